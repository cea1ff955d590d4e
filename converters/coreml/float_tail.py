"""The float tail for coreml w8a8: the concats that join an output's ranges keep a range per part.

coremltools quantizes activations around convolutions, linear layers, pools and adds only; a
concat is computed in float between them. edgeserve gives a concat's inputs and output one
shared range (converters/coreml/quantize.py), so that a device that keeps the join in int8
needs no rescaling; for an output that joins a detector's boxes in pixels and its class scores
under 1 (found before quantizing: edgeserve.quality.gate.mixed_range_outputs), one range leaves
every score at 0 or one step. The concats found here (converters/join_tail.py: the channel
joins behind layout ops, through the anchor joins) keep each part's own range instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from edgeserve.converters.coreml.program import MilProgram
from edgeserve.converters.join_tail import Step, join_tail, reshaped_axis, transposed_axis

#: Ops that only move values (or, the outputs' final ``cast``, change their float width).
_LAYOUT = {"reshape", "transpose", "squeeze", "expand_dims", "identity", "cast"}


def concat_tail(program: MilProgram, outputs: Sequence[tuple[int, int]]) -> list[str] | None:
    """Names of the concat ops from the channel joins of each program output in ``outputs``
    ((index, the axis whose channels hold the different ranges)) to that output, or None when
    one of them is not made by concats and layout ops only."""
    producer = {name: op for op in program.ops for name, _ in op.outputs}
    kinds = {op.name: op.type for op in program.ops}
    shapes = {name: vtype.shape for op in program.ops for name, vtype in op.outputs}
    shapes.update((name, vtype.shape) for name, vtype in program.inputs)

    def known(var: str | None) -> list[int] | None:
        shape = shapes.get(var or "")
        return None if shape is None or any(d is None for d in shape) else [int(d) for d in shape if d is not None]

    def describe(var: Any) -> Step | None:
        op = producer.get(var)
        if op is None or op.type not in _LAYOUT | {"concat"}:
            return None
        if op.type == "concat":
            axis = program.constant(op.inputs["axis"][0])
            rank = len(known(var) or [])
            parts = tuple(b.name for b in op.inputs.get("values", ()))
            if axis is None or not rank or any(p is None for p in parts):
                return None
            return Step(op.name, parts, axis=int(axis) % rank)
        source = op.inputs["x"][0].name
        if op.type == "transpose":
            perm = program.constant(op.inputs["perm"][0])
            return Step(op.name, (source,), before=transposed_axis(None if perm is None else list(perm)))
        return Step(op.name, (source,), before=reshaped_axis(known(source), known(var)))

    names: list[str] = []
    for index, axis in outputs:
        tail = join_tail(program.outputs[index], axis, describe)
        if tail is None:
            return None
        names += [str(name) for name in tail if name not in names and kinds.get(str(name)) == "concat"]
    return names or None
