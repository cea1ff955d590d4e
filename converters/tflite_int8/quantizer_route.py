"""The float-.tflite route: a float LiteRT model, quantized by ai-edge-quantizer.

Sources that are not TensorFlow models (PyTorch through litert-torch, a float .tflite as
shipped) reach INT8 this way. The float model is prepared (``float_prep``), calibrated
over the same calibration set as every other target and quantized with static int8
weights and activations; the remedies are the same as on the TensorFlow route (int16
activations, the worst layers kept in float), and the per-layer table comes from
``tensor_errors``. No TensorFlow is imported on this route.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import re
from typing import Any

import numpy as np

from edgeserve._deps import require
from edgeserve.console import capture_native_stderr
from edgeserve.converters.tflite_int8.float_prep import Prepared, prepare_float_tflite
from edgeserve.converters.tflite_int8.layer_errors import LayerError
from edgeserve.converters.tflite_int8.tensor_errors import tensor_errors
from edgeserve.errors import InputError
from edgeserve.tflite_model import TfliteModel

NAME = "ai-edge-quantizer"


def tool_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


class QuantizerLeftFloat(Exception):
    """The quantizer kept operators in float: name them, and what the user can do."""

    def __init__(self, ops: dict[str, str]) -> None:
        version = tool_version("ai-edge-quantizer") or ""
        names = ", ".join(f"{op} (first at {where})" for op, where in ops.items())
        super().__init__(
            f"error: {NAME} {version} cannot quantize {names}, so the model would not be full-integer. Replace "
            "that operator in the source model (PRELU with ReLU or LeakyReLU, for example) or deploy the float "
            "model with -t coreml where the source allows it"
        )


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
    # The static recipes quantize the model's inputs and outputs too (int8 or int16 I/O).
    io_types = ("int8",)

    def __init__(self, float_model: bytes, calibration: Any, io: str) -> None:
        if io not in self.io_types:
            raise InputError(
                f"--io {io} is not available on the {NAME} route (a PyTorch, ONNX or float .tflite source): "
                f"it makes int8 model inputs and outputs; use --io int8, or convert a Keras source for --io {io}"
            )
        self.prepared: Prepared = prepare_float_tflite(float_model)
        self.calibration = calibration
        self._int8: bytes | None = None
        parsed = TfliteModel.from_bytes(self.prepared.model)
        signature = parsed.signature_defs.get("serving_default") or next(iter(parsed.signature_defs.values()))
        position = {index: i for i, index in enumerate(parsed.subgraphs[signature.subgraph_index].inputs)}
        # Calibration arrays come in the subgraph's input order; the quantizer takes them by name.
        self._key = signature.key
        self._names = [name for name, index in sorted(signature.inputs.items(), key=lambda kv: position[kv[1]])]

    @property
    def float_model(self) -> bytes:
        return self.prepared.model

    def tools(self) -> dict[str, str | None]:
        return {"ai-edge-quantizer": tool_version("ai-edge-quantizer"), "ai-edge-litert": tool_version("ai-edge-litert")}

    def layer_errors(self, debug: Any) -> list[LayerError]:
        model = self.emit_scheme("int8")
        with capture_native_stderr():
            return tensor_errors(self.float_model, model, debug.batch1())

    def emit(self, remedy: Any) -> bytes:
        if remedy.name == "float-layers":
            return self.emit_scheme("int8", keep_float=[l.tensor for l in remedy.float_layers])
        model = self.emit_scheme(remedy.name)
        left_float = _float_operators(model)
        if left_float:
            raise QuantizerLeftFloat(left_float)
        return model

    def emit_scheme(self, scheme: str, keep_float: list[str] | None = None) -> bytes:
        if scheme == "int8" and not keep_float and self._int8 is not None:
            return self._int8
        quantizer = require("ai_edge_quantizer.quantizer", "quantizing a float .tflite")
        recipe = require("ai_edge_quantizer.recipe", "quantizing a float .tflite")
        algorithms = require("ai_edge_quantizer.algorithm_manager", "quantizing a float .tflite")
        q = quantizer.Quantizer(bytearray(self.float_model))
        q.load_quantization_recipe(recipe.static_wi8_ai16() if scheme == "int16x8" else recipe.static_wi8_ai8())
        for tensor in keep_float or []:
            # The quantizer names an operator by its output tensors, ';'-joined with a trailing ';'.
            q.update_quantization_recipe(f"(^|;){re.escape(tensor)};", "*",
                                         algorithm_key=algorithms.AlgorithmName.NO_QUANTIZE)
        data = {self._key: [dict(zip(self._names, [np.asarray(x, np.float32) for x in sample]))
                            for sample in self.calibration.batch1()]}
        # The quantizer prints its size summary and progress bars; edgeserve reports its own.
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
                capture_native_stderr():
            result = q.quantize(q.calibrate(data, num_threads=1))
        model = bytes(result.quantized_model)
        if scheme == "int8" and not keep_float:
            self._int8 = model
        return model
