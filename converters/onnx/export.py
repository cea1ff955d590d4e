"""The float ONNX model of a source, by the route its framework has.

keras / keras-h5 / SavedModel   the batch-1 SavedModel, through tf2onnx (in a child process:
                                tf2onnx drives TensorFlow's graph tools, whose aborts must not
                                end the user's process)
PyTorch                         torch.onnx.export: the dynamo exporter where it works, else
                                the TorchScript exporter, with the reason recorded
ONNX                            the file itself, batch fixed, shapes inferred, opset raised
float .tflite                   tf2onnx's TFLite reader (also in a child process)

Every route writes opset ``OPSET`` or newer and batch 1 unless ``dynamic_batch``, then
simplifies the graph with onnxslim (constant folding, dead nodes) when it is installed.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

from edgeserve._deps import TORCH_TRACING, installed, package_version, require
from edgeserve.console import quiet_libraries
from edgeserve.errors import InputError, MissingDependencyError, SourceModelError, first_line

OPSET = 17


@dataclasses.dataclass(frozen=True)
class FloatOnnx:
    model: Any  # onnx.ModelProto
    route: str
    tools: dict[str, str | None]
    notes: tuple[str, ...] = ()


def float_onnx(ctx: Any, dynamic_batch: bool) -> FloatOnnx:
    """The source as float ONNX, made once per conversion: the onnx target and, for a TensorFlow
    or float .tflite source, the Core ML and ExecuTorch routes (through the ONNX reader) all start
    from it, and tf2onnx runs in a fresh Python that imports TensorFlow each time (5-8 s a run on
    the corpus's .tflite models)."""
    key = "float_onnx:" + ("free batch" if dynamic_batch else "batch 1")
    return ctx.once(key, lambda: _made(ctx, dynamic_batch))


def _made(ctx: Any, dynamic_batch: bool) -> FloatOnnx:
    source = ctx.source
    onnx = require("onnx", "the onnx target")
    if dynamic_batch and source.kind == "onnx" and not _free_batch(source.proto):
        raise InputError(f"--dynamic-batch keeps a free batch dimension, and {source.path.name} fixes its batch: "
                         "re-export it with a dynamic batch (e.g. dynamic_axes={'input': {0: 'batch'}})")
    if dynamic_batch and source.framework == "pytorch" and (
            source.program is None or any(t.shape[0] is not None for t in source.signature.inputs)):
        raise InputError(f"--dynamic-batch keeps a free batch dimension, and {source.path.name} was traced or exported "
                         "with a fixed batch (its graph may bake it into reshapes): export it with "
                         "torch.export.export(model, example, dynamic_shapes={'x': {0: torch.export.Dim('batch')}})")
    if dynamic_batch and source.kind == "tflite-float":
        raise InputError("--dynamic-batch is not available for a .tflite source: its batch is fixed in the file")
    if source.kind in ("keras", "keras-h5", "saved_model"):
        if dynamic_batch:
            directory = ctx.workdir / "free_batch_saved_model"
            if not directory.exists():
                source.export_batch1_saved_model(directory, batch=None)
        else:
            directory = ctx.batch1_saved_model()
        made = _tf2onnx(["--saved-model", str(directory)], ctx.workdir / "tf2onnx.onnx", source)
        result = FloatOnnx(made, "batch-1 SavedModel -> tf2onnx", {"tf2onnx": package_version("tf2onnx")})
    elif source.kind == "tflite-float":
        from edgeserve.converters.onnx.tflite_dft import dft_as_matmul

        path = source.path
        # tf2onnx reads no sparse tensor, no MediaPipe op, and an RFFT2D only straight into a
        # COMPLEX_ABS: the rewritten bytes (the targets are still judged against the file as given)
        readable, dft = dft_as_matmul(source.readable)
        if source.rewrites or dft:
            path = ctx.workdir / "readable.tflite"
            path.write_bytes(readable)
        made = _tf2onnx(["--tflite", str(path)], ctx.workdir / "tf2onnx.onnx", source)
        result = FloatOnnx(made, "float .tflite" + (" (RFFT2D as matrix products)" if dft else "") + " -> tf2onnx",
                           {"tf2onnx": package_version("tf2onnx")}, (dft,) if dft else ())
    elif source.framework == "pytorch":
        result = _torch_export(source, ctx.workdir / "torch.onnx", dynamic_batch)
    elif source.kind == "onnx":
        result = FloatOnnx(onnx.load_model_from_string(source.data), "ONNX source, shapes inferred",
                           {"onnx": onnx.__version__})
    else:
        raise SourceModelError(f"{source.path.name} is a full-integer .tflite; the onnx target converts a float "
                               "source (Keras, PyTorch, ONNX or a float .tflite)")
    model = _fix_io(onnx, result.model, source, dynamic_batch)
    notes = list(result.notes)
    if _opset(model) < OPSET:
        try:
            model = onnx.version_converter.convert_version(model, OPSET)
            notes.append(f"opset raised to {OPSET}")
        except Exception as exc:  # the version converter raises C++ errors as RuntimeError and more
            notes.append(f"kept opset {_opset(model)}: the version converter failed ({first_line(exc)})")
    model = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    model, note = _slim(model)
    notes.append(note)
    return dataclasses.replace(result, model=model, notes=tuple(notes))


def _slim(model: Any) -> tuple[Any, str]:
    """Constant folding and dead-node removal with onnxslim (checked afterwards, as every
    artifact is, against the source in ONNX Runtime)."""
    if not installed("onnxslim"):
        return model, "not simplified: onnxslim is not installed"
    import onnxslim

    before = len(model.graph.node)
    try:
        with quiet_libraries():
            slimmed = onnxslim.slim(model)
    except Exception as exc:  # onnxslim raises from its graph rewrites; the unsimplified model is still right
        return model, f"not simplified: onnxslim failed ({first_line(exc)[:150]})"
    return slimmed, f"onnxslim {package_version('onnxslim')}: {before} -> {len(slimmed.graph.node)} nodes"


def _free_batch(model: Any) -> bool:
    constants = {i.name for i in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in constants]
    return bool(inputs) and all(
        v.type.tensor_type.shape.dim and not (v.type.tensor_type.shape.dim[0].dim_value > 0) for v in inputs)


def _opset(model: Any) -> int:
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def _fix_io(onnx: Any, model: Any, source: Any, dynamic_batch: bool) -> Any:
    """Name and shape the graph's inputs as the source does: batch 1 (or free), other dims fixed."""
    constants = {i.name for i in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in constants]
    for value, info in zip(inputs, source.signature.inputs):
        dims = value.type.tensor_type.shape.dim
        for i, d in enumerate(dims):
            size = info.shape[i] if i < len(info.shape) else None
            if i == 0:
                if dynamic_batch:
                    d.dim_param = "batch"
                else:
                    d.dim_value = 1
            elif size is not None:
                d.dim_value = int(size)
    for value in model.graph.output:
        dims = value.type.tensor_type.shape.dim
        if dims:
            if dynamic_batch:
                dims[0].dim_param = "batch"
            else:
                dims[0].dim_value = 1
    return model


def _tf2onnx(args: list[str], out: Path, source: Any) -> Any:
    onnx = require("onnx", "the onnx target")
    if not installed("tf2onnx"):  # it runs in the child; here only check it is there
        raise MissingDependencyError("tf2onnx", "convert", "the onnx target")
    command = [sys.executable, "-m", "tf2onnx.convert", *args, "--opset", str(OPSET), "--output", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode != 0 or not out.exists():
        lines = [l for l in done.stderr.splitlines() if "error" in l.lower()] or done.stderr.splitlines()[-1:]
        raise SourceModelError(f"tf2onnx cannot convert {source.path.name}: "
                               f"{(lines[-1] if lines else f'exit status {done.returncode}').strip()[:300]}")
    return onnx.load(str(out))


def _torch_export(source: Any, out: Path, dynamic_batch: bool = False) -> FloatOnnx:
    torch = require("torch", "the onnx target")
    onnx = require("onnx", "the onnx target")
    example = tuple(torch.zeros((1, *t.shape[1:]), dtype=getattr(torch, t.dtype)) for t in source.signature.inputs)
    names = {"input_names": [t.name for t in source.signature.inputs],
             "output_names": [t.name for t in source.signature.outputs]}
    notes = []
    # A free batch comes only from an ExportedProgram whose batch is symbolic (checked by the
    # caller); the exporter keeps it. The TorchScript fallback is told with dynamic_axes.
    axes = {"dynamic_axes": {n: {0: "batch"} for n in names["input_names"] + names["output_names"]}} \
        if dynamic_batch else {}
    try:
        with TORCH_TRACING, quiet_libraries():
            program = source.program if source.program is not None else source.module
            torch.onnx.export(program, example, str(out), opset_version=OPSET, dynamo=True, **names)
        route = "PyTorch -> torch.onnx.export (dynamo)"
        notes.append(f"onnxscript {package_version('onnxscript')}")
    except Exception as exc:  # dynamo needs onnxscript and a traceable program; fall back, saying why
        notes.append(f"dynamo exporter not used: {first_line(exc)[:200]}")
        try:
            with TORCH_TRACING, quiet_libraries():
                torch.onnx.export(source.module, example, str(out), opset_version=OPSET, dynamo=False, **names,
                                  **axes)
        except Exception as inner:  # the TorchScript exporter raises many types
            raise SourceModelError(f"torch.onnx.export cannot export {source.path.name}: {first_line(inner)}. "
                                   "Route tried: dynamo, then the TorchScript exporter") from inner
        route = "PyTorch -> torch.onnx.export (TorchScript exporter)"
    return FloatOnnx(onnx.load(str(out)), route, {"torch": torch.__version__}, tuple(notes))
