"""The quality gate: every output of an artifact judged against the float source, by its kind.

A model's first output alone does not say whether an artifact works: a hand-landmark
model's headline can sit at 28.8 dB while another of its outputs is at 3.3 dB, and a
detector's box head can hide a class-score head that INT8 flattened. So each output is
judged on its own:

* **By the task metric** (``--max-drop``, unchanged): the first output when labels were
  given (``--eval``), or when ``--metric`` was asked for.
* **By top-1 agreement with the float model** (``--min-agreement``): the first output when
  it is a classifier and no labels were given. Agreement is not accuracy: a flip on an input
  the float model itself is unsure of costs no accuracy, and on a calibration-sized set one
  flip is several points (1 of 32 is 3.1), so the old "drop of at most 1 point of
  agreement" refused every real classifier of the corpus (fer's emotion model at 96.9 %).
* **By detections matched to the float model's** (``--min-detection-match``): the outputs a
  recorded decoder reads (``convert --decoder``), decoded on both sides
  (``edgeserve.quality.detections``).
* **By SQNR against the float model** (``--min-sqnr``): every other output, and the first
  one when nothing above applies (regression, landmarks, embeddings, detector heads with
  no labels). "Percent more error than the float model" is no bound there: the float
  model's own error against itself is 0, and the default 1 % refused every real detector
  and landmark model tried (1.8 % to 8.7 %) while they still worked. An output that
  concatenates ranges one scale cannot hold (a YOLOv8 head's boxes and class scores) has its
  small-range channels judged by the same bound apart from the rest.

The default SQNR bound was set from measured outputs: MediaPipe's BlazeFace INT8 finds the
faces (score error < 0.1 at the best anchor) with its class logits at 11-12 dB and its boxes
at 18 dB; an output that INT8 broke measured 3.3 dB (a hand-landmark head) and 0-7 dB
(BlazeFace calibrated on images that drive its logits to -2,000). 10 dB (noise power a tenth
of the signal's) sits between the two.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from edgeserve.quality.detections import DetectionGate, DetectionMatch
from edgeserve.quality.metrics import MetricResult, evaluate, sqnr_db
from edgeserve.quality.options import DEFAULT_MIN_AGREEMENT, DEFAULT_MIN_SQNR_DB

#: A channel whose values stay under 1/64 of an output's largest channel gets at most 4 of the
#: 256 steps one int8 scale gives the output: such channels are judged apart (small_range_channels).
RANGE_RATIO = 64.0
#: Channels under 1/32768 of the largest one carry nothing an int16 scale could hold either (the
#: wrist's depth in MediaPipe's hand landmarks, 0 by construction, measured 1e-7 of the x/y range):
#: they are left out.
INT16_STEPS = 32768.0


@dataclasses.dataclass(frozen=True)
class OutputQuality:
    """One output's figures and whether it passed its bound."""

    index: int
    name: str
    judged_by: str  # "metric" (--max-drop), "agreement" (--min-agreement), "detections"
    #                 (--min-detection-match) or "sqnr" (--min-sqnr)
    sqnr_db: float | None
    relative_rmse: float | None  # RMS error / RMS spread of the float output (None: no spread)
    ok: bool
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The gate's answer for one artifact: the task metric of output 0, and every output."""

    metrics: MetricResult
    outputs: tuple[OutputQuality, ...]
    max_drop: float
    min_sqnr_db: float
    min_agreement: float = DEFAULT_MIN_AGREEMENT
    detections: DetectionMatch | None = None

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outputs)

    @property
    def reason(self) -> str:
        """Why it failed, every failing output named once ('' when it passed)."""
        return "; ".join(dict.fromkeys(o.reason for o in self.outputs if not o.ok and o.reason))

    @property
    def failed_outputs(self) -> list[int]:
        return [o.index for o in self.outputs if not o.ok]

    def shortfall(self) -> tuple[int, float, float]:
        """How far from passing: failing outputs, then the sum of their distances to the
        bound (points or dB), then the worst output's SQNR negated; the best failed attempt is
        the smallest. The last breaks ties the first two leave: two forms that each lose the one
        detection a photo holds (0 % matched both) differ in how close their outputs stay
        (MediaPipe's palm detector: 13 dB static, 23 dB dynamic)."""
        total = 0.0
        for o in self.outputs:
            if o.ok:
                continue
            if o.judged_by == "metric":
                total += self.metrics.drop_points - self.max_drop
            elif o.judged_by == "agreement":
                total += self.min_agreement - 100.0 * self.metrics.quantized
            elif o.judged_by == "detections" and self.detections is not None:
                total += (self.detections.min_match - self.detections.match_percent) / len(self.failed_outputs)
            else:
                total += self.min_sqnr_db - (o.sqnr_db if o.sqnr_db is not None else -100.0)
        measured = [o.sqnr_db for o in self.outputs if o.sqnr_db is not None]
        return len(self.failed_outputs), total, -min(measured) if measured else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "max_drop": self.max_drop, "min_sqnr_db": self.min_sqnr_db,
                "min_agreement": self.min_agreement, "outputs": [o.to_dict() for o in self.outputs],
                **({"detections": self.detections.to_dict()} if self.detections is not None else {})}


