"""uint8 model inputs and outputs around a model quantized with int8 ones.

ai-edge-quantizer makes int8 (or, with its INPUT/OUTPUT ops left unquantized, float) model
I/O. For ``--io uint8`` edgeserve adds what TensorFlow's converter adds for
``inference_input_type=tf.uint8``: a QUANTIZE op from a uint8 input (same scale, zero
point + 128) to the int8 tensor, and one from the int8 output to a uint8 output. The values
are the same numbers shifted by 128, so nothing is lost; LiteRT and TFLM both run that
requantization.
"""

from __future__ import annotations

from typing import Any

from edgeserve.tflite.metadata import pack_model, schema_module, unpack_model

_UINT8, _INT8 = 3, 9
_QUANTIZE = 114


def uint8_io(model_bytes: bytes) -> bytes:
    """The model with uint8 graph inputs and outputs (each int8 one requantized by a QUANTIZE op)."""
    import copy

    schema = schema_module()
    model = unpack_model(model_bytes)
    opcode = _quantize_opcode(schema, model)
    graph = model.subgraphs[0]

    def uint8_twin(index: int, suffix: str) -> int:
        original = graph.tensors[index]
        twin = copy.deepcopy(original)
        twin.type = _UINT8
        twin.buffer = 0
        twin.quantization.zeroPoint = [int(z) + 128 for z in original.quantization.zeroPoint]
        name = original.name.decode() if isinstance(original.name, bytes) else original.name
        twin.name, original.name = name, f"{name}_{suffix}"  # the model's I/O keeps its name
        graph.tensors.append(twin)
        return len(graph.tensors) - 1

    def quantize_op(source: int, target: int) -> Any:
        op = schema.OperatorT()
        op.opcodeIndex, op.inputs, op.outputs = opcode, [source], [target]
        return op

    remap: dict[int, int] = {}
    front, back = [], []
    for index in [int(i) for i in graph.inputs]:
        if graph.tensors[index].type == _INT8:
            remap[index] = uint8_twin(index, "int8")
            front.append(quantize_op(remap[index], index))
    for index in [int(i) for i in graph.outputs]:
        if graph.tensors[index].type == _INT8:
            remap[index] = uint8_twin(index, "int8")
            back.append(quantize_op(index, remap[index]))
    graph.operators = front + list(graph.operators) + back
    graph.inputs = [remap.get(int(i), int(i)) for i in graph.inputs]
    graph.outputs = [remap.get(int(i), int(i)) for i in graph.outputs]
    for signature in model.signatureDefs or []:
        for entry in [*(signature.inputs or []), *(signature.outputs or [])]:
            entry.tensorIndex = remap.get(entry.tensorIndex, entry.tensorIndex)
    return pack_model(model, len(model_bytes))


def _quantize_opcode(schema: Any, model: Any) -> int:
    for i, code in enumerate(model.operatorCodes or []):
        if max(code.builtinCode or 0, code.deprecatedBuiltinCode or 0) == _QUANTIZE:
            # version 2 reads int8/uint8; keep the higher of the two the model already asks for
            code.version = max(code.version or 1, 2)
            return i
    code = schema.OperatorCodeT()
    code.builtinCode, code.deprecatedBuiltinCode, code.version = _QUANTIZE, _QUANTIZE, 2
    model.operatorCodes = list(model.operatorCodes or []) + [code]
    return len(model.operatorCodes) - 1
