"""Read TensorFlow Lite model files without TensorFlow.

A pure-Python (stdlib + numpy) reader of the TFLite flatbuffer format
(``tensorflow/lite/schema/schema.fbs``, schema version 3). It exposes what edgeserve needs to
inspect a model on a device and to plan a TFLM tensor arena offline: operators in execution
order with their versions, tensors with shapes, dtypes, byte sizes and quantization, and the
constant data.

The bytes are walked once, by :mod:`edgeserve.tflite.flatbuffer`, which verifies every
offset, length and alignment against the schema before use; this module builds the model
from the tables it decoded and checks indices, shapes and types. A truncated or corrupted
file raises :class:`~edgeserve.errors.ModelFileError` naming the structure and the byte
offset at fault; no other exception escapes. :func:`edgeserve.tflite.verify.validate_tflite`
adds what the interpreters trust, on the same tables.

Example:
    >>> model = TfliteModel.from_file("kws_ref_model.tflite")  # doctest: +SKIP
    >>> model.subgraphs[0].tensors[0].quantization.scale  # doctest: +SKIP
    (0.5847029089927673,)
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple, NoReturn

import numpy as np

from edgeserve.errors import ModelFileError, model_file_guard
from edgeserve.tflite.flatbuffer import _Table, verify_flatbuffer
from edgeserve.tflite.schema import SCHEMA

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
# Handles, not numbers: a resource variable's handle (VAR_HANDLE) or a variant; the values
# behind them are typed by READ_VARIABLE/ASSIGN_VARIABLE's own tensors.
HANDLE_DTYPES = frozenset({"resource", "variant"})
_MAX_ELEMENTS = 1 << 60  # no device holds a tensor this large; also bounds the shape product


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
    # The few builtin options edgeserve reads: VAR_HANDLE's container and shared_name (which
    # variable a handle names) and CALL_ONCE's init_subgraph_index.
    options: Mapping[str, Any] = field(default_factory=dict)


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
        return read_model(data)[0]

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
        with model_file_guard(f"reading {where}"):
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

    def op_counts_all(self) -> dict[str, int]:
        """Count operators of every subgraph (CALL_ONCE's initialisation, control-flow bodies)."""
        return dict(Counter(op.op_name for sg in self.subgraphs for op in sg.operators))

    def control_flow(self) -> list[str]:
        """Why the model's subgraphs are more than a main graph and its CALL_ONCE initialisers
        (IF, WHILE, or a subgraph nothing calls once); empty when they are not."""
        reasons = sorted({op.op_name for g in self.subgraphs for op in g.operators if op.op_name in ("IF", "WHILE")})
        called = {op.options.get("init_subgraph_index") for op in self.subgraphs[0].operators
                  if op.op_name == "CALL_ONCE"} if self.subgraphs else set()
        if len(self.subgraphs) > 1 and called != set(range(1, len(self.subgraphs))):
            reasons.append("subgraphs not run by CALL_ONCE")
        return reasons

    def resource_variables(self) -> list[dict[str, Any]]:
        """The model's resource variables (state kept between invocations), named by their
        VAR_HANDLE's shared_name, typed by the value an ASSIGN_VARIABLE writes (in the CALL_ONCE
        initialisation or the main graph): name, dtype, shape, bytes."""
        found: dict[tuple[str, str], dict[str, Any]] = {}
        for sg in self.subgraphs:
            handles = {op.outputs[0]: op.options for op in sg.operators if op.op_name == "VAR_HANDLE" and op.outputs}
            for op in sg.operators:
                if op.op_name != "ASSIGN_VARIABLE" or len(op.inputs) < 2 or op.inputs[0] not in handles:
                    continue
                options = handles[op.inputs[0]]
                key = (options.get("container", ""), options.get("shared_name", ""))
                value = sg.tensors[op.inputs[1]]
                found.setdefault(key, {"name": key[1], "container": key[0], "dtype": value.dtype_name,
                                       "shape": list(value.shape), "bytes": value.nbytes, "subgraph": sg.index})
        return list(found.values())

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
                        if not t.is_constant and t.dtype_name not in INTEGER_DTYPES | HANDLE_DTYPES:
                            problems.append(f"{prefix}{op.op_name} op {op.index}: {role} "
                                            f"'{t.name}' is {t.dtype_name}")
        return not problems, problems


def read_model(data: bytes | bytearray | memoryview) -> tuple[TfliteModel, _Table]:
    """Verify ``data`` and build the model from the one walk; also return the decoded root
    table, which :mod:`edgeserve.tflite.verify` checks further without reading the bytes again.

    Raises:
        ModelFileError: The data is not a well-formed TFLite model.
    """
    if not isinstance(data, bytes):
        data = bytes(data)
    root = verify_flatbuffer(data)
    with model_file_guard("reading the model"):
        return _Builder(data).model(root), root


class _Builder:
    """TfliteModel from verified tables: the checks here are about meaning (indices, shapes,
    types), since every offset and length was checked by the walk."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        # A vector may be shared by many tables (one shape for 1,000 tensors): cap the
        # elements iterated, linear in the file size, so a small file cannot cost minutes.
        self.budget = 4 * len(data) + 65536

    def fail(self, where: _Table, field_name: str, problem: str, pos: int | None = None) -> NoReturn:
        at = where.pos if pos is None else pos
        name = f"{where.path}.{field_name}" if field_name else where.path
        raise ModelFileError(f"{name} at byte {at}: {problem} (file is {len(self.data)} bytes)")

    def numbers(self, t: _Table, name: str) -> tuple[Any, ...]:
        values = t.get(name)
        if values is None:
            return ()
        self.budget -= len(values)
        if self.budget < 0:
            self.fail(t, name, "vectors are shared too often to be a real model")
        return tuple(values.tolist())

    def string(self, t: _Table, name: str) -> str | None:
        raw = t.get(name)
        if raw is None:
            return None
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            self.fail(t, name, "string is not valid UTF-8", t.start(name) + exc.start)

    def indices(self, t: _Table, name: str, limit: int, lowest: int) -> tuple[int, ...]:
        """An int32 vector of indices, each checked to be in ``[lowest, limit)``."""
        values = self.numbers(t, name)
        for v in values:
            if not lowest <= v < limit:
                self.fail(t, name, f"index {v} is outside [{lowest}, {limit})")
        return values

    def model(self, root: _Table) -> TfliteModel:
        version = root.get("version")
        if version != SCHEMA_VERSION:
            self.fail(root, "", f"schema version {version}, expected {SCHEMA_VERSION}")
        codes = tuple(self.operator_code(t) for t in root.get("operator_codes") or [])
        buffers = tuple(self.buffer(t, i) for i, t in enumerate(root.get("buffers") or []))
        subgraphs = tuple(self.subgraph(t, i, codes, buffers) for i, t in enumerate(root.get("subgraphs") or []))
        if not subgraphs:
            self.fail(root, "", "has no subgraphs")
        metadata = {}
        for t in root.get("metadata") or []:
            index = t.get("buffer")
            if index >= len(buffers):
                self.fail(t, "buffer", f"buffer {index} does not exist ({len(buffers)} buffers)")
            buf = buffers[index]
            metadata[self.string(t, "name") or ""] = self.data[buf.offset : buf.offset + buf.size]
        signatures = {}
        for t in root.get("signature_defs") or []:
            sg_index = t.get("subgraph_index")
            if sg_index >= len(subgraphs):
                self.fail(t, "subgraph_index", f"subgraph {sg_index} does not exist")
            n_tensors = len(subgraphs[sg_index].tensors)
            ios = [MappingProxyType({self.string(m, "name") or "": self.tensor_index(m, n_tensors)
                                     for m in t.get(name) or []})
                   for name in ("inputs", "outputs")]
            key = self.string(t, "signature_key") or ""
            signatures[key] = SignatureDef(key, sg_index, ios[0], ios[1])
        return TfliteModel(version, self.string(root, "description") or "", codes, subgraphs, buffers,
                           MappingProxyType(metadata), MappingProxyType(signatures), self.data)

    def tensor_index(self, t: _Table, n_tensors: int) -> int:
        index: int = t.get("tensor_index")
        if index >= n_tensors:
            self.fail(t, "tensor_index", f"tensor {index} does not exist ({n_tensors} tensors)")
        return index

    def operator_code(self, t: _Table) -> OperatorCode:
        # The original int8 field holds min(code, 127); files older than the int32 field lack
        # it (default 0). Either way the larger of the two is the real code.
        code = max(t.get("deprecated_builtin_code"), t.get("builtin_code"))
        if code < 0:
            self.fail(t, "builtin_code", f"negative builtin operator code {code}")
        custom = self.string(t, "custom_code") if code == CUSTOM_CODE else None
        return OperatorCode(code, custom, t.get("version"))

    def buffer(self, t: _Table, index: int) -> Buffer:
        data = t.get("data")
        size = 0 if data is None else len(data)
        offset, ext_size = t.get("offset"), t.get("size")
        if offset > 1 and ext_size > 0:  # offset 1 is a placeholder the converter may leave
            if offset + ext_size > len(self.data):
                self.fail(t, "offset", f"external data at bytes {offset}..{offset + ext_size} "
                          "lies past the end of the file")
            return Buffer(index, offset, ext_size, True)
        return Buffer(index, t.start("data") if size else 0, size, False)

    def subgraph(self, t: _Table, index: int, codes: tuple[OperatorCode, ...],
                 buffers: tuple[Buffer, ...]) -> Subgraph:
        tensors = tuple(self.tensor(tt, i, buffers) for i, tt in enumerate(t.get("tensors") or []))
        n = len(tensors)
        operators = []
        for i, ot in enumerate(t.get("operators") or []):
            opcode_index = ot.get("opcode_index")
            if opcode_index >= len(codes):
                self.fail(ot, "opcode_index", f"operator code {opcode_index} does not exist "
                          f"({len(codes)} operator codes)")
            code = codes[opcode_index]
            operators.append(Operator(
                i, opcode_index, code.name, code.builtin_code, code.version, code.is_custom,
                self.indices(ot, "inputs", n, -1), self.indices(ot, "outputs", n, -1),
                self.indices(ot, "intermediates", n, -1), ot.get("builtin_options_type"),
                self.read_options(code.name, ot.get("builtin_options"))))
        return Subgraph(index, self.string(t, "name") or "", tensors, self.indices(t, "inputs", n, 0),
                        self.indices(t, "outputs", n, 0), tuple(operators))

    def read_options(self, op_name: str, options: _Table | None) -> dict[str, Any]:
        if options is None:
            return {}
        if op_name == "VAR_HANDLE":
            return {"container": self.string(options, "container") or "",
                    "shared_name": self.string(options, "shared_name") or ""}
        if op_name == "CALL_ONCE":
            return {"init_subgraph_index": options.get("init_subgraph_index")}
        # Every other options table: its scalar fields (defaults filled in) and numeric
        # vectors, which is what kernels need (padding, strides, activation, beta, ...).
        values: dict[str, Any] = {}
        for f in SCHEMA[options.kind]:
            if f.deprecated or f.kind not in ("scalar", "vector"):
                continue
            value = options.get(f.name)
            if f.kind == "vector":
                if not isinstance(value, np.ndarray):
                    continue
                value = tuple(value.tolist())
            values[f.name] = value
        return values

    def tensor(self, t: _Table, index: int, buffers: tuple[Buffer, ...]) -> Tensor:
        shape = self.numbers(t, "shape")
        count = 0 if 0 in shape else 1
        for dim in shape if count else ():
            count *= dim
            if dim < 0 or count > _MAX_ELEMENTS:
                self.fail(t, "shape", f"impossible shape {list(shape)[:16]}")
        if count == 0 and min(shape) < 0:
            self.fail(t, "shape", f"negative dimension in shape {list(shape)[:16]}")
        code = t.get("type")
        if not 0 <= code < len(TENSOR_TYPES):
            self.fail(t, "type", f"unknown tensor type {code}")
        info = TENSOR_TYPES[code]
        buffer_index = t.get("buffer")
        if buffer_index >= len(buffers):
            self.fail(t, "buffer", f"buffer {buffer_index} does not exist ({len(buffers)} buffers)")
        q = t.get("quantization")
        return Tensor(
            index=index, name=self.string(t, "name") or "", shape=shape,
            shape_signature=self.numbers(t, "shape_signature") or shape, type_code=code,
            dtype_name=info.name, numpy_dtype=np.dtype(info.numpy) if info.numpy else None,
            element_size=(info.bits + 7) // 8, nbytes=(count * info.bits + 7) // 8,
            buffer_index=buffer_index, is_constant=buffers[buffer_index].size > 0,
            is_variable=bool(t.get("is_variable")), quantization=None if q is None else self.quantization(q))

    def quantization(self, t: _Table) -> Quantization | None:
        qmin, qmax = self.numbers(t, "min"), self.numbers(t, "max")
        scale, zero_point = self.numbers(t, "scale"), self.numbers(t, "zero_point")
        if scale and zero_point and len(scale) != len(zero_point):
            self.fail(t, "", f"{len(scale)} scales but {len(zero_point)} zero points")
        if not (scale or qmin or qmax):
            return None  # converters write an empty table for float tensors
        return Quantization(scale, zero_point, t.get("quantized_dimension"), qmin, qmax)
