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

from edgeserve.errors import InputError
from edgeserve.tflite.metadata import pack_model, schema_module, unpack_model


def split_float_tail(model_bytes: bytes) -> tuple[bytes, list[dict[str, Any]]]:
    """The model with each float output made by a CONCATENATION of DEQUANTIZEd integer tensors
    replaced by those tensors, and a record per split output (name, axis, the parts' names
    and shapes); the bytes come back unchanged, with [], when no output is such a join."""
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
            _refuse_a_tail_of_several_joins(schema, graph, ops, producer, kind, out)
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
    return pack_model(model, len(model_bytes)), splits


def _refuse_a_tail_of_several_joins(schema: Any, graph: Any, ops: list[Any], producer: dict[int, int],
                                    kind: Any, out: int) -> None:
    """One error line when the float output ``out`` is a float tail of several joins (a YOLOX or
    YOLOv5 head: each level joined along the channels, the levels along the anchors), which has
    no split into integer outputs here; anything else is left to the targets' own checks."""
    moves = {schema.BuiltinOperator.CONCATENATION, schema.BuiltinOperator.RESHAPE, schema.BuiltinOperator.TRANSPOSE,
             schema.BuiltinOperator.SQUEEZE, schema.BuiltinOperator.EXPAND_DIMS}
    if graph.tensors[out].type != schema.TensorType.FLOAT32:
        return
    seen: set[int] = set()
    pending, joins, parts = [out], 0, 0
    while pending:
        k = producer.get(pending.pop())
        if k is None:
            return  # a float model input: not a tail
        if k in seen:
            continue
        seen.add(k)
        op_kind = kind(ops[k])
        if op_kind == schema.BuiltinOperator.DEQUANTIZE:
            parts += 1
            continue
        if op_kind not in moves:
            return
        joins += op_kind == schema.BuiltinOperator.CONCATENATION
        # Every input of a join is data; a layout move's first input is (the others: shape, perm).
        pending += list(ops[k].inputs) if op_kind == schema.BuiltinOperator.CONCATENATION else [ops[k].inputs[0]]
    if joins > 1 and parts:
        raise InputError(
            f"output '{graph.tensors[out].name.decode()}' of tflite-int8's artifact is a float tail of {joins} "
            f"concatenations over {parts} int8 parts (each feature level joined along the channels, then the levels "
            "along the anchors, as YOLOX and YOLOv5 heads are); the microcontroller targets split off only a tail that "
            "is one final CONCATENATION. Export the model with its boxes and scores as separate outputs, or accept the "
            "all-int8 model with a lower --min-sqnr")

