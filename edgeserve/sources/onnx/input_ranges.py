"""The values an integer ONNX input takes, read from the graph: what random calibration and
the route checks draw from, so that a token id stays inside its embedding table.

An integer input is nearly always an index: into an embedding (Gather on a constant table:
ids in [0, rows)) or into a one-hot (Equal against a constant range: magika's bytes). Data
movement between the input and that use (Cast, Reshape, Expand...) keeps the values.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# Operators that move or re-type values without changing them.
_KEEPS_VALUES = {"Cast", "Reshape", "Expand", "Squeeze", "Unsqueeze", "Flatten", "Transpose", "Identity", "Slice",
                 "Concat", "Tile"}


def input_value_range(onnx: Any, proto: Any, name: str) -> tuple[int, int] | None:
    """[low, high) for the integer input ``name``: (0, 2) for a bool, the rows of the constant
    table a Gather indexes with it, or the span of the constant an Equal compares it with;
    None when no use says (the values then come from --calib)."""
    graph = proto.graph
    value = next(v for v in graph.input if v.name == name)
    if value.type.tensor_type.elem_type == onnx.TensorProto.BOOL:
        return (0, 2)
    constants = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.output and node.attribute:
            constants.setdefault(node.output[0], onnx.helper.get_attribute_value(node.attribute[0]))
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for i in node.input:
            consumers.setdefault(i, []).append(node)
    seen, frontier = {name}, [name]
    while frontier:
        current = frontier.pop()
        for node in consumers.get(current, []):
            found = _range_of_use(onnx, node, current, constants)
            if found is not None:
                return found
            if node.op_type in _KEEPS_VALUES and node.input[0] == current:
                for out in node.output:
                    if out not in seen:
                        seen.add(out)
                        frontier.append(out)
    return None


def _range_of_use(onnx: Any, node: Any, current: str, constants: dict[str, Any]) -> tuple[int, int] | None:
    if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == current and node.input[0] in constants:
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        dims = list(constants[node.input[0]].dims)
        return (0, int(dims[axis])) if dims else None
    if node.op_type == "Equal":
        other = [i for i in node.input if i != current]
        if len(other) == 1 and other[0] in constants:
            table = onnx.numpy_helper.to_array(constants[other[0]])
            if table.size and np.issubdtype(table.dtype, np.integer):
                return (int(table.min()), int(table.max()) + 1)
    return None
