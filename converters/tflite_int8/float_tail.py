"""The float tail: an output that joins ranges one int8 scale cannot hold, concatenated in float.

A YOLOv8 head ends in one CONCATENATION of its boxes (pixels, up to the input size) and its
class scores (0 to 1): quantized with one scale, every score is 0 or one step. The two inputs
of that concatenation each have a range of their own, so quantizing up to them and joining in
float keeps every convolution int8 and each part at its own scale (nudenet's YOLOv8n: the
scores from 2.9 dB to over 30 dB). The other remedy, int16 activations, moves the whole network
to int16 kernels, which XNNPACK does not have.

Which outputs need it is read from the float model's outputs before anything is quantized
(edgeserve.quality.gate.mixed_range_outputs); this module finds the operators to keep in float.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from edgeserve.converters.join_tail import Step, join_tail, reshaped_axis, transposed_axis
from edgeserve.tflite.model import TfliteModel

#: Operators that only move values: the concatenations may sit behind them.
_LAYOUT = {"RESHAPE", "TRANSPOSE", "SQUEEZE", "EXPAND_DIMS"}


def concatenation_tail(model: bytes, outputs: Sequence[tuple[int, int]]) -> list[tuple[str, str]] | None:
    """(operator, output tensor name) of each operator from the channel joins of each subgraph
    output in ``outputs`` ((position among the subgraph's outputs, the axis whose channels hold
    the different ranges)) to that output (converters/join_tail.py), or None when one of them is
    not made by concatenations and layout operators only. A concatenation along another axis
    is followed into its inputs; one that joins the anchors with nothing joined along the
    channels behind it (PP-PicoDet's per-level score maps) puts every range in each part, and
    keeping it float separates nothing, so that is None too."""
    parsed = TfliteModel.from_bytes(model)
    graph = parsed.subgraphs[0]
    producer = {t: op for op in graph.operators for t in op.outputs if t >= 0}

    def describe(tensor: Any) -> Step | None:
        op = producer.get(tensor)
        if op is None or op.op_name not in _LAYOUT | {"CONCATENATION"}:
            return None
        name = graph.tensors[op.outputs[0]].name
        if op.op_name == "CONCATENATION":
            rank = len(graph.tensors[op.outputs[0]].shape)
            return Step(("CONCATENATION", name), tuple(op.inputs), axis=op.options.get("axis", 0) % max(rank, 1))
        source = op.inputs[0]
        if op.op_name == "TRANSPOSE":
            perm = op.inputs[1]
            before = transposed_axis(parsed.tensor_data(0, perm).tolist() if graph.tensors[perm].is_constant else None)
        else:
            before = reshaped_axis(graph.tensors[source].shape, graph.tensors[op.outputs[0]].shape)
        return Step((op.op_name, name), (source,), before=before)

    tail: list[Any] = []
    for position, axis in outputs:
        names = join_tail(graph.outputs[position], axis, describe)
        if names is None:
            return None
        tail += [step for step in names if step not in tail]
    return tail or None


def float_front(model: bytes, float_ops: Collection[str]) -> list[tuple[str, str]] | None:
    """(operator, output tensor name) of every operator that feeds, through any path back to the
    model's inputs, an operator of a kind in ``float_ops`` (those the quantizer has no int8 rule
    for); None when there is none. Kept float, they give that operator the float values it would
    otherwise read back from int8: a LOG of a power spectrum (1e-10 to 1e6) reads zeros for
    everything under 1/255 of the largest power (DNSMOS P.835's log-power front end)."""
    graph = TfliteModel.from_bytes(model).subgraphs[0]
    producer = {t: op for op in graph.operators for t in op.outputs if t >= 0}
    front: dict[int, tuple[str, str]] = {}
    pending = [t for op in graph.operators if op.op_name in float_ops for t in op.inputs if t >= 0]
    while pending:
        op = producer.get(pending.pop())
        if op is None or op.index in front or op.op_name in float_ops:
            continue
        front[op.index] = (op.op_name, graph.tensors[op.outputs[0]].name)
        pending += [t for t in op.inputs if t >= 0 and not graph.tensors[t].is_constant]
    return [front[i] for i in sorted(front)] or None
