"""The float tail for onnx-int8: the Concats that join an output's ranges, left unquantized.

Same remedy as tflite-int8's (converters/tflite_int8/float_tail.py): a YOLOv8 output
concatenates boxes in pixels and class scores under 1, and one int8 scale for both leaves the
scores at 0 or one step. Excluding the joins from quantization gives each of their inputs its
own QuantizeLinear/DequantizeLinear pair and joins them in float; every convolution stays int8.
Which joins, through which layout nodes, is converters/join_tail.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from edgeserve.converters.join_tail import Step, join_tail, reshaped_axis, transposed_axis

#: Nodes that only move values: the Concats may sit behind them.
_LAYOUT = {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity"}


def concat_tail(model: Any, outputs: Sequence[tuple[int, int]]) -> list[str] | None:
    """Names of the nodes from the channel joins of each graph output in ``outputs`` ((index,
    the axis whose channels hold the different ranges)) to that output, or None when one of them
    is not made by Concats and layout nodes only (converters/join_tail.py)."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # shapes are only needed to follow an axis through a reshape
        inferred = model
    shapes: dict[str, list[int] | None] = {}
    for value in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        dims = value.type.tensor_type.shape.dim
        shapes[value.name] = [d.dim_value if d.HasField("dim_value") else -1 for d in dims] or None
    producer = {name: node for node in model.graph.node for name in node.output}

    def describe(tensor: Any) -> Step | None:
        node = producer.get(tensor)
        if node is None or node.op_type not in _LAYOUT | {"Concat"}:
            return None
        attributes = {a.name: a for a in node.attribute}
        if node.op_type == "Concat":
            rank = len(shapes.get(node.output[0]) or []) or None
            axis = attributes["axis"].i
            return Step(node.name, tuple(node.input), axis=axis % rank if rank else (axis if axis >= 0 else None))
        if node.op_type == "Transpose":
            perm = list(attributes["perm"].ints) if "perm" in attributes else None
            return Step(node.name, (node.input[0],), before=transposed_axis(perm))
        known = [s if s is not None and -1 not in s else None for s in (shapes.get(node.input[0]), shapes.get(tensor))]
        return Step(node.name, (node.input[0],), before=reshaped_axis(*known))

    names: list[str] = []
    for index, axis in outputs:
        tail = join_tail(model.graph.output[index].name, axis, describe)
        if tail is None:
            return None
        names += [str(n) for n in tail if n not in names]
    return names or None
