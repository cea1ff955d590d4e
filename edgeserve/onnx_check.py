"""Check an .onnx file before onnxruntime parses it.

The protobuf wire format is walked first with no dependency (truncation and corruption are
reported with the message path and byte offset); with the ``onnx`` package installed the
model is then checked with ``onnx.checker`` and strict shape inference, and external data
files must lie beside the model.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, NoReturn

from edgeserve.errors import ModelFileError, model_file_guard

__all__ = ["SESSION_CONFIG", "validate_onnx"]

log = logging.getLogger(__name__)

# Session settings for every ONNX Runtime session edgeserve opens. ONNX Runtime's CPU optimizer
# fuses an int8 weight's DequantizeLinear and its MatMul into MatMulNBits, which by default
# (accuracy level 4) rounds the activations to int8 inside: an A16W8 model (onnx-int8's int16
# remedy) then computes its MatMuls with int8 activations, measured 47.5 dB where the model as
# written gives 88.7 dB. Level 1 keeps them float; existing MatMulNBits nodes keep their own level.
SESSION_CONFIG = {"session.qdq_matmulnbits_accuracy_level": "1"}


def validate_onnx(data: bytes) -> None:
    """Check an .onnx file before onnxruntime parses it.

    The protobuf wire format is always walked first (no dependency), so truncation and
    corruption are reported with the message path and byte offset. When the ``onnx`` package
    is installed the model is then parsed and checked with ``onnx.checker`` including strict
    shape inference, which is what keeps onnxruntime's kernels away from inconsistent shapes
    and types; without it only the wire format is checked.

    Raises:
        ModelFileError: The file is not a well-formed ONNX model; the message says where.
    """
    if not isinstance(data, bytes):
        data = bytes(data)
    from edgeserve.file_kinds import describe

    kind = describe(data[:16])
    if kind is not None:  # a renamed or mistaken file: say what it is, not where protobuf broke
        raise ModelFileError(f"model: not an ONNX model: the file starts like {kind}")
    with model_file_guard("walking the protobuf"):
        fields = _Protobuf(data).message(0, len(data), "ModelProto", "model", 0)
    for number, name in ((1, "ir_version"), (7, "graph")):
        if number not in fields:
            raise ModelFileError(f"model: ModelProto has no {name} (field {number}): "
                                 "not an ONNX model")
    try:
        import onnx
    except ImportError:
        log.debug("onnx is not installed: checked the ONNX wire format only")
        return
    try:
        model = onnx.load_model_from_string(data)
    except Exception as exc:  # protobuf's DecodeError and friends: any failure means "not ONNX"
        raise ModelFileError(f"model: not a valid ONNX protobuf ({type(exc).__name__}: {exc})"
                             ) from exc
    _check_onnx_external_data(model)
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as exc:  # ValidationError, InferenceError, or a C++ error as RuntimeError
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelFileError(f"model: onnx.checker rejected it: {first}") from exc


def read_onnx_file(path: Path) -> bytes:
    """An .onnx file's bytes with any external tensor data read in, from the model's own folder only.

    ONNX files over 2 GB (and some exporters' smaller ones) keep weights in side files named by
    a relative ``location``. A location that is absolute, climbs out with ``..`` or resolves
    through a link to outside the model's folder is refused: a model file must not make
    edgeserve read other files. The result is self-contained, as :func:`validate_onnx` wants.
    """
    return with_external_data(path, path.read_bytes())


def with_external_data(path: Path, data: bytes) -> bytes:
    """``data`` (the bytes of the .onnx file at ``path``) with its external tensor data read
    in, under the rules of :func:`read_onnx_file`; ``data`` itself when it has none."""
    try:
        import onnx
    except ImportError:
        return data
    try:
        model = onnx.load_model_from_string(data)
    except Exception:  # not ONNX: validate_onnx says where and why
        return data
    external = [t for t in _initializers(model) if t.data_location == onnx.TensorProto.EXTERNAL]
    if not external:
        return data
    folder = path.parent.resolve()
    for tensor in external:
        location = next((e.value for e in tensor.external_data if e.key == "location"), "")
        target = (folder / location).resolve()
        if not location or Path(location).is_absolute() or folder not in target.parents:
            raise ModelFileError(f"{path.name}: initializer '{tensor.name}' keeps its data at {location!r}, outside "
                                 f"the model's folder {folder}; external data is read from beside the model only")
        if not target.is_file():
            raise ModelFileError(f"{path.name}: initializer '{tensor.name}' keeps its data in {location!r}, which is "
                                 f"not in {folder}")
        _check_extent(path, tensor, location, target.stat().st_size)
    with model_file_guard("reading external data"):
        onnx.external_data_helper.load_external_data_for_model(model, str(folder))
    return model.SerializeToString()


def _check_extent(path: Path, tensor: Any, location: str, size: int) -> None:
    """The offset and length a tensor names lie within its data file (onnx would raise, or read short)."""
    fields = {e.key: e.value for e in tensor.external_data}
    try:
        offset, length = int(fields.get("offset", 0)), int(fields.get("length", size - int(fields.get("offset", 0))))
    except ValueError:
        raise ModelFileError(f"{path.name}: initializer '{tensor.name}' gives an offset or length that is not a whole "
                             f"number ({fields.get('offset')!r}, {fields.get('length')!r})") from None
    if 0 <= offset <= size and 0 <= length and offset + length <= size:
        return
    span = f"from byte {offset:,}" if offset < 0 or offset > size or length < 0 else \
        f"bytes {offset:,} to {offset + length:,}"
    raise ModelFileError(f"{path.name}: initializer '{tensor.name}' reads {span} of {location!r}, which holds "
                         f"{size:,} bytes: the data file is truncated or the model damaged")


def _initializers(model: Any) -> list[Any]:
    found, graphs = [], [model.graph]
    while graphs:
        graph = graphs.pop()
        found.extend(graph.initializer)
        for node in graph.node:
            graphs.extend(a.g for a in node.attribute if a.HasField("g"))
            for a in node.attribute:
                graphs.extend(a.graphs)
    return found


def _check_onnx_external_data(model: Any) -> None:
    """Bytes carry no directory to resolve external data in; a path there is never safe."""
    import onnx

    graphs = [model.graph]
    while graphs:
        graph = graphs.pop()
        for tensor in graph.initializer:
            if tensor.data_location == onnx.TensorProto.EXTERNAL:
                raise ModelFileError(f"model: initializer '{tensor.name}' keeps its data in an "
                                     "external file; load such models from their directory")
        for node in graph.node:
            graphs.extend(a.g for a in node.attribute if a.HasField("g"))
            for a in node.attribute:
                graphs.extend(a.graphs)


_WIRE_VARINT, _WIRE_FIXED64, _WIRE_BYTES, _WIRE_FIXED32 = 0, 1, 2, 5
_PROTOBUF_DEPTH = 100  # protobuf's default recursion limit
#: Message-typed fields of onnx.proto (number: (name, message)); other fields are scalars,
#: strings or bytes and are only bounds-checked. Checked against onnx's descriptors in tests.
_ONNX_MESSAGES: dict[str, dict[int, tuple[str, str]]] = {
    "ModelProto": {8: ("opset_import", "OperatorSetIdProto"), 7: ("graph", "GraphProto"),
                   20: ("training_info", "TrainingInfoProto"), 25: ("functions", "FunctionProto")},
    "GraphProto": {1: ("node", "NodeProto"), 5: ("initializer", "TensorProto"),
                   15: ("sparse_initializer", "SparseTensorProto"), 11: ("input", "ValueInfoProto"),
                   12: ("output", "ValueInfoProto"), 13: ("value_info", "ValueInfoProto"),
                   14: ("quantization_annotation", "TensorAnnotation")},
    "NodeProto": {5: ("attribute", "AttributeProto")},
    "AttributeProto": {5: ("t", "TensorProto"), 6: ("g", "GraphProto"),
                       22: ("sparse_tensor", "SparseTensorProto"), 14: ("tp", "TypeProto"),
                       10: ("tensors", "TensorProto"), 11: ("graphs", "GraphProto"),
                       23: ("sparse_tensors", "SparseTensorProto"),
                       15: ("type_protos", "TypeProto")},
    "TensorProto": {3: ("segment", "TensorProto.Segment")},
    "SparseTensorProto": {1: ("values", "TensorProto"), 2: ("indices", "TensorProto")},
    "TypeProto": {1: ("tensor_type", "TypeProto.Tensor"),
                  4: ("sequence_type", "TypeProto.Sequence"), 5: ("map_type", "TypeProto.Map"),
                  9: ("optional_type", "TypeProto.Optional"),
                  8: ("sparse_tensor_type", "TypeProto.SparseTensor"),
                  7: ("opaque_type", "TypeProto.Opaque")},
    "TypeProto.Tensor": {2: ("shape", "TensorShapeProto")},
    "TensorShapeProto": {1: ("dim", "TensorShapeProto.Dimension")},
    "TypeProto.Sequence": {1: ("elem_type", "TypeProto")},
    "TypeProto.Map": {2: ("value_type", "TypeProto")},
    "TypeProto.Optional": {1: ("elem_type", "TypeProto")},
    "TypeProto.SparseTensor": {2: ("shape", "TensorShapeProto")},
    "ValueInfoProto": {2: ("type", "TypeProto")},
    "TrainingInfoProto": {1: ("initialization", "GraphProto"), 2: ("algorithm", "GraphProto")},
    "FunctionProto": {11: ("attribute_proto", "AttributeProto"), 7: ("node", "NodeProto"),
                      9: ("opset_import", "OperatorSetIdProto"),
                      12: ("value_info", "ValueInfoProto")},
}


class _Protobuf:
    """A protobuf wire-format walk: every tag, varint and length checked before use."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def fail(self, path: str, pos: int, problem: str) -> NoReturn:
        raise ModelFileError(f"{path} at byte {pos}: {problem} (file is {len(self.data)} bytes)")

    def varint(self, pos: int, end: int, path: str) -> tuple[int, int]:
        value = shift = 0
        for i in range(10):
            if pos + i >= end:
                self.fail(path, pos, "varint runs past the end of its message")
            byte = self.data[pos + i]
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value, pos + i + 1
        self.fail(path, pos, "varint longer than 10 bytes")

    def message(self, pos: int, end: int, kind: str, path: str, depth: int) -> set[int]:
        """Walk the message in ``data[pos:end]``; return the field numbers seen."""
        if depth > _PROTOBUF_DEPTH:
            self.fail(path, pos, f"messages nest deeper than {_PROTOBUF_DEPTH} levels")
        known = _ONNX_MESSAGES.get(kind, {})
        seen: dict[int, int] = {}
        while pos < end:
            start = pos
            tag, pos = self.varint(pos, end, path)
            number, wire = tag >> 3, tag & 7
            if number == 0 or number >= 1 << 29:
                self.fail(path, start, f"invalid field number {number}")
            index = seen.get(number, 0)
            seen[number] = index + 1
            if wire == _WIRE_VARINT:
                _, pos = self.varint(pos, end, path)
            elif wire in (_WIRE_FIXED64, _WIRE_FIXED32):
                pos += 8 if wire == _WIRE_FIXED64 else 4
                if pos > end:
                    self.fail(path, start, f"field {number} runs past the end of its message")
            elif wire == _WIRE_BYTES:
                length, pos = self.varint(pos, end, path)
                if length > end - pos:
                    self.fail(path, start, f"field {number} of {length} bytes runs past the end "
                              f"of its message ({end - pos} bytes left)")
                if number in known:
                    name, sub = known[number]
                    self.message(pos, pos + length, sub, f"{path}.{name}[{index}]", depth + 1)
                pos += length
            else:  # 3 and 4 are the deprecated groups onnx never uses; 6 and 7 do not exist
                self.fail(path, start, f"field {number} has invalid wire type {wire}")
        return set(seen)
