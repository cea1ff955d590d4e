"""Tests of edgeserve.tflite.model.

Real models are checked against LiteRT's interpreter and against the flatbuffers-generated
schema reader (both only in the tests; the module itself must not import them). Hand-made
models, written by a tiny flatbuffer writer below, pin the edge cases; truncated and
byte-flipped files check that nothing but ModelFileError ever escapes.
"""

from __future__ import annotations

import collections
import contextlib
import os
import struct
import subprocess
import sys
import tracemalloc
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgeserve.errors import ModelFileError
from edgeserve.tflite.model import BUILTIN_OPS, TENSOR_TYPES, TfliteModel

from conftest import DATA_SKIP_PREFIX, TESTDATA

LITERT_REFUSES = {"person_detect"}  # "quantized_dimension 3" (see testdata/README.md)
FUZZ_MODELS = ["tflm/hello_world_int8", "tflm/micro_speech_quantized", "tflm/trained_lstm_int8",
               "tflm/audio_preprocessor_int8", "mlperf-tiny/kws_ref_model"]


def _require(path: Path | None) -> Path:
    """Return ``path``; fail (CI) or skip (elsewhere) when the shared test data is missing."""
    if path is None or not path.exists():
        message = f"{DATA_SKIP_PREFIX} {path or TESTDATA} not found (set EDGESERVE_TESTDATA)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


def _model_params() -> list[Any]:
    paths = sorted(TESTDATA.glob("*/*.tflite"))
    return [pytest.param(p, id=p.stem) for p in paths] or [pytest.param(None, id="no-testdata")]


def _testdata(name: str) -> Path:
    return _require(TESTDATA / f"{name}.tflite")


def _interpreter(path: Path) -> Any:
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    try:
        return litert.Interpreter(model_path=str(path))
    except (RuntimeError, ValueError):
        return litert.Interpreter(model_path=str(path), experimental_op_resolver_type=(
            litert.OpResolverType.BUILTIN_REF))


# --- against the references -------------------------------------------------------------------

@pytest.mark.parametrize("path", _model_params())
def test_matches_litert_interpreter(path: Path | None) -> None:
    path = _require(path)
    model = TfliteModel.from_file(path)
    sg = model.subgraphs[0]
    assert sg.operators and sg.tensors
    if path.stem in LITERT_REFUSES:
        return
    interp = _interpreter(path)
    details = interp.get_tensor_details()
    assert len(details) == len(sg.tensors)
    for d, t in zip(details, sg.tensors, strict=True):
        assert (d["index"], d["name"]) == (t.index, t.name)
        assert d["shape"].tolist() == list(t.shape)
        assert d["shape_signature"].tolist() == list(t.shape_signature)
        assert np.dtype(d["dtype"]) == t.numpy_dtype
        q = d["quantization_parameters"]
        scale = t.quantization.scale if t.quantization else ()
        zero_point = t.quantization.zero_point if t.quantization else ()
        assert q["scales"].tolist() == list(scale), t.name
        assert q["zero_points"].tolist() == list(zero_point), t.name
        if t.quantization and len(scale) > 1:
            assert q["quantized_dimension"] == t.quantization.quantized_dimension
    assert [d["index"] for d in interp.get_input_details()] == list(sg.inputs)
    assert [d["index"] for d in interp.get_output_details()] == list(sg.outputs)
    for d in interp.get_input_details() + interp.get_output_details():
        q = sg.tensors[d["index"]].quantization
        assert d["quantization"] == ((q.scale[0], q.zero_point[0]) if q else (0.0, 0))
    ops = interp._get_ops_details()
    assert [o["op_name"] for o in ops] == [op.op_name for op in sg.operators]
    assert [o["inputs"].tolist() for o in ops] == [list(op.inputs) for op in sg.operators]
    assert [o["outputs"].tolist() for o in ops] == [list(op.outputs) for op in sg.operators]
    assert model.op_counts() == dict(collections.Counter(o["op_name"] for o in ops))
    signatures = interp.get_signature_list()
    assert sorted(signatures) == sorted(model.signature_defs)
    for key, sig in model.signature_defs.items():
        assert sorted(signatures[key]["inputs"]) == sorted(sig.inputs)
        assert sorted(signatures[key]["outputs"]) == sorted(sig.outputs)


