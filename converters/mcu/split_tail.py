"""A float tail split off for the microcontroller targets: each part of the joined output is
an int8 output of its own.

tflite-int8's float-tail remedy (converters/tflite_int8/float_tail.py) leaves a YOLOv8 head's
final CONCATENATION in float: boxes and class scores, each int8 with its own scale, are
dequantized and joined. A microcontroller build wants integer outputs, and the join is only a
copy: here the DEQUANTIZE and CONCATENATION operators go, and the int8 tensors they read become
the model's outputs (``output0`` of [1, 22, 2100] becomes ``output0_part0`` [1, 4, 2100] and
``output0_part1`` [1, 18, 2100], joined along axis 1 by whoever reads them). Every value is
the one the tflite-int8 artifact computes before its DEQUANTIZE: what its gate judged.
"""

from __future__ import annotations

from typing import Any

from edgeserve.tflite_metadata import schema_module, unpack_model


def split_float_tail(model_bytes: bytes) -> tuple[bytes, list[dict[str, Any]]]:
    """The model with each float output made by a CONCATENATION of DEQUANTIZEd integer tensors
    replaced by those tensors, and a record per split output (name, axis, the parts' names
    and shapes); the bytes come back unchanged, with [], when no output is such a join."""
    import flatbuffers

    schema = schema_module()
    model = unpack_model(model_bytes)
    graph = model.subgraphs[0]
    ops = list(graph.operators or [])

    def kind(op: Any) -> int:
        code = model.operatorCodes[op.opcodeIndex]
        return max(code.builtinCode or 0, code.deprecatedBuiltinCode or 0)

    producer = {t: i for i, op in enumerate(ops) for t in op.outputs}
    readers: dict[int, int] = {}
    for op in ops:
        for t in op.inputs:
            readers[t] = readers.get(t, 0) + 1
    removed: set[int] = set()
    outputs: list[int] = []
    renamed: dict[int, list[int]] = {}
    splits: list[dict[str, Any]] = []
    for out in graph.outputs:
        k = producer.get(out)
        join = ops[k] if k is not None else None
        parts = [producer.get(t) for t in join.inputs] if join is not None else []
        if (join is None or kind(join) != schema.BuiltinOperator.CONCATENATION or readers.get(out)
                or graph.tensors[out].type != schema.TensorType.FLOAT32
                or any(p is None or kind(ops[p]) != schema.BuiltinOperator.DEQUANTIZE
                       or readers.get(ops[p].outputs[0], 0) != 1 for p in parts)):
            outputs.append(out)
            continue
        name = graph.tensors[out].name.decode()
        sources = [ops[p].inputs[0] for p in parts]
        for i, t in enumerate(sources):
            graph.tensors[t].name = f"{name}_part{i}".encode()
        removed |= {k, *parts}
        outputs += sources
        renamed[out] = sources
        axis = int(join.builtinOptions.axis) % len(graph.tensors[out].shape)  # TFLite allows a negative axis
        splits.append({"output": name, "axis": axis,
                       "parts": [{"name": f"{name}_part{i}", "shape": [int(d) for d in graph.tensors[t].shape]}
                                 for i, t in enumerate(sources)]})
    if not splits:
        return model_bytes, []
    graph.operators = [op for i, op in enumerate(ops) if i not in removed]
    graph.outputs = outputs
    for signature in model.signatureDefs or []:
        if signature.subgraphIndex != 0:
            continue
        entries = []
        for entry in signature.outputs or []:
            if entry.tensorIndex not in renamed:
                entries.append(entry)
                continue
            for t in renamed[entry.tensorIndex]:
                part = schema.TensorMapT()
                part.name, part.tensorIndex = graph.tensors[t].name, t
                entries.append(part)
        signature.outputs = entries
    builder = flatbuffers.Builder(len(model_bytes) + 4096)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output()), splits
