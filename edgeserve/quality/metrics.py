"""Compare a quantized model with its float source: task metrics and output agreement."""

from __future__ import annotations

import dataclasses

import numpy as np

from edgeserve.errors import InputError

METRICS = ("top1", "mae", "mse")
#: A float error below this share of the output spread is "exact": not a baseline to divide by.
BASELINE_FLOOR = 1e-3


@dataclasses.dataclass(frozen=True)
class MetricResult:
    """A task metric for the float source and the quantized artifact.

    ``drop_points`` is how much worse the artifact is, in percentage points for accuracy
    (top1: 0.912 → 0.905 is 0.7) and in percent of the float error for error metrics
    (mae/mse: 0.10 → 0.11 is 10.0). Without labels the float outputs are the reference:
    ``top1`` then measures agreement with the float model's top-1.
    """

    metric: str
    float: float
    quantized: float
    drop_points: float
    labelled: bool
    samples: int

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def choose_metric(requested: str | None, labels: np.ndarray | None, float_out: np.ndarray) -> str:
    if requested is not None:
        if requested not in METRICS:
            raise InputError(f"metric must be one of {', '.join(METRICS)}; got {requested!r}")
        return requested
    is_vector = float_out.ndim == 2 and float_out.shape[1] > 1
    if labels is not None:
        return "top1" if is_vector and (_whole_indices(labels) or _is_one_hot(labels, float_out)) else "mae"
    # No labels: a softmax-like output is a classifier; anything else is a regression.
    if is_vector and np.all(float_out >= 0) and np.allclose(float_out.sum(axis=1), 1.0, atol=1e-3):
        return "top1"
    return "mae"


def check_labels(labels: np.ndarray, output_shape: tuple[int | None, ...], where: str) -> None:
    """Labels that cannot score the model's first output, said before any conversion work: text,
    fractions for a classifier (they ended in "cannot reshape" after the whole float pass),
    and class indices outside the output's classes (they scored top1 0.0 and passed)."""
    if labels.dtype.kind not in "iufb":
        raise InputError(f"{where}: y holds {labels.dtype.name} values ({_first(labels)}); expected class indices "
                         "(integers), one-hot rows, or numbers to compare the output with")
    classes = output_shape[-1] if len(output_shape) == 2 else None
    if classes is None or classes < 2:
        return  # a regression output: any numbers are targets
    if labels.ndim == 2 and labels.shape[1] == classes:
        return  # one-hot rows, or regression targets shaped like the output
    flat = labels.reshape(len(labels), -1)
    if flat.shape[1] != 1:
        raise InputError(f"{where}: y has shape {list(labels.shape)}; the model's first output has {classes} classes: "
                         f"expected one class index per sample, or one-hot rows of {classes}")
    values = flat[:, 0]
    if labels.dtype.kind == "f" and not np.all(values == np.round(values)):
        raise InputError(f"{where}: y holds fractions ({_first(values[values != np.round(values)])}) for a model whose "
                         f"first output has {classes} classes: expected class indices 0..{classes - 1}")
    outside = values[(values < 0) | (values >= classes)]
    if outside.size:
        raise InputError(f"{where}: y holds {outside.size} class index(es) outside 0..{classes - 1} (e.g. "
                         f"{_first(outside)}), the classes of the model's first output")


def _first(values: np.ndarray) -> str:
    return ", ".join(str(v) for v in values.reshape(-1)[:3].tolist())


def evaluate(metric: str, float_out: np.ndarray, quant_out: np.ndarray, labels: np.ndarray | None) -> MetricResult:
    """Score float and quantized outputs of the first model output against labels (or float)."""
    n = float_out.shape[0]
    if metric == "top1":
        truth = _class_labels(labels, float_out) if labels is not None else float_out.argmax(axis=1)
        f = float(np.mean(float_out.reshape(n, -1).argmax(axis=1) == truth))
        q = float(np.mean(quant_out.reshape(n, -1).argmax(axis=1) == truth))
        drop = 100.0 * (f - q)
    else:
        target = labels.reshape(float_out.shape).astype(np.float32) if labels is not None else float_out
        err = np.abs if metric == "mae" else np.square
        f = float(np.mean(err(float_out - target)))
        q = float(np.mean(err(quant_out - target)))
        # Without labels the float error is 0: express the artifact's error relative to the output
        # spread. With labels the float error is the baseline, unless it is (nearly) 0, as for a
        # model scored against its own outputs: any difference would then be a huge or infinite
        # percentage (2.7e-9 was reported as a 100 % drop), so the spread is the baseline too.
        # Constant outputs have no spread: their own size is the scale (a zero output: absolute).
        spread = float(np.mean(err(float_out - float_out.mean())))
        scale = spread or float(np.mean(err(float_out))) or 1.0
        base = f if labels is not None and f > BASELINE_FLOOR * scale else scale
        drop = 100.0 * (q - f) / base
    return MetricResult(metric, f, q, round(drop, 4), labels is not None, n)


