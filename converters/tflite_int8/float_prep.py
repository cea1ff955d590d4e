"""Make a float .tflite something a static quantizer can calibrate, without changing its numbers.

Float .tflite files found in the wild (MediaPipe's face and hand detectors, older model
zoos) were written for the float runtime, and three of their habits stop a quantizer:

* no SignatureDef: the quantizer feeds calibration data by signature input name;
* fp16 weights behind ``DEQUANTIZE`` ops (and int8 weights read by "hybrid" kernels in a
  dynamic-range model): the quantizer needs float32 constants to pick int8 weight scales;
* ``builtin_code`` left at 0 by schema versions before 3a, with the real operator in
  ``deprecated_builtin_code``: read naively, every operator of such a file is an ADD;
* tensors sharing a name: the quantizer keys calibration ranges by name;
* sparse weights behind ``DENSIFY`` ops (MediaPipe's pose detector: 38 of them): the
  quantizer quantizes a DENSIFY output as an activation, with a zero point LiteRT's int8
  convolution refuses (conv.cc: "zero_point ... -128 != 0"), and tf2onnx cannot read sparse
  tensors at all. LiteRT densifies them itself; its dense values replace the op;
* MediaPipe's custom ``Convolution2DTransposeBias`` (selfie segmentation's upsampling head):
  no runtime but MediaPipe's has it, so LiteRT cannot even run the float file. It is a
  transposed convolution plus a per-channel bias, which the builtin ``TRANSPOSE_CONV`` (version
  3, with its optional bias input) computes, with the same weight layout [O, H, W, I] and the
  same padding rule (``rewrite_mediapipe_ops``);
* operators the quantizer leaves float although an equal form quantizes (``RELU_0_TO_1``,
  ``SHAPE`` of fixed-shape tensors, in onnx2tf's models; ``REDUCE_MAX`` as a global max pool):
  quantizable_forms.py.

Each fix is exact: fp16 and int8 values widen to float32 without rounding, so the prepared
model computes what the original does (the tflite-int8 target checks that on real data).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from edgeserve.converters.tflite_int8.quantizable_forms import (
    fold_shape_arithmetic,
    divide_by_sqrt_as_rsqrt,
    reduce_max_as_max_pool,
    relu_0_to_1_as_mul,
    variance_as_mean_of_squares,
)
from edgeserve.errors import SourceModelError
from edgeserve.tflite.edit import builtin_code
from edgeserve.tflite.metadata import pack_model, schema_module, unpack_model

SIGNATURE_KEY = "serving_default"
# TensorType values of the TFLite schema.
_FLOAT32, _FLOAT16, _UINT8, _INT8 = 0, 1, 3, 9
_DEQUANTIZE = 6
_DENSIFY = 124
_TRANSPOSE_CONV = 67
# Before schema 3a the operator lived in a signed byte; 127 means "look in builtin_code".
_PLACEHOLDER_FOR_GREATER_OP_CODES = 127


@dataclasses.dataclass(frozen=True)
class Prepared:
    model: bytes
    steps: tuple[str, ...]  # what was changed, for the manifest; empty when nothing was needed


def prepare_float_tflite(data: bytes, io_names: tuple[list[str], list[str]] | None = None) -> Prepared:
    """The model with the fixes above applied where needed.

    ``io_names`` (input names, output names, in the model's order) renames the model's inputs
    and outputs and its signature entries to the source's names: litert-torch calls them
    ``args_0`` and ``output_0``, and an ONNX file's ``probs`` should stay ``probs``.
    """
    schema = schema_module()
    try:
        model = unpack_model(data)
    except Exception as exc:  # the generated reader raises struct/index errors on bad bytes
        raise SourceModelError(f"cannot read the float .tflite: {exc}") from exc
    from edgeserve.tflite.model import TfliteModel

    external = sum(1 for b in TfliteModel.from_bytes(data).buffers if b.external)
    inlined = f"moved {external} weight buffer(s) stored after the flatbuffer into it" if external else None
    steps = [s for s in (inlined, _restore_op_codes(model), _fold_densify(model, data), _widen_constant_weights(model),
                         _flat_transpose_conv_bias(model), fold_shape_arithmetic(model), relu_0_to_1_as_mul(model),
                         reduce_max_as_max_pool(model), divide_by_sqrt_as_rsqrt(model),
                         _dropping_unused(model, variance_as_mean_of_squares(model)),
                         _name_io(model, io_names) if io_names else None, _unique_names(model),
                         _add_signature(schema, model)) if s]
    if not steps:
        return Prepared(data, ())
    return Prepared(pack_model(model, len(data) * 2), tuple(steps))


def _densify_ops(model: Any) -> list[tuple[Any, Any]]:
    codes = model.operatorCodes or []

    def builtin(op: Any) -> int:
        return max(codes[op.opcodeIndex].builtinCode or 0, codes[op.opcodeIndex].deprecatedBuiltinCode or 0)

    return [(graph, op) for graph in model.subgraphs or [] for op in graph.operators or [] if builtin(op) == _DENSIFY]


def _fold_densify(model: Any, data: bytes) -> str | None:
    """DENSIFY(constant sparse weights) -> a dense constant of the same type, as LiteRT computes it.

    LiteRT's own DENSIFY kernel is the decoder (the sparse formats, CSR and block maps, are
    its to define): the model runs once on zeros with every tensor kept, and each DENSIFY
    output is read back. Weights do not depend on the input, so any input gives the same values.
    """
    found = _densify_ops(model)
    if not found:
        return None
    if any(graph is not model.subgraphs[0] for graph, _ in found):
        raise SourceModelError("DENSIFY outside the main subgraph: sparse weights there are not supported")

    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from edgeserve.console import capture_native_stderr, quiet_warnings

    # Without XNNPACK: it takes the sparse weights itself, and DENSIFY's output is never written.
    # "preserve_all_tensors is for debugging" (a warning): it is what is wanted here.
    with quiet_warnings(), capture_native_stderr():
        interpreter = Interpreter(model_content=data, experimental_preserve_all_tensors=True,
                                  experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        interpreter.allocate_tensors()
        for detail in interpreter.get_input_details():
            interpreter.set_tensor(detail["index"], np.zeros(detail["shape"], detail["dtype"]))
        interpreter.invoke()
    graph = model.subgraphs[0]
    schema = schema_module()
    for _, op in found:
        tensor = graph.tensors[op.outputs[0]]
        values = np.ascontiguousarray(interpreter.get_tensor(op.outputs[0]))
        buffer = schema.BufferT()
        buffer.data = np.frombuffer(values.tobytes(), np.uint8)
        model.buffers.append(buffer)
        tensor.buffer = len(model.buffers) - 1  # same type (fp16 here), now a constant
    drop = {id(op) for _, op in found}
    graph.operators = [op for op in graph.operators if id(op) not in drop]
    drop_unused(model)
    return f"folded {len(found)} DENSIFY op(s) of sparse constants into dense weights (LiteRT's own densify)"


# MediaPipe's TfLiteTransposeConvParams as the custom op's options: padding (TfLitePadding:
# 1 same, 2 valid), stride_width, stride_height, as int32.
_MEDIAPIPE_PADDING = {1: "SAME", 2: "VALID"}


def rewrite_mediapipe_ops(model: Any) -> str | None:
    """Convolution2DTransposeBias -> TRANSPOSE_CONV(output_shape, weights, input, bias)."""
    schema = schema_module()
    custom = {i for i, code in enumerate(model.operatorCodes or [])
              if code.customCode in (b"Convolution2DTransposeBias", "Convolution2DTransposeBias")}
    if not custom:
        return None
    rewritten = 0
    for graph in model.subgraphs or []:
        for op in graph.operators or []:
            if op.opcodeIndex not in custom:
                continue
            options = bytes(op.customOptions if op.customOptions is not None else b"")
            if len(options) < 12 or len(op.inputs) != 3 or len(op.outputs) != 1:
                raise SourceModelError("a Convolution2DTransposeBias op without its three inputs and 12 bytes of "
                                       "options (padding, stride_width, stride_height)")
            padding, stride_w, stride_h = np.frombuffer(options[:12], "<i4").tolist()
            if padding not in _MEDIAPIPE_PADDING or stride_w < 1 or stride_h < 1:
                raise SourceModelError(f"a Convolution2DTransposeBias op with padding {padding} and strides "
                                       f"{stride_w}x{stride_h}: not MediaPipe's documented options")
            out = graph.tensors[op.outputs[0]]
            shape = schema.TensorT()
            shape.shape, shape.type, shape.name = [4], 2, f"{_name(out)}_output_shape"  # int32
            buffer = schema.BufferT()
            buffer.data = np.frombuffer(np.asarray(out.shape, "<i4").tobytes(), np.uint8)
            model.buffers.append(buffer)
            shape.buffer = len(model.buffers) - 1
            graph.tensors.append(shape)
            x, weights, bias = (int(i) for i in op.inputs)
            op.inputs = [len(graph.tensors) - 1, weights, x, bias]
            op.opcodeIndex = builtin_code(model, _TRANSPOSE_CONV, version=3)
            op.builtinOptionsType = schema.BuiltinOptions.TransposeConvOptions
            op.builtinOptions = schema.TransposeConvOptionsT()
            op.builtinOptions.padding = getattr(schema.Padding, _MEDIAPIPE_PADDING[padding])
            op.builtinOptions.strideW, op.builtinOptions.strideH = stride_w, stride_h
            op.customOptions, op.customOptionsFormat = None, 0
            rewritten += 1
    return f"rewrote {rewritten} Convolution2DTransposeBias (MediaPipe custom op) as TRANSPOSE_CONV with its bias"


def _name(tensor: Any) -> str:
    return tensor.name.decode() if isinstance(tensor.name, bytes) else (tensor.name or "")


def runnable(data: bytes) -> tuple[bytes, tuple[str, ...]]:
    """The model as LiteRT, tf2onnx and the quantizer can read it, and what was changed:
    MediaPipe's custom ops rewritten as builtins (LiteRT cannot run the file otherwise), then
    DENSIFY folded by LiteRT (tf2onnx reads no sparse tensor). The bytes come back as given
    when nothing was needed."""
    if b"Convolution2DTransposeBias" not in data and not _densify_ops(unpack_model(data)):
        return data, ()
    model = unpack_model(data)
    steps = [rewrite_mediapipe_ops(model)]
    if steps[0]:  # LiteRT densifies below, so it must be able to run the model first
        data = pack_model(model, len(data) * 2)
        model = unpack_model(data)
    steps.append(_fold_densify(model, data))
    if not steps[1]:
        return data, tuple(s for s in steps if s)
    return pack_model(model, len(data) * 2), tuple(s for s in steps if s)


def _restore_op_codes(model: Any) -> str | None:
    fixed = 0
    for code in model.operatorCodes or []:
        deprecated = code.deprecatedBuiltinCode or 0
        if deprecated != _PLACEHOLDER_FOR_GREATER_OP_CODES and (code.builtinCode or 0) < deprecated:
            code.builtinCode = deprecated
            fixed += 1
    return f"copied deprecated_builtin_code into builtin_code for {fixed} operator code(s)" if fixed else None


def _buffer_array(model: Any, tensor: Any) -> np.ndarray | None:
    """A constant tensor's values, or None for an activation (no data in its buffer)."""
    if not tensor.buffer or tensor.buffer >= len(model.buffers):
        return None
    raw = model.buffers[tensor.buffer].data
    if raw is None or len(raw) == 0:
        return None
    dtype = {_FLOAT16: np.float16, _INT8: np.int8, _UINT8: np.uint8, _FLOAT32: np.float32}.get(tensor.type)
    if dtype is None:
        return None
    return np.frombuffer(np.asarray(raw, np.uint8).tobytes(), dtype).reshape(tuple(int(d) for d in (tensor.shape if tensor.shape is not None else ())))


