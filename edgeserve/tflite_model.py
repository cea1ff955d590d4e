"""Read TensorFlow Lite model files without TensorFlow.

A bounds-checked, pure-Python (stdlib + numpy) reader of the TFLite flatbuffer format
(``tensorflow/lite/schema/schema.fbs``, schema version 3). It exposes what edgeserve needs to
inspect a model on a device and to plan a TFLM tensor arena offline: operators in execution
order with their versions, tensors with shapes, dtypes, byte sizes and quantization, and the
constant data.

A truncated or corrupted file raises :class:`~edgeserve.errors.ModelFileError` naming the
structure and the byte offset at fault; no other exception escapes parsing. Every offset,
length and index is checked as it is read, before it is used.

Example:
    >>> model = TfliteModel.from_file("kws_ref_model.tflite")  # doctest: +SKIP
    >>> model.subgraphs[0].tensors[0].quantization.scale  # doctest: +SKIP
    (0.5847029089927673,)
"""

from __future__ import annotations

import math
import os
import struct
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple, NoReturn

import numpy as np

from edgeserve.errors import ModelFileError

FILE_IDENTIFIER = b"TFL3"
SCHEMA_VERSION = 3

#: BuiltinOperator names, indexed by code (schema.fbs as of LiteRT 2.3).
BUILTIN_OPS: tuple[str, ...] = tuple("""
ADD AVERAGE_POOL_2D CONCATENATION CONV_2D DEPTHWISE_CONV_2D DEPTH_TO_SPACE DEQUANTIZE
EMBEDDING_LOOKUP FLOOR FULLY_CONNECTED HASHTABLE_LOOKUP L2_NORMALIZATION L2_POOL_2D
LOCAL_RESPONSE_NORMALIZATION LOGISTIC LSH_PROJECTION LSTM MAX_POOL_2D MUL RELU RELU_N1_TO_1
RELU6 RESHAPE RESIZE_BILINEAR RNN SOFTMAX SPACE_TO_DEPTH SVDF TANH CONCAT_EMBEDDINGS
SKIP_GRAM CALL CUSTOM EMBEDDING_LOOKUP_SPARSE PAD UNIDIRECTIONAL_SEQUENCE_RNN GATHER
BATCH_TO_SPACE_ND SPACE_TO_BATCH_ND TRANSPOSE MEAN SUB DIV SQUEEZE
UNIDIRECTIONAL_SEQUENCE_LSTM STRIDED_SLICE BIDIRECTIONAL_SEQUENCE_RNN EXP TOPK_V2 SPLIT
LOG_SOFTMAX DELEGATE BIDIRECTIONAL_SEQUENCE_LSTM CAST PRELU MAXIMUM ARG_MAX MINIMUM LESS NEG
PADV2 GREATER GREATER_EQUAL LESS_EQUAL SELECT SLICE SIN TRANSPOSE_CONV SPARSE_TO_DENSE TILE
EXPAND_DIMS EQUAL NOT_EQUAL LOG SUM SQRT RSQRT SHAPE POW ARG_MIN FAKE_QUANT REDUCE_PROD
REDUCE_MAX PACK LOGICAL_OR ONE_HOT LOGICAL_AND LOGICAL_NOT UNPACK REDUCE_MIN FLOOR_DIV
REDUCE_ANY SQUARE ZEROS_LIKE FILL FLOOR_MOD RANGE RESIZE_NEAREST_NEIGHBOR LEAKY_RELU
SQUARED_DIFFERENCE MIRROR_PAD ABS SPLIT_V UNIQUE CEIL REVERSE_V2 ADD_N GATHER_ND COS WHERE
RANK ELU REVERSE_SEQUENCE MATRIX_DIAG QUANTIZE MATRIX_SET_DIAG ROUND HARD_SWISH IF WHILE
NON_MAX_SUPPRESSION_V4 NON_MAX_SUPPRESSION_V5 SCATTER_ND SELECT_V2 DENSIFY SEGMENT_SUM
BATCH_MATMUL PLACEHOLDER_FOR_GREATER_OP_CODES CUMSUM CALL_ONCE BROADCAST_TO RFFT2D CONV_3D
IMAG REAL COMPLEX_ABS HASHTABLE HASHTABLE_FIND HASHTABLE_IMPORT HASHTABLE_SIZE REDUCE_ALL
CONV_3D_TRANSPOSE VAR_HANDLE READ_VARIABLE ASSIGN_VARIABLE BROADCAST_ARGS
RANDOM_STANDARD_NORMAL BUCKETIZE RANDOM_UNIFORM MULTINOMIAL GELU DYNAMIC_UPDATE_SLICE
RELU_0_TO_1 UNSORTED_SEGMENT_PROD UNSORTED_SEGMENT_MAX UNSORTED_SEGMENT_SUM ATAN2
UNSORTED_SEGMENT_MIN SIGN BITCAST BITWISE_XOR RIGHT_SHIFT STABLEHLO_LOGISTIC STABLEHLO_ADD
STABLEHLO_DIVIDE STABLEHLO_MULTIPLY STABLEHLO_MAXIMUM STABLEHLO_RESHAPE STABLEHLO_CLAMP
STABLEHLO_CONCATENATE STABLEHLO_BROADCAST_IN_DIM STABLEHLO_CONVOLUTION STABLEHLO_SLICE
STABLEHLO_CUSTOM_CALL STABLEHLO_REDUCE STABLEHLO_ABS STABLEHLO_AND STABLEHLO_COSINE
STABLEHLO_EXPONENTIAL STABLEHLO_FLOOR STABLEHLO_LOG STABLEHLO_MINIMUM STABLEHLO_NEGATE
STABLEHLO_OR STABLEHLO_POWER STABLEHLO_REMAINDER STABLEHLO_RSQRT STABLEHLO_SELECT
STABLEHLO_SUBTRACT STABLEHLO_TANH STABLEHLO_SCATTER STABLEHLO_COMPARE STABLEHLO_CONVERT
STABLEHLO_DYNAMIC_SLICE STABLEHLO_DYNAMIC_UPDATE_SLICE STABLEHLO_PAD STABLEHLO_IOTA
STABLEHLO_DOT_GENERAL STABLEHLO_REDUCE_WINDOW STABLEHLO_SORT STABLEHLO_WHILE
STABLEHLO_GATHER STABLEHLO_TRANSPOSE DILATE STABLEHLO_RNG_BIT_GENERATOR REDUCE_WINDOW
STABLEHLO_COMPOSITE STABLEHLO_SHIFT_LEFT STABLEHLO_CBRT STABLEHLO_CASE
""".split())
CUSTOM_CODE = BUILTIN_OPS.index("CUSTOM")


