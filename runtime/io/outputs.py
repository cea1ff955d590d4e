"""Raw engine outputs to float32 in buffers allocated once (or one value to a Python float), and top-k."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from edgeserve.runtime.backends.litert_run import TensorDetail


class Dequantizer:
    """Writes one output's raw values as float32 into ``self.out`` (allocated once)."""

    # Up to this many values, a Python loop beats two ufunc calls (about 1.3 µs each even on
    # one element), which is most of a wake word's per-stride overhead.
    SCALAR_LIMIT = 8

    def __init__(self, detail: TensorDetail) -> None:
        self.detail = detail
        self.out = np.zeros(detail.shape, np.float32)
        self._zero_point = np.float32(detail.zero_point)
        self._scale = np.float32(detail.scale)
        self._flat = self.out.reshape(-1)  # a view: writes land in self.out
        self._scalar = detail.quantized and self.out.size <= self.SCALAR_LIMIT
        self._zp, self._sc = int(detail.zero_point), float(self._scale)

    def __call__(self, raw: np.ndarray) -> np.ndarray:
        if self._scalar:
            # (q - zero point) is an exact small integer and the scale a float32, so their
            # product rounded to float32 once equals the ufuncs' float32 arithmetic.
            flat = self._flat
            for i, q in enumerate(raw.reshape(-1).tolist()):
                flat[i] = (q - self._zp) * self._sc
            return self.out
        if self.detail.quantized:
            # Two in-place float32 ufuncs. Not np.take over a 256-entry table: np.take turns
            # its uint8 indices into a fresh intp array on every call.
            np.subtract(raw, self._zero_point, out=self.out, dtype=np.float32)
            np.multiply(self.out, self._scale, out=self.out)
        else:
            np.copyto(self.out, raw, casting="unsafe")
        return self.out


@dataclasses.dataclass(frozen=True)
class Prediction:
    index: int
    score: float
    label: str | None = None

    def to_dict(self) -> dict[str, object]:
        d: dict[str, object] = {"index": self.index, "score": self.score}
        if self.label is not None:
            d["label"] = self.label
        return d


def top_k(scores: np.ndarray, k: int, labels: Sequence[str] | None = None) -> list[Prediction]:
    """The k highest scores of a (1, N) or (N,) output, best first (ties: lower index first)."""
    flat = scores.reshape(-1)
    k = max(1, min(int(k), flat.size))
    # A stable sort of the negated scores keeps the lower index first among equal scores,
    # which int8 outputs produce often.
    best = np.argsort(-flat, kind="stable")[:k]
    return [
        Prediction(int(i), float(flat[i]), labels[i] if labels is not None and i < len(labels) else None)
        for i in best
    ]


def scalar_decoder(detail: TensorDetail) -> Callable[[Any], float]:
    """One raw output value -> its real value, as :class:`Dequantizer` computes it but for a
    single Python number (StreamStep.value): a 256-entry table for 8-bit quantized outputs
    (indexed by the raw value; an int8 -1 is entry 255, as Python's negative index), exact
    arithmetic for other quantized ones, ``float`` for float outputs. The table's entries
    equal the Dequantizer's float32 results once rounded to float32 (tested on every value)."""
    if not detail.quantized:
        return float
    scale, zero = float(np.float32(detail.scale)), int(detail.zero_point)
    if detail.dtype.itemsize == 1:
        signed = detail.dtype.kind == "i"
        table = [((i - 256 if signed and i > 127 else i) - zero) * scale for i in range(256)]
        return table.__getitem__
    return lambda q: (q - zero) * scale