def _dequantized(tensor: Any, values: np.ndarray) -> np.ndarray:
    if tensor.type == _FLOAT16:
        return values.astype(np.float32)
    q = tensor.quantization
    scale = np.asarray(q.scale, np.float64)
    zero = np.asarray(q.zeroPoint if q.zeroPoint is not None else [0] * len(scale), np.float64)
    if scale.size > 1:  # per channel along quantized_dimension
        shape = [1] * values.ndim
        shape[q.quantizedDimension] = scale.size
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    return ((values.astype(np.float64) - zero) * scale).astype(np.float32)


def _set_float32(model: Any, tensor: Any, values: np.ndarray) -> None:
    schema = schema_module()
    buffer = schema.BufferT()
    buffer.data = np.frombuffer(values.astype("<f4").tobytes(), np.uint8)
    model.buffers.append(buffer)
    tensor.buffer = len(model.buffers) - 1
    tensor.type = _FLOAT32
    tensor.quantization = None


def _widen_constant_weights(model: Any) -> str | None:
    """Fold DEQUANTIZE(constant) into a float32 constant; widen int8 weights of hybrid ops."""
    codes = model.operatorCodes or []
    folded = widened = 0
    for graph in model.subgraphs or []:
        kept = []
        for op in graph.operators or []:
            code = codes[op.opcodeIndex]
            if max(code.builtinCode or 0, code.deprecatedBuiltinCode or 0) == _DEQUANTIZE and len(op.inputs) == 1:
                source = graph.tensors[op.inputs[0]]
                values = _buffer_array(model, source)
                if values is not None and source.type in (_FLOAT16, _INT8, _UINT8):
                    _set_float32(model, graph.tensors[op.outputs[0]], _dequantized(source, values))
                    folded += 1
                    continue  # the DEQUANTIZE op goes; its output is now a constant
            kept.append(op)
        graph.operators = kept
        for op in kept:
            for index in op.inputs:
                if index < 0:
                    continue
                tensor = graph.tensors[index]
                q = tensor.quantization
                if tensor.type not in (_INT8, _UINT8) or q is None or q.scale is None or len(q.scale) == 0:
                    continue
                values = _buffer_array(model, tensor)
                if values is not None and _reads_float(graph, op):
                    _set_float32(model, tensor, _dequantized(tensor, values))
                    widened += 1
    if folded or widened:
        drop_unused(model)
    parts = []
    if folded:
        parts.append(f"folded {folded} DEQUANTIZE op(s) of fp16/int8 constants into float32 weights")
    if widened:
        parts.append(f"widened {widened} int8 weight tensor(s) of dynamic-range ops to float32")
    return "; ".join(parts) or None


