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


def concat_tail(model: Any, outputs: Sequence[int]) -> list[str] | None:
    """Names of the nodes from a Concat to each graph output in ``outputs`` (indexes), or None
    when one of those outputs is not made by a Concat behind layout nodes only."""
    producer = {name: node for node in model.graph.node for name in node.output}
    names: list[str] = []
    for index in outputs:
        tensor = model.graph.output[index].name
        while True:
            node = producer.get(tensor)
            if node is None or node.op_type not in _LAYOUT | {"Concat"}:
                return None
            if node.name not in names:
                names.append(node.name)
            if node.op_type == "Concat":
                break
            tensor = node.input[0]
    return names or None
