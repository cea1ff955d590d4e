"""ONNX sources: a self-contained ``.onnx`` file.

The float reference is ONNX Runtime on the file itself (after the same checks the runtime
does before ORT parses a file). The TFLite and Core ML routes go through PyTorch: the graph
becomes an ``nn.Module`` (reader.py), ``torch.export`` traces it, and from there it
is a PyTorch model like any other. The TFLite targets have a second route, onnx2tf
(:mod:`onnx2tf_lowering`), taken where the reader's cannot make a float model (and by
tflite-int8 where the reader's model gives no INT8 model that passes). NCHW stays NCHW on
every route.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from edgeserve._deps import TORCH_TRACING, package_version, require
from edgeserve.console import quiet_warnings
from edgeserve.errors import EdgeServeError, SourceModelError, first_line
from edgeserve.sources.base import FloatTflite, Signature, SourceKind, SourceModel, TensorInfo, random_samples
from edgeserve.sources.litert_lowering import lower_to_tflite
from edgeserve.sources.onnx.input_ranges import input_value_range
from edgeserve.sources.onnx.layout import move_batch_first

log = logging.getLogger(__name__)
ROUTE = "ONNX -> edgeserve ONNX reader -> torch.export -> litert-torch"
# What a torch.export failure names: coremltools and ExecuTorch take the program from there, so
# their refusal must not name litert-torch, which they never reach.
ROUTE_TO_TORCH = "ONNX -> edgeserve ONNX reader -> torch.export"
ROUTE_ONNX2TF = "ONNX -> onnx2tf (flatbuffer_direct)"
# Which route's float model the TFLite targets start from: the reader's by default (measured
# better on the corpus, docs/sources.md), "onnx2tf" to start from onnx2tf's, "reader" for the
# reader's alone. The other route is the fallback.
ROUTE_ENV = "EDGESERVE_ONNX_ROUTE"
# The most one sample of one input may hold: conversion keeps calibration and evaluation
# batches of them in memory, so a larger input is refused before anything is allocated.
MAX_INPUT_BYTES = 1 << 30
# Input types every route takes: float32 values, and integers that are data (token ids, bytes,
# a mask: sources/onnx/input_ranges.py reads the values they take).
INPUT_TYPES = ("float32", "int32", "int64", "bool")


def _check_sizes(path: Path, graph: Any, inputs: tuple[TensorInfo, ...]) -> None:
    """Refuse what no conversion can hold: a graph without outputs, or an input whose one
    sample would not fit in memory (a hand-made or damaged file)."""
    if not graph.output:
        raise SourceModelError(f"{path.name} has no outputs: an ONNX model must give at least one")
    for t in inputs:
        nbytes = np.dtype(t.dtype).itemsize * int(np.prod([max(int(d), 0) for d in t.shape], dtype=object))
        if nbytes > MAX_INPUT_BYTES:
            raise SourceModelError(
                f"input {t.name!r} of {path.name} has shape {list(t.shape)}: {_size(nbytes)} per sample, more than "
                f"the {_size(MAX_INPUT_BYTES)} a conversion can hold; give a smaller --input-shape")


def _size(nbytes: int) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes:,} bytes"


class OnnxSource(SourceModel):
    tflite_route = "float-tflite"
    # How messages name the file: its own name, or, for an ONNX edgeserve made from the user's
    # model on the way to a torch program (converters/_torch_source.py), that model's.
    shown_as: str | None = None

    @property
    def _name(self) -> str:
        return self.shown_as or self.path.name

    def __init__(self, path: Path, input_shapes: dict[str, tuple[int, ...]] | None = None,
                 input_values: dict[str, str] | None = None, batch_axes: dict[str, int] | None = None) -> None:
        from edgeserve.onnx_check import read_onnx_file, validate_onnx

        self.path = path
        data = read_onnx_file(path)  # external data from beside the model only
        validate_onnx(data)  # before onnxruntime or the reader parse it
        onnx = require("onnx", "reading an ONNX model")
        self._onnx = onnx
        self.proto = onnx.load_model_from_string(data)
        self.fixed_inputs = _fix_inputs(onnx, self.proto, path, input_values or {})
        self.batch_axes = move_batch_first(onnx, self.proto, path, batch_axes or {})
        self.reshaped_inputs = _reshape_placeholders(self.proto, dict(input_shapes or {}))
        if self.fixed_inputs or self.batch_axes or self.reshaped_inputs:  # every route and the reference start from the model so
            data = self.proto.SerializeToString()
        self._data = data
        graph = self.proto.graph
        constants = {i.name for i in graph.initializer}
        shapes = dict(input_shapes or {})
        names = [v.name for v in graph.input if v.name not in constants]
        unknown = set(shapes) - set(names)
        if unknown:
            raise SourceModelError(f"--input-shape names {', '.join(sorted(unknown))}, which {path.name} has no "
                                   f"input called; its inputs: {', '.join(names)}")
        inputs = tuple(_input_info(onnx, v, shapes) for v in graph.input if v.name not in constants)
        inputs = tuple(info if info.is_float else
                       dataclasses.replace(info, values=input_value_range(onnx, self.proto, info.name))
                       for info in inputs)
        for info in inputs:
            if not info.shape or info.shape[0] != 1:
                # Samples are fed one at a time as x[i:i+1]: a first dimension that is not a
                # batch of 1 (a recurrent state laid out [layers, batch, units]) cannot be fed so.
                raise SourceModelError(
                    f"input '{info.name}' has shape {list(info.shape)}: edgeserve feeds inputs one sample at a time "
                    "with a batch of 1 first, and this one's first dimension is not that batch. Re-export the "
                    "model with the batch first, say where its batch is with --batch-axis (state=1), or fix the "
                    "input with --input-value")
        _check_sizes(path, graph, inputs)
        opset = max((o.version for o in self.proto.opset_import if o.domain in ("", "ai.onnx")), default=0)
        self._session: Any = None
        self._program: Any = None
        self._inputs = inputs
        outputs = tuple(TensorInfo(v.name, tuple(o.shape), o.dtype.name)
                        for v, o in zip(graph.output, self._run([np.zeros(t.shape, t.dtype) for t in inputs])))
        for value, info in zip(graph.output, outputs):
            if info.shape and info.shape[0] != 1:
                _refuse_batch_not_first(value, info)
        super().__init__(path, "onnx", Signature(inputs, outputs), f"onnx {onnx.__version__}, opset {opset}")
        self.framework = "onnx"

    def describe(self) -> dict[str, Any]:
        return super().describe() | ({"fixed_inputs": self.fixed_inputs} if self.fixed_inputs else {}) | \
            ({"batch_axes": self.batch_axes} if self.batch_axes else {}) | \
            ({"reshaped_inputs": self.reshaped_inputs} if self.reshaped_inputs else {})

    @property
    def data(self) -> bytes:
        """The model's bytes, external data read in: what every route starts from."""
        return self._data

    # ----- float reference: ONNX Runtime ---------------------------------------------------
    def _run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        if self._session is None:
            ort = require("onnxruntime", "running an ONNX source")
            options = ort.SessionOptions()
            options.log_severity_level = 3
            try:
                self._session = ort.InferenceSession(self._data, options, providers=["CPUExecutionProvider"])
            except Exception as exc:  # ORT raises its own Fail/InvalidGraph types
                raise SourceModelError(f"onnxruntime cannot load {self._name}: {first_line(exc)}") from exc
        names = [i.name for i in self._session.get_inputs()]
        typed = [np.asarray(x, t.dtype) for x, t in zip(inputs, self._inputs)]
        try:
            return self._session.run(None, dict(zip(names, typed)))
        except Exception as exc:  # ORT's own error types: a kernel it cannot build or run
            raise SourceModelError(f"onnxruntime cannot run {self._name}: {first_line(exc)}") from exc

    def _predict_batch(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        chunks = [self._run([x[i : i + 1] for x in inputs]) for i in range(len(inputs[0]))]
        return [np.concatenate([c[k] for c in chunks]) for k in range(len(chunks[0]))]

    # ----- the PyTorch routes --------------------------------------------------------------
    @property
    def program(self) -> Any:
        """The ExportedProgram of the translated graph (what coremltools and ExecuTorch take)."""
        with TORCH_TRACING:  # made once, by whichever target asks first
            if self._program is None:
                self._program = self._export(named_nodes=False)
            return self._program

    def _export(self, named_nodes: bool) -> Any:
        """torch.export of the reader's module; ``named_nodes``: a submodule per node (reader.py)."""
        torch = require("torch", "converting an ONNX model")
        from edgeserve.sources.onnx.reader import build_module

        module = build_module(self._onnx, self.proto, named_nodes)
        example = self._example()
        try:
            with TORCH_TRACING, quiet_warnings():
                return torch.export.export(module, example)
        except SourceModelError:
            raise
        except Exception as exc:  # torch.export raises many types
            cause = exc.__cause__ if isinstance(exc.__cause__, SourceModelError) else None
            if cause is not None:
                raise cause from exc
            raise SourceModelError(f"torch.export cannot trace the ONNX graph of {self._name}: "
                                   f"{first_line(exc)}. Route tried: {ROUTE_TO_TORCH}") from exc

    def _example(self) -> tuple[Any, ...]:
        """One sample of zeros of each input's own type: torch.export traces with it (zero is a
        valid id in every embedding table)."""
        torch = require("torch", "converting an ONNX model")
        return tuple(torch.from_numpy(np.zeros(t.shape, t.dtype)) for t in self._inputs)

    @property
    def module(self) -> Any:
        return self.program.module()

    def operator_counts(self) -> dict[str, int]:
        import collections

        return dict(collections.Counter(node.op_type for node in self.proto.graph.node))

    def float_tflite(self, workdir: Path) -> FloatTflite:
        """The first route's float .tflite (the reader's, or onnx2tf's with EDGESERVE_ONNX_ROUTE=onnx2tf);
        the other route's when the first cannot make one, with why in ``fallback``."""
        first, second = self._routes()
        try:
            return first(workdir, None)
        except EdgeServeError as exc:
            if second is None:
                raise
            try:
                return second(workdir, first_line(exc))
            except EdgeServeError as other:  # the first route's refusal, with what the second said
                raise _with_note(exc, f"then {ROUTE_ONNX2TF if second == self.onnx2tf_tflite else ROUTE}: "
                                      f"{first_line(other)}") from other

    def other_float_tflite(self, workdir: Path, made: FloatTflite, why: str) -> FloatTflite | None:
        """The float model of the route ``made`` did not come from (None when there is none):
        tflite-int8 tries it when ``made`` gave no INT8 model that passes (``why``)."""
        if made.fallback is not None:
            return None  # both routes were tried already
        first, second = self._routes()
        return second(workdir, why) if second is not None else None

    def _routes(self) -> tuple[Any, Any]:
        """(first, second) float-model makers, each (workdir, why the other was not used) -> FloatTflite."""
        from edgeserve.sources.onnx import onnx2tf_lowering as onnx2tf_lowering

        asked = os.environ.get(ROUTE_ENV, "")
        if asked not in ("", "reader", "onnx2tf"):
            raise SourceModelError(f"{ROUTE_ENV} must be reader or onnx2tf; got {asked!r}")
        if not onnx2tf_lowering.installed():
            return self.reader_tflite, None
        if asked == "onnx2tf":
            return self.onnx2tf_tflite, self.reader_tflite
        return self.reader_tflite, (None if asked == "reader" else self.onnx2tf_tflite)

    def onnx2tf_tflite(self, workdir: Path, fallback: str | None) -> FloatTflite:
        """onnx2tf's model with the source's layout at its edges, checked against ONNX Runtime on
        two random samples (every output within MIN_FLOAT_SQNR_DB); ``fallback``: why not the reader's."""
        from edgeserve.quality.metrics import sqnr_db
        from edgeserve.sources.onnx import onnx2tf_lowering as lowering

        inputs, outputs = self.signature.inputs, self.signature.outputs
        data = lowering.lower_to_tflite(self._data, {t.name: tuple(t.shape) for t in inputs}, workdir / "onnx2tf")
        rng = np.random.default_rng(0)
        samples = [[random_samples(t, rng, None) for t in inputs] for _ in range(2)]
        reference = [self._run(x) for x in samples]
        first = _run_tflite(data, inputs, samples[0])
        data = lowering.restore_outputs(data, lowering.match_outputs(reference[0], first), [t.name for t in outputs])
        for x, ref in zip(samples, reference):
            for t, r, g in zip(outputs, ref, _run_tflite(data, inputs, x)):
                if r.shape != g.shape:
                    raise SourceModelError(f"output {t.name!r} is {list(g.shape)}, ONNX Runtime's {list(r.shape)}")
                db = sqnr_db(r, g)
                if db is not None and db < lowering.MIN_FLOAT_SQNR_DB:
                    raise SourceModelError(f"output {t.name!r} is {db:.1f} dB from ONNX Runtime's "
                                           f"(min {lowering.MIN_FLOAT_SQNR_DB:.0f} dB)")
        return FloatTflite(data, ROUTE_ONNX2TF, {"onnx": self._onnx.__version__, "onnx2tf": lowering.version()},
                           fallback)

    def reader_tflite(self, workdir: Path, fallback: str | None) -> FloatTflite:
        """The reader's float .tflite (ONNX -> torch -> litert-torch); ``fallback``: why not onnx2tf's."""
        torch = require("torch", "converting an ONNX model")
        require("litert_torch", "converting an ONNX model to LiteRT")
        # A submodule per node: litert-torch names each tensor after the node that made it, so
        # the per-layer table and the keep-in-float remedy can tell the nodes apart.
        program = self._export(named_nodes=True)
        example = self._example()
        try:
            data = lower_to_tflite(program, example, workdir / "litert_torch")
        except EdgeServeError as exc:
            tried = f"Routes tried: {ROUTE_ONNX2TF} ({fallback}); {ROUTE}" if fallback else f"Route tried: {ROUTE}"
            raise SourceModelError(f"litert-torch cannot convert the ONNX graph of {self._name}: "
                                   f"{first_line(exc)}. {tried}") from exc
        return FloatTflite(data, ROUTE, {"onnx": self._onnx.__version__, "torch": torch.__version__,
                                         "litert-torch": package_version("litert-torch")}, fallback)


def _with_note(error: EdgeServeError, note: str) -> EdgeServeError:
    """``error`` (its class and fields kept: an UnsupportedOpError stays one) with ``note`` after its text."""
    made = type(error).__new__(type(error))
    Exception.__init__(made, f"{error} ({note})")
    made.__dict__.update(error.__dict__)
    if error.cli_message:
        made.cli_message = f"{error.cli_message} ({note})"
    return made


def _run_tflite(data: bytes, inputs: tuple[TensorInfo, ...], sample: list[np.ndarray]) -> list[np.ndarray]:
    """Every output of the float .tflite on one sample, inputs matched by name (by order when
    the names differ), outputs in the subgraph's order."""
    from edgeserve.runtime.backends.litert_run import TfliteRunner

    try:
        interpreter = TfliteRunner(data).interpreter
        details = interpreter.get_input_details()
        by_name = {d["name"]: d for d in details}
        for i, (info, x) in enumerate(zip(inputs, sample)):
            detail = by_name.get(info.name, details[i])
            if tuple(detail["shape"]) != tuple(x.shape):
                raise SourceModelError(f"input {info.name!r} became {list(detail['shape'])}, the source's is "
                                       f"{list(x.shape)}")
            # litert-torch makes an int64 input int32 (it lowers without 64-bit integers)
            interpreter.set_tensor(detail["index"], x.astype(detail["dtype"], copy=False))
        interpreter.invoke()
        return [interpreter.get_tensor(d["index"]).copy() for d in interpreter.get_output_details()]
    except EdgeServeError:
        raise
    except Exception as exc:  # LiteRT raises RuntimeError/ValueError on a model it cannot prepare or run
        raise SourceModelError(f"LiteRT cannot run the float model: {first_line(exc)}") from exc


def _fix_inputs(onnx: Any, proto: Any, path: Path, values: dict[str, str]) -> dict[str, Any]:
    """Each named graph input becomes an initializer holding the given value (a sample rate,
    a mode flag): the model then has one input fewer, and ONNX Runtime folds what depends on
    it. The value is parsed as the input's own type and must fit its declared shape."""
    fixed: dict[str, Any] = {}
    graph = proto.graph
    constants = {i.name for i in graph.initializer}
    inputs = {v.name: v for v in graph.input if v.name not in constants}
    for name, text in values.items():
        if name not in inputs:
            raise SourceModelError(f"--input-value names {name}, which {path.name} has no input called; its inputs: "
                                   f"{', '.join(inputs)}")
        tensor = inputs[name].type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in tensor.shape.dim]
        try:
            number = np.array(float(text) if dtype.kind == "f" else int(text), dtype)
        except (ValueError, OverflowError) as exc:
            raise SourceModelError(f"--input-value {name}={text}: expected one {dtype.name} number for input "
                                   f"'{name}', got {text!r}") from exc
        graph.initializer.append(onnx.numpy_helper.from_array(np.full(dims, number, dtype), name))
        graph.input.remove(inputs[name])
        fixed[name] = number.item()
    return fixed


