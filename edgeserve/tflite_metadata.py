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


def add_metadata(model: bytes, payload: dict[str, Any]) -> bytes:
    """Return ``model`` with ``payload`` (JSON) stored under the metadata name "edgeserve"."""
    import flatbuffers

    schema = schema_module()
    obj = schema.ModelT.InitFromPackedBuf(bytearray(model), 0)
    buffer = schema.BufferT()
    buffer.data = list(json.dumps(payload, sort_keys=True).encode())
    obj.buffers = list(obj.buffers or []) + [buffer]
    entry = schema.MetadataT()
    entry.name = METADATA_NAME
    entry.buffer = len(obj.buffers) - 1
    obj.metadata = [m for m in (obj.metadata or []) if m.name not in (METADATA_NAME, METADATA_NAME.encode())]
    obj.metadata.append(entry)
    builder = flatbuffers.Builder(len(model) + 4096)
    builder.Finish(obj.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())