class _TypeInfo(NamedTuple):
    name: str
    numpy: str | None  # little-endian numpy dtype of the (unpacked) values; None: no numpy type
    bits: int  # storage bits per element; 0 = not fixed-size (string, resource, variant)


#: TensorType enum, indexed by code. Sub-byte types are stored packed, low bits first.
TENSOR_TYPES: tuple[_TypeInfo, ...] = tuple(_TypeInfo(*row) for row in (
    ("float32", "<f4", 32), ("float16", "<f2", 16), ("int32", "<i4", 32), ("uint8", "u1", 8),
    ("int64", "<i8", 64), ("string", None, 0), ("bool", "?", 8), ("int16", "<i2", 16),
    ("complex64", "<c8", 64), ("int8", "i1", 8), ("float64", "<f8", 64),
    ("complex128", "<c16", 128), ("uint64", "<u8", 64), ("resource", None, 0),
    ("variant", None, 0), ("uint32", "<u4", 32), ("uint16", "<u2", 16), ("int4", "i1", 4),
    ("bfloat16", None, 16), ("int2", "i1", 2), ("uint4", "u1", 4),
    ("float8_e4m3fn", None, 8), ("float8_e5m2", None, 8),
))
_BITS = {t.name: t.bits for t in TENSOR_TYPES}
#: Types an integer-only kernel can read or write (every integer width, and bool).
INTEGER_DTYPES = frozenset(
    t.name for t in TENSOR_TYPES if t.numpy and np.dtype(t.numpy).kind in "iub")
_MAX_ELEMENTS = 1 << 60  # no device holds a tensor this large; also bounds the shape product
_STRUCTS = {f: struct.Struct(f) for f in ("<b", "<B", "<?", "<H", "<i", "<I", "<Q")}
# What a parser bug on hostile input could raise; converted at the API boundary so that
# callers only ever see ModelFileError (the checks below are meant to make this unreachable).
_UNEXPECTED = (IndexError, KeyError, ValueError, TypeError, ArithmeticError, struct.error,
               MemoryError, RecursionError)


