"""MediaPipe's SSD detectors (BlazeFace short and full range): raw regressors and scores to
boxes in frame pixels.

The model gives, per anchor, 4 box values (centre x, centre y, width, height, in input
pixels relative to the anchor) followed by keypoints, and one raw score. Scores go through
a sigmoid after clipping to +-100; boxes above ``min_score`` are merged by MediaPipe's
weighted non-maximum suppression (each kept box is the score-weighted mean of the boxes
overlapping it by more than ``iou_threshold``); the letterbox is then undone. Facts from
MediaPipe's tensors_to_detections_calculator and face detection graphs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from edgeserve.preprocess import PreprocessSpec
from edgeserve.runtime.decoders.boxes import Detection, iou, label_of
from edgeserve.runtime.decoders.geometry import FrameGeometry
from edgeserve.runtime.decoders.ssd_anchors import FACE_FULL, FACE_SHORT, AnchorOptions, generate_anchors

SCORE_CLIP = 100.0


@dataclasses.dataclass(frozen=True)
class SsdDecoder:
    anchors: AnchorOptions
    min_score: float = 0.5
    iou_threshold: float = 0.3
    scale: tuple[float, float] | None = None  # (x, y) divisors of the raw values; default: the input size
    # The values the model was trained on: MediaPipe's ImageToTensorCalculator
    # output_tensor_float_range, [-1, 1] for its face and pose detectors, [0, 1] for its palm
    # detector (modules/palm_detection/palm_detection_cpu.pbtxt).
    input_range: tuple[float, float] = (-1.0, 1.0)

    def preprocess(self) -> PreprocessSpec:
        """What MediaPipe feeds these models: RGB, letterboxed, values in ``input_range``."""
        low, high = self.input_range
        return PreprocessSpec(size=self.anchors.input_size, color="rgb", resize_mode="letterbox",
                              scale=1 / 255, mean=(-low / (high - low),), std=(1 / (high - low),), pad_value=0)

    def decode(self, regressors: np.ndarray, scores: np.ndarray, geometry: FrameGeometry,
               labels: Sequence[str] | None = None) -> list[Detection]:
        centres = generate_anchors(self.anchors)
        raw = np.asarray(regressors, np.float32).reshape(len(centres), -1)
        logits = np.asarray(scores, np.float32).reshape(len(centres), -1)[:, 0]
        h, w = self.anchors.input_size
        sx, sy = self.scale or (float(w), float(h))
        cx = raw[:, 0] / sx + centres[:, 0]
        cy = raw[:, 1] / sy + centres[:, 1]
        bw, bh = raw[:, 2] / sx, raw[:, 3] / sy
        boxes = np.stack([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], axis=1)
        probability = 1 / (1 + np.exp(-np.clip(logits.astype(np.float64), -SCORE_CLIP, SCORE_CLIP)))
        keep = (probability > self.min_score) & (bw > 0) & (bh > 0)
        merged = weighted_nms(boxes[keep], probability[keep], self.iou_threshold)
        detections = []
        for box, score in merged:
            pixels = geometry.to_frame(box[None] * np.array([w, h, w, h], np.float64))[0]
            detections.append(Detection(tuple(float(v) for v in pixels), float(score), 0, label_of(0, labels)))
        return detections


def weighted_nms(boxes: np.ndarray, scores: np.ndarray, threshold: float) -> list[tuple[np.ndarray, float]]:
    """MediaPipe's WEIGHTED suppression: best first; every remaining box overlapping it by
    more than ``threshold`` (itself included) is folded into a score-weighted mean box."""
    order = np.argsort(-scores, kind="stable")
    remaining = list(order)
    out = []
    while remaining:
        best = remaining[0]
        overlaps = iou(boxes[best].astype(np.float64), boxes[remaining].astype(np.float64))
        group = [r for r, o in zip(remaining, overlaps) if o > threshold or r == best]
        weights = scores[group].astype(np.float64)
        merged = (boxes[group].astype(np.float64) * weights[:, None]).sum(axis=0) / weights.sum()
        out.append((merged, float(scores[best])))
        remaining = [r for r in remaining if r not in group]
    return out


FACE_SHORT_RANGE = SsdDecoder(FACE_SHORT)
FACE_FULL_RANGE = SsdDecoder(FACE_FULL)
