"""Tests of edgeserve.converters.microcontroller.ops (TFLM operator table), ops_header (the resolver header) and names.

Operators are read a second time with the flatbuffers-generated schema that LiteRT ships, so
resolve_ops is checked against an independent reader. Unsupported and too-new operators are
made by editing real models through that schema (object API, packed again), not by hand.
The generated header is compiled with the host g++ against real TFLM's resolver header and
library (``../shared/tflm``, built once for the tests, see tests/tflm_build.py) and run, so
every resolver method the table names is shown to exist in TFLM.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from edgeserve.errors import InputError, UnsupportedOpError
from edgeserve.converters.microcontroller.names import c_identifier
from edgeserve.converters.microcontroller.ops import (
    CORE_CODE_BYTES,
    SUPPORTED,
    TFLM_CUSTOM_KERNELS,
    OpUse,
    resolve_ops,
)
from edgeserve.converters.tflm.ops_header import render_ops_header
from edgeserve.converters.microcontroller.toolchain import find_compiler
from edgeserve.tflite.model import TfliteModel

from mcu_models import INT8_MODELS  # noqa: E402  (tests/ is on sys.path)
from tflm_build import STRICT_CXX, TflmBuild  # noqa: E402


# --- an independent reader -------------------------------------------------------------------
def _schema() -> Any:
    return pytest.importorskip("ai_edge_litert.schema_py_generated")


def _builtin_names() -> dict[int, str]:
    return {v: k for k, v in vars(_schema().BuiltinOperator).items() if not k.startswith("_")}


def _code_name(code: Any) -> str:
    number = max(code.builtinCode, code.deprecatedBuiltinCode)
    if number == _schema().BuiltinOperator.CUSTOM:
        return code.customCode.decode()
    return _builtin_names()[number]


def _read_ops(data: bytes) -> dict[str, tuple[int, int]]:
    """Operator name -> (highest version, number of layers), over every subgraph."""
    model = _schema().ModelT.InitFromPackedBuf(data, 0)
    versions: dict[str, int] = {}
    counts: Counter[str] = Counter()
    for subgraph in model.subgraphs:
        for op in subgraph.operators:
            code = model.operatorCodes[op.opcodeIndex]
            name = _code_name(code)
            versions[name] = max(code.version, versions.get(name, 0))
            counts[name] += 1
    return {name: (versions[name], counts[name]) for name in versions}


def _edited(data: bytes, edit: Callable[[Any], None]) -> bytes:
    """Return ``data`` with ``edit`` applied to its ModelT, serialized again."""
    import flatbuffers  # installed with ai-edge-litert

    model = _schema().ModelT.InitFromPackedBuf(data, 0)
    edit(model)
    builder = flatbuffers.Builder(len(data) + 1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _first_layer(data: bytes, op_name: str) -> tuple[int, str, int]:
    """(index, first output tensor name, layer count) of ``op_name`` in subgraph 0."""
    model = _schema().ModelT.InitFromPackedBuf(data, 0)
    subgraph = model.subgraphs[0]
    layers = [(i, op) for i, op in enumerate(subgraph.operators)
              if _code_name(model.operatorCodes[op.opcodeIndex]) == op_name]
    index, op = layers[0]
    return index, subgraph.tensors[op.outputs[0]].name.decode(), len(layers)


def _set_code(model: Any, old: str, new: str | None = None, version: int | None = None,
              custom: str | None = None) -> None:
    """Point the operator code named ``old`` at another builtin, a custom code or a version."""
    schema = _schema()
    code = next(c for c in model.operatorCodes if _code_name(c) == old)
    if new is not None or custom is not None:
        number = getattr(schema.BuiltinOperator, new or "CUSTOM")
        code.builtinCode = number
        # Codes above 127 live only in the int32 field; the int8 one holds a placeholder.
        code.deprecatedBuiltinCode = min(number, 127)
        code.customCode = custom.encode() if custom else None
    if version is not None:
        code.version = version


# --- the real models -------------------------------------------------------------------------
@pytest.mark.parametrize("relpath", INT8_MODELS)
def test_every_int8_model_resolves_to_exactly_its_operators(testdata, relpath):
    data = (testdata / relpath).read_bytes()
    expected = _read_ops(data)

    uses = resolve_ops(TfliteModel.from_bytes(data))

    assert [u.builtin for u in uses] == sorted(expected)
    for use in uses:
        assert (use.version, use.count) == expected[use.builtin], use.builtin
        assert use.resolver_method == SUPPORTED[use.builtin].resolver_method
        assert use.code_bytes == SUPPORTED[use.builtin].code_bytes > 0


def test_person_detect_keeps_its_old_conv_version(testdata):
    # Its int8 CONV_2D carries version 2, which today's rules give to hybrid models: the
    # table must not reject versions below the maximum (see the ops module docstring).
    uses = {u.builtin: u for u in resolve_ops(
        TfliteModel.from_file(testdata / "tflm/person_detect.tflite"))}
    assert uses["CONV_2D"].version == 2 and uses["CONV_2D"].count == 14


# --- models TFLM cannot run ------------------------------------------------------------------
def test_too_new_version_names_op_version_layer_and_the_supported_version(testdata):
    original = (testdata / "mlperf-tiny/kws_ref_model.tflite").read_bytes()
    newest = SUPPORTED["CONV_2D"].max_version
    data = _edited(original, lambda m: _set_code(m, "CONV_2D", version=newest + 1))
    index, output, layers = _first_layer(data, "CONV_2D")
    assert layers == 5

    with pytest.raises(UnsupportedOpError) as caught:
        resolve_ops(TfliteModel.from_bytes(data))

    message = str(caught.value)
    assert caught.value.op == "CONV_2D" and caught.value.target == "mcu"
    assert f"CONV_2D version {newest + 1} at layer {index} ('{output}')" in message
    assert "and 2 more" in message  # three layers shown, two counted
    assert f"up to version {newest}" in message
    assert "quantize to int8" in message


def test_operator_without_a_kernel_and_a_custom_op_are_reported_together(testdata):
    original = (testdata / "tflm/micro_speech_quantized.tflite").read_bytes()
    assert "TILE" not in SUPPORTED

    def edit(model: Any) -> None:
        _set_code(model, "RESHAPE", new="TILE")
        _set_code(model, "SOFTMAX", custom="MyPostprocess", version=1)

    data = _edited(original, edit)
    assert set(_read_ops(data)) == {"DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TILE",
                                    "MyPostprocess"}
    tile_index, tile_output, _ = _first_layer(data, "TILE")
    custom_index, custom_output, _ = _first_layer(data, "MyPostprocess")

    with pytest.raises(UnsupportedOpError) as caught:
        resolve_ops(TfliteModel.from_bytes(data))

    message = str(caught.value)
    assert "2 problems:" in message
    assert f"TILE version 1 at layer {tile_index} ('{tile_output}'): TFLM has no kernel" in message
    assert (f"MyPostprocess version 1 at layer {custom_index} ('{custom_output}'): custom "
            "operator with no TFLM kernel") in message
    assert "Replace layers TFLM has no kernel for" in message
    assert "MicroMutableOpResolver::AddCustom" in message


def test_custom_ops_with_a_tflm_kernel_name_the_method_that_registers_them(testdata):
    data = (testdata / "tflm/audio_preprocessor_int8.tflite").read_bytes()
    custom = {name for name in _read_ops(data) if name.startswith("Signal")}
    assert len(custom) == 9

    with pytest.raises(UnsupportedOpError) as caught:
        resolve_ops(TfliteModel.from_bytes(data))

    message = str(caught.value)
    assert f"{len(custom)} problems:" in message
    for name in custom:
        assert f"MicroMutableOpResolver::{TFLM_CUSTOM_KERNELS[name]}" in message
    assert "CAST" not in message.split("Supported ops:")[0]  # its builtin ops are fine


# --- the generated header --------------------------------------------------------------------
_PROGRAM = """#include "{name}_model_ops.h"
#include "{name}_model_ops.h"  // the include guard must make this harmless