def _reshape_placeholders(proto: Any, shapes: dict[str, tuple[int, ...]]) -> dict[str, dict[str, list[int]]]:
    """Inputs whose fixed declared shape ``--input-shape`` replaces with another of the same rank:
    a fully convolutional model exported with a placeholder size (CenterFace declares
    [10, 3, 32, 32]; its own package rewrites it to the image's size at run time). The input's
    dimensions are rewritten and the shapes inferred inside the graph dropped, so ONNX Runtime and
    every route infer them again at the new size; a graph that bakes the old size into a Reshape
    then fails to run, and says so. {name: {"declared": [...], "given": [...]}}."""
    constants = {i.name for i in proto.graph.initializer}
    changed: dict[str, dict[str, list[int]]] = {}
    for value in proto.graph.input:
        given = shapes.get(value.name)
        dims = value.type.tensor_type.shape.dim
        if value.name in constants or given is None or len(given) != len(dims):
            continue
        declared = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in dims]
        if all(d is None or d == g for d, g in zip(declared, given)) or None in declared:
            continue  # it fits (or only fills free dimensions), or it is a mix _input_info refuses
        for dim, size in zip(dims, given):
            dim.Clear()
            dim.dim_value = int(size)
        changed[value.name] = {"declared": [int(d) for d in declared], "given": [int(g) for g in given]}
    if changed:
        del proto.graph.value_info[:]
        for value in proto.graph.output:
            for dim in value.type.tensor_type.shape.dim:
                dim.Clear()
        log.warning("--input-shape replaces the declared shape of %s (a placeholder size; the graph's "
                    "shapes are inferred again at the new one)",
                    "; ".join(f"{n} ({_dims(c['declared'])} -> {_dims(c['given'])})" for n, c in changed.items()))
    return changed


