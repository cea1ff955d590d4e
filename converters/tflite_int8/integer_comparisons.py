"""Compare in int8 what ai-edge-quantizer leaves as a float comparison against a constant.

ai-edge-quantizer 0.10 has no rule for GREATER, GREATER_EQUAL, LESS or LESS_EQUAL, so a
threshold on a quantized value (openwakeword's "hey jarvis" runs its verifier only when its
first score, a LOGISTIC, reaches 0.5) stays

    int8 x -> DEQUANTIZE -> float x' -> GREATER_EQUAL(x', 0.5) -> bool

and the model is not full-integer, which the microcontroller targets refuse. LiteRT and TFLM
both compare int8 tensors (comparisons.cc: each side rescaled as
``MultiplyByQuantizedMultiplierSmallerThanOneExp((q - zero_point) << 8, M(scale))``), so the
rewrite is ``int8 x -> GREATER_EQUAL(x, int8 c) -> bool`` with ``c`` on x's own scale and zero
point, its value chosen from the 256 values x can take. The choice is exact, not rounded: for
every int8 q the float comparison LiteRT computed (DEQUANTIZE's float, then the float operator)
and the integer comparison the kernels compute (the rescaling above, in Python) are evaluated,
and a constant (and, at the ends of the range, the strict or non-strict form) is taken only when
the two agree on all 256; otherwise the operator stays float and is named as before.
tests/test_integer_comparisons.py runs both models in LiteRT over every int8 value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgeserve.converters.tflite_int8.integer_activations import _code, _per_tensor, _remove, _wiring, rewrite_graphs
from edgeserve.tflite.edit import add_tensor, builtin_code, tensor_name, zero_point

# BuiltinOperator and TensorType values of the TFLite schema.
_LESS, _GREATER, _GREATER_EQUAL, _LESS_EQUAL = 58, 61, 62, 63
_DEQUANTIZE = 6
_FLOAT32, _INT8 = 0, 9
COMPARISONS = {_LESS: "LESS", _GREATER: "GREATER", _GREATER_EQUAL: "GREATER_EQUAL", _LESS_EQUAL: "LESS_EQUAL"}
# x OP c written as c OP' x: the operator with its operands swapped.
_SWAPPED = {_LESS: _GREATER, _GREATER: _LESS, _GREATER_EQUAL: _LESS_EQUAL, _LESS_EQUAL: _GREATER_EQUAL}
_NUMPY = {_LESS: np.less, _GREATER: np.greater, _GREATER_EQUAL: np.greater_equal, _LESS_EQUAL: np.less_equal}
_VALUES = np.arange(-128, 128)


def integerize_comparisons(model_bytes: bytes) -> tuple[bytes, dict[str, int]]:
    """The model with each float comparison of a dequantized int8 tensor against a constant made
    an int8 comparison, and how many of each; the bytes come back unchanged when there were none."""
    from edgeserve.tflite.model import TfliteModel

    if not set(COMPARISONS.values()) & set(TfliteModel.from_bytes(model_bytes).op_counts_all()):
        return model_bytes, {}  # most models: not even unpacked
    return rewrite_graphs(model_bytes, _rewrite_graph)


def _rewrite_graph(model: Any, graph: Any) -> list[str]:
    ops, producer, readers, graph_outputs = _wiring(graph)
    removed: set[int] = set()
    rewritten: list[str] = []
    for op in ops:
        code = _code(model, op)
        if code not in COMPARISONS or op.inputs is None or len(op.inputs) != 2:
            continue
        sides = [_dequantized(model, graph, int(t), producer) for t in op.inputs]
        constants = [_float_constant(model, graph, int(t)) for t in op.inputs]
        if sides[0] is not None and constants[1] is not None:
            position, form = 0, code
        elif sides[1] is not None and constants[0] is not None:
            position, form = 1, _SWAPPED[code]
        else:
            continue
        dequantize = sides[position]
        x = int(dequantize.inputs[0])
        chosen = choose_int8_comparison(form, constants[1 - position], *_scale_zero(graph.tensors[x]))
        if chosen is None:
            continue
        new_code, values = chosen
        prefix = tensor_name(graph, int(op.inputs[1 - position]))
        tensor = graph.tensors[x]
        c = add_tensor(model, graph, f"{prefix}/int8", values.shape, _INT8, values.astype(np.int8),
                       quantization=(float(tensor.quantization.scale[0]), zero_point(tensor)))
        dequantized = int(op.inputs[position])
        # version 2: the int8 kernels of all four (LiteRT's op_version.cc)
        op.opcodeIndex = builtin_code(model, new_code, 2)
        op.inputs = [x, c]
        readers.setdefault(x, []).append(op)
        if all(r is op for r in readers.get(dequantized, [])) and dequantized not in graph_outputs:
            removed.add(id(dequantize))
        rewritten.append(COMPARISONS[code])
    _remove(model, graph, ops, removed)
    return rewritten


def choose_int8_comparison(form: int, constant: np.ndarray, scale: float,
                           zero: int) -> tuple[int, np.ndarray] | None:
    """(operator, int8 constant on x's scale and zero point) computing ``x' FORM constant`` for
    every int8 x, x' its float value; None when no int8 comparison does."""
    if not 0.0 < scale < 1.0:
        return None  # the kernels take the scale as a multiplier smaller than one
    # What LiteRT computed: DEQUANTIZE (double scale times the integer, stored as float32), then the float operator.
    floats = (np.float64(scale) * (_VALUES - zero)).astype(np.float32)
    flat = np.asarray(constant, np.float32).reshape(-1)
    wanted = _NUMPY[form](floats[None, :], flat[:, None])  # [constant element, x]
    rescaled = _rescaled(_VALUES, scale, zero)
    # Candidates: the form itself and its strict or non-strict sibling, for the ends of the range.
    sibling = {_GREATER_EQUAL: _GREATER, _GREATER: _GREATER_EQUAL, _LESS_EQUAL: _LESS, _LESS: _LESS_EQUAL}[form]
    for candidate in (form, sibling):
        computed = _NUMPY[candidate](rescaled[None, :], rescaled[:, None])  # [c value, x]: the kernel's answer
        values = []
        for row in wanted:
            hits = np.flatnonzero((computed == row[None, :]).all(axis=1))
            if not len(hits):
                break
            values.append(_VALUES[hits[0]])
        else:
            return candidate, np.array(values, np.int8).reshape(np.shape(constant))
    return None


def _rescaled(q: np.ndarray, scale: float, zero: int) -> np.ndarray:
    """What the int8 comparison kernels compare: (q - zero_point) << 8 times the scale as a
    Q31 multiplier and a right shift, rounded twice (MultiplyByQuantizedMultiplierSmallerThanOneExp)."""
    from edgeserve.converters.microcontroller.quant import mul_by_quantized_multiplier, quantize_multiplier

    multiplier, shift = quantize_multiplier(float(scale))
    return mul_by_quantized_multiplier((q.astype(np.int64) - zero) * 256, multiplier, shift)


def _dequantized(model: Any, graph: Any, index: int, producer: dict[int, Any]) -> Any:
    """The DEQUANTIZE making float tensor ``index`` from a per-tensor int8 one, or None."""
    op = producer.get(index)
    if op is None or _code(model, op) != _DEQUANTIZE or graph.tensors[index].type != _FLOAT32:
        return None
    source = graph.tensors[int(op.inputs[0])]
    return op if source.type == _INT8 and _per_tensor(source) else None


def _float_constant(model: Any, graph: Any, index: int) -> np.ndarray | None:
    tensor = graph.tensors[index]
    buffer = model.buffers[tensor.buffer] if 0 < tensor.buffer < len(model.buffers) else None
    if tensor.type != _FLOAT32 or buffer is None or buffer.data is None or len(buffer.data) == 0:
        return None
    values = np.frombuffer(np.asarray(buffer.data, np.uint8).tobytes(), "<f4")
    shape = [int(d) for d in tensor.shape] if tensor.shape is not None else []
    if values.size != int(np.prod(shape)) or not np.all(np.isfinite(values)):
        return None
    return values.reshape(shape)


def _scale_zero(tensor: Any) -> tuple[float, int]:
    return float(tensor.quantization.scale[0]), zero_point(tensor)
