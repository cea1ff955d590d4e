"""Stamp provenance into a .tflite file's own metadata table (name "edgeserve").

A .tflite copied away from its manifest still says which edgeserve, framework and
calibration set made it. Uses the flatbuffer object API that ships with ai-edge-litert
(or TensorFlow) as ``schema_py_generated``.
"""

from __future__ import annotations

import importlib
import json
from typing import Any

from edgeserve.errors import MissingDependencyError

METADATA_NAME = "edgeserve"


def schema_module() -> Any:
    """The TFLite flatbuffer object API (``ModelT`` ...) from ai-edge-litert or TensorFlow."""
    for name in ("ai_edge_litert.schema_py_generated", "tensorflow.lite.python.schema_py_generated"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise MissingDependencyError("ai-edge-litert", "tflite", "writing .tflite metadata")


def unpack_model(data: bytes | bytearray) -> Any:
    """The flatbuffer object API's ``ModelT`` of ``data``, with every buffer's bytes inline.

    Converters write large weights after the flatbuffer and point at them with a buffer's
    ``offset`` and ``size`` (litert-torch does so for a 10 MB MobileNet). The object API keeps
    only those two numbers, so a model packed again from it would lose the weights: here they
    are read into ``data`` and the offset cleared (fine below the 2 GB flatbuffer limit).
    """
    import numpy as np

    schema = schema_module()
    model = schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
    for buffer in model.buffers or []:
        if (buffer.offset or 0) > 1 and buffer.size:
            buffer.data = np.frombuffer(bytes(data[buffer.offset: buffer.offset + buffer.size]), np.uint8)
            buffer.offset, buffer.size = 0, 0
    return model


def pack_model(model: Any, size_hint: int = 0) -> bytes:
    """The bytes of an unpacked ``ModelT`` (``unpack_model``), as a .tflite file."""
    import flatbuffers

    builder = flatbuffers.Builder(size_hint + 4096)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def add_metadata(model: bytes, payload: dict[str, Any]) -> bytes:
    """Return ``model`` with ``payload`` (JSON) stored under the metadata name "edgeserve"."""
    schema = schema_module()
    obj = unpack_model(model)
    # metadata_buffer (a deprecated list of buffers holding metadata) can outlive the buffers
    # it names: ai-edge-quantizer copies it from the float model and renumbers the buffers
    # (measured on MediaPipe's face detector: [86, 87] over 86 buffers). An index past the
    # end makes the file invalid, so only entries naming a real buffer are kept.
    count = len(obj.buffers or [])
    if getattr(obj, "metadataBuffer", None) is not None:
        obj.metadataBuffer = [i for i in obj.metadataBuffer if 0 <= int(i) < count] or None
    buffer = schema.BufferT()
    buffer.data = list(json.dumps(payload, sort_keys=True).encode())
    obj.buffers = list(obj.buffers or []) + [buffer]
    entry = schema.MetadataT()
    entry.name = METADATA_NAME
    entry.buffer = len(obj.buffers) - 1
    obj.metadata = [m for m in (obj.metadata or []) if m.name not in (METADATA_NAME, METADATA_NAME.encode())]
    obj.metadata.append(entry)
    return pack_model(obj, len(model))