@pytest.mark.parametrize("path", _model_params())
def test_matches_generated_schema_reader(path: Path | None) -> None:
    """Fields the interpreter does not report, checked against flatc's generated reader."""
    path = _require(path)
    pytest.importorskip("flatbuffers")
    schema = pytest.importorskip("ai_edge_litert.schema_py_generated")
    data = path.read_bytes()
    ref, model = schema.Model.GetRootAs(data, 0), TfliteModel.from_bytes(data)
    assert model.version == ref.Version() == 3
    assert model.description == (ref.Description() or b"").decode()
    versions: dict[str, int] = {}
    for i, code in enumerate(model.operator_codes):
        r = ref.OperatorCodes(i)
        assert code.builtin_code == max(r.DeprecatedBuiltinCode(), r.BuiltinCode())
        assert code.version == r.Version()
        if code.is_custom:
            assert code.name == r.CustomCode().decode()
    assert len(model.buffers) == ref.BuffersLength()
    for i in range(len(model.buffers)):
        rb = ref.Buffers(i)
        expected = rb.DataAsNumpy().tobytes() if rb.DataLength() else b""
        assert bytes(model.buffer_data(i)) == expected
    assert sorted(model.metadata) == sorted(
        ref.Metadata(i).Name().decode() for i in range(ref.MetadataLength()))
    for si, sg in enumerate(model.subgraphs):
        rsg = ref.Subgraphs(si)
        for op in sg.operators:
            rop = rsg.Operators(op.index)
            assert op.opcode_index == rop.OpcodeIndex()
            n = rop.IntermediatesLength()
            assert op.intermediates == (tuple(rop.IntermediatesAsNumpy().tolist()) if n else ())
            assert op.builtin_options_type == rop.BuiltinOptionsType()
            versions[op.op_name] = max(versions.get(op.op_name, 0), op.version)
        for t in sg.tensors:
            assert t.is_variable == bool(rsg.Tensors(t.index).IsVariable())
            assert t.buffer_index == rsg.Tensors(t.index).Buffer()
    assert model.op_versions() == versions


def test_figures_from_testdata_readme() -> None:
    def io(name: str, which: int) -> tuple[str, list[int], float, int]:
        sg = TfliteModel.from_file(_testdata(name)).subgraphs[0]
        t = sg.tensors[(sg.inputs, sg.outputs)[which][0]]
        q = t.quantization
        assert q is not None
        return t.dtype_name, list(t.shape), q.scale[0], q.zero_point[0]

    approx = pytest.approx
    assert io("mlperf-tiny/kws_ref_model", 0) == ("int8", [1, 49, 10, 1], approx(0.5847, 1e-4), 83)
    assert io("mlperf-tiny/kws_ref_model", 1)[:2] == ("int8", [1, 12])
    assert io("mlperf-tiny/vww_96_int8", 0) == ("int8", [1, 96, 96, 3], approx(1 / 255), -128)
    assert io("mlperf-tiny/pretrainedResnet_quant", 0) == ("int8", [1, 32, 32, 3], 1.0, -128)
    assert io("mlperf-tiny/ad01_int8", 0) == ("int8", [1, 640], approx(0.391, 1e-3), 89)
    assert io("mlperf-tiny/str_ww_ref_model", 0)[:2] == ("int8", [1, 30, 1, 40])
    assert io("mlperf-tiny/str_ww_ref_model", 1)[:2] == ("int8", [1, 3])
    assert io("tflm/hello_world_int8", 0) == ("int8", [1, 1], approx(0.02448, 1e-3), -128)
    assert io("tflm/hello_world_int8", 1) == ("int8", [1, 1], approx(0.00829, 1e-3), 5)
    assert io("tflm/mobilenet_v2_quantized_1x3x224x224", 0) == (
        "int8", [1, 3, 224, 224], approx(0.01863, 1e-3), -14)


@pytest.mark.parametrize("name", ["tflm/hello_world_int8", "mlperf-tiny/kws_ref_model",
                                  "tflm/trained_lstm_int8"])
