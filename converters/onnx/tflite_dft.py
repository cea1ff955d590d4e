"""A float .tflite's RFFT2D as products with constant cosine and sine matrices, for tf2onnx.

tf2onnx 1.16 converts TFLite's RFFT2D only when a COMPLEX_ABS reads its output directly. Audio
models put shape operators between them (the wake-phrase model of word-activation-recognition:
RFFT2D -> SQUEEZE -> COMPLEX_ABS) or take the real part with a CAST (BirdNET V2.4's two
spectrograms: RFFT2D -> SQUEEZE -> CAST), and tf2onnx then stops the onnx, onnx-int8, coreml and
executorch targets. Here, before tf2onnx reads the file, each such RFFT2D over the last axis
becomes what the DFT is by definition:

    real[k] = sum_n x[n] cos(2 pi k n / N),   imag[k] = -sum_n x[n] sin(2 pi k n / N)

two BATCH_MATMULs of the frame with constant [L, N/2+1] matrices (L the frame's length; rows
past N are zero, which is RFFT2D's crop, and a frame shorter than N is its zero padding), then
sqrt(real^2 + imag^2) for COMPLEX_ABS, real alone for a CAST or REAL, imag for an IMAG; the SQUEEZEs and
RESHAPEs in between (each keeping the frequency axis last) are applied to that float result
instead of the complex one. Only the float ONNX route reads the rewritten
bytes: the TFLite targets keep RFFT2D (LiteRT runs it), and every target is judged against the
file as given.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgeserve.tflite.edit import add_tensor, new_operator, tensor_name
from edgeserve.tflite.metadata import pack_model, schema_module, unpack_model

_FLOAT32, _INT32 = 0, 2  # TensorType codes


def dft_as_matmul(data: bytes) -> tuple[bytes, str | None]:
    """``data`` with every rewritable RFFT2D written as matrix products, and what was done
    (None, and the bytes as given, when there was none)."""
    schema = schema_module()
    if not _has_rfft(data):
        return data, None
    model = unpack_model(data)
    rewritten = sum(_rewrite_graph(model, graph, schema) for graph in model.subgraphs or [])
    if not rewritten:
        return data, None
    return pack_model(model, len(data)), (f"{rewritten} RFFT2D written as products with constant cosine and sine "
                                          "matrices (tf2onnx takes RFFT2D only straight into COMPLEX_ABS)")


def _has_rfft(data: bytes) -> bool:
    from edgeserve.tflite.model import TfliteModel

    return any(op.op_name == "RFFT2D" for g in TfliteModel.from_bytes(data).subgraphs for op in g.operators)


def _op_name(model: Any, op: Any, schema: Any) -> str:
    from edgeserve.tflite.model import BUILTIN_OPS  # the reader's table of builtin names

    code = model.operatorCodes[op.opcodeIndex]
    builtin = max(code.builtinCode or 0, code.deprecatedBuiltinCode or 0)
    return "CUSTOM" if code.customCode else BUILTIN_OPS[builtin] if builtin < len(BUILTIN_OPS) else str(builtin)


def _shape(tensor: Any) -> list[int]:
    return [] if tensor.shape is None else [int(d) for d in tensor.shape]  # the object API gives numpy arrays


def _consumers(graph: Any, tensor: int) -> list[int]:
    return [i for i, op in enumerate(graph.operators) if tensor in list(op.inputs)]


def _constant(model: Any, graph: Any, tensor: int, dtype: str) -> np.ndarray | None:
    buffer = model.buffers[graph.tensors[tensor].buffer]
    return None if buffer.data is None or not len(buffer.data) else np.frombuffer(bytes(buffer.data), dtype)


def _rewrite_graph(model: Any, graph: Any, schema: Any) -> int:
    rewritten = 0
    index = 0
    while index < len(graph.operators):
        op = graph.operators[index]
        plan = _plan(model, graph, index, schema) if _op_name(model, op, schema) == "RFFT2D" else None
        if plan is None:
            index += 1
            continue
        chain, kind, frame, length, fft_length = plan
        reshapes = [graph.operators[i] for i in chain[1:-1]]
        out = int(graph.operators[chain[-1]].outputs[0])
        new_ops = _dft_ops(model, graph, schema, frame, length, fft_length, kind, reshapes, out)
        for position in sorted(chain, reverse=True):
            del graph.operators[position]
        graph.operators[index:index] = new_ops
        index += len(new_ops)
        rewritten += 1
    return rewritten


def _plan(model: Any, graph: Any, index: int, schema: Any) -> tuple[list[int], str, int, int, int] | None:
    """What one RFFT2D reaches: [its index, the SQUEEZEs and RESHAPEs, the consumer], "abs",
    "real" or "imag", the frame tensor, its length and the FFT length; None when it is not a case this
    covers (an FFT over two axes, a shape operator that moves the frequency axis, a complex value
    read twice or by another operator)."""
    op = graph.operators[index]
    frame, lengths = int(op.inputs[0]), int(op.inputs[1])
    fft = _constant(model, graph, lengths, "<i4")
    shape = _shape(graph.tensors[frame])
    if fft is None or len(fft) != 2 or int(fft[0]) != 1 or len(shape) < 2 or shape[-2] != 1 or shape[-1] < 1:
        return None
    chain, tensor = [index], int(op.outputs[0])
    while True:
        if tensor in list(graph.outputs):
            return None
        readers = _consumers(graph, tensor)
        if len(readers) != 1:
            return None
        reader = graph.operators[readers[0]]
        name = _op_name(model, reader, schema)
        chain.append(readers[0])
        if name == "SQUEEZE":
            if not _squeezed_axes(graph, reader) or len(_shape(graph.tensors[tensor])) - 1 in _squeezed_axes(graph, reader):
                return None
            tensor = int(reader.outputs[0])
            continue
        if name == "RESHAPE":
            target = _new_shape(model, graph, reader)
            if target is None or target[-1] != int(fft[1]) // 2 + 1:
                return None
            tensor = int(reader.outputs[0])
            continue
        result = graph.tensors[int(reader.outputs[0])]
        if name == "COMPLEX_ABS" and result.type == _FLOAT32:
            return chain, "abs", frame, shape[-1], int(fft[1])
        if name in ("CAST", "REAL") and result.type == _FLOAT32:
            return chain, "real", frame, shape[-1], int(fft[1])
        if name == "IMAG" and result.type == _FLOAT32:
            return chain, "imag", frame, shape[-1], int(fft[1])
        return None


def _new_shape(model: Any, graph: Any, op: Any) -> list[int] | None:
    """A RESHAPE's new shape when it is a constant (its second input, else its options)."""
    if len(op.inputs) > 1 and int(op.inputs[1]) >= 0:
        values = _constant(model, graph, int(op.inputs[1]), "<i4")
        return None if values is None else [int(v) for v in values]
    options = op.builtinOptions
    return None if options is None or options.newShape is None else [int(v) for v in options.newShape]


