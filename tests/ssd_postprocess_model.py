"""A model built in the test whose only operator is LiteRT's own TFLite_Detection_PostProcess
(box encodings and class scores in, anchors as a constant), written with the flatbuffer
object API; its custom options are a flexbuffer map, as TensorFlow's exporter writes them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

OPTIONS = {"max_detections": 10, "max_classes_per_detection": 1, "detections_per_class": 100,
           "use_regular_nms": False, "nms_score_threshold": 0.3, "nms_iou_threshold": 0.5,
           "y_scale": 10.0, "x_scale": 10.0, "h_scale": 5.0, "w_scale": 5.0}


def build(path: Path, anchors: np.ndarray, classes: int) -> Path:
    import flatbuffers
    from flatbuffers import flexbuffers

    from edgeserve.tflite.metadata import schema_module

    schema = schema_module()
    fbb = flexbuffers.Builder()
    with fbb.Map():
        for key, value in {**OPTIONS, "num_classes": classes}.items():
            (fbb.Bool if isinstance(value, bool) else fbb.Float if isinstance(value, float) else fbb.Int)(key, value)
    n = len(anchors)

    def tensor(name: str, shape: tuple[int, ...], buffer: int) -> object:
        t = schema.TensorT()
        t.name, t.shape, t.type, t.buffer = name, list(shape), schema.TensorType.FLOAT32, buffer
        return t

    buffers = [schema.BufferT() for _ in range(8)]
    buffers[3].data = list(np.asarray(anchors, np.float32).tobytes())
    m = OPTIONS["max_detections"]
    op = schema.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs, op.customOptions = 0, [0, 1, 2], [3, 4, 5, 6], list(fbb.Finish())
    graph = schema.SubGraphT()
    graph.tensors = [tensor("box_encodings", (1, n, 4), 1), tensor("class_predictions", (1, n, classes + 1), 2),
                     tensor("anchors", (n, 4), 3), tensor("boxes", (1, m, 4), 4), tensor("classes", (1, m), 5),
                     tensor("scores", (1, m), 6), tensor("count", (1,), 7)]
    graph.inputs, graph.outputs, graph.operators, graph.name = [0, 1], [3, 4, 5, 6], [op], "main"
    code = schema.OperatorCodeT()
    code.builtinCode, code.deprecatedBuiltinCode = schema.BuiltinOperator.CUSTOM, 32
    code.customCode, code.version = "TFLite_Detection_PostProcess", 1
    model = schema.ModelT()
    model.version, model.operatorCodes, model.subgraphs, model.buffers = 3, [code], [graph], buffers
    builder = flatbuffers.Builder(0)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    path.write_bytes(bytes(builder.Output()))
    return path
