"""What every source kind gives the converters: a signature, float reference outputs,
and the routes it can take to each target.

A source module subclasses :class:`SourceModel` and registers a :class:`SourceKind` in
``edgeserve.sources``; frameworks are imported when a model is loaded, never at import.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgeserve.atomic import sha256_file

SERVING_KEY = "serving_default"


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """One model input or output as the source framework declares it (None = dynamic).

    ``values``: for an integer or bool input, the half-open range [low, high) of the values
    it takes when the source can tell (token ids below an embedding table's rows, bytes a
    one-hot compares with); random samples are drawn from it.
    """

    name: str
    shape: tuple[int | None, ...]
    dtype: str
    values: tuple[int, int] | None = None

    @property
    def is_float(self) -> bool:
        return np.dtype(self.dtype).kind == "f"

    @property
    def takes_integers(self) -> bool:
        """An input of integer values that are data, not quantized reals: token ids, bytes, a
        mask (bool, and integers of 32 bits or more). An int8, uint8 or int16 input is a
        quantized model's pixels or features, and is fed as it always was."""
        dtype = np.dtype(self.dtype)
        return dtype.kind == "b" or (dtype.kind in "iu" and dtype.itemsize >= 4)

    @property
    def sample_shape(self) -> tuple[int | None, ...]:
        """The shape of one sample, without the batch dimension."""
        return self.shape[1:]

    def to_dict(self) -> dict[str, Any]:
        described: dict[str, Any] = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}
        return described | ({"values": list(self.values)} if self.values is not None else {})


def random_samples(info: TensorInfo, rng: np.random.Generator, count: int | None) -> np.ndarray:
    """``count`` random samples for ``info`` stacked first (one sample of ``info.shape`` when
    None): floats in [0, 1), integers in the input's value range (for an integer input of
    unknown range [0, 2): ids below 2 are valid in every table, which is more than a wider
    guess can say), and bools all true.

    A bool input is nearly always an attention mask, true at every token of a full-length
    sample; a random one would mask random positions with its fill value (-inf, -1e9), whose
    range then sets the int8 scales of every attention score (measured on khmersm's segmenter:
    6.3 dB, int16 no better), though no real sentence is masked so.
    """
    dims = info.shape if count is None else (count, *info.sample_shape)
    shape = tuple(int(d) for d in dims)  # type: ignore[arg-type]
    dtype = np.dtype(info.dtype)
    if not info.takes_integers:  # floats, and a quantized model's int8/uint8/int16 input (as before)
        return rng.random(shape, dtype=np.float32)
    if dtype.kind == "b":
        return np.ones(shape, dtype)
    low, high = info.values or (0, 2)
    return rng.integers(low, high, shape).astype(dtype)


@dataclasses.dataclass(frozen=True)
class Signature:
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]


def with_input_shapes(inputs: Sequence[TensorInfo], shapes: dict[str, tuple[int, ...]] | None,
                      source: str) -> tuple[TensorInfo, ...]:
    """``inputs`` with the dynamic dimensions ``--input-shape`` fixes; every name must exist
    and every fixed dimension must match what the model declares."""
    from edgeserve.errors import SourceModelError

    shapes = dict(shapes or {})
    unknown = set(shapes) - {t.name for t in inputs}
    if unknown:
        raise SourceModelError(f"--input-shape names {', '.join(sorted(unknown))}, which {source} has no input "
                               f"called; its inputs: {', '.join(t.name for t in inputs)}")
    fixed = []
    for info in inputs:
        given = shapes.get(info.name)
        if given is not None:
            if len(given) != len(info.shape) or any(d is not None and d != g for d, g in zip(info.shape, given)):
                declared = "[" + ", ".join("?" if d is None else str(d) for d in info.shape) + "]"
                raise SourceModelError(f"--input-shape {info.name}={'x'.join(map(str, given))} does not fit the "
                                       f"declared shape {declared}")
            info = TensorInfo(info.name, tuple(given), info.dtype)
        fixed.append(info)
    return tuple(fixed)


@dataclasses.dataclass(frozen=True)
class SourceKind:
    """One kind of source file, as the registry sees it.

    Attributes:
        name: the kind recorded in the manifest ("keras", "torch-export", ...).
        described: how the accepted-formats message names it.
        detect: True when a path is of this kind (by suffix or directory layout only:
            detection never opens a framework).
        load: builds the :class:`SourceModel`; imports the framework it needs.
    """

    name: str
    described: str
    detect: Callable[[Path], bool]
    load: Callable[[Path], "SourceModel"]


@dataclasses.dataclass(frozen=True)
class FloatTflite:
    """A float LiteRT model made from a source, and how it was made.

    Attributes:
        model: the .tflite bytes (float32 or fp16/dynamic-range weights, float activations).
        route: the steps, e.g. "ExportedProgram (.pt2) -> litert-torch".
        tools: package -> version of every tool the route used.
        fallback: why the first route's model was not used (onnx2tf's after the ONNX reader's), or None.
    """

    model: bytes
    route: str
    tools: dict[str, str | None]
    fallback: str | None = None


class SourceModel:
    """A loaded float source model. Use :func:`edgeserve.sources.load_source` to make one.

    ``tflite_route`` says how the TFLite targets start from it: "saved-model" (TensorFlow
    sources: TensorFlow's own converter) or "float-tflite" (every other source: a float
    .tflite from :meth:`float_tflite`, quantized by ai-edge-quantizer).
    """

    tflite_route = "saved-model"

    def __init__(self, path: Path, kind: str, signature: Signature, framework_version: str) -> None:
        self.path = path
        self.kind = kind
        self.signature = signature
        self.framework = "tensorflow"
        self.framework_version = framework_version
        self._sha256: str | None = None
        self.origin: str | None = None  # what the manifest names instead of a path (an in-memory nn.Module)

    @property
    def sha256(self) -> str:
        if self._sha256 is None:
            self._sha256 = sha256_file(self.path)
        return self._sha256

    def describe(self) -> dict[str, Any]:
        return {
            "path": self.origin or str(self.path),
            "kind": self.kind,
            "sha256": self.sha256,
            "framework": self.framework,
            "framework_version": self.framework_version,
        }

    def predict(self, inputs: Sequence[np.ndarray], batch_size: int = 64) -> list[np.ndarray]:
        """Float outputs for N samples (one array per input, N first), in output order."""
        n = len(inputs[0])
        chunks: list[list[np.ndarray]] = []
        for start in range(0, n, batch_size):
            chunks.append(self._predict_batch([x[start : start + batch_size] for x in inputs]))
        return [np.concatenate([c[i] for c in chunks]) for i in range(len(self.signature.outputs))]

    def _predict_batch(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        raise NotImplementedError

    def export_batch1_saved_model(self, directory: Path, batch: int | None = 1) -> Path:
        """Write a SavedModel whose ``serving_default`` takes batch-1 inputs (for TFLite), or
        ``batch=None`` for a free batch (the onnx target's ``--dynamic-batch``)."""
        raise NotImplementedError

    def operator_counts(self) -> dict[str, int]:
        """The source's operators (layers, ATen ops, TFLite builtins) and how often each occurs."""
        return {}

    def float_tflite(self, workdir: Path) -> FloatTflite:
        """A float .tflite of this model with batch-1 inputs (the "float-tflite" route)."""
        raise NotImplementedError
