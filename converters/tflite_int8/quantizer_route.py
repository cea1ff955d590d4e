"""The float-.tflite route: a float LiteRT model, quantized by ai-edge-quantizer.

Sources that are not TensorFlow models (PyTorch through litert-torch, a float .tflite as
shipped) reach INT8 this way. The float model is prepared (``float_prep``), calibrated
over the same calibration set as every other target and quantized with static int8
weights and activations; the remedies are the same as on the TensorFlow route (int16
activations, the worst layers kept in float), and the per-layer table comes from
``tensor_errors``. No TensorFlow is imported on this route.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
from typing import Any

import numpy as np

from edgeserve._deps import package_version, require
from edgeserve.console import NativeOutput, capture_native_stderr, quiet_libraries
from edgeserve.converters.tflite_int8.float_prep import Prepared, prepare_float_tflite
from edgeserve.converters.tflite_int8.int16_rewrites import rewrite_for_int16
from edgeserve.converters.tflite_int8.integer_activations import integerize_activations
from edgeserve.converters.tflite_int8.integer_comparisons import integerize_comparisons
from edgeserve.converters.tflite_int8.io_types import uint8_io
from edgeserve.converters.tflite_int8.layer_errors import LayerError
from edgeserve.converters.tflite_int8.tensor_errors import tensor_errors
from edgeserve.errors import InputError, UnquantizableOpError, VerificationError
from edgeserve.isolation import run_isolated
from edgeserve.tflite.model import TfliteModel

NAME = "ai-edge-quantizer"


def _float_operators(model: bytes) -> dict[str, str]:
    """Operator name -> where its first float instance is, for ops that compute in float."""
    graph = TfliteModel.from_bytes(model).subgraphs[0]
    found: dict[str, str] = {}
    for op in graph.operators:
        if op.op_name in ("QUANTIZE", "DEQUANTIZE"):
            continue  # conversions around a float op; the op itself is what to name
        for index in (*op.inputs, *op.outputs):
            tensor = graph.tensors[index] if index >= 0 else None
            if tensor is not None and not tensor.is_constant and tensor.dtype_name.startswith("float"):
                out = graph.tensors[op.outputs[0]].name if op.outputs else "?"
                found.setdefault(op.op_name, f"op {op.index}, output '{out}'")
                break
    return found


class QuantizerRoute:
    """Quantizes one prepared float .tflite; ``emit`` makes one model per remedy."""

    name = NAME
    io_types = ("int8", "uint8", "float")

    def __init__(self, float_model: bytes, calibration: Any, io: str, described: str = "float .tflite",
                 alternative: str = "", io_names: tuple[list[str], list[str]] | None = None) -> None:
        if io not in self.io_types:
            raise InputError(f"--io must be one of {', '.join(self.io_types)}; got {io!r}")
        self.io = io
        self.prepared: Prepared = prepare_float_tflite(float_model, io_names)
        self.calibration = calibration
        self.described = described  # the route up to the float model, for error messages
        self.alternative = alternative  # ", or ..." another target that takes this source
        self._int8: bytes | None = None
        # Operators the quantizer left float and edgeserve made int8 (integer_activations.py),
        # by name, from the last int8 model made: the route record shows them.
        self.made_integer: dict[str, int] = {}
        # Operators rewritten for the int16x8 attempt (int16_rewrites.py), filled when it is made.
        self.int16_rewrites: dict[str, int] = {}
        # Operators the quantizer has no int8 rule for and edgeserve does not make int8 (operator ->
        # where its first instance is), left float in the all-int8 model: a mixed model that names
        # them, as the issue asks of the LiteRT targets (the microcontroller targets refuse it).
        self.no_int8_rule: dict[str, str] = {}
        parsed = TfliteModel.from_bytes(self.prepared.model)
        signature = parsed.signature_defs.get("serving_default") or next(iter(parsed.signature_defs.values()))
        position = {index: i for i, index in enumerate(parsed.subgraphs[signature.subgraph_index].inputs)}
        # Calibration arrays come in the subgraph's input order; the quantizer takes them by name.
        self._key = signature.key
        self._names = [name for name, index in sorted(signature.inputs.items(), key=lambda kv: position[kv[1]])]
        # Each input's own type: an integer input (token ids, bytes) is fed as integers, int64 ids
        # as the int32 litert-torch made of them.
        subgraph = parsed.subgraphs[signature.subgraph_index]
        self._dtypes = [subgraph.tensors[signature.inputs[name]].numpy_dtype or np.dtype(np.float32)
                        for name in self._names]

    @property
    def float_model(self) -> bytes:
        return self.prepared.model

    def tools(self) -> dict[str, str | None]:
        return {"ai-edge-quantizer": package_version("ai-edge-quantizer"), "ai-edge-litert": package_version("ai-edge-litert")}

    # The quantizer calibrates in LiteRT's interpreter, and the per-layer table runs the float
    # and int8 models side by side in it: native code given a model nobody has run before, so
    # both run in a child process (edgeserve.isolation); the arguments are bytes and arrays.
    def layer_errors(self, debug: Any, keep_float: list[str] | None = None) -> list[LayerError]:
        model = self.emit_scheme("int8", keep_float=keep_float or None)
        return run_isolated(f"{__name__}:layer_errors_step", self.float_model, model, list(debug.batch1()),
                            self.described, tool="LiteRT (per-layer error)", what="measuring the per-layer int8 error")

    def emit(self, remedy: Any) -> bytes:
        if remedy.keep_float:  # float-layers, float-tail
            return self.emit_scheme("int8", keep_float=remedy.keep_float)
        model = self.emit_scheme(remedy.name)
        left_float = _float_operators(model)
        if remedy.name == "int8":
            self.no_int8_rule = left_float  # LiteRT runs them in float between DEQUANTIZE and QUANTIZE
            return model
        if left_float:  # the remedy's scheme has no rule for them either: this attempt stops, naming one
            op, where = next(iter(left_float.items()))
            others = f" (also: {', '.join(list(left_float)[1:])})" if len(left_float) > 1 else ""
            raise UnquantizableOpError(op, "tflite-int8", (
                f"{NAME} {package_version('ai-edge-quantizer') or ''} cannot quantize {op} at {where}{others}, so no "
                f"full-integer model exists. Route tried: {self.described} -> {NAME}. What to do: replace {op} in "
                f"the source model with operators that quantize{self.alternative}"))
        return model

    def emit_scheme(self, scheme: str, keep_float: list[str] | None = None) -> bytes:
        if scheme == "int8" and not keep_float and self._int8 is not None:
            return self._int8
        data = {self._key: [dict(zip(self._names, [np.asarray(x, t) for x, t in zip(sample, self._dtypes)]))
                            for sample in self.calibration.batch1()]}
        what = f"quantizing ({scheme}" + (f", {len(keep_float)} layer(s) in float)" if keep_float else ")")
        float_model = self.float_model
        if scheme == "int16x8":
            float_model, rewrites = rewrite_for_int16(float_model)
            self.int16_rewrites.clear()
            self.int16_rewrites.update(rewrites)
        model = run_isolated(f"{__name__}:quantize_step", float_model, scheme, self.io == "float",
                             list(keep_float or []), data, tool=f"{NAME} (LiteRT calibration)", what=what)
        if scheme == "int8":
            model, made_integer = integerize_activations(model)
            model, compared = integerize_comparisons(model)
            self.made_integer.clear()
            self.made_integer.update(made_integer)
            self.made_integer.update(compared)
        if self.io == "uint8" and scheme == "int8":  # 16x8 models keep int16 I/O, as on the TensorFlow route
            model = uint8_io(model)
        if scheme == "int8" and not keep_float:
            self._int8 = model
        return model


# ----- the steps that run in a child process ------------------------------------------------
def _calibrate(q: Any, float_model: bytes, data: dict[str, list[dict[str, np.ndarray]]]) -> Any:
    """Activation ranges: the min and max over the whole calibration set.

    The quantizer's own ``calibrate`` keeps a moving average of each sample's min and
    max (smoothing 0.95), so the last samples set a range that clips the others;
    TensorFlow's converter keeps the overall min and max. Measured on the PyTorch digits
    CNN of the tests (200 calibration frames, 200 held out): top-1 drop 1.5 points and
    output SQNR 15.7 dB with the moving average, 0.0 points and 38.0 dB with min/max.
    On BlazeFace (faces only) the moving average is 1 dB better; min/max is kept for
    all, as the range TFLite users know. The quantizer's own Calibrator is given its own
    ``min_max_update`` and the same recipe.
    """
    calibrator = require("ai_edge_quantizer.calibrator", "quantizing a float .tflite")
    qsv_utils = require("ai_edge_quantizer.utils.qsv_utils", "quantizing a float .tflite")
    recipes = require("ai_edge_quantizer.recipe_manager", "quantizing a float .tflite")
    manager = recipes.RecipeManager()
    manager.load_quantization_recipe(q.get_quantization_recipe())

    def ranges(part: dict[str, list[dict[str, np.ndarray]]]) -> dict[str, Any]:
        calib = calibrator.Calibrator(bytearray(float_model), num_threads=1,
                                      qsv_update_func=qsv_utils.min_max_update)
        calib.calibrate(part, manager)
        return calib.get_model_qsvs()

    # One calibrator per core, each over every n-th sample: min and max over the parts are the
    # min and max over the whole set, so the model is the same byte for byte; LiteRT's invoke
    # and numpy's reductions release the GIL (PaddleOCR's DBNet at 320x320, 100 samples, on this
    # 2-core machine: the int8 quantization from 18.2 s to 13.5 s, int16x8 from 28.1 s to 22.0 s).
    workers = min(os.cpu_count() or 1, 4, min(len(samples) for samples in data.values()) // 4)
    if workers < 2:
        return ranges(data)
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        parts = list(pool.map(ranges, [{key: samples[k::workers] for key, samples in data.items()}
                                       for k in range(workers)]))
    merged = parts[0]
    for part in parts[1:]:
        if set(part) != set(merged) or any(set(v) - {"min", "max"} for v in part.values()):
            return ranges(data)  # ranges that are not min/max alone: calibrate as one
        merged = {name: qsv_utils.min_max_update(merged[name], part[name]) if part[name] else merged[name]
                  for name in merged}
    return merged


def keep_float_pattern(tensors: list[str]) -> str:
    """One recipe regex for every operator kept in float. The quantizer names an operator by its
    output tensors, ';'-joined with a trailing ';'. One pattern per tensor made the quantizer
    search every operator name with every pattern, and past re's cache of 512 compiled
    patterns each search compiled again: an unrolled 3-layer LSTM sat there for 22 minutes."""
    return "(^|;)(" + "|".join(re.escape(t) for t in sorted(set(tensors))) + ");"


def quantize_step(float_model: bytes, scheme: str, float_io: bool, keep_float: list[str],
                  data: dict[str, list[dict[str, np.ndarray]]]) -> bytes:
    """Calibrate ``float_model`` over ``data`` and quantize it with ``scheme`` (int8 or int16x8)."""
    quantizer = require("ai_edge_quantizer.quantizer", "quantizing a float .tflite")
    recipe = require("ai_edge_quantizer.recipe", "quantizing a float .tflite")
    algorithms = require("ai_edge_quantizer.algorithm_manager", "quantizing a float .tflite")
    q = quantizer.Quantizer(bytearray(float_model))
    q.load_quantization_recipe(recipe.static_wi8_ai16() if scheme == "int16x8" else recipe.static_wi8_ai8())
    if float_io:  # QUANTIZE after each input and DEQUANTIZE before each output, kernels integer
        for boundary in ("INPUT", "OUTPUT"):
            q.update_quantization_recipe(".*", boundary, algorithm_key=algorithms.AlgorithmName.NO_QUANTIZE)
    if keep_float:
        q.update_quantization_recipe(keep_float_pattern(keep_float), "*",
                                     algorithm_key=algorithms.AlgorithmName.NO_QUANTIZE)
    # The quantizer prints its size summary and progress bars; edgeserve reports its own.
    with quiet_libraries():
        return bytes(q.quantize(_calibrate(q, float_model, data)).quantized_model)


def layer_errors_step(float_model: bytes, int8_model: bytes, samples: list[list[np.ndarray]],
                      described: str) -> list[LayerError]:
    """The per-layer table of ``int8_model`` against ``float_model`` (tensor_errors)."""
    native = NativeOutput()
    try:
        with capture_native_stderr() as native:
            return tensor_errors(float_model, int8_model, samples)
    except (ValueError, RuntimeError) as exc:  # LiteRT refuses the model it was given
        reason = (str(exc).strip() or native.text.strip() or type(exc).__name__).splitlines()[0]
        raise VerificationError(
            f"LiteRT refuses the INT8 model {NAME} {package_version('ai-edge-quantizer') or ''} made from "
            f"{described}: {reason[:300]}. Route tried: {described} -> {NAME}") from exc
