"""Source models, one module per kind behind one interface (:class:`SourceModel`).

keras    .keras, Keras 2 .h5 (with keras_legacy's shims), SavedModel directories
pytorch  ExportedProgram .pt2, traced TorchScript .pt
tflite   a .tflite file, read by edgeserve's own reader
onnx     a self-contained .onnx file (onnx/source.py; its graph becomes a torch module in onnx/reader.py)

Each module lists its :class:`SourceKind` entries in ``KINDS``; a new kind is a new module
added to ``_MODULES``. Modules import their framework only when a model is loaded, so
``import edgeserve.sources`` stays light.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from edgeserve.atomic import NOT_REGULAR, special_file
from edgeserve.errors import SourceModelError
from edgeserve.sources.base import SERVING_KEY, FloatTflite, Signature, SourceKind, SourceModel, TensorInfo

__all__ = ["SERVING_KEY", "FloatTflite", "Signature", "SourceKind", "SourceModel", "TensorInfo", "kinds", "load_source",
           "source_kind"]

_MODULES = ("keras", "pytorch", "tflite", "onnx.source")

def kinds() -> tuple[SourceKind, ...]:
    """Every registered source kind, in detection order."""
    found: list[SourceKind] = []
    for name in _MODULES:
        found.extend(importlib.import_module(f"{__name__}.{name}").KINDS)
    return tuple(found)


def accepted() -> str:
    """The accepted formats, as one phrase for error messages."""
    described = [k.described for k in kinds()]
    return ", ".join(described[:-1]) + " or " + described[-1]


def _find(path: Path) -> SourceKind:
    for kind in kinds():
        if kind.detect(path):
            return kind
    if path.is_dir():
        raise SourceModelError(f"{path} is a directory without saved_model.pb; expected a SavedModel directory")
    raise SourceModelError(f"cannot tell the model format of {path.name}: expected {accepted()}")


def source_kind(path: Path) -> str:
    """The registered kind name of ``path`` ("keras", "tflite", ...), or raise naming what is accepted."""
    return _find(Path(path)).name


def load_source(path: str | Path, input_shapes: dict[str, tuple[int, ...]] | None = None,
                input_values: dict[str, str] | None = None, batch_axes: dict[str, int] | None = None) -> SourceModel:
    """Load any registered source kind, or raise :class:`SourceModelError`.

    ``input_shapes`` fixes dynamic input dimensions by input name (``--input-shape``); the
    kinds that can have them (ONNX, ExportedProgram) take it. ``input_values`` fixes an ONNX
    input to a value (``--input-value sr=16000``): it becomes a constant of the graph.
    """
    path = Path(path)
    if not path.exists():
        raise SourceModelError(f"source model not found: {path}")
    if special_file(path):  # reading a FIFO with no writer would block for ever
        raise SourceModelError(f"{path} {NOT_REGULAR}; give the model file")
    kind = _find(path)
    if input_values or batch_axes:
        if kind.name != "onnx":
            flag = "--input-value" if input_values else "--batch-axis"
            raise SourceModelError(f"{flag} applies to ONNX sources; {path.name} is {kind.described}")
        from edgeserve.sources.onnx.source import OnnxSource

        return OnnxSource(path, input_shapes, input_values, batch_axes)
    if input_shapes:
        if kind.name not in ("onnx", "torch-export", "keras", "keras-h5"):
            raise SourceModelError(f"--input-shape applies to ONNX, ExportedProgram (.pt2) and Keras (.keras, .h5) "
                                   f"sources; {path.name} is {kind.described}, whose input shapes are fixed when it "
                                   "is saved")
        return kind.load(path, input_shapes)
    return kind.load(path)