def test_tensor_data_equals_interpreter_get_tensor(name: str) -> None:
    path = _testdata(name)
    model, interp = TfliteModel.from_file(path), _interpreter(path)
    interp.allocate_tensors()
    constants = [t for t in model.subgraphs[0].tensors if t.is_constant]
    assert constants
    for t in constants:
        np.testing.assert_array_equal(model.tensor_data(0, t.index), interp.get_tensor(t.index))
        assert model.tensor_data(0, t.index).dtype == interp.get_tensor(t.index).dtype


def test_is_full_integer() -> None:
    assert TfliteModel.from_file(_testdata("tflm/hello_world_int8")).is_full_integer() == (True, [])
    ok, problems = TfliteModel.from_file(_testdata("tflm/hello_world_float")).is_full_integer()
    assert not ok
    assert problems[0] == "FULLY_CONNECTED op 0: input 'serving_default_dense_input:0' is float32"
    assert len(problems) == 6  # 3 ops x (activation input + output)
    for name in ("kws_ref_model", "vww_96_int8", "ad01_int8", "pretrainedResnet_quant"):
        assert TfliteModel.from_file(_testdata(f"mlperf-tiny/{name}")).is_full_integer()[0]


def test_views_share_the_file_bytes_without_copying() -> None:
    model = TfliteModel.from_file(_testdata("tflm/mobilenet_v2_quantized_1x3x224x224"))
    biggest = max(model.subgraphs[0].tensors, key=lambda t: t.nbytes if t.is_constant else 0)
    assert biggest.nbytes > 1_000_000
    tracemalloc.start()
    array = model.tensor_data(0, biggest.index)
    view = model.buffer_data(biggest.buffer_index)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # A copy would be over 1 MB. The peak is process-wide, and the threads watching the corpus
    # converts in the background allocate too, so the bound leaves them room.
    assert peak < 500_000
    assert np.shares_memory(array, np.frombuffer(model.file_bytes, np.uint8))
    assert view.obj is model.file_bytes and view.readonly and len(view) == biggest.nbytes
    with pytest.raises(ValueError):
        array.flat[0] = 1
    first = array.reshape(-1)[:8].tolist()
    del model  # each view holds its own reference to the bytes
    assert array.reshape(-1)[:8].tolist() == first and len(view) == biggest.nbytes


def test_module_imports_no_ml_framework() -> None:
    code = ("import sys, edgeserve.tflite.model; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'tensorflow', 'flatbuffers', 'ai_edge_litert', 'tflite_micro', 'keras'}))")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_enum_tables() -> None:
    assert (BUILTIN_OPS[0], BUILTIN_OPS[3], BUILTIN_OPS[32], BUILTIN_OPS[44]) == (
        "ADD", "CONV_2D", "CUSTOM", "UNIDIRECTIONAL_SEQUENCE_LSTM")
    assert (BUILTIN_OPS[114], BUILTIN_OPS[161], BUILTIN_OPS[209]) == (
        "QUANTIZE", "RIGHT_SHIFT", "STABLEHLO_CASE")
    names = [t.name for t in TENSOR_TYPES]
    assert names[:19] == ["float32", "float16", "int32", "uint8", "int64", "string", "bool",
                          "int16", "complex64", "int8", "float64", "complex128", "uint64",
                          "resource", "variant", "uint32", "uint16", "int4", "bfloat16"]
    schema = pytest.importorskip("ai_edge_litert.schema_py_generated")
    for code, name in enumerate(BUILTIN_OPS):
        assert getattr(schema.BuiltinOperator, name) == code
    for code, info in enumerate(TENSOR_TYPES):
        assert getattr(schema.TensorType, info.name.upper()) == code


# --- a tiny flatbuffer writer for hand-made models --------------------------------------------

@dataclass
class T:
    """A table: field id -> ``(struct format, value)`` or a child node."""

    fields: dict[int, Any]


@dataclass
class V:
    """A vector of scalars (``fmt``), of nodes (``fmt=None``) or a string (``fmt="str"``)."""

    fmt: str | None
    items: Sequence[Any] | str
    count: int | None = None  # override the stored length, to corrupt it