def judge(metric: str, reference: Sequence[np.ndarray], outputs: Sequence[np.ndarray],
          labels: np.ndarray | None, *, max_drop: float, min_sqnr_db: float,
          min_agreement: float = DEFAULT_MIN_AGREEMENT, metric_requested: bool = False,
          names: Sequence[str] | None = None, detections: DetectionGate | None = None) -> Verdict:
    """Judge ``outputs`` (the artifact's, in float) against ``reference`` (the source's).

    ``metric`` is the task metric of output 0 (``choose_metric``); it is the bound for that
    output when ``labels`` are given or the user asked for it. An unlabelled top-1 output is
    judged by its agreement with the float model's top-1 (``min_agreement``, percent). With
    ``detections`` (a recorded decoder) the outputs it reads are judged by decoded detections.
    """
    metrics = evaluate(metric, reference[0], outputs[0], labels)
    by_agreement = metric == "top1" and labels is None and detections is None
    by_metric = labels is not None or metric_requested
    found = detections.compare(reference, outputs) if detections is not None else None
    decoded = set(detections.outputs_read(len(outputs))) if found is not None and not found.degenerate else set()
    judged = []
    for i, (ref, out) in enumerate(zip(reference, outputs)):
        name = names[i] if names and i < len(names) else f"output_{i}"
        sqnr = sqnr_db(ref, out)
        rel = relative_rmse(ref, out)
        if i in decoded:
            assert found is not None
            judged.append(OutputQuality(i, name, "detections", sqnr, rel, found.ok, found.reason))
            continue
        if i == 0 and by_agreement:
            agreed = 100.0 * metrics.quantized  # the float model's own top-1 is the truth here
            ok = agreed >= min_agreement
            reason = "" if ok else (f"top-1 agreement with the float model {agreed:.1f} % < min {min_agreement:g} % "
                                    f"on {metrics.samples} samples")
            judged.append(OutputQuality(i, name, "agreement", sqnr, rel, ok, reason))
            continue
        if i == 0 and by_metric:
            ok = metrics.drop_points <= max_drop
            reason = "" if ok else f"{metric} drop {metrics.drop_points:.2f} > max {max_drop}"
            judged.append(OutputQuality(i, name, "metric", sqnr, rel, ok, reason))
            continue
        ok, reason = _sqnr_bound(name, ref, out, sqnr, min_sqnr_db)
        if ok:
            ok, reason = _small_range_bound(name, ref, out, min_sqnr_db)
        judged.append(OutputQuality(i, name, "sqnr", sqnr, rel, ok, reason))
    return Verdict(metrics, tuple(judged), max_drop, min_sqnr_db, min_agreement, found)


def _sqnr_bound(name: str, ref: np.ndarray, out: np.ndarray, sqnr: float | None,
                bound: float) -> tuple[bool, str]:
    bad = int(np.size(out) - np.count_nonzero(np.isfinite(np.asarray(out, np.float64))))
    if bad:  # "SQNR nan dB" says nothing: an fp16 overflow (Core ML, a -1e9 attention mask) reads so
        return False, (f"{name}: {bad} of {np.size(out)} values are NaN or infinite (an overflow: fp16 holds "
                       "at most 65504)")
    if sqnr is not None:
        ok = sqnr >= bound
        return ok, "" if ok else f"{name}: SQNR {sqnr:.1f} dB < min {bound:g} dB"
    if np.array_equal(np.asarray(ref, np.float64), np.asarray(out, np.float64)):
        return True, ""  # no noise at all
    # No signal: the float output is all zero, so any error is infinitely large in dB.
    worst = float(np.max(np.abs(np.asarray(out, np.float64))))
    return False, f"{name}: the float output is all zero and the artifact's is not (max |value| {worst:.3g})"