@dataclass(frozen=True)
class Quantization:
    """Affine quantization of a tensor: ``real = scale * (q - zero_point)``.

    One scale per tensor, or one per slice along ``quantized_dimension`` (per-channel).
    """

    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    quantized_dimension: int = 0
    min: tuple[float, ...] = ()
    max: tuple[float, ...] = ()


@dataclass(frozen=True)
class Tensor:
    """One tensor of a subgraph.

    ``nbytes`` is the storage size: element count times bit width, rounded up to whole bytes
    (packed int4 takes ``ceil(n / 2)``); 0 for a shape with a 0 dimension and for types
    without a fixed size (string, resource, variant). ``element_size`` is bytes per element,
    rounded up (int4 → 1). ``shape_signature`` is ``shape`` when the file has none; -1 marks
    a dynamic dimension there.
    """

    index: int
    name: str
    shape: tuple[int, ...]
    shape_signature: tuple[int, ...]
    type_code: int
    dtype_name: str
    numpy_dtype: np.dtype[Any] | None
    element_size: int
    nbytes: int
    buffer_index: int
    is_constant: bool
    is_variable: bool
    quantization: Quantization | None


@dataclass(frozen=True)
class OperatorCode:
    """An entry of the model's operator table."""

    builtin_code: int
    custom_code: str | None
    version: int

    @property
    def is_custom(self) -> bool:
        """Whether this is a custom (non-builtin) operator."""
        return self.builtin_code == CUSTOM_CODE

    @property
    def name(self) -> str:
        """BuiltinOperator name, the custom code for custom ops, ``BUILTIN_<n>`` if unknown."""
        if self.is_custom:
            return self.custom_code or "CUSTOM"
        if self.builtin_code < len(BUILTIN_OPS):
            return BUILTIN_OPS[self.builtin_code]
        return f"BUILTIN_{self.builtin_code}"


@dataclass(frozen=True)
class Operator:
    """One operator; tensor indices refer to its subgraph, -1 marks an omitted optional input."""

    index: int
    opcode_index: int
    op_name: str
    builtin_code: int
    version: int
    is_custom: bool
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    intermediates: tuple[int, ...]
    builtin_options_type: int