def build(root: T, identifier: bytes = b"TFL3") -> bytes:
    """Lay out ``root`` breadth-first so every offset points forward, as the format requires.

    A node object used in several places is written once and shared.
    """
    buf = bytearray(8)
    buf[4:8] = identifier
    queue: collections.deque[tuple[int, Any]] = collections.deque([(0, root)])
    placed: dict[int, int] = {}
    while queue:
        at, node = queue.popleft()
        if id(node) not in placed:
            buf.extend(bytes(-len(buf) % 8))
            placed[id(node)] = _write(node, buf, queue)
        struct.pack_into("<I", buf, at, placed[id(node)] - at)
    return bytes(buf)


def _write(node: T | V, buf: bytearray, queue: collections.deque[tuple[int, Any]]) -> int:
    if isinstance(node, V):
        pos, items = len(buf), node.items
        if node.fmt == "str":
            raw = items if isinstance(items, bytes) else str(items).encode()
            buf.extend(struct.pack("<I", len(raw)) + raw + b"\0")
        else:
            buf.extend(struct.pack("<I", len(items) if node.count is None else node.count))
            if node.fmt:
                buf.extend(struct.pack(f"<{len(items)}{node.fmt}", *items))
            else:
                buf.extend(bytes(4 * len(items)))
                queue.extend((pos + 4 + 4 * i, item) for i, item in enumerate(items))
        return pos
    fids = sorted(node.fields)
    offsets, size = {}, 4
    for fid in fids:
        value = node.fields[fid]
        field_size = struct.calcsize("<" + value[0]) if isinstance(value, tuple) else 4
        size += -size % field_size  # fields aligned to their size, as flatc lays them out
        offsets[fid] = size
        size += field_size
    slots = max(fids) + 1 if fids else 0
    vtable = len(buf)
    buf.extend(struct.pack(f"<HH{slots}H", 4 + 2 * slots, size,
                           *(offsets.get(i, 0) for i in range(slots))))
    buf.extend(bytes(-len(buf) % 8))
    pos = len(buf)
    buf.extend(struct.pack("<i", pos - vtable) + bytes(size - 4))
    for fid in fids:
        value = node.fields[fid]
        if isinstance(value, tuple):
            struct.pack_into("<" + value[0], buf, pos + offsets[fid], value[1])
        else:
            queue.append((pos + offsets[fid], value))
    return pos


def tensor(name: str | bytes, shape: Sequence[int] | V, type_code: int = 9, buffer: int = 0,
           quant: T | None = None, signature: Sequence[int] | None = None) -> T:
    fields = {0: shape if isinstance(shape, V) else V("i", shape), 1: ("b", type_code),
              2: ("I", buffer), 3: V("str", name)}
    if quant:
        fields[4] = quant
    if signature is not None:
        fields[7] = V("i", signature)
    return T(fields)


def tiny_model(tensors: list[T] | None = None, buffers: list[T] | None = None,
               ops: list[T] | None = None, version: int = 3,
               root_fields: dict[int, Any] | None = None) -> T:
    """in (int8 [1,4]) + weights (int8 [4], constant) -> out; one ADD and a signature."""
    quant = T({2: V("f", [0.5]), 3: V("q", [-3])})
    tensors = tensors or [tensor("in", [1, 4], quant=quant), tensor("w", [4], buffer=1),
                          tensor("out", [1, 4], quant=quant)]
    buffers = buffers or [T({}), T({0: V("B", [1, 2, 3, 255])}), T({0: V("B", b"1.14")})]
    ops = ops or [T({0: ("I", 0), 1: V("i", [0, 1]), 2: V("i", [2]), 3: ("B", 1)})]
    signature = T({0: V(None, [T({0: V("str", "x"), 1: ("I", 0)})]),
                   1: V(None, [T({0: V("str", "y"), 1: ("I", 2)})]),
                   2: V("str", "serving_default"), 4: ("I", 0)})
    subgraph = T({0: V(None, tensors), 1: V("i", [0]), 2: V("i", [2]), 3: V(None, ops),
                  4: V("str", "main")})
    return T({0: ("I", version), 1: V(None, [T({0: ("b", 0), 2: ("i", 2), 3: ("i", 0)})]),
              2: V(None, [subgraph]), 3: V("str", "hand-made"), 4: V(None, buffers),
              6: V(None, [T({0: V("str", "min_runtime_version"), 1: ("I", 2)})]),
              7: V(None, [signature]), **(root_fields or {})})


