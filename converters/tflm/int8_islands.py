"""For TFLM: an int16 operator that has no int16 kernel there runs in int8, between two requantizations.

tflite-int8's int16-activation remedy is what makes MediaPipe's palm and pose detectors and
its selfie segmentation pass their quality gate (int8 activations lose the palm; 5.0 dB for
the segmentation). LiteRT runs every operator of those models in int16, but TFLM's
RESIZE_BILINEAR takes float and int8 only (resize_bilinear.cc at TFLM_COMMIT), so TFLM could
not run them at all. Here each such operator becomes

    int16 x -> QUANTIZE -> int8 x' -> OP -> int8 y' -> QUANTIZE -> int16 y

with ``x'`` and ``y'`` on one symmetric int8 scale that covers ``x``'s whole int16 range
(scale x 32767 / 127, zero point 0): a resize only interpolates, so its output stays within
its input's range, and TFLM's int8 kernel wants both on one scale. Both runtimes requantize
int16 <-> int8 in QUANTIZE (TFLM's quantize.cc; QUANTIZE version 2 for the int16 output).
The island costs that one operator int8 precision; the mcu target judges the rewritten model
against the float source with LiteRT, by the gate tflite-int8 used, before TFLM sees it.
"""

from __future__ import annotations

from typing import Any

from edgeserve.converters.microcontroller.op_rewrite import replace_operators
from edgeserve.tflite.edit import add_tensor, new_operator, tensor_name

# TensorType and BuiltinOperator values of the TFLite schema.
_INT8, _INT16 = 9, 7
_QUANTIZE, _RESIZE_BILINEAR = 114, 23
#: int16 operators TFLM has no kernel for, that compute the same in int8 on one scale in and out.
ISLANDS = {_RESIZE_BILINEAR: "RESIZE_BILINEAR"}


def int8_islands(model_bytes: bytes) -> tuple[bytes, dict[str, int]]:
    """The model with each int16 operator of ``ISLANDS`` run in int8 between requantizations,
    and how many of each; the bytes come back unchanged when there were none."""
    return replace_operators(model_bytes, _as_island, ISLANDS.values())


def _as_island(model: Any, graph: Any, op: Any) -> tuple[str, list[Any]] | None:
    name = _island(model, graph, op)
    if name is None:
        return None
    x, y = int(op.inputs[0]), int(op.outputs[0])
    int8 = (float(graph.tensors[x].quantization.scale[0]) * 32767.0 / 127.0, 0)
    x8 = add_tensor(model, graph, f"{tensor_name(graph, x)}/int8_in", graph.tensors[x].shape, _INT8, quantization=int8)
    y8 = add_tensor(model, graph, f"{tensor_name(graph, y)}/int8_out", graph.tensors[y].shape, _INT8, quantization=int8)
    op.inputs[0], op.outputs[0] = x8, y8
    # QUANTIZE version 2: an int16 output
    return name, [new_operator(model, _QUANTIZE, 2, [x], [x8]), op, new_operator(model, _QUANTIZE, 2, [y8], [y])]


def _island(model: Any, graph: Any, op: Any) -> str | None:
    """The operator's name when it is one of ISLANDS with an int16 per-tensor, zero-point-0
    input and output; None for every other operator (left as it is)."""
    code = model.operatorCodes[op.opcodeIndex]
    name = None if code.customCode else ISLANDS.get(max(code.builtinCode or 0, code.deprecatedBuiltinCode or 0))
    if name is None or op.inputs is None or op.outputs is None or len(op.inputs) == 0 or len(op.outputs) == 0:
        return None
    tensors = [graph.tensors[int(op.inputs[0])], graph.tensors[int(op.outputs[0])]]
    for tensor in tensors:
        q = tensor.quantization
        if tensor.type != _INT16 or q is None or q.scale is None or len(q.scale) != 1 or \
                any(int(z) != 0 for z in (q.zeroPoint if q.zeroPoint is not None else [])):
            return None
    return name