def _squeezed_axes(graph: Any, op: Any) -> list[int]:
    """A SQUEEZE's axes, counted from the front (none listed: every axis of size 1, not handled)."""
    rank = len(_shape(graph.tensors[int(op.inputs[0])]))
    dims = None if op.builtinOptions is None else op.builtinOptions.squeezeDims
    return [] if dims is None or not rank else [int(a) % rank for a in dims]


def _dft_ops(model: Any, graph: Any, schema: Any, frame: int, length: int, fft_length: int, kind: str,
             reshapes: list[Any], out: int) -> list[Any]:
    bins = fft_length // 2 + 1
    n = np.arange(min(length, fft_length), dtype=np.float64)[:, None]
    angle = 2.0 * np.pi * n * np.arange(bins, dtype=np.float64)[None, :] / fft_length
    base = tensor_name(graph, frame)
    ops: list[Any] = []
    # Converters write RFFT2D's output with the frame's length as its last dimension (the
    # wake-phrase model: 2048 for 1025 bins) and LiteRT sizes it again when it allocates; the new
    # tensors get the true number of bins, and keep the frame's free dimensions (-1) as such.
    dims, free = _shape(graph.tensors[frame])[:-1], _signature(graph.tensors[frame])[:-1]

    def activation(name: str) -> int:
        index = add_tensor(model, graph, f"{base}/dft_{name}", dims + [bins], _FLOAT32)
        graph.tensors[index].shapeSignature = np.asarray(free + [bins], np.int32)
        return index

    def product(weights: np.ndarray, name: str) -> int:
        full = np.zeros((length, bins), np.float32)  # rows past fft_length: RFFT2D's crop
        full[: weights.shape[0]] = weights
        matrix = add_tensor(model, graph, f"{base}/dft_{name}_matrix", full.shape, _FLOAT32, full)
        return operator(schema.BuiltinOperator.BATCH_MATMUL, [frame, matrix], name, "BatchMatMulOptions")

    def operator(builtin: int, inputs: list[int], name: str, options: str | None = None) -> int:
        result = activation(name)
        ops.append(new_operator(model, builtin, 1, inputs, [result], options))
        return result

    value = product(-np.sin(angle), "imag") if kind == "imag" else product(np.cos(angle), "real")
    if kind == "abs":
        imag = product(-np.sin(angle), "imag")  # the DFT's sign; it does not matter under the square
        squares = [operator(schema.BuiltinOperator.MUL, [v, v], f"{part}_squared", "MulOptions")
                   for v, part in ((value, "real"), (imag, "imag"))]
        power = operator(schema.BuiltinOperator.ADD, squares, "power", "AddOptions")
        value = operator(schema.BuiltinOperator.SQRT, [power], "magnitude")
    for number, step in enumerate(reshapes):
        if _op_name(model, step, schema) == "SQUEEZE":
            axes = _squeezed_axes(graph, step)
            dims, free = [d for i, d in enumerate(dims) if i not in axes], [d for i, d in enumerate(free) if i not in axes]
            value = operator(schema.BuiltinOperator.SQUEEZE, [value], f"squeezed_{number}", "SqueezeOptions")
            ops[-1].builtinOptions.squeezeDims = axes
            continue
        target = _new_shape(model, graph, step) or []
        known = int(np.prod([d for d in target if d >= 0])) or 1
        dims = [d if d >= 0 else int(np.prod(dims + [bins])) // known for d in target][:-1]
        free = [d if d >= 0 else -1 for d in target][:-1]
        value = operator(schema.BuiltinOperator.RESHAPE, [value, *[int(i) for i in step.inputs[1:]]],
                         f"reshaped_{number}", "ReshapeOptions")
        ops[-1].builtinOptions.newShape = target
    ops[-1].outputs = [out]  # the consumer's tensor, read by the rest of the graph, now float bins
    result = graph.tensors[out]
    result.shape = np.asarray(dims + [bins], np.int32)
    result.shapeSignature = np.asarray(free + [bins], np.int32)
    return ops


def _signature(tensor: Any) -> list[int]:
    signature = tensor.shapeSignature
    return _shape(tensor) if signature is None or not len(signature) else [int(d) for d in signature]