def parse_error(data: bytes) -> str:
    with pytest.raises(ModelFileError) as info:
        TfliteModel.from_bytes(data)
    message = str(info.value)
    assert "at byte" in message and "please report" not in message, message
    return message


# --- hand-made models ------------------------------------------------------------------------

def test_tiny_model_reads_every_field() -> None:
    model = TfliteModel.from_bytes(build(tiny_model()))
    sg = model.subgraphs[0]
    assert (model.version, model.description, sg.name) == (3, "hand-made", "main")
    assert dict(model.metadata) == {"min_runtime_version": b"1.14"}
    sig = model.signature_defs["serving_default"]
    assert (dict(sig.inputs), dict(sig.outputs), sig.subgraph_index) == ({"x": 0}, {"y": 2}, 0)
    assert [t.name for t in sg.tensors] == ["in", "w", "out"]
    assert [t.is_constant for t in sg.tensors] == [False, True, False]
    x = sg.tensors[0]
    assert (x.shape, x.shape_signature, x.dtype_name, x.element_size, x.nbytes) == (
        (1, 4), (1, 4), "int8", 1, 4)
    assert x.quantization is not None
    assert (x.quantization.scale, x.quantization.zero_point) == ((0.5,), (-3,))
    assert sg.tensors[1].quantization is None
    op = sg.operators[0]
    assert (op.op_name, op.version, op.inputs, op.outputs, op.is_custom) == (
        "ADD", 2, (0, 1), (2,), False)
    assert model.tensor_data(0, 1).tolist() == [1, 2, 3, -1]
    assert model.is_full_integer() == (True, [])
    assert (model.op_counts(), model.op_versions()) == ({"ADD": 1}, {"ADD": 2})


def test_operator_codes_above_127_and_custom_ops() -> None:
    codes = V(None, [T({0: ("b", 127), 3: ("i", 150)}), T({0: ("b", 32), 1: V("str", "MyOp")}),
                     T({0: ("b", 9)}), T({0: ("b", 127), 3: ("i", 4000)})])
    ops = [T({0: ("I", i), 1: V("i", [0, -1]), 2: V("i", [2])}) for i in range(4)]
    model = TfliteModel.from_bytes(build(tiny_model(ops=ops, root_fields={1: codes})))
    assert [op.op_name for op in model.subgraphs[0].operators] == [
        "GELU", "MyOp", "FULLY_CONNECTED", "BUILTIN_4000"]
    assert [op.is_custom for op in model.subgraphs[0].operators] == [False, True, False, False]
    assert model.subgraphs[0].operators[0].inputs == (0, -1)
    assert model.op_versions()["GELU"] == 1  # version defaults to 1


def test_dtypes_shapes_and_sizes() -> None:
    tensors = [tensor("f", [2, 3], 0), tensor("empty", [0, 5], 0), tensor("scalar", [], 2),
               tensor("i4", [3], 17, buffer=1), tensor("s", [2], 5, buffer=2),
               tensor("dyn", [1, 8], 0, signature=[-1, 8])]
    buffers = [T({}), T({0: V("B", [0xF1, 0x07])}), T({0: V("B", b"xx")})]
    no_op = [T({0: ("I", 0)})]
    model = TfliteModel.from_bytes(build(tiny_model(tensors, buffers, no_op)))
    f, empty, scalar, i4, s, dyn = model.subgraphs[0].tensors
    assert (f.nbytes, f.numpy_dtype, empty.nbytes, scalar.nbytes) == (24, np.dtype(np.float32), 0, 4)
    assert (i4.nbytes, i4.element_size, model.tensor_data(0, 3).tolist()) == (2, 1, [1, -1, 7])
    assert (s.numpy_dtype, s.element_size, s.nbytes) == (None, 0, 0)
    assert dyn.shape_signature == (-1, 8)
    with pytest.raises(ModelFileError, match="no numpy dtype"):
        model.tensor_data(0, 4)
    with pytest.raises(ModelFileError, match="computed at run time"):
        model.tensor_data(0, 0)
    assert model.is_full_integer() == (True, [])  # no operator touches the float tensors
    bad = tiny_model(tensors=[tensor("in", [1, 4]), tensor("w", [5], buffer=1), tensor("o", [4])])
    with pytest.raises(ModelFileError, match=r"holds 4 bytes, but shape \[5\] of int8 needs 5"):
        TfliteModel.from_bytes(build(bad)).tensor_data(0, 1)