def _input_info(onnx: Any, value: Any, shapes: dict[str, tuple[int, ...]]) -> TensorInfo:
    tensor = value.type.tensor_type
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name
    if dtype not in INPUT_TYPES:  # uint8 pixels, fp16: not read as any route would feed them
        raise SourceModelError(f"input '{value.name}' is {dtype}; edgeserve converts ONNX models whose inputs are "
                               f"{', '.join(INPUT_TYPES)}")
    declared = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tensor.shape.dim]
    if value.name in shapes:
        given = tuple(shapes[value.name])
        if len(given) != len(declared) or any(d is not None and d != g for d, g in zip(declared, given)):
            raise SourceModelError(f"--input-shape {value.name}={'x'.join(map(str, given))} does not fit the "
                                   f"declared shape {_dims(declared)}")
        return TensorInfo(value.name, given, dtype)
    if declared and declared[0] is None:
        declared[0] = 1  # a dynamic batch: edge targets run batch 1
    if any(d is None for d in declared):
        example = "x".join(str(d) if d else "224" for d in declared)
        raise SourceModelError(
            f"input '{value.name}' has dynamic dimensions {_dims(declared)}; edge targets need a fixed shape. "
            f"Pass --input-shape {value.name}={example} (your sizes)")
    return TensorInfo(value.name, tuple(declared), dtype)


