"""Detector outputs as boxes in the original frame's pixels (camera apps).

``geometry``: the inverse of the PreprocessSpec's crop / resize / letterbox, per frame size.
``boxes``: Detection and non-maximum suppression. ``yolo``: YOLO-style heads.
``ssd_anchors`` + ``mediapipe``: MediaPipe's SSD detectors (BlazeFace short and full range,
or any fixed-size-anchor SSD given its anchor options).

:func:`make_decoder` gives a :class:`Decoder` by name; ``Decoder.preprocess`` is the
preprocessing the family was trained with (None: the model's own), so `edgeserve run
face_detection_short_range.tflite --decoder mediapipe-face-short` needs no other flag.
``ssd_postprocess``: models ending in TFLite_Detection_PostProcess.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from edgeserve.errors import InputError
from edgeserve.preprocess import PreprocessSpec
from edgeserve.runtime.decoders.boxes import Detection
from edgeserve.runtime.decoders.geometry import FrameGeometry

DECODERS = ("mediapipe-face-short", "mediapipe-face-full", "ssd-anchors", "ssd-postprocess", "yolo")


class Decoder:
    """Turns one frame's dequantized outputs into detections in that frame's pixels."""

    def __init__(self, name: str, options: Mapping[str, Any] | None = None) -> None:
        from edgeserve.runtime.decoders import mediapipe, ssd_anchors

        options = dict(options or {})
        self.name = name
        self.score_threshold = float(options.pop("score_threshold", 0.5 if name != "yolo" else 0.25))
        self.iou_threshold = float(options.pop("iou_threshold", 0.3 if name != "yolo" else 0.45))
        self._ssd: Any = None
        if name == "mediapipe-face-short":
            self._ssd = mediapipe.SsdDecoder(ssd_anchors.FACE_SHORT, self.score_threshold, self.iou_threshold)
        elif name == "mediapipe-face-full":
            self._ssd = mediapipe.SsdDecoder(ssd_anchors.FACE_FULL, self.score_threshold, self.iou_threshold)
        elif name == "ssd-anchors":
            input_range = _input_range(options.pop("input_range", (-1.0, 1.0)))
            try:
                anchors = ssd_anchors.AnchorOptions.from_mapping(options)
            except (KeyError, ValueError, TypeError) as exc:
                raise InputError(f"--decoder ssd-anchors needs MediaPipe's anchor options (input_size_height, "
                                 f"input_size_width, strides, ...) in --decoder-options: {exc}") from exc
            self._ssd = mediapipe.SsdDecoder(anchors, self.score_threshold, self.iou_threshold,
                                             input_range=input_range)
            options = {}
        elif name not in ("yolo", "ssd-postprocess"):
            raise InputError(f"unknown decoder {name!r}; known: {', '.join(DECODERS)}")
        if options:
            raise InputError(f"unknown option(s) for decoder {name}: {', '.join(sorted(options))}")

    @property
    def preprocess(self) -> PreprocessSpec | None:
        return self._ssd.preprocess() if self._ssd is not None else None

    def detect(self, outputs: Sequence[np.ndarray], input_size: tuple[int, int], geometry: FrameGeometry,
               labels: Sequence[str] | None = None) -> list[Detection]:
        if labels is None and self.name.startswith("mediapipe-face"):
            labels = ("face",)
        if self._ssd is not None:
            if len(outputs) < 2:
                raise InputError(f"decoder {self.name} needs the model's box regressors and scores (2 outputs); "
                                 f"this model has {len(outputs)}")
            regressors, scores = sorted(outputs[:2], key=lambda o: -o.shape[-1])  # 16 values vs 1 score
            return self._ssd.decode(regressors, scores, geometry, labels)
        if self.name == "ssd-postprocess":
            from edgeserve.runtime.decoders.ssd_postprocess import decode_postprocess

            return decode_postprocess(outputs, input_size, geometry, score_threshold=self.score_threshold,
                                      labels=labels)
        from edgeserve.runtime.decoders.yolo import decode_yolo

        return decode_yolo(outputs[0], input_size, geometry, score_threshold=self.score_threshold,
                           iou_threshold=self.iou_threshold, labels=labels)


def _input_range(value: Any) -> tuple[float, float]:
    """``input_range = [low, high]``: the model's input values (MediaPipe's output_tensor_float_range)."""
    low = high = float("nan")
    if isinstance(value, (list, tuple)) and len(value) == 2:
        try:
            low, high = float(value[0]), float(value[1])
        except (TypeError, ValueError):
            pass
    if not low < high:  # also false for NaN
        raise InputError(f"--decoder-options input_range must be [low, high] with low < high (the model's input "
                         f"values, e.g. [0.0, 1.0] or [-1.0, 1.0]); got {value!r}")
    return low, high


def make_decoder(name: str, options: Mapping[str, Any] | None = None) -> Decoder:
    return Decoder(name, options)