def _flat_transpose_conv_bias(model: Any) -> str | None:
    """TRANSPOSE_CONV's bias as the 1-D [C] tensor its kernels document.

    litert-torch writes it [1, 1, 1, C] (PaddleOCR's text detector, through the ONNX reader),
    which the float kernel takes; ai-edge-quantizer then quantizes it per channel along
    dimension 0, of size 1, and LiteRT refuses that model ("num_scales must be 1 ... but got
    24"). The values do not change, only the shape.
    """
    codes = model.operatorCodes or []
    fixed = 0
    for graph in model.subgraphs or []:
        for op in graph.operators or []:
            code = codes[op.opcodeIndex]
            if max(code.builtinCode or 0, code.deprecatedBuiltinCode or 0) != _TRANSPOSE_CONV or len(op.inputs) < 4:
                continue
            if op.inputs[3] < 0:
                continue
            bias = graph.tensors[op.inputs[3]]
            shape = [int(d) for d in (bias.shape if bias.shape is not None else [])]
            if len(shape) > 1 and int(np.prod(shape)) == shape[-1]:
                bias.shape = [shape[-1]]
                if bias.shapeSignature is not None:
                    bias.shapeSignature = [shape[-1]]
                fixed += 1
    return f"reshaped {fixed} TRANSPOSE_CONV bias(es) to 1-D" if fixed else None


