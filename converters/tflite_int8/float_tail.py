"""The float tail: an output that joins ranges one int8 scale cannot hold, concatenated in float.

A YOLOv8 head ends in one CONCATENATION of its boxes (pixels, up to the input size) and its
class scores (0 to 1): quantized with one scale, every score is 0 or one step. The two inputs
of that concatenation each have a range of their own, so quantizing up to them and joining in
float keeps every convolution int8 and each part at its own scale (nudenet's YOLOv8n: the
scores from 2.9 dB to over 30 dB). The other remedy, int16 activations, moves the whole network
to int16 kernels, which XNNPACK does not have.

Which outputs need it is read from the float model's outputs before anything is quantized
(edgeserve.quality.mixed_range_outputs); this module finds the operators to keep in float.
"""

from __future__ import annotations

from collections.abc import Sequence

from edgeserve.tflite_model import TfliteModel

#: Operators that only move values: the concatenation may sit behind them.
_LAYOUT = {"RESHAPE", "TRANSPOSE", "SQUEEZE", "EXPAND_DIMS"}


def concatenation_tail(model: bytes, outputs: Sequence[tuple[int, int]]) -> list[tuple[str, str]] | None:
    """(operator, output tensor name) of each operator from a CONCATENATION to each subgraph
    output in ``outputs`` ((position among the subgraph's outputs, the axis whose channels hold
    the different ranges)), or None when one of them is not joined along that axis by a
    concatenation behind layout operators only: a concatenation along another axis (PP-PicoDet's
    per-level score maps, joined along the anchors) puts every range in each part, and keeping
    it float separates nothing."""
    parsed = TfliteModel.from_bytes(model)
    graph = parsed.subgraphs[0]
    producer = {t: op for op in graph.operators for t in op.outputs if t >= 0}
    tail: list[tuple[str, str]] = []
    for position, axis in outputs:
        tensor = graph.outputs[position]
        chain: list[tuple[str, str]] = []
        while True:
            op = producer.get(tensor)
            if op is None or op.op_name not in _LAYOUT | {"CONCATENATION"}:
                return None
            chain.append((op.op_name, graph.tensors[op.outputs[0]].name))
            if op.op_name == "CONCATENATION":
                if axis is not None and op.options.get("axis", 0) % len(graph.tensors[tensor].shape) != axis:
                    return None
                break
            if op.op_name == "TRANSPOSE" and axis is not None and graph.tensors[op.inputs[1]].is_constant:
                axis = int(parsed.tensor_data(0, op.inputs[1])[axis])  # the same channels before the transpose
            else:
                axis = None  # a reshape moves axes in ways not followed here: the join is taken as it is
            tensor = op.inputs[0]
        tail += [step for step in chain if step not in tail]
    return tail or None
