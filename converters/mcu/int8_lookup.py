"""For TFLM: an int8 elementwise operator TFLM has no int8 kernel for, as a 256-entry table lookup.

LiteRT quantizes SQRT to int8 (silero-vad's STFT magnitude, sqrt(re^2 + im^2)); TFLM's SQRT
takes float only (elementwise.cc at TFLM_COMMIT). An int8 -> int8 function of one operand has
only 256 inputs, so it is a table, and TFLM can look one up with kernels it has:

    int8 x -> CAST -> int32 -> ADD 128 -> GATHER(table int8[256]) -> int8 y

The table is what LiteRT's int8 SQRT computes: the input dequantized in float32, its square
root divided by the output scale and truncated (not rounded), plus the output zero point,
clamped. Measured on silero-vad's INT8 model with LiteRT's reference kernels: every one of the
165 input values its SQRT met gave the truncated value, while rounding missed 94 of them by a
step; tests/test_mcu_tflm_rewrites.py checks a table against LiteRT's SQRT on all 256 inputs.
The mcu target judges the rewritten model against the float source (converter.with_tflm_rewrites)
as it does its int8 islands.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgeserve.converters.mcu.op_rewrite import replace_operators
from edgeserve.tflite_metadata import schema_module

# TensorType and BuiltinOperator values of the TFLite schema.
_INT32, _INT8 = 2, 9
_ADD, _CAST, _GATHER, _SQRT = 0, 53, 36, 75
#: int8 operators TFLM has no int8 kernel for -> (name, the float function LiteRT applies).
TABULATED = {_SQRT: ("SQRT", lambda v: np.sqrt(np.maximum(v, np.float32(0))))}


def lookup_table(function: Any, in_scale: float, in_zero: int, out_scale: float, out_zero: int) -> np.ndarray:
    """The int8 output for each int8 input -128..127, as LiteRT's int8 kernel computes it."""
    q = np.arange(-128, 128, dtype=np.int32)
    dequantized = np.float32(in_scale) * (q - np.int32(in_zero)).astype(np.float32)
    scaled = function(dequantized).astype(np.float32) / np.float32(out_scale)
    return np.clip(np.trunc(scaled).astype(np.int64) + out_zero, -128, 127).astype(np.int8)


def int8_lookups(model_bytes: bytes) -> tuple[bytes, dict[str, int]]:
    """The model with each int8 operator of ``TABULATED`` as CAST, ADD, GATHER, and how many
    of each; the bytes come back unchanged when there were none."""
    return replace_operators(model_bytes, _as_lookup)


def _as_lookup(model: Any, graph: Any, op: Any) -> tuple[str, list[Any]] | None:
    from edgeserve.converters.tflite_int8.float_prep import builtin_code

    found = _tabulated(model, graph, op)
    if found is None:
        return None
    name, function = found
    schema = schema_module()
    x, y = int(op.inputs[0]), int(op.outputs[0])
    qx, qy = graph.tensors[x].quantization, graph.tensors[y].quantization
    table = lookup_table(function, float(qx.scale[0]), _zero(qx), float(qy.scale[0]), _zero(qy))
    new = _Tensors(schema, model, graph, x)
    wide, index = new.add("int32", graph.tensors[x].shape, _INT32), new.add("index", graph.tensors[x].shape, _INT32)
    offset = new.add("offset", [1], _INT32, np.array([128], np.int32))
    lut = new.add(f"{name.lower()}_table", [256], _INT8, table, quantization=qy)
    cast = _op(schema, builtin_code(model, _CAST, version=3), [x], [wide])  # version 3: int8 input
    add = _op(schema, builtin_code(model, _ADD, version=1), [wide, offset], [index], "AddOptions")
    gather = _op(schema, builtin_code(model, _GATHER, version=2), [lut, index], [y], "GatherOptions")
    return name, [cast, add, gather]  # GatherOptions' axis and batch_dims default to 0


def _tabulated(model: Any, graph: Any, op: Any) -> tuple[str, Any] | None:
    code = model.operatorCodes[op.opcodeIndex]
    found = None if code.customCode else TABULATED.get(max(code.builtinCode or 0, code.deprecatedBuiltinCode or 0))
    if found is None or op.inputs is None or op.outputs is None or len(op.inputs) != 1 or len(op.outputs) != 1:
        return None
    for index in (int(op.inputs[0]), int(op.outputs[0])):
        tensor = graph.tensors[index]
        q = tensor.quantization
        if tensor.type != _INT8 or q is None or q.scale is None or len(q.scale) != 1:
            return None
    return found


def _zero(q: Any) -> int:
    return int(q.zeroPoint[0]) if q.zeroPoint is not None and len(q.zeroPoint) else 0


class _Tensors:
    """New tensors of one graph, named after the operator's input."""

    def __init__(self, schema: Any, model: Any, graph: Any, source: int) -> None:
        self.schema, self.model, self.graph = schema, model, graph
        name = graph.tensors[source].name
        self.prefix = name.decode() if isinstance(name, bytes) else (name or "lookup")

    def add(self, suffix: str, shape: Any, dtype: int, data: np.ndarray | None = None, quantization: Any = None) -> int:
        tensor = self.schema.TensorT()
        tensor.shape, tensor.type, tensor.name = [int(d) for d in shape], dtype, f"{self.prefix}/{suffix}".encode()
        buffer = self.schema.BufferT()
        if data is not None:
            buffer.data = np.frombuffer(np.ascontiguousarray(data).tobytes(), np.uint8)
        self.model.buffers.append(buffer)
        tensor.buffer = len(self.model.buffers) - 1
        if quantization is not None:  # the table holds output values: the output's scale and zero point
            params = self.schema.QuantizationParametersT()
            params.scale, params.zeroPoint = list(quantization.scale), [_zero(quantization)]
            tensor.quantization = params
        self.graph.tensors.append(tensor)
        return len(self.graph.tensors) - 1


def _op(schema: Any, opcode: int, inputs: list[int], outputs: list[int], options: str | None = None) -> Any:
    op = schema.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = opcode, list(inputs), list(outputs)
    if options is not None:
        op.builtinOptionsType = getattr(schema.BuiltinOptions, options)
        op.builtinOptions = getattr(schema, f"{options}T")()
    return op
