"""PyTorch sources: an ``ExportedProgram`` saved as ``.pt2``, or a traced TorchScript ``.pt``.

torch is imported when a model is loaded. PyTorch sources convert to Core ML only today
(coremltools takes them directly); the TFLite targets need a TensorFlow model.
"""

from __future__ import annotations

import collections
import logging
import pickle
import re
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from edgeserve._deps import require
from edgeserve.errors import SourceModelError, first_line
from edgeserve.sources.base import Signature, SourceKind, SourceModel, TensorInfo

log = logging.getLogger(__name__)

TORCH_EXPORT_SUFFIXES = (".pt2",)
TORCHSCRIPT_SUFFIXES = (".pt", ".pth", ".torchscript")


class TorchSource(SourceModel):
    """A PyTorch model: an ``ExportedProgram`` (.pt2) or a TorchScript module (.pt).

    PyTorch sources convert to Core ML only (coremltools takes them directly); the TFLite
    targets need a TensorFlow model. ``program`` is the ExportedProgram (None for
    TorchScript), ``module`` what is called for reference predictions.
    """

    def __init__(self, path: Path, kind: str, module: Any, program: Any, signature: Signature,
                 framework_version: str) -> None:
        self.module = module
        self.program = program
        super().__init__(path, kind, signature, framework_version)
        self.framework = "pytorch"

    def _predict_batch(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        torch = require("torch", "running a PyTorch source")
        # An ExportedProgram (and often a traced module) is specialised to the batch size it
        # was exported with: feed one sample at a time when that batch size is 1.
        fixed_one = all(t.shape and t.shape[0] == 1 for t in self.signature.inputs)
        rows = range(len(inputs[0])) if fixed_one else [slice(None)]
        chunks: list[list[np.ndarray]] = []
        with torch.no_grad():
            for row in rows:
                picked = [x[row : row + 1] if isinstance(row, int) else x for x in inputs]
                out = self.module(*[torch.from_numpy(np.ascontiguousarray(x)) for x in picked])
                outs = out if isinstance(out, (list, tuple)) else [out]
                chunks.append([o.detach().cpu().numpy() for o in outs])
        return [np.concatenate([c[i] for c in chunks]) for i in range(len(chunks[0]))]

    def export_batch1_saved_model(self, directory: Path) -> Path:
        raise SourceModelError(
            f"{self.path.name} is a PyTorch model; it converts to -t coreml only. The TFLite targets "
            "(tflite-int8, mcu) start from a .keras, .h5 or SavedModel model"
        )


def _load_torch(path: Path, kind: str) -> TorchSource:
    torch = require("torch", "loading a PyTorch model")
    version = f"torch {torch.__version__}"
    if kind == "torch-export":
        try:
            with warnings.catch_warnings():
                # torch's own pytree deprecation notices, raised while unpickling the program.
                warnings.simplefilter("ignore", FutureWarning)
                program = torch.export.load(str(path))
        except Exception as exc:  # torch raises many types for a bad archive
            raise SourceModelError(f"cannot load ExportedProgram {path}: {first_line(exc)}") from exc
        signature = _exported_signature(program)
        return TorchSource(path, kind, program.module(), program, signature, version)
    if not zipfile.is_zipfile(path) or not _is_torchscript(path):
        raise SourceModelError(
            f"{path.name} is not a TorchScript archive (a state dict or a pickled module holds no graph to "
            "convert). Save the model with torch.export.save(torch.export.export(model, example), 'model.pt2') "
            "or torch.jit.trace(model, example).save('model.pt')"
        )
    try:
        module = torch.jit.load(str(path), map_location="cpu").eval()
    except Exception as exc:  # RuntimeError for most problems, others for damaged zips
        raise SourceModelError(f"cannot load TorchScript {path}: {first_line(exc)}") from exc
    names = [a.name for a in module.forward.schema.arguments[1:]]
    recorded = _traced_input_specs(path)
    if recorded is None or len(recorded) != len(names):
        raise SourceModelError(
            f"{path.name} records no input shapes (it was scripted, or traced with _store_inputs=False), and "
            "Core ML needs fixed ones. Save it with torch.jit.trace(model, example_inputs).save(...) or as an "
            "ExportedProgram (.pt2)"
        )
    inputs = tuple(TensorInfo(_torch_name(n, f"input_{i}"), shape, dtype)
                   for i, (n, (shape, dtype)) in enumerate(zip(names, recorded)))
    with torch.no_grad():
        example = [torch.zeros(t.shape, dtype=getattr(torch, t.dtype)) for t in inputs]
        out = module(*example)
    outs = out if isinstance(out, (list, tuple)) else [out]
    outputs = tuple(TensorInfo(f"output_{i}", tuple(o.shape), str(o.dtype).replace("torch.", ""))
                    for i, o in enumerate(outs))
    return TorchSource(path, kind, module, None, Signature(inputs, outputs), version)


def _exported_signature(program: Any) -> Signature:
    nodes = {n.name: n for n in program.graph.nodes}

    def info(name: str, val: Any, fallback: str) -> TensorInfo:
        shape = tuple(int(d) if isinstance(d, int) else None for d in val.shape)
        return TensorInfo(_torch_name(name, fallback), shape, str(val.dtype).replace("torch.", ""))

    user_inputs = program.graph_signature.user_inputs
    inputs = tuple(info(n, nodes[n].meta["val"], f"input_{i}") for i, n in enumerate(user_inputs))
    output_node = next(n for n in program.graph.nodes if n.op == "output")
    results = output_node.args[0] if isinstance(output_node.args[0], (list, tuple)) else [output_node.args[0]]
    user_outputs = set(program.graph_signature.user_outputs)
    outputs = tuple(info(r.name, r.meta["val"], f"output_{i}")
                    for i, r in enumerate(x for x in results if getattr(x, "name", None) in user_outputs))
    return Signature(inputs, outputs)


def _is_torchscript(path: Path) -> bool:
    with zipfile.ZipFile(path) as archive:
        return any(n.endswith("/constants.pkl") or "/code/" in n for n in archive.namelist())


_STORAGE_DTYPES = {"FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16",
                   "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16",
                   "CharStorage": "int8", "ByteStorage": "uint8", "BoolStorage": "bool"}


class _TracedShapes(pickle.Unpickler):
    """Reads ``traced_inputs.pkl`` for the example inputs' shapes only: no tensor data, no code."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return lambda storage, offset, size, *rest: (tuple(int(d) for d in size), storage)
        if (module, name) == ("torch.jit._pickle", "restore_type_tag"):
            return lambda value, tag: value
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if module == "torch" and name in _STORAGE_DTYPES:
            return _STORAGE_DTYPES[name]
        raise pickle.UnpicklingError(f"unexpected {module}.{name} in traced_inputs.pkl")

    def persistent_load(self, pid: Any) -> Any:
        return pid[1]  # ("storage", dtype marker, key, location, numel)


def _traced_input_specs(path: Path) -> list[tuple[tuple[int, ...], str]] | None:
    """The (shape, dtype) of each example input ``torch.jit.trace`` stored, or None."""
    with zipfile.ZipFile(path) as archive:
        entry = next((n for n in archive.namelist() if n.endswith("/traced_inputs.pkl")), None)
        if entry is None:
            return None
        try:
            recorded = _TracedShapes(archive.open(entry)).load()
        except (pickle.UnpicklingError, EOFError, TypeError, ValueError, IndexError) as exc:
            log.debug("cannot read %s in %s: %s", entry, path, exc)
            return None
    inputs = recorded.get("forward") if isinstance(recorded, dict) else None
    if not inputs or not all(isinstance(t, tuple) and len(t) == 2 for t in inputs):
        return None
    return [(shape, dtype) for shape, dtype in inputs]


def _torch_name(name: str, fallback: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name) or fallback


KINDS = (
    SourceKind("torch-export", "a PyTorch ExportedProgram (.pt2) (Core ML target only)",
               lambda p: not p.is_dir() and p.suffix.lower() in TORCH_EXPORT_SUFFIXES,
               lambda p: _load_torch(p, "torch-export")),
    SourceKind("torchscript", "a TorchScript (.pt) file (Core ML target only)",
               lambda p: not p.is_dir() and p.suffix.lower() in TORCHSCRIPT_SUFFIXES,
               lambda p: _load_torch(p, "torchscript")),
)
