"""Multiply-accumulates of a written ML program by the type of the activations going in: the same
measure as tflite-int8's (edgeserve/mac_share.py). In a W8A8 package coremltools puts a
``quantize`` (to int8) and a ``dequantize`` in front of each layer it quantizes; a conv, linear
or matmul whose activation comes out of such a dequantize is the int8 arithmetic the Neural
Engine runs, and one fed an fp16 or fp32 tensor is float (the FP16 and INT8-weights precisions:
their weights are int8 in the file, their arithmetic is not).
"""

from __future__ import annotations

import math
from typing import Any

from edgeserve.mac_share import activation_kind, shares


def program_mac_share(program: Any) -> dict[str, Any]:
    """MACs per activation type of ``program``'s (a MilProgram read from the package) conv,
    conv_transpose, linear and matmul ops at their declared shapes (unknown dimensions as 1)."""
    types = {name: vtype for name, vtype in program.inputs}
    producers: dict[str, Any] = {}
    for op in program.ops:
        for name, vtype in op.outputs:
            types[name], producers[name] = vtype, op

    def shape(name: str | None) -> list[int]:
        vtype = types.get(name or "")
        return [max(1, int(d or 1)) for d in vtype.shape] if vtype is not None and vtype.shape else []

    def first(op: Any, key: str) -> str | None:
        bound = op.inputs.get(key) or ()
        return bound[0].name if bound else None

    def kind(name: str | None) -> str:
        made = producers.get(name or "")
        if made is None or made.type != "dequantize":
            return "float"
        quantized = types.get(first(made, "input") or "")
        return activation_kind(quantized.dtype or "") if quantized is not None else "float"

    def transposed_x(op: Any) -> bool:
        flag = op.inputs.get("transpose_x") or ()
        return bool(flag and flag[0].value is not None and bool(flag[0].value))

    macs = {"int8": 0, "int16": 0, "float": 0}
    for op in program.ops:
        if op.type not in ("conv", "conv_transpose", "linear", "matmul") or not op.outputs:
            continue
        x, out = first(op, "x"), shape(op.outputs[0][0])
        if op.type == "conv":  # weight [O, I/groups, k...]
            count = math.prod(out) * math.prod(shape(first(op, "weight"))[1:])
        elif op.type == "conv_transpose":  # every input element scatters a kernel: weight [I, O/groups, k...]
            count = math.prod(shape(x)) * math.prod(shape(first(op, "weight"))[1:])
        elif op.type == "linear":  # weight [O, I]
            count = math.prod(out) * (shape(first(op, "weight")) or [0])[-1]
        else:  # matmul: [..., M, K] x [..., K, N]
            a = shape(x)
            count = math.prod(out) * (a[-2] if transposed_x(op) and len(a) > 1 else (a or [0])[-1])
        macs[kind(x)] += count
    return shares(macs)
