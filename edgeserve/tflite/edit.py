"""Small edits of an unpacked .tflite (the flatbuffer object API's ``ModelT``): a new tensor with
its buffer, a new builtin operator with its operator code. Shared by the rewrites that put
operators in (float_prep and quantizable_forms for the quantizer, the mcu target's rewrites for
TFLM's kernels, onnx2tf_lowering's restored outputs)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from edgeserve.tflite.metadata import schema_module


def builtin_code(model: Any, builtin: int, version: int) -> int:
    """The index of ``builtin``'s operator code, added when the model has none."""
    for i, code in enumerate(model.operatorCodes or []):
        if not code.customCode and max(code.builtinCode or 0, code.deprecatedBuiltinCode or 0) == builtin:
            code.version = max(code.version or 1, version)
            return i
    code = schema_module().OperatorCodeT()
    code.builtinCode, code.deprecatedBuiltinCode, code.version = builtin, min(builtin, 127), version
    model.operatorCodes.append(code)
    return len(model.operatorCodes) - 1


def add_tensor(model: Any, graph: Any, name: str, shape: Sequence[int], dtype: int,
               data: np.ndarray | None = None, quantization: tuple[float, int] | None = None) -> int:
    """A new tensor in ``graph`` (its own buffer: ``data``, or empty for an activation) and its index."""
    schema = schema_module()
    tensor = schema.TensorT()
    tensor.shape, tensor.type, tensor.name = [int(d) for d in shape], dtype, name.encode()
    buffer = schema.BufferT()
    if data is not None:
        buffer.data = np.frombuffer(np.ascontiguousarray(data).tobytes(), np.uint8)
    model.buffers.append(buffer)
    tensor.buffer = len(model.buffers) - 1
    if quantization is not None:
        params = schema.QuantizationParametersT()
        params.scale, params.zeroPoint = [float(quantization[0])], [int(quantization[1])]
        tensor.quantization = params
    graph.tensors.append(tensor)
    return len(graph.tensors) - 1


def new_operator(model: Any, builtin: int, version: int, inputs: Sequence[int], outputs: Sequence[int],
                 options: str | None = None) -> Any:
    """A builtin operator (its operator code added to the model when missing), with default options."""
    schema = schema_module()
    op = schema.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = builtin_code(model, builtin, version), list(inputs), list(outputs)
    if options is not None:
        op.builtinOptionsType = getattr(schema.BuiltinOptions, options)
        op.builtinOptions = getattr(schema, f"{options}T")()
    return op


def tensor_name(graph: Any, index: int) -> str:
    name = graph.tensors[index].name
    return name.decode() if isinstance(name, bytes) else (name or f"t{index}")


def zero_point(tensor: Any) -> int:
    q = tensor.quantization
    return int(q.zeroPoint[0]) if q.zeroPoint is not None and len(q.zeroPoint) else 0