@dataclass(frozen=True)
class Subgraph:
    """A graph of tensors and operators; ``operators`` are in execution order."""

    index: int
    name: str
    tensors: tuple[Tensor, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    operators: tuple[Operator, ...]


@dataclass(frozen=True)
class Buffer:
    """Where a buffer's bytes are in the file: ``offset`` (absolute) and ``size``.

    ``external`` is True for data stored after the flatbuffer (models over 2 GB).
    """

    index: int
    offset: int
    size: int
    external: bool


@dataclass(frozen=True, eq=False)
class SignatureDef:
    """A named entry point: argument names mapped to tensor indices of ``subgraph_index``."""

    key: str
    subgraph_index: int
    inputs: Mapping[str, int]
    outputs: Mapping[str, int]


@dataclass(frozen=True, eq=False)
class TfliteModel:
    """A parsed .tflite model.

    Ownership: the model keeps the file's immutable ``bytes``; ``buffer_data`` and
    ``tensor_data`` return read-only views into them (no copy), and each view holds its own
    reference, so it stays valid after the model is dropped.
    """

    version: int
    description: str
    operator_codes: tuple[OperatorCode, ...]
    subgraphs: tuple[Subgraph, ...]
    buffers: tuple[Buffer, ...]
    metadata: Mapping[str, bytes]
    signature_defs: Mapping[str, SignatureDef]
    file_bytes: bytes = field(repr=False)

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> TfliteModel:
        """Parse a model from the bytes of a .tflite file.

        Args:
            data: The whole file. A bytearray or memoryview is copied once, so later writes
                to it cannot change the parsed model.

        Raises:
            ModelFileError: The data is not a well-formed TFLite model.
        """
        if not isinstance(data, bytes):
            data = bytes(data)
        with _guarded("parsing the model"):
            return _parse(data)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> TfliteModel:
        """Read and parse a .tflite file.

        Raises:
            ModelFileError: The file cannot be read or is not a well-formed TFLite model.
        """
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise ModelFileError(f"cannot read model file {os.fspath(path)!r}: {exc}") from exc
        try:
            return cls.from_bytes(data)
        except ModelFileError as exc:
            raise ModelFileError(f"{os.fspath(path)}: {exc}") from exc

    def buffer_data(self, index: int) -> memoryview:
        """Return the bytes of buffer ``index`` as a read-only view into the file (no copy)."""
        buf = self.buffers[index]
        return memoryview(self.file_bytes)[buf.offset : buf.offset + buf.size]

    def tensor_data(self, subgraph: int, tensor_index: int) -> np.ndarray:
        """Return a constant tensor's values as a read-only array of its dtype and shape.

        The array is a view into the file bytes, except for sub-byte types (int4, ...), which
        are unpacked into a new int8/uint8 array.

        Raises:
            ModelFileError: The tensor has no constant data, no numpy dtype, or its buffer's
                size does not match its shape and dtype.
        """
        t = self.subgraphs[subgraph].tensors[tensor_index]
        where = f"subgraph {subgraph}, tensor {tensor_index} '{t.name}'"
        if not t.is_constant:
            raise ModelFileError(f"{where} has no constant data: it is computed at run time")
        if t.numpy_dtype is None:
            raise ModelFileError(f"{where} is {t.dtype_name}, which has no numpy dtype; "
                                 f"read its bytes with buffer_data({t.buffer_index})")
        buf = self.buffers[t.buffer_index]
        if buf.size != t.nbytes:
            raise ModelFileError(f"{where}: buffer {buf.index} at byte {buf.offset} holds "
                                 f"{buf.size} bytes, but shape {list(t.shape)} of {t.dtype_name}"
                                 f" needs {t.nbytes}")
        with _guarded(f"reading {where}"):
            raw, count = self.buffer_data(t.buffer_index), math.prod(t.shape)
            bits = _BITS[t.dtype_name]
            if bits >= 8:
                array = np.frombuffer(raw, dtype=t.numpy_dtype, count=count)
            else:  # packed, lowest bits first; sign-extend signed types
                per_byte, mask = 8 // bits, (1 << bits) - 1
                packed = np.frombuffer(raw, dtype=np.uint8)
                shifts = np.arange(per_byte, dtype=np.uint8) * bits
                values = ((packed[:, None] >> shifts) & mask).reshape(-1)[:count].astype(np.int16)
                if t.numpy_dtype.kind == "i":
                    values = np.where(values > mask >> 1, values - (mask + 1), values)
                array = values.astype(t.numpy_dtype)
            array = array.reshape(t.shape)
            array.flags.writeable = False
            return array

    def op_counts(self) -> dict[str, int]:
        """Count operators of the main subgraph by name, in order of first use."""
        return dict(Counter(op.op_name for op in self.subgraphs[0].operators))

    def op_versions(self) -> dict[str, int]:
        """Return the highest version of each operator name used in any subgraph."""
        versions: dict[str, int] = {}
        for op in (op for sg in self.subgraphs for op in sg.operators):
            versions[op.op_name] = max(op.version, versions.get(op.op_name, op.version))
        return versions

    def is_full_integer(self) -> tuple[bool, list[str]]:
        """Check that every operator reads and writes only integer tensors at run time.

        Constant inputs (weights, biases) are not checked: a float constant consumed by an
        integer kernel is the kernel's concern, not the arena's.

        Returns:
            ``(ok, problems)``, e.g. ``["DEQUANTIZE op 3: output 'x' is float32"]``.
        """
        problems = []
        for sg in self.subgraphs:
            prefix = f"subgraph {sg.index} " if sg.index else ""
            for op in sg.operators:
                for role, refs in (("input", op.inputs), ("output", op.outputs)):
                    for t in (sg.tensors[i] for i in refs if i >= 0):
                        if not t.is_constant and t.dtype_name not in INTEGER_DTYPES:
                            problems.append(f"{prefix}{op.op_name} op {op.index}: {role} "
                                            f"'{t.name}' is {t.dtype_name}")
        return not problems, problems


@contextmanager
def _guarded(action: str) -> Iterator[None]:
    try:
        yield
    except _UNEXPECTED as exc:
        raise ModelFileError(f"malformed model while {action} ({type(exc).__name__}: {exc}); "
                             "an edgeserve check missed this, please report it") from exc


class _Table(NamedTuple):
    pos: int  # absolute position of the table
    vtable: int  # absolute position of its vtable
    vtable_size: int
    size: int  # inline size of the table
    what: str  # e.g. "subgraph 0, tensor 5", for messages


class _Reader:
    """Bounds-checked access to one flatbuffer; every failure raises ModelFileError."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.end = len(data)
        # Vectors may be shared between tables, so a small crafted file could make us iterate
        # one long vector many times: cap the total elements iterated, linear in file size.
        self.budget = 4 * self.end + 65536

    def fail(self, what: str, pos: int, problem: str) -> NoReturn:
        raise ModelFileError(f"{what or 'model'} at byte {pos}: {problem} "
                             f"(file is {self.end} bytes)")

    def scalar(self, fmt: str, pos: int, what: str) -> Any:
        s = _STRUCTS[fmt]
        if pos < 0 or pos + s.size > self.end:
            self.fail(what, pos, f"{s.size}-byte value lies outside the file")
        return s.unpack_from(self.data, pos)[0]

    def table(self, pos: int, what: str) -> _Table:
        if pos + 4 > self.end:
            self.fail(what, pos, "table starts past the end of the file")
        vt = pos - self.scalar("<i", pos, what)
        if vt < 0 or vt + 4 > self.end:
            self.fail(what, pos, f"its vtable offset points to byte {vt}, outside the file")
        vt_size, size = self.scalar("<H", vt, what), self.scalar("<H", vt + 2, what)
        if vt_size < 4 or vt_size % 2 or vt + vt_size > self.end:
            self.fail(f"{what} vtable", vt, f"invalid vtable size {vt_size}")
        if size < 4 or pos + size > self.end:
            self.fail(what, pos, f"invalid table size {size}")
        return _Table(pos, vt, vt_size, size, what)

    def field(self, t: _Table, fid: int, size: int, name: str) -> int | None:
        """Absolute position of field ``fid`` (``size`` bytes inline), None when absent."""
        slot = 4 + 2 * fid
        if slot + 2 > t.vtable_size:
            return None
        off: int = self.scalar("<H", t.vtable + slot, t.what)
        if off == 0:
            return None
        if off < 4 or off + size > t.size:
            self.fail(f"{t.what} field {name}", t.pos,
                      f"field offset {off} lies outside the table's {t.size} bytes")
        return t.pos + off

    def get(self, t: _Table, fid: int, fmt: str, default: Any, name: str) -> Any:
        pos = self.field(t, fid, _STRUCTS[fmt].size, name)
        return default if pos is None else self.scalar(fmt, pos, f"{t.what} field {name}")

    def ref(self, t: _Table, fid: int, name: str) -> int | None:
        """Follow the offset in field ``fid`` to a table, vector or string."""
        pos = self.field(t, fid, 4, name)
        if pos is None:
            return None
        target: int = pos + self.scalar("<I", pos, f"{t.what} field {name}")
        if target + 4 > self.end:
            self.fail(f"{t.what} field {name}", pos, f"points to byte {target}, past the end")
        return target

    def vector(self, t: _Table, fid: int, elem_size: int, name: str) -> tuple[int, int]:
        """Return ``(start, count)`` of a vector field, ``(0, 0)`` when absent."""
        pos = self.ref(t, fid, name)
        if pos is None:
            return 0, 0
        count = self.scalar("<I", pos, f"{t.what} {name} length")
        if count * elem_size > self.end - pos - 4:
            self.fail(f"{t.what} {name}", pos,
                      f"{count} elements of {elem_size} bytes run past the end of the file")
        self.budget -= count
        if self.budget < 0:
            self.fail(f"{t.what} {name}", pos, "vectors are shared too often to be a real model")
        return pos + 4, count

    def numbers(self, t: _Table, fid: int, fmt: str, name: str) -> tuple[Any, ...]:
        start, count = self.vector(t, fid, struct.calcsize("<" + fmt), name)
        return struct.unpack_from(f"<{count}{fmt}", self.data, start)

    def tables(self, t: _Table, fid: int, name: str) -> list[_Table]:
        start, count = self.vector(t, fid, 4, name)
        prefix = f"{t.what}, " if t.what else ""
        return [self.table(p + self.scalar("<I", p, name), f"{prefix}{name} {i}")
                for i, p in enumerate(range(start, start + 4 * count, 4))]

    def string(self, t: _Table, fid: int, name: str) -> str | None:
        start, count = self.vector(t, fid, 1, name)
        if not start:
            return None
        try:
            return self.data[start : start + count].decode("utf-8")
        except UnicodeDecodeError as exc:
            self.fail(f"{t.what} {name}", start + exc.start, "string is not valid UTF-8")

    def indices(self, t: _Table, fid: int, name: str, limit: int, lowest: int) -> tuple[int, ...]:
        """An int32 vector of indices, each checked to be in ``[lowest, limit)``."""
        values = self.numbers(t, fid, "i", name)
        for v in values:
            if not lowest <= v < limit:
                self.fail(f"{t.what} {name}", t.pos, f"index {v} is outside [{lowest}, {limit})")
        return values


def _parse(data: bytes) -> TfliteModel:
    r = _Reader(data)
    if r.end < 8:
        r.fail("file header", 0, "too short to be a TFLite model (needs at least 8 bytes)")
    if data[4:8] != FILE_IDENTIFIER:
        r.fail("file identifier", 4, f"found {data[4:8]!r}, expected {FILE_IDENTIFIER!r}: "
               "not a TFLite model")
    root = r.table(r.scalar("<I", 0, "root offset"), "")
    version = r.get(root, 0, "<I", 0, "version")
    if version != SCHEMA_VERSION:
        r.fail("model", root.pos, f"schema version {version}, expected {SCHEMA_VERSION}")
    codes = tuple(_operator_code(r, t) for t in r.tables(root, 1, "operator code"))
    buffers = tuple(_buffer(r, t, i) for i, t in enumerate(r.tables(root, 4, "buffer")))
    subgraphs = tuple(_subgraph(r, t, i, codes, buffers)
                      for i, t in enumerate(r.tables(root, 2, "subgraph")))
    if not subgraphs:
        r.fail("model", root.pos, "has no subgraphs")
    metadata = {}
    for t in r.tables(root, 6, "metadata"):
        index = r.get(t, 1, "<I", 0, "buffer")
        if index >= len(buffers):
            r.fail(t.what, t.pos, f"buffer {index} does not exist ({len(buffers)} buffers)")
        buf = buffers[index]
        metadata[r.string(t, 0, "name") or ""] = data[buf.offset : buf.offset + buf.size]
    signatures = {}
    for t in r.tables(root, 7, "signature def"):
        sg_index = r.get(t, 4, "<I", 0, "subgraph_index")
        if sg_index >= len(subgraphs):
            r.fail(t.what, t.pos, f"subgraph {sg_index} does not exist")
        n_tensors = len(subgraphs[sg_index].tensors)
        ios = [MappingProxyType({r.string(m, 0, "name") or "": _tensor_index(r, m, n_tensors)
                                 for m in r.tables(t, fid, name)})
               for fid, name in ((0, "input"), (1, "output"))]
        key = r.string(t, 2, "signature_key") or ""
        signatures[key] = SignatureDef(key, sg_index, ios[0], ios[1])
    return TfliteModel(version, r.string(root, 3, "description") or "", codes, subgraphs,
                       buffers, MappingProxyType(metadata), MappingProxyType(signatures), data)


def _tensor_index(r: _Reader, t: _Table, n_tensors: int) -> int:
    index: int = r.get(t, 1, "<I", 0, "tensor_index")
    if index >= n_tensors:
        r.fail(t.what, t.pos, f"tensor {index} does not exist ({n_tensors} tensors)")
    return index


def _operator_code(r: _Reader, t: _Table) -> OperatorCode:
    # The original int8 field holds min(code, 127); files older than the int32 field lack
    # it (default 0). Either way the larger of the two is the real code.
    deprecated = r.get(t, 0, "<b", 0, "deprecated_builtin_code")
    code = max(deprecated, r.get(t, 3, "<i", 0, "builtin_code"))
    if code < 0:
        r.fail(t.what, t.pos, f"negative builtin operator code {code}")
    custom = r.string(t, 1, "custom_code") if code == CUSTOM_CODE else None
    return OperatorCode(code, custom, r.get(t, 2, "<i", 1, "version"))


def _buffer(r: _Reader, t: _Table, index: int) -> Buffer:
    start, size = r.vector(t, 0, 1, "data")
    offset, ext_size = r.get(t, 1, "<Q", 0, "offset"), r.get(t, 2, "<Q", 0, "size")
    if offset > 1 and ext_size > 0:  # offset 1 is a placeholder the converter may leave
        if offset + ext_size > r.end:
            r.fail(t.what, t.pos, f"external data at bytes {offset}..{offset + ext_size} "
                   "lies past the end of the file")
        return Buffer(index, offset, ext_size, True)
    return Buffer(index, start if size else 0, size, False)


def _subgraph(r: _Reader, t: _Table, index: int, codes: tuple[OperatorCode, ...],
              buffers: tuple[Buffer, ...]) -> Subgraph:
    tensors = tuple(_tensor(r, tt, i, buffers) for i, tt in enumerate(r.tables(t, 0, "tensor")))
    n = len(tensors)
    operators = []
    for i, ot in enumerate(r.tables(t, 3, "operator")):
        opcode_index = r.get(ot, 0, "<I", 0, "opcode_index")
        if opcode_index >= len(codes):
            r.fail(ot.what, ot.pos, f"operator code {opcode_index} does not exist "
                   f"({len(codes)} operator codes)")
        code = codes[opcode_index]
        operators.append(Operator(
            i, opcode_index, code.name, code.builtin_code, code.version, code.is_custom,
            r.indices(ot, 1, "inputs", n, -1), r.indices(ot, 2, "outputs", n, -1),
            r.indices(ot, 8, "intermediates", n, -1),
            r.get(ot, 3, "<B", 0, "builtin_options_type")))
    return Subgraph(index, r.string(t, 4, "name") or "", tensors,
                    r.indices(t, 1, "inputs", n, 0), r.indices(t, 2, "outputs", n, 0),
                    tuple(operators))


def _tensor(r: _Reader, t: _Table, index: int, buffers: tuple[Buffer, ...]) -> Tensor:
    shape = r.numbers(t, 0, "i", "shape")
    count = 0 if 0 in shape else 1
    for dim in shape if count else ():
        count *= dim
        if dim < 0 or count > _MAX_ELEMENTS:
            r.fail(f"{t.what} shape", t.pos, f"impossible shape {list(shape)[:16]}")
    if count == 0 and min(shape) < 0:
        r.fail(f"{t.what} shape", t.pos, f"negative dimension in shape {list(shape)[:16]}")
    code = r.get(t, 1, "<b", 0, "type")
    if not 0 <= code < len(TENSOR_TYPES):
        r.fail(f"{t.what} type", t.pos, f"unknown tensor type {code}")
    info = TENSOR_TYPES[code]
    buffer_index = r.get(t, 2, "<I", 0, "buffer")
    if buffer_index >= len(buffers):
        r.fail(t.what, t.pos, f"buffer {buffer_index} does not exist ({len(buffers)} buffers)")
    qpos = r.ref(t, 4, "quantization")
    quant = None if qpos is None else _quantization(r, r.table(qpos, f"{t.what}, quantization"))
    return Tensor(
        index=index, name=r.string(t, 3, "name") or "", shape=shape,
        shape_signature=r.numbers(t, 7, "i", "shape_signature") or shape, type_code=code,
        dtype_name=info.name, numpy_dtype=np.dtype(info.numpy) if info.numpy else None,
        element_size=(info.bits + 7) // 8, nbytes=(count * info.bits + 7) // 8,
        buffer_index=buffer_index, is_constant=buffers[buffer_index].size > 0,
        is_variable=bool(r.get(t, 5, "<?", False, "is_variable")), quantization=quant)


def _quantization(r: _Reader, t: _Table) -> Quantization | None:
    qmin, qmax = r.numbers(t, 0, "f", "min"), r.numbers(t, 1, "f", "max")
    scale, zero_point = r.numbers(t, 2, "f", "scale"), r.numbers(t, 3, "q", "zero_point")
    if scale and zero_point and len(scale) != len(zero_point):
        r.fail(t.what, t.pos, f"{len(scale)} scales but {len(zero_point)} zero points")
    if not (scale or qmin or qmax):
        return None  # converters write an empty table for float tensors
    qdim = r.get(t, 6, "<i", 0, "quantized_dimension")
    return Quantization(scale, zero_point, qdim, qmin, qmax)
