"""Make integer the operators ai-edge-quantizer leaves in float: PRELU, LEAKY_RELU, DEPTH_TO_SPACE,
SPACE_TO_DEPTH, SHAPE, L2_NORMALIZATION.

ai-edge-quantizer 0.10 has no quantization rule for PRELU or LEAKY_RELU (neither its
opcode map nor its default policy names them), so it leaves each such operator in float
between a DEQUANTIZE and a QUANTIZE. LiteRT and TFLM both have int8 kernels for the two
(LiteRT's ``activations.cc``, TFLM's ``prelu.cc`` and ``leaky_relu.cc``): input and output
take independent scales and PRELU's alpha is one int8 tensor with a single scale and zero
point. So the pattern

    int8 x -> DEQUANTIZE -> float PRELU(alpha float) -> QUANTIZE -> int8 y

becomes ``int8 x -> PRELU(alpha int8) -> int8 y``. The output keeps the scale the quantizer
calibrated for the QUANTIZE (the range of the float PRELU's output over the calibration
set); alpha gets an asymmetric per-tensor int8 scale over its own range and 0. Other
QUANTIZE ops reading the same float output become int8-to-int8 requantizations of ``y``.
An operator in any other pattern (a float model input, a consumer that reads the float
value, an int16 scheme, whose PRELU kernels want int8 alpha beside int16 data) is left as
it was, and the caller's integer-only check names it.

DEPTH_TO_SPACE and SPACE_TO_DEPTH (MediaPipe's pose detector upsamples with three) only move
values: LiteRT's and TFLM's int8 kernels want the output on the input's scale and zero
point, so ``int8 x -> DEQUANTIZE -> float op -> QUANTIZE(s)`` becomes ``int8 x -> op -> int8 y``
with ``y`` on ``x``'s scale, and each QUANTIZE that read the float output requantizes ``y``
to the scale the quantizer calibrated for it (int8 to int8, which both runtimes run).

The rewrite is checked where every tflite-int8 artifact is: LiteRT runs it against the
float source on the evaluation set; tests/test_sources_tflite.py compares each int8
PRELU with the float operator on its own dequantized input.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from edgeserve.tflite.metadata import pack_model, schema_module, unpack_model

# TensorType and BuiltinOperator values of the TFLite schema.
_FLOAT32, _INT8 = 0, 9
_DEQUANTIZE, _LEAKY_RELU, _PRELU, _QUANTIZE = 6, 98, 54, 114
_DEPTH_TO_SPACE, _SPACE_TO_DEPTH = 5, 26
_SHAPE, _L2_NORMALIZATION = 77, 11
# LiteRT's and TFLM's int8 L2_NORMALIZATION write their output on this fixed scale, zero point 0.
L2_OUTPUT_SCALE = 1.0 / 128.0
ACTIVATIONS = {_PRELU: "PRELU", _LEAKY_RELU: "LEAKY_RELU"}
MOVES = {_DEPTH_TO_SPACE: "DEPTH_TO_SPACE", _SPACE_TO_DEPTH: "SPACE_TO_DEPTH"}


def integerize_activations(model_bytes: bytes) -> tuple[bytes, dict[str, int]]:
    """The model with its float PRELU/LEAKY_RELU in the pattern above made int8, and how many
    of each were; the bytes come back unchanged when there were none."""
    return rewrite_graphs(model_bytes, lambda model, graph: _rewrite_graph(model, graph) + _rewrite_moves(model, graph)
                          + _rewrite_shapes(model, graph) + _rewrite_l2_norms(model, graph))


def rewrite_graphs(model_bytes: bytes, rewrite: Callable[[Any, Any], list[str]]) -> tuple[bytes, dict[str, int]]:
    """The model with ``rewrite(model, graph)`` applied to each graph (it edits the graph in place
    and returns the kinds it rewrote), and how many of each kind; the bytes come back unchanged
    when nothing was rewritten. Shared with integer_comparisons.py."""
    model = unpack_model(model_bytes)
    done: dict[str, int] = {}
    for graph in model.subgraphs or []:
        for name in rewrite(model, graph):
            done[name] = done.get(name, 0) + 1
    if not done:
        return model_bytes, {}
    return pack_model(model, len(model_bytes)), done


def _code(model: Any, op: Any) -> int:
    code = model.operatorCodes[op.opcodeIndex]
    return max(code.builtinCode or 0, code.deprecatedBuiltinCode or 0)


def _wiring(graph: Any) -> tuple[list[Any], dict[int, Any], dict[int, list[Any]], set[int]]:
    """The graph's ops, the op producing each tensor, the ops reading it, its output tensors."""
    ops = list(graph.operators or [])
    producer = {int(t): op for op in ops for t in (op.outputs if op.outputs is not None else []) if t >= 0}
    readers: dict[int, list[Any]] = {}
    for op in ops:
        for t in op.inputs if op.inputs is not None else []:
            if t >= 0:
                readers.setdefault(int(t), []).append(op)
    return ops, producer, readers, {int(t) for t in graph.outputs}