def degenerate(reference: list[np.ndarray], steps: list[float] | None = None) -> str | None:
    """Why comparing with ``reference`` proves nothing, or None when it can.

    When the source's outputs do not vary over the evaluation samples (or vary by less than
    one quantization step of the artifact's output), every artifact that outputs that
    constant agrees with it, right or wrong: such a check cannot fail and must not be
    called a verification.
    """
    samples = reference[0].shape[0] if reference and reference[0].ndim else 0
    if samples < 2:
        return None
    for i, out in enumerate(reference):
        flat = out.reshape(samples, -1).astype(np.float64)
        spread = float(np.max(flat.max(axis=0) - flat.min(axis=0))) if flat.size else 0.0
        floor = steps[i] if steps and i < len(steps) and steps[i] else 1e-6 * max(1.0, float(np.abs(flat).max()))
        if spread > floor:
            return None
    return (f"degenerate: constant reference outputs over {samples} samples (the source gives the same values "
            "for every input), so any artifact that outputs them agrees; this check cannot fail")


def agreement(float_out: np.ndarray, quant_out: np.ndarray, classifier: bool) -> dict[str, float | None]:
    """Output-level agreement: max |diff|, SQNR in dB and, for a classifier, top-1 agreement.

    Top-1 agreement is meaningless for a regression output (an autoencoder's 640 values),
    so it is only computed when the task metric is top-1.
    """
    f = float_out.reshape(float_out.shape[0], -1).astype(np.float64)
    q = quant_out.reshape(quant_out.shape[0], -1).astype(np.float64)
    out: dict[str, float | None] = {
        "max_abs_diff": float(np.max(np.abs(f - q))),
        "sqnr_db": sqnr_db(f, q),
    }
    if classifier and f.shape[1] > 1:
        out["top1_agreement"] = float(np.mean(f.argmax(axis=1) == q.argmax(axis=1)))
    return out


def _whole_indices(labels: np.ndarray) -> bool:
    """One class index per sample: integers, or whole numbers stored as floats (labels read
    from a CSV or built with numpy's default dtype), which check_labels lets through."""
    if labels.dtype.kind in "iu":
        return True
    return (labels.dtype.kind == "f" and labels.size == len(labels) and bool(np.all(np.isfinite(labels)))
            and bool(np.all(labels == np.round(labels))))


def _is_one_hot(labels: np.ndarray, float_out: np.ndarray) -> bool:
    # Float labels shaped like the output are one-hot only if they are 0/1 rows summing to 1;
    # otherwise they are regression targets (an autoencoder's y = x).
    return (labels.ndim == 2 and labels.shape == float_out.shape and bool(np.all((labels == 0) | (labels == 1)))
            and bool(np.all(labels.sum(axis=1) == 1)))


def _class_labels(labels: np.ndarray, float_out: np.ndarray) -> np.ndarray:
    if _is_one_hot(labels, float_out):
        return labels.argmax(axis=1)
    return labels.reshape(-1).astype(np.int64)


def sqnr_db(reference: np.ndarray, approx: np.ndarray) -> float | None:
    """Signal-to-quantization-noise ratio of ``approx`` against ``reference``, in dB.

    None when it is undefined: an all-zero reference (no signal), or an exact match
    (no noise; reported as None rather than infinity so it survives JSON).
    """
    ref = np.asarray(reference, np.float64)
    noise = float(np.sum(np.square(ref - np.asarray(approx, np.float64))))
    signal = float(np.sum(np.square(ref)))
    if noise == 0.0 or signal == 0.0:
        return None
    return round(float(10.0 * np.log10(signal / noise)), 2)
