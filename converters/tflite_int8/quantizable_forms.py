"""Float operators the quantizer cannot take, written as equal ones it can (part of float_prep).

Measured on onnx2tf's float models of PP-LCNet and PP-PicoDet (onnx2tf 2.6.9, ai-edge-quantizer
0.10): ONNX's HardSigmoid arrives as MUL, ADD and ``RELU_0_TO_1``, and a few ``SHAPE`` ops of
static tensors, with integer arithmetic on their results, are left in; the quantizer leaves
these float, so no full-integer model exists.

* ``SHAPE`` of a tensor whose shape is fixed is a constant, and so is the integer arithmetic
  on it (the shape of a flatten): LiteRT computes the values once and they replace the ops.
* Operators that only move values (``BROADCAST_TO``, ``RESHAPE``, ``CONCATENATION``, ...) on
  constants are constants too, folded while the result stays small (MAX_FOLDED_ELEMENTS):
  YOLOv8's anchor grid is Expand, Reshape, Concat and Transpose of constants (nudenet's
  exporter), which quantized stayed an int8 BROADCAST_TO that neither edgeserve's TFLM arena
  model nor mcu-c has, and RESHAPEs of constants mcu-c's planner cannot alias: the
  microcontroller targets refused the detector for operators that compute nothing at run time.
* ``REDUCE_MAX`` over a block of neighbouring axes is a ``MAX_POOL_2D`` whose window covers the
  block, between two RESHAPEs ([lead, block, 1, rest] and back): the quantizer 0.10 has no int8
  rule for REDUCE_MAX, so models that end a convolution stack in a global max pool (DNSMOS P.808
  and P.835 from the speechmos wheel, openwakeword's melspectrogram) had no full-integer model.
  A maximum is exact in float and keeps the int8 scale, so both forms give the same values.
* ``RELU_0_TO_1(z)`` (a clamp to [0, 1]) is ``MUL(z, 6)`` with a fused RELU6, then ``MUL(., 1/6)``:
  the quantizer takes MUL with a fused activation, LiteRT, TFLM and mcu-c have int8 MUL, and
  the clamped product's range [0, 6] gives the same int8 step after the second MUL as a clamp
  to [0, 1] would. In float the two agree to rounding (6z/6).
* ``DIV(c, SQRT(z))`` with a constant ``c`` (a layer norm's 1/sqrt(var + eps): ONNX Sqrt
  then Reciprocal, litert-torch's DIV of 1) is ``MUL(c, RSQRT(z))``, with any RESHAPEs between
  kept. The int8 DIV kernel stops the interpreter when the divisor's int8 value is its zero
  point (LiteRT div.cc), which a variance near zero in a calibrated range of [0, max] is:
  magika's classifier, whose one-hot input gives channels of zero variance, ended there.
  RSQRT's int8 kernel maps an input of zero to its largest output, as the clamped float
  value would be. In float the two agree to rounding.
* A variance computed as ``MEAN(x*x) - MEAN(x)^2`` (flax's LayerNorm, so every layer norm a
  JAX model exports through jax2tf) is ``MEAN((x - MEAN(x))^2)``: the same value in exact
  arithmetic, but int8 holds each of the two means to 1/255 of its own range, and their
  difference is far smaller than either (magika's classifier: the variance at -22 dB, top-1
  agreement with the float model 0 % on real files; 95 % after). The deviations
  ``x - MEAN(x)`` are what the normalisation computes anyway.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from edgeserve.tflite.metadata import pack_model, schema_module


#: The largest constant a folded value-moving operator may write: 64 K elements (64 KB in int8).
MAX_FOLDED_ELEMENTS = 65536


def fold_shape_arithmetic(model: Any) -> str | None:
    """Integer operators computed from constants alone (the shape arithmetic onnx2tf writes for a
    flatten: SHAPE, SLICE, CONCATENATION, EQUAL, SELECT), with each SHAPE of a fixed-shape tensor
    counted as a constant, and operators of any type that only move constant values into a
    result of at most MAX_FOLDED_ELEMENTS, replaced by the values LiteRT computes for them.
    Float arithmetic stays, and so does a large move: folding could turn a small constant into
    a large one."""
    schema = schema_module()
    ops = schema.BuiltinOperator
    moves = {ops.BROADCAST_TO, ops.RESHAPE, ops.CONCATENATION, ops.TRANSPOSE, ops.PACK, ops.EXPAND_DIMS,
             ops.SQUEEZE, ops.TILE, ops.SLICE, ops.STRIDED_SLICE, ops.GATHER}
    graph = model.subgraphs[0] if model.subgraphs else None
    if graph is None:
        return None
    integer = {schema.TensorType.INT32, schema.TensorType.INT64, schema.TensorType.BOOL}
    constant = {i for i, t in enumerate(graph.tensors)
                if t.buffer and model.buffers[t.buffer].data is not None and len(model.buffers[t.buffer].data)}
    fold = []
    for op in graph.operators or []:
        code = model.operatorCodes[op.opcodeIndex]
        inputs = [i for i in (op.inputs if op.inputs is not None else []) if i >= 0]
        outputs = list(op.outputs if op.outputs is not None else [])
        kind = max(code.builtinCode or 0, code.deprecatedBuiltinCode or 0)
        if kind == ops.SHAPE:
            computable = bool(inputs) and _fixed(graph.tensors[inputs[0]])
        else:
            computable = bool(inputs) and not code.customCode and all(i in constant for i in inputs)
        small_move = kind in moves and all(_fixed(graph.tensors[o]) and
                                           int(np.prod(graph.tensors[o].shape)) <= MAX_FOLDED_ELEMENTS for o in outputs)
        if computable and outputs and (small_move or all(graph.tensors[o].type in integer for o in outputs)):
            fold.append(op)
            constant.update(outputs)
    if not fold:
        return None
    values = _tensor_values(model, [o for op in fold for o in op.outputs])
    for index, value in values.items():
        buffer = schema.BufferT()
        buffer.data = np.frombuffer(np.ascontiguousarray(value).tobytes(), np.uint8)
        model.buffers.append(buffer)
        tensor = graph.tensors[index]
        tensor.buffer, tensor.shape, tensor.shapeSignature = len(model.buffers) - 1, list(value.shape), None
    folded = {id(op) for op in fold}
    graph.operators = [op for op in graph.operators if id(op) not in folded]
    return f"folded {len(fold)} op(s) computed from constants and fixed shapes into constants"


def _fixed(tensor: Any) -> bool:
    signature = tensor.shapeSignature if tensor.shapeSignature is not None and len(tensor.shapeSignature) else None
    return tensor.shape is not None and all(int(d) >= 0 for d in (signature if signature is not None else tensor.shape))


def _tensor_values(model: Any, indices: list[int]) -> dict[int, np.ndarray]:
    """The values of main-subgraph tensors ``indices`` as LiteRT computes them on zero inputs
    (they depend on no input), every intermediate kept."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from edgeserve.console import capture_native_stderr, quiet_warnings

    packed = pack_model(model, 1024)
    # "preserve_all_tensors is for debugging" (a warning): it is what is wanted here.
    with quiet_warnings(), capture_native_stderr():
        interpreter = Interpreter(model_content=packed, experimental_preserve_all_tensors=True,
                                  experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        interpreter.allocate_tensors()
        for detail in interpreter.get_input_details():
            interpreter.set_tensor(detail["index"], np.zeros(detail["shape"], detail["dtype"]))
        interpreter.invoke()
        return {i: np.array(interpreter.get_tensor(i)) for i in indices}


def _builtin(model: Any, op: Any) -> int:
    """The builtin operator code of ``op`` (newer codes live in ``builtinCode`` only)."""
    code = model.operatorCodes[op.opcodeIndex]
    return max(code.builtinCode or 0, code.deprecatedBuiltinCode or 0)


def _graph_outputs(graph: Any) -> set[int]:
    """The subgraph's output tensors as ints (the object API holds a numpy array, or None)."""
    return {int(i) for i in (graph.outputs if graph.outputs is not None else [])}


def _rewrite_each(model: Any, builtin: int, rewrite: Any) -> int:
    """Replace each ``builtin`` operator by the operators ``rewrite(graph, op)`` gives (None keeps
    it as it is); the number replaced."""
    rewritten = 0
    for graph in model.subgraphs or []:
        operators = []
        for op in graph.operators or []:
            written = rewrite(graph, op) if _builtin(model, op) == builtin else None
            operators += written if written is not None else [op]
            rewritten += written is not None
        graph.operators = operators
    return rewritten


def relu_0_to_1_as_mul(model: Any) -> str | None:
    """Each RELU_0_TO_1 written as MUL by 6 with a fused RELU6, then MUL by 1/6."""
    from edgeserve.tflite.edit import add_tensor, new_operator, tensor_name

    schema = schema_module()

    def rewrite(graph: Any, op: Any) -> list[Any]:
        z, out = op.inputs[0], op.outputs[0]
        name = tensor_name(graph, out)
        six = add_tensor(model, graph, f"{name}/six", [], schema.TensorType.FLOAT32, np.float32(6.0))
        sixth = add_tensor(model, graph, f"{name}/sixth", [], schema.TensorType.FLOAT32, np.float32(1.0 / 6.0))
        clamped = add_tensor(model, graph, f"{name}/relu6", list(graph.tensors[out].shape), schema.TensorType.FLOAT32)
        first = new_operator(model, schema.BuiltinOperator.MUL, 1, [z, six], [clamped], "MulOptions")
        first.builtinOptions.fusedActivationFunction = schema.ActivationFunctionType.RELU6
        second = new_operator(model, schema.BuiltinOperator.MUL, 1, [clamped, sixth], [out], "MulOptions")
        return [first, second]

    rewritten = _rewrite_each(model, schema.BuiltinOperator.RELU_0_TO_1, rewrite)
    return f"wrote {rewritten} RELU_0_TO_1 as MUL with a fused RELU6 and MUL by 1/6" if rewritten else None


def reduce_max_as_max_pool(model: Any) -> str | None:
    """Each REDUCE_MAX over neighbouring axes (constant axes, float input of known shape) written
    as RESHAPE to [lead, block, 1, rest], MAX_POOL_2D with a [block, 1] window, RESHAPE back."""
    from edgeserve.tflite.edit import add_tensor, new_operator, tensor_name

    schema = schema_module()
    f32, i32 = schema.TensorType.FLOAT32, schema.TensorType.INT32

    def rewrite(graph: Any, op: Any) -> list[Any] | None:
        form = _pooling_form(model, graph, op)
        if form is None:
            return None
        lead, block, rest = form
        x, out = op.inputs[0], op.outputs[0]
        name = tensor_name(graph, out)
        window = [lead, block, 1, rest]
        out_shape = [int(d) for d in graph.tensors[out].shape]
        as_window = add_tensor(model, graph, f"{name}/window_shape", [4], i32, np.array(window, np.int32))
        windowed = add_tensor(model, graph, f"{name}/windowed", window, f32)
        pooled = add_tensor(model, graph, f"{name}/pooled", [lead, 1, 1, rest], f32)
        back = add_tensor(model, graph, f"{name}/shape", [len(out_shape)], i32, np.array(out_shape, np.int32))
        first = new_operator(model, schema.BuiltinOperator.RESHAPE, 1, [x, as_window], [windowed], "ReshapeOptions")
        first.builtinOptions.newShape = window
        pool = new_operator(model, schema.BuiltinOperator.MAX_POOL_2D, 1, [windowed], [pooled], "Pool2DOptions")
        options = pool.builtinOptions
        options.padding, options.strideH, options.strideW = schema.Padding.VALID, 1, 1
        options.filterHeight, options.filterWidth = block, 1
        last = new_operator(model, schema.BuiltinOperator.RESHAPE, 1, [pooled, back], [out], "ReshapeOptions")
        last.builtinOptions.newShape = out_shape
        return [first, pool, last]

    rewritten = _rewrite_each(model, schema.BuiltinOperator.REDUCE_MAX, rewrite)
    return f"wrote {rewritten} REDUCE_MAX as MAX_POOL_2D between RESHAPEs" if rewritten else None


def divide_by_sqrt_as_rsqrt(model: Any) -> str | None:
    """Each DIV of a constant by SQRT(z) (RESHAPEs between allowed), where the SQRT and the
    RESHAPEs feed nothing else, written as RSQRT(z) and MUL by the constant."""
    from edgeserve.tflite.edit import new_operator

    schema = schema_module()
    rewritten = 0
    for graph in model.subgraphs or []:
        ops = list(graph.operators or [])
        kind = functools.partial(_builtin, model)
        producer = {out: op for op in ops for out in op.outputs}
        uses: dict[int, int] = {}
        for op in ops:
            for i in op.inputs:
                uses[i] = uses.get(i, 0) + 1
        outputs = _graph_outputs(graph)
        replaced: dict[int, Any] = {}  # id(op) -> its replacement
        for op in ops:
            if kind(op) != schema.BuiltinOperator.DIV or op.builtinOptions is None \
                    or op.builtinOptions.fusedActivationFunction != schema.ActivationFunctionType.NONE:
                continue
            numerator = graph.tensors[op.inputs[0]]
            data = model.buffers[numerator.buffer].data if numerator.buffer else None
            if data is None or not len(data):
                continue
            walk = op.inputs[1]
            while walk in producer and kind(producer[walk]) == schema.BuiltinOperator.RESHAPE \
                    and uses.get(walk) == 1 and walk not in outputs:
                walk = producer[walk].inputs[0]
            root = producer.get(walk)
            if root is None or kind(root) != schema.BuiltinOperator.SQRT or uses.get(walk) != 1 or walk in outputs:
                continue
            replaced[id(root)] = new_operator(model, schema.BuiltinOperator.RSQRT, 1, root.inputs, root.outputs)
            mul = new_operator(model, schema.BuiltinOperator.MUL, 1, op.inputs, op.outputs, "MulOptions")
            replaced[id(op)] = mul
            rewritten += 1
        graph.operators = [replaced.get(id(op), op) for op in ops]
    return f"wrote {rewritten} DIV by SQRT as MUL by RSQRT" if rewritten else None


def variance_as_mean_of_squares(model: Any) -> str | None:
    """Each SUB(MEAN(x*x), MEAN(x)*MEAN(x)) over the same axes written as MEAN(d*d) with
    d = x - MEAN(x) (MEAN(x) reshaped to keep its reduced axes when the MEAN drops them); the
    square of x and of its mean are removed when nothing else reads them."""
    from edgeserve.tflite.edit import add_tensor, new_operator, tensor_name

    schema = schema_module()
    op_type = schema.BuiltinOperator
    rewritten = 0
    for graph in model.subgraphs or []:
        ops = list(graph.operators or [])
        kind = functools.partial(_builtin, model)
        producer = {out: op for op in ops for out in op.outputs}

        def made_by(tensor: int, builtin: int) -> Any:
            op = producer.get(tensor)
            return op if op is not None and kind(op) == builtin else None

        def square_of(tensor: int) -> int | None:
            op = made_by(tensor, op_type.MUL)
            plain = op is not None and (op.builtinOptions is None or op.builtinOptions.fusedActivationFunction == 0)
            return op.inputs[0] if plain and op.inputs[0] == op.inputs[1] else None

        def axes_of(mean: Any) -> bytes | None:
            axes = graph.tensors[mean.inputs[1]]
            data = model.buffers[axes.buffer].data if axes.buffer else None
            return bytes(data) if data is not None and len(data) else None

        replaced: dict[int, list[Any]] = {}
        for op in ops:
            # A fused RELU is flax's max(variance, 0): a mean of squares needs none.
            if kind(op) != op_type.SUB or (op.builtinOptions is not None and op.builtinOptions.fusedActivationFunction
                                           not in (schema.ActivationFunctionType.NONE,
                                                   schema.ActivationFunctionType.RELU)):
                continue
            mean_sq, mean = made_by(op.inputs[0], op_type.MEAN), None
            x = square_of(mean_sq.inputs[0]) if mean_sq is not None else None
            m = square_of(op.inputs[1])
            mean = made_by(m, op_type.MEAN) if m is not None else None
            if x is None or mean is None or mean.inputs[0] != x or axes_of(mean) is None \
                    or axes_of(mean) != axes_of(mean_sq) \
                    or bool(mean.builtinOptions.keepDims) != bool(mean_sq.builtinOptions.keepDims):
                continue
            shape = [int(d) for d in graph.tensors[x].shape]
            if not shape or min(shape) < 1 or graph.tensors[x].type != schema.TensorType.FLOAT32:
                continue
            name = tensor_name(graph, op.outputs[0])
            steps, centre = [], m
            if not mean.builtinOptions.keepDims:  # MEAN(x) back to x's rank, its reduced axes 1
                kept = list(shape)
                for a in np.frombuffer(axes_of(mean), np.int32 if graph.tensors[mean.inputs[1]].type ==
                                       schema.TensorType.INT32 else np.int64):
                    kept[int(a) % len(shape)] = 1
                new_shape = add_tensor(model, graph, f"{name}/kept_shape", [len(kept)], schema.TensorType.INT32,
                                       np.array(kept, np.int32))
                centre = add_tensor(model, graph, f"{name}/mean_kept", kept, schema.TensorType.FLOAT32)
                reshape = new_operator(model, op_type.RESHAPE, 1, [m, new_shape], [centre], "ReshapeOptions")
                reshape.builtinOptions.newShape = kept
                steps.append(reshape)
            deviation = add_tensor(model, graph, f"{name}/deviation", shape, schema.TensorType.FLOAT32)
            squared = add_tensor(model, graph, f"{name}/deviation_squared", shape, schema.TensorType.FLOAT32)
            steps.append(new_operator(model, op_type.SUB, 1, [x, centre], [deviation], "SubOptions"))
            steps.append(new_operator(model, op_type.MUL, 1, [deviation, deviation], [squared], "MulOptions"))
            variance = new_operator(model, op_type.MEAN, 1, [squared, mean_sq.inputs[1]], op.outputs, "ReducerOptions")
            variance.builtinOptions.keepDims = mean_sq.builtinOptions.keepDims
            replaced[id(op)] = [*steps, variance]
            rewritten += 1
        if not replaced:
            continue
        ops = [new for op in ops for new in replaced.get(id(op), [op])]
        graph.operators = _without_unread(ops, _graph_outputs(graph))
    return f"wrote {rewritten} variance(s) E[x^2] - E[x]^2 as E[(x - E[x])^2]" if rewritten else None


def _without_unread(ops: list[Any], outputs: set[int]) -> list[Any]:
    """``ops`` without those whose outputs nothing reads (the squares a rewrite left), repeated
    until none is left."""
    while True:
        read = {i for op in ops for i in op.inputs} | outputs
        kept = [op for op in ops if any(o in read for o in op.outputs)]
        if len(kept) == len(ops):
            return kept
        ops = kept


def _pooling_form(model: Any, graph: Any, op: Any) -> tuple[int, int, int] | None:
    """(lead, block, rest): the element counts before, inside and after the reduced axes, when
    they are neighbours given as a constant; None otherwise."""
    schema = schema_module()
    x, axes = graph.tensors[op.inputs[0]], graph.tensors[op.inputs[1]]
    shape = [int(d) for d in x.shape] if x.shape is not None else []
    data = model.buffers[axes.buffer].data if axes.buffer else None
    if x.type != schema.TensorType.FLOAT32 or not shape or min(shape) < 1 or data is None or not len(data):
        return None
    dtype = np.int64 if axes.type == schema.TensorType.INT64 else np.int32
    reduced = sorted({int(a) % len(shape) for a in np.frombuffer(bytes(data), dtype)})
    if not reduced or reduced != list(range(reduced[0], reduced[-1] + 1)):
        return None
    return (int(np.prod(shape[:reduced[0]])), int(np.prod(shape[reduced[0]:reduced[-1] + 1])),
            int(np.prod(shape[reduced[-1] + 1:])))
