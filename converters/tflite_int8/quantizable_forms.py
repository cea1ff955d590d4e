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
* ``RELU_0_TO_1(z)`` (a clamp to [0, 1]) is ``MUL(z, 6)`` with a fused RELU6, then ``MUL(., 1/6)``:
  the quantizer takes MUL with a fused activation, LiteRT, TFLM and mcu-c have int8 MUL, and
  the clamped product's range [0, 6] gives the same int8 step after the second MUL as a clamp
  to [0, 1] would. In float the two agree to rounding (6z/6).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgeserve.tflite_metadata import schema_module


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
    import warnings

    import flatbuffers
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from edgeserve.console import capture_native_stderr

    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    with warnings.catch_warnings(), capture_native_stderr():
        warnings.simplefilter("ignore")  # "preserve_all_tensors is for debugging": it is what is wanted here
        interpreter = Interpreter(model_content=bytes(builder.Output()), experimental_preserve_all_tensors=True,
                                  experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        interpreter.allocate_tensors()
        for detail in interpreter.get_input_details():
            interpreter.set_tensor(detail["index"], np.zeros(detail["shape"], detail["dtype"]))
        interpreter.invoke()
        return {i: np.array(interpreter.get_tensor(i)) for i in indices}


def relu_0_to_1_as_mul(model: Any) -> str | None:
    """Each RELU_0_TO_1 written as MUL by 6 with a fused RELU6, then MUL by 1/6."""
    from edgeserve.tflite_edit import add_tensor, new_operator, tensor_name

    schema = schema_module()
    rewritten = 0
    for graph in model.subgraphs or []:
        operators = []
        for op in graph.operators or []:
            code = model.operatorCodes[op.opcodeIndex]
            if max(code.builtinCode or 0, code.deprecatedBuiltinCode or 0) != schema.BuiltinOperator.RELU_0_TO_1:
                operators.append(op)
                continue
            z, out = op.inputs[0], op.outputs[0]
            name = tensor_name(graph, out)
            six = add_tensor(model, graph, f"{name}/six", [], schema.TensorType.FLOAT32, np.float32(6.0))
            sixth = add_tensor(model, graph, f"{name}/sixth", [], schema.TensorType.FLOAT32, np.float32(1.0 / 6.0))
            clamped = add_tensor(model, graph, f"{name}/relu6", list(graph.tensors[out].shape), schema.TensorType.FLOAT32)
            first = new_operator(model, schema.BuiltinOperator.MUL, 1, [z, six], [clamped], "MulOptions")
            first.builtinOptions.fusedActivationFunction = schema.ActivationFunctionType.RELU6
            second = new_operator(model, schema.BuiltinOperator.MUL, 1, [clamped, sixth], [out], "MulOptions")
            operators += [first, second]
            rewritten += 1
        graph.operators = operators
    return f"wrote {rewritten} RELU_0_TO_1 as MUL with a fused RELU6 and MUL by 1/6" if rewritten else None
