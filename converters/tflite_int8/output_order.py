"""Which output of a converted .tflite is which output of its source.

TensorFlow's converter does not keep a multi-output model's order: a Keras model with
outputs (scores [1,4], values [1,2]) became a .tflite whose subgraph lists values first
(measured, TensorFlow 2.21). Comparing output i with output i then compares two different
heads, or fails on their shapes. The signature keeps the source's order
(``output_0``, ``output_1``, ... or the source's own names); where it does not say, a
shape that only one output has decides; otherwise the subgraph's order stands.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from edgeserve.tflite.model import TfliteModel

_NUMBERED = re.compile(r"^output_(\d+)$")


def source_order(model: bytes, names: Sequence[str], shapes: Sequence[Sequence[int | None]]) -> list[int]:
    """For each source output (by ``names`` and ``shapes``, in the source's order), its
    position among the subgraph outputs of ``model``."""
    parsed = TfliteModel.from_bytes(model)
    graph = parsed.subgraphs[0]
    outputs = list(graph.outputs)
    n = len(outputs)
    identity = list(range(n))
    if n <= 1 or len(names) != n:
        return identity
    for signature in parsed.signature_defs.values():
        if signature.subgraph_index != 0 or len(signature.outputs) != n:
            continue
        keys = dict(signature.outputs)
        if all(name in keys for name in names):
            order = [outputs.index(keys[name]) for name in names if keys[name] in outputs]
        else:
            numbered = {int(m.group(1)): index for key, index in keys.items() if (m := _NUMBERED.match(key))}
            order = [outputs.index(numbered[i]) for i in range(n) if i in numbered and numbered[i] in outputs]
        if sorted(order) == identity:
            return order
    return _by_unique_shape(graph, outputs, shapes) or identity


def _by_unique_shape(graph: object, outputs: list[int], shapes: Sequence[Sequence[int | None]]) -> list[int] | None:
    tflite_shapes = [tuple(graph.tensors[i].shape[1:]) for i in outputs]  # type: ignore[attr-defined]
    order = []
    for shape in shapes:
        wanted = tuple(shape[1:])
        matches = [p for p, s in enumerate(tflite_shapes) if s == wanted]
        if len(matches) != 1:
            return None
        order.append(matches[0])
    return order if sorted(order) == list(range(len(outputs))) else None


def upstream_tensors(model: bytes, order: list[int], failed: list[int]) -> set[str]:
    """Names of every tensor computed on the way to the source outputs ``failed`` (``order``: the
    position of each source output among the model's outputs)."""
    graph = TfliteModel.from_bytes(model).subgraphs[0]
    producer = {t: op for op in graph.operators for t in op.outputs if t >= 0}
    pending = [graph.outputs[order[i]] for i in failed if i < len(order)]
    seen: set[int] = set()
    while pending:
        tensor = pending.pop()
        if tensor in seen:
            continue
        seen.add(tensor)
        op = producer.get(tensor)
        if op is not None:
            pending.extend(t for t in op.inputs if t >= 0)
    return {graph.tensors[t].name for t in seen}