def mixed_range_axes(reference: np.ndarray) -> list[tuple[int, list[int], float]]:
    """The channel axes of a float output that concatenates ranges one scale cannot hold.

    Along each axis but the batch with 2 to 64 entries (a channel axis), the channels whose
    values all stay under 1/RANGE_RATIO of the largest channel's peak (and over 1/INT16_STEPS of
    it): one int8 scale for the whole output gives them at most a few steps, an int16 one enough.
    YOLOv8's [1, 4 + classes, anchors] output is the case (nudenet's 320n.onnx: boxes up to 320,
    class scores under 0.84). Read from the float outputs alone, so it is known before anything
    is quantized: (axis, the small channels, largest peak / their largest peak) per such axis."""
    ref = np.asarray(reference, np.float64)
    found = []
    for axis in range(1, ref.ndim):
        size = ref.shape[axis]
        if not 2 <= size <= 64:
            continue
        peaks = np.max(np.abs(np.moveaxis(ref, axis, 0).reshape(size, -1)), axis=1)
        small = [i for i, peak in enumerate(peaks) if peaks.max() / INT16_STEPS < peak < peaks.max() / RANGE_RATIO]
        if small:
            found.append((axis, small, float(peaks.max() / max(peaks[small]))))
    return found


def small_range_channels(reference: np.ndarray, approx: np.ndarray) -> tuple[int, list[int], float | None] | None:
    """The small-range channels of an output (mixed_range_axes) and how an artifact kept them.

    nudenet's YOLOv8n all-INT8 put every class score at 0 or 1.26 (2.9 dB) while the output as
    a whole measured 30.6 dB. The axis whose small channels fare worst is returned as (axis,
    channels, their SQNR; None when they are exact); None when no axis has such channels."""
    ref = np.asarray(reference, np.float64)
    got = np.asarray(approx, np.float64)
    if got.shape != ref.shape:
        return None
    worst: tuple[int, list[int], float | None] | None = None
    for axis, small, _ in mixed_range_axes(ref):
        size = ref.shape[axis]
        rows = np.moveaxis(ref, axis, 0).reshape(size, -1)
        db = sqnr_db(rows[small], np.moveaxis(got, axis, 0).reshape(size, -1)[small])
        if worst is None or (db is not None and (worst[2] is None or db < worst[2])):
            worst = (axis, small, db)
    return worst


def channel_list(channels: list[int]) -> str:
    """"4-21" for a run of channels, "1, 5, 9" otherwise."""
    if channels == list(range(channels[0], channels[-1] + 1)) and len(channels) > 1:
        return f"{channels[0]}-{channels[-1]}"
    return ", ".join(map(str, channels))


def mixed_range_outputs(reference: Sequence[np.ndarray], names: Sequence[str],
                        skip_first: bool = False) -> dict[int, dict[str, Any]]:
    """Source output index -> what its float values join (the axis with the widest gap), for
    each output that joins ranges one int8 scale cannot hold."""
    found: dict[int, dict[str, Any]] = {}
    for i, values in enumerate(reference):
        axes = mixed_range_axes(values) if i or not skip_first else []
        if axes:
            axis, channels, ratio = max(axes, key=lambda a: a[2])
            found[i] = {"output": names[i] if i < len(names) else f"output_{i}", "axis": axis,
                        "small_channels": channel_list(channels), "range_ratio": round(ratio, 1)}
    return found


def _small_range_bound(name: str, ref: np.ndarray, out: np.ndarray, bound: float) -> tuple[bool, str]:
    found = small_range_channels(ref, out)
    if found is None or found[2] is None or found[2] >= bound:
        return True, ""
    axis, channels, db = found
    return False, (f"{name}: channels {channel_list(channels)} of axis {axis} (under 1/{RANGE_RATIO:g} of its largest channel's "
                   f"range) at SQNR {db:.1f} dB < min {bound:g} dB: one scale cannot hold the output's ranges")


def relative_rmse(reference: np.ndarray, approx: np.ndarray) -> float | None:
    """RMS of the error over the RMS spread of the reference around its mean: 1.0 means
    the error is as large as everything the output says; None for a constant output."""
    ref = np.asarray(reference, np.float64)
    spread = float(np.sqrt(np.mean(np.square(ref - ref.mean())))) if ref.size else 0.0
    if spread == 0.0:
        return None
    error = float(np.sqrt(np.mean(np.square(ref - np.asarray(approx, np.float64)))))
    return round(error / spread, 5)