def _dims(dims: list[int | None]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def load_onnx(path: Path, input_shapes: dict[str, tuple[int, ...]] | None = None) -> OnnxSource:
    return OnnxSource(path, input_shapes)


KINDS = (
    SourceKind("onnx", "an ONNX (.onnx) file", lambda p: not p.is_dir() and p.suffix.lower() == ".onnx", load_onnx),
)


def _refuse_batch_not_first(value: Any, info: TensorInfo) -> None:
    """One sample gives this output a first dimension other than 1 while the file declares a
    free dimension further in (a CRNN's [time, batch, classes] logits): its samples cannot be
    stacked along the first. Names that axis, so the fix is one flag. An output whose declared
    dimensions are all fixed (a weight the graph also gives out) is left as it was."""
    dims = [d.dim_param or None for d in value.type.tensor_type.shape.dim]
    free = [i for i, d in enumerate(dims) if d and i > 0 and i < len(info.shape) and info.shape[i] == 1]
    if not free or dims[0]:
        return
    axis = next((i for i in free if "batch" in str(dims[i]).lower()), free[0])
    raise SourceModelError(
        f"output '{info.name}' has shape {list(info.shape)} for one sample: edgeserve stacks outputs sample by sample "
        f"along their first dimension, and this one's batch is its dimension {axis} ('{dims[axis]}'); say so with "
        f"--batch-axis {info.name}={axis}, or re-export the model with the batch first")
