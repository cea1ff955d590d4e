"""The quality gate for a detector: its detections matched to the float model's.

A detector's raw heads say little through SQNR. Most anchors look at background, and their
box regressors are noise the decoder drops, so an INT8 palm detector that finds the same
palms as the float one can measure 5 dB on its box head; a score head can look fine in dB
while a threshold crossing moves. What a user ships is the decoded boxes, so with a decoder
recorded (``convert --decoder``) the outputs the decoder reads are judged by what it gives.
Each sample is decoded from the float model's outputs and from the artifact's, in model input
pixels; detections are matched greedily, best score first, to the unmatched detection of the
same class with the largest IoU, a match needing IoU >= 0.5 (the PASCAL VOC criterion).

A score that moves from 0.52 to 0.48 turns a kept box into a dropped one, and on a handful of
detections that alone would fail an artifact that works. So each side is also decoded with the
score threshold lowered by ``SCORE_MARGIN``, and

    found %     = float detections that the artifact finds (at the lowered threshold)
    confirmed % = artifact detections that the float model has (at the lowered threshold)
    match %     = the smaller of the two

so a lost box and an invented one both count against it, and a score moved by less than the
margin across the threshold does not; the mean score difference of the matched detections is
bounded too (``--max-score-error``), so a model whose scores all sag is not excused by the
margin. The mean IoU of the matches is reported beside them (the artifact's side decoded at
the lowered threshold, whose suppression merges a few more boxes: 0.97 for a float copy).
When neither model detects anything on the evaluation inputs the check cannot fail: the gate
says so and judges those outputs by SQNR.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

#: Percent of detections that must match; ``--min-detection-match``. Measured on the corpus
#: (tests/test_corpus.py): see DETECTION_BOUND_MEASURED in the README's corpus section.
DEFAULT_MIN_DETECTION_MATCH = 80.0
MATCH_IOU = 0.5
#: A detection the artifact scores this much below the threshold still counts as found.
SCORE_MARGIN = 0.1
#: Largest mean |score difference| of matched detections; ``--max-score-error``.
DEFAULT_MAX_SCORE_ERROR = 0.1
# Outputs each decoder family reads (the SSD decoders take the first two: boxes and scores).
_SSD_DECODERS = ("mediapipe-face-short", "mediapipe-face-full", "ssd-anchors")


@dataclasses.dataclass(frozen=True)
class DetectionMatch:
    """Float and artifact detections on the same samples, matched."""

    decoder: str
    samples: int
    float_detections: int
    artifact_detections: int
    found: int  # float detections the artifact also gives (at the lowered threshold)
    confirmed: int  # artifact detections the float model also gives (at the lowered threshold)
    mean_score_error: float | None
    mean_iou: float | None
    min_match: float
    max_score_error: float = DEFAULT_MAX_SCORE_ERROR

    @property
    def degenerate(self) -> bool:
        """Neither model detects anything: nothing to lose or invent, so the check could not fail."""
        return self.float_detections == 0 and self.artifact_detections == 0

    @property
    def found_percent(self) -> float:
        return 100.0 * self.found / self.float_detections if self.float_detections else 100.0

    @property
    def confirmed_percent(self) -> float:
        return 100.0 * self.confirmed / self.artifact_detections if self.artifact_detections else 100.0

    @property
    def match_percent(self) -> float:
        return min(self.found_percent, self.confirmed_percent)

    @property
    def scores_ok(self) -> bool:
        return self.mean_score_error is None or self.mean_score_error <= self.max_score_error

    @property
    def ok(self) -> bool:
        return self.match_percent >= self.min_match and self.scores_ok

    @property
    def reason(self) -> str:
        if self.ok:
            return ""
        counts = (f"the artifact finds {self.found} of {self.float_detections} float detections, the float model "
                  f"{self.confirmed} of its {self.artifact_detections}; IoU >= {MATCH_IOU:g}, {self.samples} samples")
        if self.match_percent < self.min_match:
            return (f"detections ({self.decoder}): {self.match_percent:.1f} % matched the float model's < min "
                    f"{self.min_match:g} % ({counts})")
        return (f"detections ({self.decoder}): mean score error {self.mean_score_error:.3f} of the matched "
                f"detections > max {self.max_score_error:g} ({counts})")

    def to_dict(self) -> dict[str, Any]:
        return {"decoder": self.decoder, "samples": self.samples, "float_detections": self.float_detections,
                "artifact_detections": self.artifact_detections, "found": self.found, "confirmed": self.confirmed,
                "match_percent": round(self.match_percent, 2), "min_match": self.min_match, "iou": MATCH_IOU,
                "score_margin": SCORE_MARGIN, "mean_score_error": self.mean_score_error,
                "max_score_error": self.max_score_error, "mean_iou": self.mean_iou,
                "degenerate": ("neither model detects anything on these inputs: the detection check cannot fail "
                               "here, so the decoder's outputs are judged by SQNR") if self.degenerate else None}


@dataclasses.dataclass(frozen=True)
class DetectionGate:
    """A recorded decoder, ready to judge an artifact's outputs against the float model's."""

    decoder: str
    options: Mapping[str, Any]
    input_size: tuple[int, int]  # (height, width) of the model input
    min_match: float = DEFAULT_MIN_DETECTION_MATCH
    max_score_error: float = DEFAULT_MAX_SCORE_ERROR

    @classmethod
    def of(cls, ctx: Any) -> "DetectionGate | None":
        """The gate for a conversion run (``ctx``: a ConversionContext), or None without a decoder."""
        from edgeserve.quality.options import GateOptions

        opts = GateOptions.from_mapping(ctx.options or {})
        output = opts.output or {}
        if output.get("kind") != "detect":
            return None
        size = ctx.preprocess.size if ctx.preprocess is not None and ctx.preprocess.size else None
        if size is None:
            size = _input_size(ctx.source.signature.inputs[0].shape)
        bound, scores = opts.min_detection_match, opts.max_score_error
        return cls(output["decoder"], dict(output.get("options") or {}), (int(size[0]), int(size[1])),
                   DEFAULT_MIN_DETECTION_MATCH if bound is None else float(bound),
                   DEFAULT_MAX_SCORE_ERROR if scores is None else float(scores))

    def outputs_read(self, count: int) -> list[int]:
        if self.decoder in _SSD_DECODERS:
            return [0, 1][:count]
        if self.decoder == "yolo":
            return [0]
        return list(range(count))

    def compare(self, reference: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> DetectionMatch:
        from edgeserve.runtime.decoders import make_decoder
        from edgeserve.runtime.decoders.geometry import FrameGeometry

        strict = make_decoder(self.decoder, dict(self.options))
        loose = make_decoder(self.decoder, {**self.options,
                                            "score_threshold": max(0.01, strict.score_threshold - SCORE_MARGIN)})
        h, w = self.input_size
        # Model-input pixels, moved into the middle of a frame three times as large so that a box
        # running off the input keeps its size (the frame clips boxes, which would zero its IoU).
        geometry = FrameGeometry((3 * h, 3 * w), (h, w, h, w), (1.0, 1.0), (0, 0))
        samples = len(reference[0])
        counts = [0, 0, 0, 0]
        score_errors: list[float] = []
        ious: list[float] = []
        for i in range(samples):
            decoded = {}
            for side, outs in (("float", reference), ("artifact", outputs)):
                batch = [np.asarray(o[i: i + 1], np.float32) for o in outs]
                decoded[side] = [d.detect(batch, (h, w), geometry) for d in (strict, loose)]
            found = match(decoded["float"][0], decoded["artifact"][1])
            confirmed = match(decoded["artifact"][0], decoded["float"][1])
            counts[0] += len(decoded["float"][0])
            counts[1] += len(decoded["artifact"][0])
            counts[2] += len(found)
            counts[3] += len(confirmed)
            score_errors += [abs(decoded["float"][0][a].score - decoded["artifact"][1][b].score) for a, b, _ in found]
            ious += [overlap for _, _, overlap in found]
        return DetectionMatch(self.decoder, samples, *counts,
                              round(float(np.mean(score_errors)), 4) if score_errors else None,
                              round(float(np.mean(ious)), 4) if ious else None, self.min_match, self.max_score_error)


def match(reference: Sequence[Any], found: Sequence[Any]) -> list[tuple[int, int, float]]:
    """(reference index, found index, IoU) pairs: each reference detection, best score first,
    takes the unmatched detection of its class that overlaps it most, if by IoU >= 0.5."""
    from edgeserve.runtime.decoders.boxes import iou

    taken: set[int] = set()
    pairs = []
    for a in sorted(range(len(reference)), key=lambda k: -reference[k].score):
        candidates = [b for b in range(len(found)) if b not in taken and found[b].class_id == reference[a].class_id]
        if not candidates:
            continue
        overlaps = iou(np.asarray(reference[a].box, np.float64),
                       np.asarray([found[b].box for b in candidates], np.float64))
        best = int(np.argmax(overlaps))
        if overlaps[best] >= MATCH_IOU:
            taken.add(candidates[best])
            pairs.append((a, candidates[best], float(overlaps[best])))
    return pairs


def _input_size(shape: Sequence[int | None]) -> tuple[int, int]:
    """(height, width) of an image input: NCHW when its second dimension holds 1-4 channels."""
    dims = [int(d or 0) for d in shape]
    if len(dims) == 4:
        return (dims[2], dims[3]) if 1 <= dims[1] <= 4 and dims[3] > 4 else (dims[1], dims[2])
    if len(dims) == 3:
        return dims[0], dims[1]
    raise ValueError(f"a detector's input is an image; this model's first input has shape {list(shape)}")
