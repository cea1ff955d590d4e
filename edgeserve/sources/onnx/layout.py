"""Inputs and outputs whose batch is not their first axis, made batch-first (``--batch-axis``).

edgeserve feeds and compares samples along the first axis. A recurrent state is often laid out
[layers, batch, units] (silero-vad's ``state`` is [2, batch, 128], and so is its ``stateN``
output): ``--batch-axis state=1`` says where the batch is, and the graph gets a Transpose after
that input (or before that output), so every artifact takes and gives it batch-first,
[batch, 2, 128], under the same name. The model computes exactly what it did; only the layout
at its boundary moves, and the manifest records it (``source.batch_axes``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeserve.errors import SourceModelError


def move_batch_first(onnx: Any, proto: Any, path: Path, axes: dict[str, int]) -> dict[str, dict[str, Any]]:
    """Rewrite ``proto`` in place; returns, per name, the axis and the layout it had."""
    graph = proto.graph
    constants = {i.name for i in graph.initializer}
    inputs = {v.name: v for v in graph.input if v.name not in constants}
    outputs = {v.name: v for v in graph.output}
    record: dict[str, dict[str, Any]] = {}
    front: list[Any] = []
    for name, axis in axes.items():
        value = inputs.get(name) or outputs.get(name)
        if value is None:
            raise SourceModelError(f"--batch-axis names {name}, which {path.name} has no input or output called; "
                                   f"its inputs: {', '.join(inputs)}; its outputs: {', '.join(outputs)}")
        dims = list(value.type.tensor_type.shape.dim)
        if not 0 < axis < len(dims):
            raise SourceModelError(f"--batch-axis {name}={axis}: {name} has {len(dims)} dimensions, so the batch "
                                   f"axis to move first must be 1 to {len(dims) - 1}")
        perm = [axis] + [i for i in range(len(dims)) if i != axis]  # batch first
        inner = f"{name}__edgeserve_layout"
        _rename(graph, name, inner)
        if name in inputs:  # the new input is batch-first; the graph reads it back in its own layout
            inverse = [perm.index(i) for i in range(len(perm))]
            front.append(onnx.helper.make_node("Transpose", [name], [inner], perm=inverse,
                                               name=f"edgeserve_batch_first_{name}"))
        else:
            graph.node.append(onnx.helper.make_node("Transpose", [inner], [name], perm=perm,
                                                    name=f"edgeserve_batch_first_{name}"))
        old = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in dims]
        moved = [dims[i] for i in perm]
        copies = [type(d)() for d in moved]
        for copy, d in zip(copies, moved):
            copy.CopyFrom(d)
        del value.type.tensor_type.shape.dim[:]
        value.type.tensor_type.shape.dim.extend(copies)
        record[name] = {"axis": axis, "layout_in_source": old}
    for node in reversed(front):
        graph.node.insert(0, node)
    return record


def _rename(graph: Any, old: str, new: str) -> None:
    """Every use and the definition of ``old`` in the graph and its subgraphs (branches and
    loop bodies read the enclosing graph's values by name) becomes ``new``."""
    for node in graph.node:
        node.input[:] = [new if i == old else i for i in node.input]
        node.output[:] = [new if o == old else o for o in node.output]
        for attribute in node.attribute:
            if attribute.HasField("g"):
                _rename(attribute.g, old, new)
            for sub in attribute.graphs:
                _rename(sub, old, new)