def _remove(model: Any, graph: Any, ops: list[Any], removed: set[int]) -> None:
    """Take the ops whose id() is in ``removed`` out, and the tensors only they used."""
    if removed:
        graph.operators = [op for op in ops if id(op) not in removed]
        from edgeserve.converters.tflite_int8.float_prep import drop_unused

        drop_unused(model)


def _rewrite_graph(model: Any, graph: Any) -> list[str]:
    ops, producer, readers, graph_outputs = _wiring(graph)
    removed: set[int] = set()  # id() of ops taken out
    rewritten: list[str] = []
    for op in ops:
        found = _float_between_int8(model, graph, op, ACTIVATIONS, producer, readers, graph_outputs)
        if found is None:
            continue
        kind, dequantize, consumers = found
        x, source = int(op.inputs[0]), int(dequantize.inputs[0])
        first = consumers[0]
        y_int8 = int(first.outputs[0])
        if graph.tensors[y_int8].type != _INT8 or not _per_tensor(graph.tensors[y_int8]):
            continue
        if kind == "PRELU" and not _quantize_alpha(model, graph, op, readers):
            continue
        op.inputs[0] = source
        op.outputs[0] = y_int8
        removed.add(id(first))
        for other in consumers[1:]:
            other.inputs[0] = y_int8  # an int8 -> int8 requantization to that consumer's scale
        if all(r is op for r in readers.get(x, [])) and x not in graph_outputs:
            removed.add(id(dequantize))
        readers.setdefault(source, []).append(op)
        rewritten.append(kind)
    _remove(model, graph, ops, removed)
    return rewritten


def _rewrite_moves(model: Any, graph: Any) -> list[str]:
    """int8 x -> DEQUANTIZE -> DEPTH_TO_SPACE -> QUANTIZE... as int8 x -> DEPTH_TO_SPACE -> int8 y
    on x's scale, each former QUANTIZE requantizing y (see the module docstring)."""
    ops, producer, readers, graph_outputs = _wiring(graph)
    removed: set[int] = set()
    rewritten: list[str] = []
    for op in ops:
        found = _float_between_int8(model, graph, op, MOVES, producer, readers, graph_outputs)
        if found is None:
            continue
        kind, dequantize, _ = found
        x, source = int(op.inputs[0]), graph.tensors[int(dequantize.inputs[0])]
        out = graph.tensors[int(op.outputs[0])]
        params = schema_module().QuantizationParametersT()
        q = source.quantization
        params.scale, params.zeroPoint = list(q.scale), list(q.zeroPoint) if q.zeroPoint is not None else [0]
        out.type, out.quantization = _INT8, params
        op.inputs[0] = int(dequantize.inputs[0])
        if all(r is op for r in readers.get(x, [])) and x not in graph_outputs:
            removed.add(id(dequantize))
        rewritten.append(kind)
    _remove(model, graph, ops, removed)
    return rewritten


def _rewrite_shapes(model: Any, graph: Any) -> list[str]:
    """SHAPE of a DEQUANTIZE's float output reads the int8 tensor instead: the same dimensions
    (EfficientNet-style squeeze-excite blocks take the shape of their pooled vector for a
    RESHAPE), and the DEQUANTIZE goes when nothing else reads it."""
    ops, producer, readers, graph_outputs = _wiring(graph)
    removed: set[int] = set()
    rewritten: list[str] = []
    for op in ops:
        if _code(model, op) != _SHAPE or not _float(graph, int(op.inputs[0])):
            continue
        x = int(op.inputs[0])
        dequantize = producer.get(x)
        if dequantize is None or _code(model, dequantize) != _DEQUANTIZE:
            continue
        op.inputs[0] = int(dequantize.inputs[0])
        readers[x] = [r for r in readers.get(x, []) if r is not op]
        if not readers[x] and x not in graph_outputs:
            removed.add(id(dequantize))
        rewritten.append("SHAPE")
    _remove(model, graph, ops, removed)
    return rewritten


