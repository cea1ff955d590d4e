"""Replace a .tflite's operators one at a time: the mcu target's rewrites for TFLM's kernels
(int8_islands.py, int8_lookup.py) share this walk over the graphs and the repacking, and the
making of the tensors and operators they put in."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

import numpy as np

from edgeserve.tflite_metadata import schema_module, unpack_model

# (model, graph, operator) -> (what was rewritten, the operators in its place), or None to keep it
Replace = Callable[[Any, Any, Any], "tuple[str, list[Any]] | None"]


def replace_operators(model_bytes: bytes, replace: Replace, kinds: Collection[str]) -> tuple[bytes, dict[str, int]]:
    """The model with each operator ``replace`` rewrites put in its place, and how many of each
    kind; the bytes come back unchanged when ``replace`` kept every operator. A model with no
    operator of ``kinds`` is not unpacked at all (every mcu build passes through here)."""
    import flatbuffers

    from edgeserve.tflite_model import TfliteModel

    if not set(kinds) & set(TfliteModel.from_bytes(model_bytes).op_counts_all()):
        return model_bytes, {}
    model = unpack_model(model_bytes)
    done: dict[str, int] = {}
    for graph in model.subgraphs or []:
        operators: list[Any] = []
        for op in graph.operators or []:
            found = replace(model, graph, op)
            if found is None:
                operators.append(op)
                continue
            name, replacement = found
            operators += replacement
            done[name] = done.get(name, 0) + 1
        graph.operators = operators
    if not done:
        return model_bytes, {}
    builder = flatbuffers.Builder(len(model_bytes) + 4096)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output()), done


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
    from edgeserve.converters.tflite_int8.float_prep import builtin_code

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
