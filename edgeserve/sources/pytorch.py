"""PyTorch sources: an ``ExportedProgram`` saved as ``.pt2``, or a traced TorchScript ``.pt``.

torch is imported when a model is loaded. Core ML takes PyTorch models directly
(coremltools); the TFLite targets start from a float .tflite made by litert-torch, which
needs no TensorFlow (``float_tflite``).
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

from edgeserve._deps import TORCH_TRACING, package_version, require
from edgeserve.console import quiet_libraries
from edgeserve.errors import EdgeServeError, SourceModelError, first_line
from edgeserve.sources.base import FloatTflite, Signature, SourceKind, SourceModel, TensorInfo, with_input_shapes
from edgeserve.sources.litert_lowering import lower_to_tflite

log = logging.getLogger(__name__)

TORCH_EXPORT_SUFFIXES = (".pt2",)
TORCHSCRIPT_SUFFIXES = (".pt", ".pth", ".torchscript")


class TorchSource(SourceModel):
    """A PyTorch model: an ``ExportedProgram`` (.pt2), a TorchScript module (.pt), or an
    ``nn.Module`` given to the Python API with example inputs.

    ``program`` is the ExportedProgram (None for TorchScript), ``module`` what is called for
    reference predictions.
    """

    tflite_route = "float-tflite"

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

    def operator_counts(self) -> dict[str, int]:
        if self.program is not None:
            names = [str(n.target) for n in self.program.graph.nodes if n.op == "call_function"]
        else:
            names = [n.kind() for n in self.module.inlined_graph.nodes()
                     if not n.kind().startswith(("prim::", "aten::size"))]
        return dict(collections.Counter(names))

    def float_tflite(self, workdir: Path) -> FloatTflite:
        """litert-torch lowers the model to a float .tflite, in the source's own layout (NCHW stays NCHW)."""
        torch = require("torch", "converting a PyTorch model")
        require("litert_torch", "converting a PyTorch model to LiteRT")
        example = tuple(torch.zeros(_batch1(t), dtype=getattr(torch, t.dtype)) for t in self.signature.inputs)
        if self.program is not None:
            program, route = self.program, "ExportedProgram (.pt2) -> litert-torch"
        else:
            with TORCH_TRACING:
                program = _torchscript_to_program(torch, self.module, example, self.path)
            route = "TorchScript -> torch.export (TS2EP) -> litert-torch"
        try:
            data = lower_to_tflite(program, example, workdir / "litert_torch")
        except EdgeServeError as exc:
            raise SourceModelError(
                f"litert-torch cannot convert {self.path.name}: {first_line(exc)}. Route tried: {route}. "
                "-t coreml takes PyTorch models directly"
            ) from exc
        if self.kind == "torch-module":
            route = "nn.Module -> torch.export -> litert-torch"
        return FloatTflite(data, route,
                           {"torch": torch.__version__, "litert-torch": package_version("litert-torch")})


def _batch1(info: TensorInfo) -> tuple[int, ...]:
    if any(d is None for d in info.shape[1:]):
        raise SourceModelError(
            f"input '{info.name}' has dynamic dimensions {_dims(info.shape)}; edge targets need a fixed shape. "
            f"Pass --input-shape {info.name}={'x'.join(str(d or 224) for d in (1, *info.shape[1:]))} (your sizes)"
        )
    return (1, *(int(d) for d in info.shape[1:]))


def _dims(shape: tuple[int | None, ...]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _torchscript_to_program(torch: Any, module: Any, example: tuple[Any, ...], path: Path) -> Any:
    from torch._export.converter import TS2EPConverter

    try:
        with quiet_libraries():
            return TS2EPConverter(module, example).convert()
    except Exception as exc:  # the TorchScript-to-export converter raises many types
        raise SourceModelError(
            f"cannot turn TorchScript {path.name} into an ExportedProgram for litert-torch: {first_line(exc)}. "
            "Save the model with torch.export.save(torch.export.export(model, example), 'model.pt2') instead"
        ) from exc


def _load_torch(path: Path, kind: str, input_shapes: dict[str, tuple[int, ...]] | None = None) -> TorchSource:
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
        if input_shapes:  # an ExportedProgram with dynamic dimensions, fixed for edge targets
            signature = Signature(with_input_shapes(signature.inputs, input_shapes, path.name), signature.outputs)
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
            "edge targets need fixed ones. Save it with torch.jit.trace(model, example_inputs).save(...) or as an "
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
    SourceKind("torch-export", "a PyTorch ExportedProgram (.pt2)",
               lambda p: not p.is_dir() and p.suffix.lower() in TORCH_EXPORT_SUFFIXES,
               lambda p, shapes=None: _load_torch(p, "torch-export", shapes)),
    SourceKind("torchscript", "a traced TorchScript (.pt) file",
               lambda p: not p.is_dir() and p.suffix.lower() in TORCHSCRIPT_SUFFIXES,
               lambda p: _load_torch(p, "torchscript")),
)


def from_module(module: Any, example_inputs: Any, directory: Path) -> TorchSource:
    """An ``nn.Module`` given to the Python API: exported with ``torch.export`` into ``directory``.

    The ExportedProgram is what every target starts from and what the manifest's sha256
    names, so a module and its saved ``.pt2`` convert the same way.
    """
    torch = require("torch", "converting a PyTorch model")
    if not isinstance(module, torch.nn.Module):
        raise SourceModelError(f"expected a path to a model file or a torch.nn.Module; got {type(module).__name__}")
    if example_inputs is None:
        raise SourceModelError(
            f"converting the nn.Module {type(module).__name__} needs example_inputs (a tensor or a tuple of "
            "tensors with the batch-1 input shapes), e.g. example_inputs=torch.zeros(1, 3, 224, 224)"
        )
    example = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    try:
        with quiet_libraries():
            program = torch.export.export(module.eval(), example)
    except Exception as exc:  # torch.export raises many types for untraceable code
        raise SourceModelError(
            f"torch.export cannot export {type(module).__name__}: {first_line(exc)}. Route tried: nn.Module -> "
            "torch.export. Make forward() traceable (no data-dependent Python control flow) or pass a traced "
            "TorchScript file"
        ) from exc
    path = directory / f"{type(module).__name__}.pt2"
    torch.export.save(program, str(path))
    source = _load_torch(path, "torch-export")
    source.kind = "torch-module"
    source.origin = f"nn.Module {type(module).__module__}.{type(module).__qualname__} (exported with torch.export)"
    return source