def _rewrite_l2_norms(model: Any, graph: Any) -> list[str]:
    """int8 x -> DEQUANTIZE -> float L2_NORMALIZATION -> QUANTIZE(s), or -> a float model output
    in a model whose inputs are int8 (int8 I/O), as int8 x -> L2_NORMALIZATION -> int8 y on the
    kernels' fixed output scale 1/128 (an embedding's last step, a hotword model in the issue
    48 trial): each QUANTIZE requantizes y; a model output becomes int8 like the model's others.
    The gate judges the precision it costs, as for every artifact."""
    ops, producer, readers, graph_outputs = _wiring(graph)
    int8_io = bool(len(graph.inputs)) and all(graph.tensors[int(i)].type == _INT8 for i in graph.inputs)
    removed: set[int] = set()
    rewritten: list[str] = []
    for op in ops:
        if _code(model, op) != _L2_NORMALIZATION or not _float(graph, int(op.inputs[0])):
            continue
        x, y = int(op.inputs[0]), int(op.outputs[0])
        dequantize = producer.get(x)
        if dequantize is None or _code(model, dequantize) != _DEQUANTIZE:
            continue
        source = graph.tensors[int(dequantize.inputs[0])]
        consumers = readers.get(y, [])
        as_output = y in graph_outputs and not consumers and int8_io
        if source.type != _INT8 or not _per_tensor(source) or not (as_output or (
                consumers and y not in graph_outputs and all(_code(model, c) == _QUANTIZE for c in consumers))):
            continue
        params = schema_module().QuantizationParametersT()
        params.scale, params.zeroPoint = [L2_OUTPUT_SCALE], [0]
        graph.tensors[y].type, graph.tensors[y].quantization = _INT8, params
        op.inputs[0] = int(dequantize.inputs[0])
        if all(r is op for r in readers.get(x, [])) and x not in graph_outputs:
            removed.add(id(dequantize))
        rewritten.append("L2_NORMALIZATION")
    _remove(model, graph, ops, removed)
    return rewritten


def _float_between_int8(model: Any, graph: Any, op: Any, kinds: dict[int, str], producer: dict[int, Any],
                        readers: dict[int, list[Any]], graph_outputs: set[int]) -> tuple[str, Any, list[Any]] | None:
    """(kind, the DEQUANTIZE before it, the QUANTIZE ops after it) when ``op`` is one of ``kinds``
    left float between a per-tensor int8 DEQUANTIZE and only QUANTIZE readers; None otherwise."""
    kind = kinds.get(_code(model, op))
    if kind is None or not _float(graph, int(op.inputs[0])):
        return None
    x, y = int(op.inputs[0]), int(op.outputs[0])
    dequantize = producer.get(x)
    if dequantize is None or _code(model, dequantize) != _DEQUANTIZE:
        return None
    source = graph.tensors[int(dequantize.inputs[0])]
    consumers = readers.get(y, [])
    if source.type != _INT8 or not _per_tensor(source) or y in graph_outputs or not consumers or \
            any(_code(model, c) != _QUANTIZE for c in consumers):
        return None
    return kind, dequantize, consumers


def _float(graph: Any, index: int) -> bool:
    return index >= 0 and graph.tensors[index].type == _FLOAT32


def _per_tensor(tensor: Any) -> bool:
    q = tensor.quantization
    return q is not None and q.scale is not None and len(q.scale) == 1


def _quantize_alpha(model: Any, graph: Any, op: Any, readers: dict[int, list[Any]]) -> bool:
    """PRELU's float alpha as int8, per tensor: a new tensor when another op also reads it."""
    index = int(op.inputs[1])
    tensor = graph.tensors[index]
    buffer = model.buffers[tensor.buffer] if tensor.buffer < len(model.buffers) else None
    if tensor.type != _FLOAT32 or buffer is None or buffer.data is None or len(buffer.data) == 0:
        return False
    alpha = np.frombuffer(np.asarray(buffer.data, np.uint8).tobytes(), "<f4").astype(np.float64)
    if not np.all(np.isfinite(alpha)):
        return False
    q, scale, zero = quantize_alpha(alpha)
    schema = schema_module()
    if len(readers.get(index, [])) > 1:
        copy = schema.TensorT()
        name = tensor.name.decode() if isinstance(tensor.name, bytes) else (tensor.name or "")
        copy.shape, copy.name = list(tensor.shape), f"{name}_int8"
        graph.tensors.append(copy)
        tensor = copy
        op.inputs[1] = len(graph.tensors) - 1
    new_buffer = schema.BufferT()
    new_buffer.data = np.frombuffer(q.tobytes(), np.uint8)
    model.buffers.append(new_buffer)
    tensor.buffer = len(model.buffers) - 1
    tensor.type = _INT8
    params = schema.QuantizationParametersT()
    params.scale, params.zeroPoint = [scale], [zero]
    tensor.quantization = params
    return True


def quantize_alpha(alpha: np.ndarray) -> tuple[np.ndarray, float, int]:
    """(int8 values, scale, zero point) of PRELU's alpha over [min(alpha, 0), max(alpha, 0)]:
    asymmetric, so the usual all-positive slopes (0.05 .. 0.3) get all 256 steps but one."""
    lo, hi = min(float(alpha.min()), 0.0), max(float(alpha.max()), 0.0)
    if hi == lo:  # every slope 0: any scale represents it exactly
        return np.zeros(alpha.shape, np.int8), 1.0, 0
    scale = (hi - lo) / 255.0
    zero = int(np.clip(np.round(-128 - lo / scale), -128, 127))
    q = np.clip(np.round(alpha / scale) + zero, -128, 127).astype(np.int8)
    return q, float(np.float32(scale)), zero
