"""For TFLM: SELECT as SELECT_V2, which is the only select TFLM registers (select.cc at TFLM_COMMIT).

The two differ only in how the condition may be shaped: SELECT takes a condition of x's
shape, a scalar, or a vector along x's first axis; SELECT_V2 broadcasts all three operands
numpy-style. For a scalar condition, or one of x's shape, with x and y of one shape, both
pick the same element everywhere, so the rewrite is exact and needs no judging (openwakeword's
"hey jarvis" selects its verifier's score or its first one on a scalar condition). The vector
form would broadcast along the last axis in SELECT_V2, not the first: it is left as it was,
and TFLM's operator check names it.
"""

from __future__ import annotations

from typing import Any

from edgeserve.converters.microcontroller.op_rewrite import replace_operators
from edgeserve.tflite.edit import new_operator

_SELECT, _SELECT_V2 = 64, 123


def select_as_v2(model_bytes: bytes) -> tuple[bytes, dict[str, int]]:
    """The model with each SELECT that SELECT_V2 computes the same as SELECT_V2, and how many."""
    return replace_operators(model_bytes, _as_v2, ("SELECT",))


def _as_v2(model: Any, graph: Any, op: Any) -> tuple[str, list[Any]] | None:
    code = model.operatorCodes[op.opcodeIndex]
    if code.customCode or max(code.builtinCode or 0, code.deprecatedBuiltinCode or 0) != _SELECT:
        return None
    if op.inputs is None or len(op.inputs) != 3 or op.outputs is None or len(op.outputs) != 1:
        return None
    condition, x, y = (list(graph.tensors[int(t)].shape if graph.tensors[int(t)].shape is not None else [])
                       for t in op.inputs)
    if x != y or condition not in ([], x):
        return None
    # version 1: SELECT_V2 on every operand type but uint32 (mcu/ops.py)
    return "SELECT", [new_operator(model, _SELECT_V2, 1, [int(t) for t in op.inputs], [int(op.outputs[0])],
                                   "SelectV2Options")]