def test_external_buffer_after_the_flatbuffer() -> None:
    def with_external(offset: int) -> bytes:
        buffers = [T({}), T({1: ("Q", offset), 2: ("Q", 4)}), T({0: V("B", b"1.14")})]
        return build(tiny_model(buffers=buffers))

    flatbuffer = with_external(1)  # same layout; the real offset is known once it is built
    data = with_external(len(flatbuffer)) + bytes([9, 8, 7, 6])
    model = TfliteModel.from_bytes(data)
    assert model.buffers[1].external and model.buffers[1].offset == len(flatbuffer)
    assert model.tensor_data(0, 1).tolist() == [9, 8, 7, 6]
    assert "past the end" in parse_error(data[:-1])
    placeholder = TfliteModel.from_bytes(flatbuffer)  # offset 1 means "not set"
    assert not placeholder.buffers[1].external
    assert not placeholder.subgraphs[0].tensors[1].is_constant


@pytest.mark.parametrize(("model", "expected"), [
    (tiny_model(version=4), "schema version 4"),
    (tiny_model(root_fields={2: V(None, [])}), "no subgraphs"),
    (tiny_model(tensors=[tensor("in", [1, 4], 99), tensor("w", [4]), tensor("o", [4])]),
     "unknown tensor type 99"),
    (tiny_model(tensors=[tensor("in", [1, -4]), tensor("w", [4]), tensor("o", [4])]),
     r"impossible shape \[1, -4\]"),
    (tiny_model(tensors=[tensor("in", [0, -4]), tensor("w", [4]), tensor("o", [4])]),
     "negative dimension"),
    (tiny_model(tensors=[tensor("in", [1 << 30] * 3), tensor("w", [4]), tensor("o", [4])]),
     "impossible shape"),
    (tiny_model(tensors=[tensor("in", [4], buffer=7), tensor("w", [4]), tensor("o", [4])]),
     "buffer 7 does not exist"),
    (tiny_model(ops=[T({0: ("I", 0), 1: V("i", [0, 3]), 2: V("i", [2])})]),
     r"inputs at byte \d+: index 3 is outside \[-1, 3\)"),
    (tiny_model(ops=[T({0: ("I", 5), 1: V("i", [0]), 2: V("i", [2])})]),
     "operator code 5 does not exist"),
    (tiny_model(tensors=[tensor("in", V("i", [1], count=0xFFFFFFFF)), tensor("w", [4]),
                         tensor("o", [4])]), "4294967295 elements of 4 bytes run past the end"),
    (tiny_model(tensors=[tensor(b"ok\xff\xfe", [1])]), "name at byte \\d+: string is not valid"),
    (tiny_model(tensors=[tensor("in", [4], quant=T({2: V("f", [1.0, 2.0]), 3: V("q", [0])}))]),
     "2 scales but 1 zero points"),
])
def test_inconsistent_models_are_rejected(model: T, expected: str) -> None:
    data = build(model)
    with pytest.raises(ModelFileError, match=expected):
        TfliteModel.from_bytes(data)
    parse_error(data)


def test_shared_vectors_cannot_amplify_work() -> None:
    shape = V("i", [1] * 2000)  # one vector, referenced by every tensor
    tensors = [tensor(str(i), shape) for i in range(1000)]
    data = build(tiny_model(tensors=tensors, ops=[T({0: ("I", 0)})]))
    assert len(data) < 100_000
    assert "shared too often" in parse_error(data)


