"""Multiply-accumulates of an ONNX model by the type of the activations going in: for a QDQ
model (onnx-int8), a node whose input comes out of a DequantizeLinear of int8 (or uint8) values
computes in int8 on ONNX Runtime's integer kernels, of int16 values in int16, and one fed a
float tensor in float. The same measure as tflite-int8's (edgeserve/mac_share.py)."""

from __future__ import annotations

import math
from typing import Any

from edgeserve.mac_share import activation_kind, shares

# ONNX TensorProto element types of a DequantizeLinear zero point -> its numpy name
_ZERO_POINT_TYPES = {2: "uint8", 3: "int8", 4: "uint16", 5: "int16"}


def onnx_mac_share(model: Any) -> dict[str, Any]:
    """MACs per activation type of Conv, ConvTranspose, MatMul and Gemm at batch 1 (dynamic
    dimensions taken as 1), as :func:`edgeserve.mac_share.shares` gives them."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    graph = inferred.graph
    shapes = {v.name: [max(1, d.dim_value) for d in v.type.tensor_type.shape.dim]
              for v in [*graph.value_info, *graph.input, *graph.output]}
    initializers = {t.name: t for t in graph.initializer}
    shapes |= {name: [max(1, int(d)) for d in t.dims] for name, t in initializers.items()}
    producer = {out: node for node in graph.node for out in node.output}

    def source_shape(name: str) -> list[int]:
        node = producer.get(name)  # a quantized weight: the shape of the int8 initializer behind it
        if node is not None and node.op_type == "DequantizeLinear" and node.input[0] in shapes:
            return shapes[node.input[0]]
        return shapes.get(name, [])

    def kind(name: str) -> str:
        node = producer.get(name)
        if node is None or node.op_type != "DequantizeLinear":
            return "float"
        zero = initializers.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        return activation_kind(_ZERO_POINT_TYPES.get(zero.data_type, "float") if zero is not None else "uint8")

    macs = {"int8": 0, "int16": 0, "float": 0}
    for node in graph.node:
        if node.op_type not in ("Conv", "ConvTranspose", "MatMul", "Gemm") or not node.output:
            continue
        x, w, out = source_shape(node.input[0]), source_shape(node.input[1]), shapes.get(node.output[0], [])
        if not (x and w and out):
            continue
        if node.op_type == "Conv":  # weights [O, I/groups, k...]
            count = math.prod(out) * math.prod(w[1:])
        elif node.op_type == "ConvTranspose":  # every input element scatters a kernel: [I, O/groups, k...]
            count = math.prod(x) * math.prod(w[1:])
        elif node.op_type == "Gemm":
            transposed = any(a.name == "transA" and a.i for a in node.attribute)
            count = math.prod(out) * (x[0] if transposed else x[-1])
        else:  # MatMul
            count = math.prod(out) * x[-1]
        macs[kind(node.input[0])] += count
    return shares(macs)
