"""What LiteRT refused to run in int8, read from its own message, and what to keep float for it.

LiteRT names the node it stops on ("Node number 102 (DIV) failed to invoke": its int8 DIV refuses
a divisor on its zero point, as a LayerNorm's or a masked mean's gives). tflite-int8's
float-refused remedy keeps that operator float, and for a division the cheap operators that
compute its divisor, the rest int8.
"""

from __future__ import annotations

import re

from edgeserve.tflite.model import TfliteModel

# Operators with no multiply-accumulate, walked back from a refused division's divisor: kept float
# with it, so the divisor keeps values int8 would round to its zero point (a clamp at 1e-9).
CHEAP_IN_FLOAT = frozenset({"MAXIMUM", "MINIMUM", "SUM", "MEAN", "ADD", "SUB", "MUL", "CAST", "RESHAPE",
                            "EXPAND_DIMS", "SQUEEZE", "BROADCAST_TO", "TILE", "ABS", "SQRT", "RSQRT",
                            "SQUARE", "DEQUANTIZE", "QUANTIZE"})
DIVISIONS = ("DIV", "FLOOR_DIV")


def refused_operators(model: bytes | None, reason: str) -> list[tuple[str, str]]:
    """[(operator, its first output tensor)] to keep float after LiteRT refused the node its
    ``reason`` names ("Node number 102 (DIV) failed to invoke"): that node, and for a division
    the cheap operators that compute its divisor (LiteRT's int8 DIV refuses a divisor on its zero
    point); empty when the reason names no node of ``model``. LiteRT numbers the nodes of its
    execution plan, which for a model without delegates is subgraph 0's operator order."""
    found = re.search(r"Node number (\d+) \((\w+)\) failed to invoke", reason or "")
    if not model or found is None:
        return []
    graph = TfliteModel.from_bytes(model).subgraphs[0]
    index = int(found.group(1))
    if index >= len(graph.operators) or graph.operators[index].op_name != found.group(2) \
            or not graph.operators[index].outputs:
        return []
    op = graph.operators[index]
    kept = [(op.op_name, graph.tensors[op.outputs[0]].name)]
    if op.op_name in DIVISIONS and len(op.inputs) > 1:
        producer = {t: o for o in graph.operators for t in o.outputs}
        todo = [op.inputs[1]]
        while todo and len(kept) < 16:
            before = producer.get(todo.pop())
            if before is None or before.op_name not in CHEAP_IN_FLOAT or not before.outputs:
                continue
            pair = (before.op_name, graph.tensors[before.outputs[0]].name)
            if before.op_name not in ("DEQUANTIZE", "QUANTIZE") and pair not in kept:
                kept.append(pair)
            todo.extend(i for i in before.inputs if i >= 0)
    return kept