def _dropping_unused(model: Any, step: str | None) -> str | None:
    """``step``, after removing the tensors it left unread (LiteRT leaves a tensor no operator
    touches unallocated, and the quantizer's calibration reads every tensor)."""
    if step:
        drop_unused(model)
    return step


def drop_unused(model: Any) -> None:
    """Remove the tensors and buffers the folding left unreferenced (the fp16/int8 originals)."""
    for graph in model.subgraphs or []:
        used = sorted({i for op in graph.operators or [] for i in [*(op.inputs if op.inputs is not None else []),
                                                                  *(op.outputs if op.outputs is not None else []),
                                                                  *(op.intermediates if op.intermediates is not None
                                                                    else [])] if i >= 0}
                      | {int(i) for i in graph.inputs} | {int(i) for i in graph.outputs})
        remap = {old: new for new, old in enumerate(used)}
        graph.tensors = [graph.tensors[i] for i in used]
        for op in graph.operators or []:
            op.inputs = [remap[i] if i >= 0 else i for i in op.inputs]
            op.outputs = [remap[i] if i >= 0 else i for i in op.outputs]
            if op.intermediates is not None:
                op.intermediates = [remap[i] for i in op.intermediates]
        graph.inputs = [remap[int(i)] for i in graph.inputs]
        graph.outputs = [remap[int(i)] for i in graph.outputs]
        for signature in model.signatureDefs or []:
            if signature.subgraphIndex == model.subgraphs.index(graph):
                for entry in [*(signature.inputs or []), *(signature.outputs or [])]:
                    entry.tensorIndex = remap[entry.tensorIndex]
    # Buffer 0 is the schema's empty sentinel; metadata entries point at buffers too.
    used_buffers = {0} | {t.buffer for g in model.subgraphs or [] for t in g.tensors} | \
        {m.buffer for m in model.metadata or []}
    order = sorted(b for b in used_buffers if b < len(model.buffers))
    remap = {old: new for new, old in enumerate(order)}
    model.buffers = [model.buffers[i] for i in order]
    for graph in model.subgraphs or []:
        for tensor in graph.tensors:
            tensor.buffer = remap[tensor.buffer]
    for entry in model.metadata or []:
        entry.buffer = remap[entry.buffer]


