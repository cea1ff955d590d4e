"""How much of a .tflite's arithmetic runs in int8: multiply-accumulates per operator, by the
type of the activations it multiplies.

"Integer-only" is a yes or no over operators; a model can fail it on one CAST at the end and
still be 99.9 % int8, or keep 351 of 360 operators float behind a "tflite-int8 ... ok" (a BERT
encoder whose float-front remedy grew back from a CAST and an ABS at the very end). The share of
multiply-accumulates says which: convolutions, fully connected layers and matrix products carry
almost all of a network's arithmetic (with the recurrent cells LSTM and SVDF), so their MACs, grouped by the dtype of the activations
going in, are the measure. int8 activations with int8 weights count as int8; int16 activations
(the int16x8 scheme) as int16; float activations as float, whatever the weights (a hybrid
kernel with int8 weights still computes in float on most CPUs' paths).
"""

from __future__ import annotations

import math
from typing import Any

# operator -> (index of its activation input, index of its weights input or None)
_MAC_OPS = {"CONV_2D": (0, 1), "DEPTHWISE_CONV_2D": (0, 1), "FULLY_CONNECTED": (0, 1), "BATCH_MATMUL": (0, 1),
            "TRANSPOSE_CONV": (2, 1), "CONV_3D": (0, 1), "UNIDIRECTIONAL_SEQUENCE_LSTM": (0, 2), "SVDF": (0, 1)}


def _macs(op: Any, tensors: Any) -> int:
    """Multiply-accumulates of one operator at batch 1 (dynamic dimensions taken as 1)."""
    def shape(index: int) -> list[int]:
        return [max(1, int(d)) for d in tensors[index].shape] if index >= 0 else []

    out = shape(op.outputs[0])
    name = op.op_name
    if name in ("CONV_2D", "CONV_3D"):  # filter [O, (KD,) KH, KW, I/groups]
        return math.prod(out) * math.prod(shape(op.inputs[1])[1:])
    if name == "DEPTHWISE_CONV_2D":  # filter [1, KH, KW, O]
        kernel = shape(op.inputs[1])
        return math.prod(out) * kernel[1] * kernel[2]
    if name == "FULLY_CONNECTED":  # filter [O, I]
        return math.prod(out) * shape(op.inputs[1])[-1]
    if name == "BATCH_MATMUL":  # [..., M, K] x [..., K, N]
        a = shape(op.inputs[0])
        adjoint = bool(op.options.get("adj_x")) if op.options else False
        return math.prod(out) * (a[-2] if adjoint and len(a) > 1 else a[-1])
    if name == "TRANSPOSE_CONV":  # every input pixel scatters a kernel: weights [O, KH, KW, I]
        return math.prod(shape(op.inputs[2])) * math.prod(shape(op.inputs[1])[:3])
    if name == "UNIDIRECTIONAL_SEQUENCE_LSTM":  # each step: 4 gates x H x (I + H); input [B, T, I]
        x, hidden = shape(op.inputs[0]), shape(op.inputs[2])[0]
        return math.prod(x[:-1]) * 4 * hidden * (x[-1] + hidden)
    if name == "SVDF":  # feature weights [F, I], time weights [F, memory]; input [B, I]
        x, feature, time = shape(op.inputs[0]), shape(op.inputs[1]), shape(op.inputs[2])
        return x[0] * feature[0] * (feature[1] + time[1])
    return 0


def activation_kind(dtype: str) -> str:
    if dtype in ("int8", "uint8"):
        return "int8"
    if dtype == "int16":
        return "int16"
    return "float"


def mac_share(model: Any) -> dict[str, Any]:
    """MACs per activation type over every subgraph: {"int8": n, "int16": n, "float": n, "total": n,
    "int8_percent": p, "float_percent": p} (the percentages None for a model without a
    convolution, fully connected layer or matrix product: there is nothing to share)."""
    macs = {"int8": 0, "int16": 0, "float": 0}
    for graph in model.subgraphs:
        for op in graph.operators:
            spec = _MAC_OPS.get(op.op_name)
            if spec is None or len(op.inputs) <= spec[0] or op.inputs[spec[0]] < 0:
                continue
            macs[activation_kind(graph.tensors[op.inputs[spec[0]]].dtype_name)] += _macs(op, graph.tensors)
    return shares(macs)


def shares(macs: dict[str, int]) -> dict[str, Any]:
    """Counts by activation type, their total and the int8 and float percentages (None: no MACs)."""
    total = sum(macs.values())
    return {**macs, "total": total, "int8_percent": round(100.0 * macs["int8"] / total, 2) if total else None,
            "float_percent": round(100.0 * macs["float"] / total, 2) if total else None}
