"""Small .tflite files written by hand with the flatbuffer object API, for tests that need one
operator pattern exactly (what a converter leaves, or a model a runtime refuses)."""

from __future__ import annotations

from typing import Any

import numpy as np

FLOAT32, INT32, INT8, BOOL = 0, 2, 9, 6
# Operators whose int8 kernels are version 2 in LiteRT's op_version.cc; others are written as version 1.
INT8_VERSION_2 = {op: 2 for op in ("DIV", "GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL", "EQUAL", "NOT_EQUAL")}


def tflite(tensors: list[tuple[str, list[int], int, Any, tuple[float, int] | None]],
                ops: list[tuple[str, list[int], list[int], str | None]], inputs: list[int], outputs: list[int]) -> bytes:
    """A one-subgraph .tflite: tensors as (name, shape, type, constant values or None,
    (scale, zero point) or None), operators as (builtin name, inputs, outputs, options)."""
    import flatbuffers

    from edgeserve.tflite.metadata import schema_module

    schema = schema_module()
    model = schema.ModelT()
    model.version, model.buffers, model.operatorCodes = 3, [schema.BufferT()], []
    graph = schema.SubGraphT()
    graph.tensors, graph.operators = [], []
    for name, shape, dtype, values, quantization in tensors:
        tensor = schema.TensorT()
        tensor.name, tensor.shape, tensor.type, tensor.buffer = name.encode(), shape, dtype, 0
        if values is not None:
            buffer = schema.BufferT()
            buffer.data = np.frombuffer(np.ascontiguousarray(values).tobytes(), np.uint8)
            model.buffers.append(buffer)
            tensor.buffer = len(model.buffers) - 1
        if quantization is not None:
            tensor.quantization = schema.QuantizationParametersT()
            tensor.quantization.scale, tensor.quantization.zeroPoint = [quantization[0]], [quantization[1]]
        graph.tensors.append(tensor)
    codes: dict[str, int] = {}
    for builtin, op_inputs, op_outputs, options in ops:
        if builtin not in codes:
            code = schema.OperatorCodeT()
            value = getattr(schema.BuiltinOperator, builtin)
            code.builtinCode, code.deprecatedBuiltinCode = value, min(value, 127)
            code.version = INT8_VERSION_2.get(builtin, 1)
            codes[builtin] = len(model.operatorCodes)
            model.operatorCodes.append(code)
        op = schema.OperatorT()
        op.opcodeIndex, op.inputs, op.outputs = codes[builtin], op_inputs, op_outputs
        if options:
            op.builtinOptionsType = getattr(schema.BuiltinOptions, options)
            op.builtinOptions = getattr(schema, f"{options}T")()
        graph.operators.append(op)
    graph.inputs, graph.outputs = inputs, outputs
    model.subgraphs = [graph]
    builder = flatbuffers.Builder(4096)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())
