"""For TFLM: an int8 elementwise operator TFLM has no int8 kernel for, as a 256-entry table lookup.

LiteRT quantizes SQRT to int8 (silero-vad's STFT magnitude, sqrt(re^2 + im^2)); TFLM's SQRT
takes float only (elementwise.cc at TFLM_COMMIT). An int8 -> int8 function of one operand has
only 256 inputs, so it is a table, and TFLM can look one up with kernels it has:

    int8 x -> CAST -> int32 -> ADD 128 -> GATHER(table int8[256]) -> int8 y

The table is what LiteRT's int8 SQRT computes, which truncates where its other tables round
(converters/microcontroller/quant.py ``lookup_table``, shared with mcu-c's own SQRT kernel);
tests/test_mcu_tflm_rewrites.py checks a table against LiteRT's SQRT on all 256 inputs.
The mcu target judges the rewritten model against the float source (converter.with_tflm_rewrites)
as it does its int8 islands.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgeserve.converters.microcontroller.op_rewrite import replace_operators
from edgeserve.tflite.edit import add_tensor, new_operator, tensor_name, zero_point

# TensorType and BuiltinOperator values of the TFLite schema.
_INT32, _INT8 = 2, 9
_ADD, _CAST, _GATHER, _SQRT = 0, 53, 36, 75
#: int8 operators TFLM has no int8 kernel for, and LiteRT computes as a function of one operand.
TABULATED = {_SQRT: "SQRT"}


def int8_lookups(model_bytes: bytes) -> tuple[bytes, dict[str, int]]:
    """The model with each int8 operator of ``TABULATED`` as CAST, ADD, GATHER, and how many
    of each; the bytes come back unchanged when there were none."""
    return replace_operators(model_bytes, _as_lookup, TABULATED.values())


def by_value(table: np.ndarray) -> np.ndarray:
    """A table indexed by (uint8)v (quant.lookup_table) as one indexed by v + 128 (GATHER's)."""
    return table[np.arange(-128, 128).astype(np.uint8)]


def _as_lookup(model: Any, graph: Any, op: Any) -> tuple[str, list[Any]] | None:
    from edgeserve.converters.microcontroller.quant import lookup_table

    name = _tabulated(model, graph, op)
    if name is None:
        return None
    x, y = int(op.inputs[0]), int(op.outputs[0])
    tx, ty = graph.tensors[x], graph.tensors[y]
    out = (float(ty.quantization.scale[0]), zero_point(ty))
    table = by_value(lookup_table(name, float(tx.quantization.scale[0]), zero_point(tx), *out))
    prefix, shape = tensor_name(graph, x), tx.shape
    wide = add_tensor(model, graph, f"{prefix}/int32", shape, _INT32)
    index = add_tensor(model, graph, f"{prefix}/index", shape, _INT32)
    offset = add_tensor(model, graph, f"{prefix}/offset", [1], _INT32, np.array([128], np.int32))
    # The table holds output values: the output's scale and zero point (GATHER keeps them).
    lut = add_tensor(model, graph, f"{prefix}/{name.lower()}_table", [256], _INT8, table, quantization=out)
    return name, [new_operator(model, _CAST, 3, [x], [wide]),  # version 3: an int8 input
                  new_operator(model, _ADD, 1, [wide, offset], [index], "AddOptions"),
                  # GatherOptions' axis and batch_dims default to 0
                  new_operator(model, _GATHER, 2, [lut, index], [y], "GatherOptions")]


def _tabulated(model: Any, graph: Any, op: Any) -> str | None:
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