def test_root_and_vtable_corruption() -> None:
    data = build(tiny_model())
    root = struct.unpack_from("<I", data)[0]

    def patch(pos: int, fmt: str, value: int) -> bytes:
        out = bytearray(data)
        struct.pack_into(fmt, out, pos, value)
        return bytes(out)

    assert "root offset at byte 0: offset points to byte" in parse_error(patch(0, "<I", len(data)))
    assert "vtable offset points to byte" in parse_error(patch(root, "<i", -(1 << 30)))
    assert "vtable offset points to byte" in parse_error(patch(root, "<i", root + 8))
    vtable = root - struct.unpack_from("<i", data, root)[0]
    assert "invalid vtable size 3" in parse_error(patch(vtable, "<H", 3))
    assert "invalid vtable size" in parse_error(patch(vtable, "<H", 0xFFFE))
    assert "invalid table size" in parse_error(patch(vtable + 2, "<H", 0xFFFF))
    assert "lies outside the table" in parse_error(patch(vtable + 4, "<H", 0xFFF0))
    # A root offset of 0 would make byte 0 a table that is its own vtable: refused as an offset.
    assert "root offset at byte 0: invalid offset 0" in parse_error(patch(0, "<I", 0))


def test_wrong_identifier_and_short_files() -> None:
    data = build(tiny_model())
    message = parse_error(data[:4] + b"TFL2" + data[8:])
    assert "file identifier at byte 4" in message and "b'TFL2'" in message
    assert "at least 8 bytes" in parse_error(b"")
    assert "at least 8 bytes" in parse_error(data[:7])
    assert "past the end" in parse_error(data[:8])


def test_from_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="cannot read model file"):
        TfliteModel.from_file(tmp_path / "missing.tflite")
    with pytest.raises(ModelFileError, match="cannot read model file"):
        TfliteModel.from_file(tmp_path)
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"not a model at all")
    with pytest.raises(ModelFileError, match=r"bad\.tflite: file identifier at byte 4"):
        TfliteModel.from_file(bad)


def test_from_bytes_copies_mutable_input() -> None:
    data = bytearray(build(tiny_model()))
    model = TfliteModel.from_bytes(data)
    data[:] = bytes(len(data))
    assert model.tensor_data(0, 1).tolist() == [1, 2, 3, -1]


# --- corrupted real files --------------------------------------------------------------------

def _exercise(data: bytes) -> bool:
    """Parse and use every accessor; True if parsed, False if rejected with ModelFileError."""
    try:
        model = TfliteModel.from_bytes(data)
    except ModelFileError as exc:
        assert "at byte" in str(exc) and "please report" not in str(exc), str(exc)
        return False
    model.op_counts(), model.op_versions(), model.is_full_integer()
    for sg in model.subgraphs:
        for t in sg.tensors:
            if t.is_constant:
                with contextlib.suppress(ModelFileError):  # e.g. a flipped shape
                    model.tensor_data(sg.index, t.index)
    return True


@pytest.mark.parametrize("name", FUZZ_MODELS)
def test_truncated_files_raise_model_file_error(name: str) -> None:
    data = _testdata(name).read_bytes()
    parsed = [n for n in range(0, len(data), 37) if _exercise(data[:n])]
    # Only cutting the alignment padding after the last string may leave a valid model.
    assert all(n > len(data) - 8 for n in parsed), parsed
    assert _exercise(data)


@pytest.mark.parametrize("name", FUZZ_MODELS)
def test_byte_flips_raise_only_model_file_error(name: str) -> None:
    data = _testdata(name).read_bytes()
    model = TfliteModel.from_bytes(data)
    # Flips inside weights change nothing structural: aim most of them at the rest.
    in_weights = np.zeros(len(data), bool)
    for b in model.buffers:
        in_weights[b.offset : b.offset + b.size] = True
    structure = np.flatnonzero(~in_weights)
    outcomes: collections.Counter[bool] = collections.Counter()
    for seed in range(300):
        rng = np.random.default_rng(seed)
        mutated = bytearray(data)
        for _ in range(int(rng.integers(1, 6))):
            pos = structure[rng.integers(len(structure))] if rng.random() < 0.9 else (
                rng.integers(len(data)))
            mutated[pos] = int(rng.integers(256)) if rng.random() < 0.5 else (
                mutated[pos] ^ (1 << int(rng.integers(8))))
        outcomes[_exercise(bytes(mutated))] += 1
    assert outcomes[False] > 30 and outcomes[True] > 10, outcomes  # both paths were exercised
