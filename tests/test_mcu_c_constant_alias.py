"""A RESHAPE of a constant in a full-INT8 model: mcu-c's planner keeps aliases in the arena, and
a constant's bytes are in flash, so the step is refused in one line naming the operator (it
raised a KeyError in the planner before; tflite-int8 now folds such moves before quantizing)."""

from __future__ import annotations

import numpy as np
import pytest


def _constant_reshape_model() -> bytes:
    """y = x + reshape(c): x int8 [1, 4], c an int8 constant [4], reshaped to [1, 4]."""
    import flatbuffers

    from edgeserve.tflite.metadata import schema_module

    schema = schema_module()
    model = schema.ModelT()
    model.version = 3
    empty, weights, shape = schema.BufferT(), schema.BufferT(), schema.BufferT()
    weights.data = np.frombuffer(np.array([1, 2, 3, 4], np.int8).tobytes(), np.uint8)
    shape.data = np.frombuffer(np.array([1, 4], np.int32).tobytes(), np.uint8)
    model.buffers = [empty, weights, shape]
    codes = []
    for builtin in (schema.BuiltinOperator.RESHAPE, schema.BuiltinOperator.ADD):
        code = schema.OperatorCodeT()
        code.builtinCode, code.deprecatedBuiltinCode, code.version = builtin, builtin, 1
        codes.append(code)
    model.operatorCodes = codes
    graph = schema.SubGraphT()
    graph.tensors = []
    for name, dims, dtype, buffer in (("x", [1, 4], 9, 0), ("c", [4], 9, 1), ("shape", [2], 2, 2),
                                      ("c_2d", [1, 4], 9, 0), ("y", [1, 4], 9, 0)):
        tensor = schema.TensorT()
        tensor.name, tensor.shape, tensor.type, tensor.buffer = name.encode(), dims, dtype, buffer
        if dtype == 9:
            tensor.quantization = schema.QuantizationParametersT()
            tensor.quantization.scale, tensor.quantization.zeroPoint = [0.1], [0]
        graph.tensors.append(tensor)
    reshape, add = schema.OperatorT(), schema.OperatorT()
    reshape.opcodeIndex, reshape.inputs, reshape.outputs = 0, [1, 2], [3]
    add.opcodeIndex, add.inputs, add.outputs = 1, [0, 3], [4]
    add.builtinOptionsType, add.builtinOptions = schema.BuiltinOptions.AddOptions, schema.AddOptionsT()
    graph.inputs, graph.outputs, graph.operators = [0], [4], [reshape, add]
    model.subgraphs = [graph]
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def test_a_reshape_of_a_constant_is_refused_by_name() -> None:
    pytest.importorskip("flatbuffers")
    from edgeserve.converters.mcu_c.lower import Lowering
    from edgeserve.errors import EdgeServeError
    from edgeserve.tflite.model import TfliteModel

    model = TfliteModel.from_bytes(_constant_reshape_model())
    assert [op.op_name for op in model.subgraphs[0].operators] == ["RESHAPE", "ADD"]
    with pytest.raises(EdgeServeError, match=r"no kernel for RESHAPE \(operator 0\) of a constant tensor"):
        Lowering(model).steps()
