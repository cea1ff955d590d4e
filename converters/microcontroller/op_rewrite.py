"""Replace a .tflite's operators one at a time: the mcu target's rewrites for TFLM's kernels
(int8_islands.py, int8_lookup.py) share this walk over the graphs and the repacking; the
tensors and operators they put in are made with edgeserve.tflite.edit."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from edgeserve.tflite.metadata import pack_model, unpack_model

# (model, graph, operator) -> (what was rewritten, the operators in its place), or None to keep it
Replace = Callable[[Any, Any, Any], "tuple[str, list[Any]] | None"]


def replace_operators(model_bytes: bytes, replace: Replace, kinds: Collection[str]) -> tuple[bytes, dict[str, int]]:
    """The model with each operator ``replace`` rewrites put in its place, and how many of each
    kind; the bytes come back unchanged when ``replace`` kept every operator. A model with no
    operator of ``kinds`` is not unpacked at all (every mcu build passes through here)."""
    from edgeserve.tflite.model import TfliteModel

    if not set(kinds) & set(TfliteModel.from_bytes(model_bytes).op_counts_all()):
        return model_bytes, {}
    model = unpack_model(model_bytes)
    done: dict[str, int] = {}
    for graph in model.subgraphs or []:
        operators: list[Any] = []
        for op in graph.operators or []:
            found = replace(model, graph, op)
            if found is None:
                operators.append(op)
                continue
            name, replacement = found
            operators += replacement
            done[name] = done.get(name, 0) + 1
        graph.operators = operators
    if not done:
        return model_bytes, {}
    return pack_model(model, len(model_bytes)), done
