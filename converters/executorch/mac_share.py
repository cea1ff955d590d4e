"""Multiply-accumulates of an ExportedProgram by the type of the activations going in: the same
measure as tflite-int8's (edgeserve/mac_share.py) and onnx-int8's, for the program ExecuTorch
lowers. After PT2E a convolution or linear layer whose activation input comes out of a
``dequantize_per_tensor`` of int8 values runs on XNNPACK's int8 kernels (the q/dq pair is what
the delegate fuses); with dynamic quantization the dequantize takes the scale it chose at run
time, and the product is still int8. An input that is a float tensor is float arithmetic.
"""

from __future__ import annotations

import math
from typing import Any

from edgeserve.mac_share import activation_kind, shares


def _shape(node: Any) -> list[int]:
    value = getattr(node, "meta", {}).get("val")
    shape = getattr(value, "shape", None)
    return [max(1, int(d)) if isinstance(d, int) or str(d).isdigit() else 1 for d in shape] if shape is not None else []


def _kind(node: Any) -> str:
    """int8 / int16 / float: the type the activation had before the dequantize that feeds the layer."""
    import torch

    target = str(getattr(node, "target", ""))
    if "dequantize" not in target:
        return "float"
    dtypes = [a for a in (*node.args, *node.kwargs.values()) if isinstance(a, torch.dtype)]
    return activation_kind(str(dtypes[-1]).removeprefix("torch.")) if dtypes else "int8"


def program_mac_share(program: Any) -> dict[str, Any]:
    """MACs per activation type of the program's convolutions, linear layers and matrix products
    at the traced shapes, as :func:`edgeserve.mac_share.shares` gives them."""
    import torch

    aten = torch.ops.aten
    convolutions = {aten.convolution.default, aten.conv1d.default, aten.conv2d.default, aten.conv3d.default}
    products = {aten.mm.default, aten.bmm.default, aten.matmul.default}
    macs = {"int8": 0, "int16": 0, "float": 0}
    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        target, args = node.target, node.args
        out = _shape(node)
        if not out:
            continue
        if target in convolutions and len(args) > 1:
            x, w = _shape(args[0]), _shape(args[1])
            transposed = target == aten.convolution.default and len(args) > 6 and bool(args[6])
            # weights [O, I/groups, k...]; a transposed one scatters a kernel per input element
            count = math.prod(x) * math.prod(w[1:]) if transposed else math.prod(out) * math.prod(w[1:])
            activation = args[0]
        elif target == aten.linear.default and len(args) > 1:  # weight [O, I]
            count, activation = math.prod(out) * _shape(args[1])[-1], args[0]
        elif target == aten.addmm.default and len(args) > 2:  # bias + a @ b
            count, activation = math.prod(out) * _shape(args[1])[-1], args[1]
        elif target in products and args:
            count, activation = math.prod(out) * _shape(args[0])[-1], args[0]
        else:
            continue
        macs[_kind(activation)] += count
    return shares(macs)
