"""The float tail for onnx-int8: the Concat that joins an output's ranges, left unquantized.

Same remedy as tflite-int8's (converters/tflite_int8/float_tail.py): a YOLOv8 output
concatenates boxes in pixels and class scores under 1, and one int8 scale for both leaves the
scores at 0 or one step. Excluding the final Concat from quantization gives each of its
inputs its own QuantizeLinear/DequantizeLinear pair and joins them in float; every
convolution stays int8.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: Nodes that only move values: the Concat may sit behind them.
_LAYOUT = {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity"}


def concat_tail(model: Any, outputs: Sequence[tuple[int, int]]) -> list[str] | None:
    """Names of the nodes from a Concat to each graph output in ``outputs`` ((index, the axis
    whose channels hold the different ranges)), or None when one of those outputs is not joined
    along that axis by a Concat behind layout nodes only (a Concat along another axis puts every
    range in each of its inputs)."""
    producer = {name: node for node in model.graph.node for name in node.output}
    rank = {v.name: len(v.type.tensor_type.shape.dim) for v in model.graph.output}
    names: list[str] = []
    for index, axis in outputs:
        tensor = model.graph.output[index].name
        dims = rank.get(tensor)
        while True:
            node = producer.get(tensor)
            if node is None or node.op_type not in _LAYOUT | {"Concat"}:
                return None
            if node.name not in names:
                names.append(node.name)
            attributes = {a.name: a for a in node.attribute}
            if node.op_type == "Concat":
                if axis is not None and dims and attributes["axis"].i % dims != axis:
                    return None
                break
            if node.op_type == "Transpose" and axis is not None and "perm" in attributes:
                axis = int(attributes["perm"].ints[axis])  # the same channels before the transpose
            elif node.op_type != "Identity":
                axis = None  # a reshape moves axes in ways not followed here: the join is taken as it is
            tensor = node.input[0]
    return names or None