def _reads_float(graph: Any, op: Any) -> bool:
    """True for a hybrid (dynamic-range) op: its first input is a float activation."""
    first = op.inputs[0] if op.inputs is not None and len(op.inputs) else -1
    return first >= 0 and graph.tensors[first].type == _FLOAT32


def _name_io(model: Any, io_names: tuple[list[str], list[str]]) -> str | None:
    graph = model.subgraphs[0]
    renamed = 0
    for indices, names in ((graph.inputs, io_names[0]), (graph.outputs, io_names[1])):
        if len(indices) != len(names):
            return None  # not the source's signature: leave the model's own names
        for index, name in zip(indices, names):
            tensor = graph.tensors[int(index)]
            current = tensor.name.decode() if isinstance(tensor.name, bytes) else tensor.name
            if name and current != name:
                for other in graph.tensors:  # a clash would be renamed away again by _unique_names
                    if other is not tensor and (other.name.decode() if isinstance(other.name, bytes)
                                                else other.name) == name:
                        other.name = f"{name}#inner"
                tensor.name = name
                renamed += 1
    for signature in model.signatureDefs or []:
        if signature.subgraphIndex == 0:
            for maps, indices, names in ((signature.inputs, graph.inputs, io_names[0]),
                                         (signature.outputs, graph.outputs, io_names[1])):
                by_index = {int(i): n for i, n in zip(indices, names)}
                for entry in maps or []:
                    entry.name = by_index.get(entry.tensorIndex, entry.name)
    return f"named {renamed} input/output tensor(s) as the source names them" if renamed else None


def _unique_names(model: Any) -> str | None:
    """Give every tensor of a subgraph its own name.

    The quantizer keys calibration ranges by tensor name: two tensors with one name share
    one range, which is wrong for both. litert-torch names tensors after the nn.Module that
    made them, so every op of a one-module model (an ONNX graph, a flat forward) gets the
    same name.
    """
    renamed = 0
    for graph in model.subgraphs or []:
        seen: set[str] = set()
        for index, tensor in enumerate(graph.tensors):
            name = tensor.name.decode() if isinstance(tensor.name, bytes) else (tensor.name or "")
            if name in seen or not name:
                name = f"{name or 'tensor'}#{index}"
                tensor.name = name
                renamed += 1
            seen.add(name)
    return f"renamed {renamed} tensor(s) that shared a name (the quantizer keys ranges by name)" if renamed else None


def _add_signature(schema: Any, model: Any) -> str | None:
    if model.signatureDefs:
        return None
    if not model.subgraphs:
        raise SourceModelError("the .tflite has no subgraph")
    graph = model.subgraphs[0]

    def maps(indices: Any, prefix: str) -> list[Any]:
        result, seen = [], set()
        for position, index in enumerate(indices):
            raw = graph.tensors[index].name
            name = (raw.decode() if isinstance(raw, bytes) else raw) or f"{prefix}_{position}"
            if name in seen:
                name = f"{prefix}_{position}"
            seen.add(name)
            entry = schema.TensorMapT()
            entry.name, entry.tensorIndex = name, int(index)
            result.append(entry)
        return result

    signature = schema.SignatureDefT()
    signature.signatureKey = SIGNATURE_KEY
    signature.subgraphIndex = 0
    signature.inputs = maps(graph.inputs, "input")
    signature.outputs = maps(graph.outputs, "output")
    model.signatureDefs = [signature]
    return f"added SignatureDef '{SIGNATURE_KEY}' over the {len(graph.inputs)} input(s) and {len(graph.outputs)} output(s)"