int main() {{
  {name}_model::OpResolver resolver;
  if ({name}_model::RegisterOps(resolver) != kTfLiteOk) return 10;
  if (resolver.GetRegistrationLength() != {name}_model::kOpCount) return 11;
  if ({name}_model::RegisterOps(resolver) != kTfLiteError) return 12;  // all already there
  tflite::MicroMutableOpResolver<{name}_model::kOpCount - 1> too_small;
  if ({name}_model::RegisterOps(too_small) != kTfLiteError) return 13;
  if (too_small.GetRegistrationLength() != {name}_model::kOpCount - 1) return 14;
  tflite::MicroMutableOpResolver<{name}_model::kOpCount + 3> roomy;  // room for custom ops
  if ({name}_model::RegisterOps(roomy) != kTfLiteOk) return 15;
  return 0;
}}
"""


def _compile_and_run(tmp_path: Path, name: str, ops: list[OpUse], tflm: TflmBuild) -> None:
    """Build the header into a program against real TFLM and run its checks (see _PROGRAM)."""
    (tmp_path / f"{name}_model_ops.h").write_text(render_ops_header(name, ops))
    (tmp_path / "main.cc").write_text(_PROGRAM.format(name=name))
    exe = tmp_path / "main"
    build = subprocess.run(
        [str(find_compiler("host-c++")), *STRICT_CXX, f"-I{tmp_path}", *tflm.include_flags,
         str(tmp_path / "main.cc"), str(tflm.library), "-o", str(exe)],
        capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-4000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True)
    assert run.returncode == 0, f"check {run.returncode} failed in main.cc: {run.stdout}{run.stderr}"


@pytest.mark.parametrize("relpath", ["mlperf-tiny/kws_ref_model.tflite",
                                     "tflm/trained_lstm_int8.tflite",
                                     "tflm/hello_world_int8.tflite"])
def test_generated_header_compiles_and_registers_exactly_n_ops(testdata, tmp_path, relpath, tflm):
    ops = resolve_ops(TfliteModel.from_file(testdata / relpath))
    text = render_ops_header("demo", ops)
    assert f"constexpr unsigned int kOpCount = {len(ops)};" in text
    assert text.count("status = resolver.Add") == len(ops)
    _compile_and_run(tmp_path, "demo", ops, tflm)


def test_header_with_every_supported_op_compiles(tmp_path, tflm):
    ops = [OpUse(op.builtin, op.max_version, 1, op.resolver_method, op.code_bytes)
           for op in SUPPORTED.values()]
    _compile_and_run(tmp_path, "everything", ops, tflm)


def test_header_text_names_versions_layers_and_guards(testdata):
    ops = resolve_ops(TfliteModel.from_file(testdata / "mlperf-tiny/kws_ref_model.tflite"))
    text = render_ops_header("kws", ops)
    assert text.splitlines()[2:4] == ["#ifndef EDGESERVE_KWS_MODEL_OPS_H_",
                                      "#define EDGESERVE_KWS_MODEL_OPS_H_"]
    assert '#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"' in text
    assert "namespace kws_model {" in text
    assert "  // CONV_2D version 3, used by 5 layers\n  status = resolver.AddConv2D();" in text
    assert "  // RESHAPE version 1, used by 1 layer\n" in text


def test_header_refuses_bad_names_no_ops_and_duplicates():
    conv = OpUse("CONV_2D", 3, 1, "AddConv2D", 1)
    with pytest.raises(InputError, match="lowercase letters"):
        render_ops_header("KWS-1", [conv])
    with pytest.raises(InputError, match="no operators"):
        render_ops_header("kws", [])
    with pytest.raises(InputError, match="twice.*CONV_2D"):
        render_ops_header("kws", [conv, conv])


# --- names -----------------------------------------------------------------------------------
@pytest.mark.parametrize("good", ["kws", "kws_ref_model2", "a", "a" * 39])
def test_c_identifier_accepts_plain_lowercase_identifiers(good):
    assert c_identifier(good) == good


@pytest.mark.parametrize(("bad", "got", "suggestion"), [
    ("KWS", "the character(s) 'KSW'", "kws"),
    ("kws-int8", "the character(s) '-'", "kws_int8"),
    ("9lives", "a leading digit", "model_9lives"),
    ("", "an empty name", "model"),
    ("a__b", "a double underscore", "a_b"),
    ("class", "a C/C++ keyword", "class_model"),
    ("_private", "a leading underscore", "private_model"),
    ("a_", "a trailing underscore (the generated names add suffixes: a__model has '__')", "a"),
    ("a" * 300, "300 characters (at most 39", "a" * 39),
    # names the generated project uses itself: es_conv built, was said ok, and did not link
    ("main", "a name the generated project already uses", "main_model"),
    ("stdint", "a name the generated project already uses", "stdint_model"),
    ("es_conv", "a name the generated project already uses", "m_es_conv"),
    ("arm_convolve_s8", "a name the generated project already uses", "m_arm_convolve_s8"),
])
def test_c_identifier_says_what_was_expected_and_what_was_given(bad, got, suggestion):
    with pytest.raises(InputError) as caught:
        c_identifier(bad)
    message = str(caught.value)
    assert "expected lowercase letters (a-z), digits and underscores" in message
    assert f"got {got}" in message and f"Try '{suggestion}'" in message


def test_a_file_named_like_a_name_the_project_uses_gets_a_name_that_is_not():
    from edgeserve.converters.microcontroller.int8_source import default_name

    assert [default_name(stem) for stem in ("main", "es_kernels", "stdint", "Float", "kws-ref")] == \
        ["main_model", "m_es_kernels", "stdint_model", "float_model", "kws_ref"]
    for stem in ("main", "es_kernels", "stdint", "Float"):
        assert c_identifier(default_name(stem)) == default_name(stem)


# --- the table against the installed TFLM wheel ----------------------------------------------
# Kernels in the wheel that are not builtin operators: custom ops and type-specific variants.
_WHEEL_NON_BUILTIN = {"BASIC_CLASSIFIER", "L2NORM_REF", "CIRCULAR_BUFFER", "DECODE", "DELAY",
                      "DETECTION_POSTPROCESS", "ENERGY", "ETHOSU", "FFT_AUTO_SCALE",
                      "FILTER_BANK", "FILTER_BANK_LOG", "FILTER_BANK_SPECTRAL_SUBTRACTION",
                      "FILTER_BANK_SQUARE_ROOT", "FRAMER", "IRFFT", "OVERLAP_ADD", "PCAN", "RFFT",
                      "STACKER", "WINDOW"}


def _wheel_kernels() -> set[str]:
    spec = importlib.util.find_spec("tflite_micro")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("tflite-micro is not installed (pip install 'edgeserve[convert]')")
    runtime = Path(next(iter(spec.submodule_search_locations))) / "python/tflite_micro/_runtime.so"
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm is not installed (Debian: apt-get install binutils)")
    symbols = subprocess.run([nm, "-C", "--defined-only", str(runtime)], capture_output=True,
                             text=True, check=True).stdout
    # Kernel factories are functions "tflite::[...::]Register_NAME()" in the text section.
    return set(re.findall(r" [Tt] \S*tflite::\S*Register_([A-Z0-9_]+)\(\)$", symbols, re.M))


def test_every_operator_in_the_table_has_a_kernel_in_the_tflm_wheel():
    kernels = _wheel_kernels()
    assert len(kernels) > 100
    assert sorted(set(SUPPORTED) - kernels) == []


def test_the_table_lists_every_builtin_kernel_of_the_tflm_wheel():
    variants = re.compile(r"_(FLOAT|INT16|INT32)$")  # type-specific entry points of one kernel
    builtin = {k for k in _wheel_kernels() if not variants.search(k)} - _WHEEL_NON_BUILTIN
    assert sorted(builtin - set(SUPPORTED)) == [], "the wheel has kernels missing from the table"


# --- table consistency and import weight -----------------------------------------------------
def test_table_rows_are_consistent():
    from edgeserve.tflite.model import BUILTIN_OPS

    assert len(SUPPORTED) == 100
    for name, op in SUPPORTED.items():
        assert name == op.builtin and name in BUILTIN_OPS
        assert re.fullmatch(r"Add[A-Z][A-Za-z0-9]*", op.resolver_method), op
        assert op.max_version >= 1 and op.code_bytes > 0
    assert len({op.resolver_method for op in SUPPORTED.values()}) == len(SUPPORTED)
    assert SUPPORTED["BROADCAST_TO"].max_version >= 2  # its versions start at 2
    assert 10_000 < CORE_CODE_BYTES < 200_000


def test_importing_the_op_table_stays_light():
    code = ("import sys, edgeserve.converters.microcontroller.ops, edgeserve.converters.tflm.ops_header; "
            "heavy = {'tensorflow', 'tflite_micro', 'ai_edge_litert'} & set(sys.modules); "
            "sys.exit(sorted(heavy) or 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
