"""The C array, the examples and the toolchain helper: compiled, run and measured.

The model data files are compiled with the host C and C++ compilers into programs that
write the array back out (byte-identical to the .tflite, 16-byte aligned), and with the
Arm compiler for a Cortex-M4 (all of it in flash, none in RAM). A missing compiler fails
these tests in CI (CI=true) and skips them elsewhere, with the package that provides it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path

import pytest

from edgeserve.errors import InputError
from edgeserve.converters.microcontroller import toolchain
from edgeserve.converters.tflm.carray import render_model_data, symbol_names
from edgeserve.converters.tflm.examples import TensorDesc, render_examples, sketch_files
from edgeserve.tflite.model import TfliteModel

MODELS = {
    "hello_world": "tflm/hello_world_int8.tflite",
    "vww": "mlperf-tiny/vww_96_int8.tflite",
}
BIG_MODEL = "tflm/mobilenet_v2_quantized_1x3x224x224.tflite"  # 3.98 MB

STRICT_C = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic"]
STRICT_CXX = ["-std=c++17", "-Wall", "-Wextra", "-Werror", "-pedantic"]

# Valid C and C++: the same text is compiled as dump.c and as dump.cc. With WITH_PROBE it
# also checks that a C translation unit sees the very same array (C linkage both ways).
DUMP_PROGRAM = """\
#include <stdint.h>
#include <stdio.h>
#include "{name}_model_data.h"

#ifdef WITH_PROBE
#ifdef __cplusplus
extern "C" {{
#endif
const unsigned char* probe_data(void);
unsigned int probe_len(void);
#ifdef __cplusplus
}}
#endif
#endif

int main(int argc, char** argv) {{
  FILE* out;
  size_t written;
  if (argc != 2) return 2;
  if ((uintptr_t){array} % 16u != 0) {{
    fprintf(stderr, "misaligned: %p\\n", (const void*){array});
    return 3;
  }}
#ifdef WITH_PROBE
  if (probe_data() != {array} || probe_len() != {length}) return 4;
#endif
  out = fopen(argv[1], "wb");
  if (out == NULL) return 5;
  written = fwrite({array}, 1, {length}, out);
  fclose(out);
  return written == {length} ? 0 : 6;
}}
"""

PROBE_UNIT = """\
#include "{name}_model_data.h"

const unsigned char* probe_data(void) {{ return {array}; }}
unsigned int probe_len(void) {{ return {length}; }}
"""


def compiler(kind: str) -> Path:
    """The compiler, or a failure in CI and a skip elsewhere that names the package."""
    try:
        return toolchain.find_compiler(kind)
    except toolchain.MissingToolError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(str(exc))
        pytest.skip(str(exc))


def run(command: list[str | Path]) -> None:
    done = subprocess.run([str(part) for part in command], capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(map(str, command))}\n{done.stdout}{done.stderr}"


def write_data_files(directory: Path, name: str, model: bytes) -> None:
    header, source = render_model_data(name, model)
    (directory / f"{name}_model_data.h").write_text(header)
    (directory / f"{name}_model_data.cc").write_text(source)
    (directory / f"{name}_model_data.c").write_text(source)  # the same text, as C


@pytest.fixture(params=sorted(MODELS))
def model(request, testdata) -> tuple[str, bytes]:
    return request.param, (testdata / MODELS[request.param]).read_bytes()


def test_cxx_program_with_a_c_unit_writes_back_the_exact_model(model, tmp_path):
    gcc, gxx = compiler("host-c"), compiler("host-c++")
    name, data = model
    array, length = symbol_names(name)
    write_data_files(tmp_path, name, data)
    (tmp_path / "dump.cc").write_text(DUMP_PROGRAM.format(name=name, array=array, length=length))
    (tmp_path / "probe.c").write_text(PROBE_UNIT.format(name=name, array=array, length=length))

    run([gcc, *STRICT_C, "-c", tmp_path / "probe.c", "-o", tmp_path / "probe.o"])
    # The header alone must also be plain C99 (no alignas, no C11 keywords).
    run([gcc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only",
         tmp_path / "probe.c"])
    run([gxx, *STRICT_CXX, "-DWITH_PROBE", tmp_path / "dump.cc",
         tmp_path / f"{name}_model_data.cc", tmp_path / "probe.o", "-o", tmp_path / "dump"])
    run([tmp_path / "dump", tmp_path / "out.tflite"])

    assert (tmp_path / "out.tflite").read_bytes() == data


def test_source_renamed_to_c_builds_a_c11_program_that_writes_back_the_exact_model(model, tmp_path):
    gcc = compiler("host-c")
    name, data = model
    array, length = symbol_names(name)
    write_data_files(tmp_path, name, data)
    (tmp_path / "dump.c").write_text(DUMP_PROGRAM.format(name=name, array=array, length=length))

    run([gcc, *STRICT_C, tmp_path / "dump.c", tmp_path / f"{name}_model_data.c",
         "-o", tmp_path / "dump"])
    run([tmp_path / "dump", tmp_path / "out.tflite"])

    assert (tmp_path / "out.tflite").read_bytes() == data


def test_cortex_m4_object_keeps_the_whole_model_in_flash(model, tmp_path):
    compiler("arm-c++")
    compiler("arm-size")
    name, data = model
    write_data_files(tmp_path, name, data)

    obj = toolchain.compile_object(tmp_path / f"{name}_model_data.cc", toolchain.CORTEX_M4_FLAGS)
    sizes = toolchain.arm_size(obj)

    # text holds .rodata: the array, its length and at most alignment padding. Nothing in
    # data or bss, i.e. no RAM copy of the model at startup.
    assert len(data) <= sizes["text"] <= len(data) + 32
    assert sizes["data"] == 0
    assert sizes["bss"] == 0
    # The converter's report figure: the same compile, with the compiler named and dated.
    report = toolchain.arm_data_object_size(tmp_path / f"{name}_model_data.cc", tmp_path)
    assert {key: report[key] for key in ("text", "data", "bss")} == sizes
    assert report["compiler"] == "arm-none-eabi-g++" and report["version"][0].isdigit()
    assert report["flags"] == list(toolchain.CORTEX_M4_FLAGS)


def test_multi_megabyte_model_renders_fast_and_identically(testdata):
    data = (testdata / BIG_MODEL).read_bytes()
    timings, outputs = [], []
    for _ in range(2):
        started = time.perf_counter()
        outputs.append(render_model_data("mobilenet", data))
        timings.append(time.perf_counter() - started)

    assert outputs[0] == outputs[1]
    assert min(timings) < 1.0, f"rendering {len(data)} bytes took {min(timings):.2f} s"
    header, source = outputs[0]
    assert hashlib.sha256(data).hexdigest() in header
    assert f"Size: {len(data)} bytes" in header
    assert source.count(" 0x") == len(data)
    assert f"g_mobilenet_model_data_len = {len(data)}u;" in source


def test_partial_last_row_and_comment_header():
    data = bytes(range(25))  # two full rows of 12 and one byte
    header, source = render_model_data("tiny", data, source="tiny.tflite")

    rows = source.split("g_tiny_model_data[] = {\n", 1)[1].split("};", 1)[0].splitlines()
    assert rows == [
        "  " + " ".join(f"0x{b:02x}," for b in range(0, 12)),
        "  " + " ".join(f"0x{b:02x}," for b in range(12, 24)),
        "  0x18,",
    ]
    assert "Source file: tiny.tflite" in header
    assert 'extern "C"' in header and "alignas(16)" in source


@pytest.mark.parametrize("bad_name", ["9lives", "Hello", "int", "kws-int8", ""])
def test_bad_names_are_rejected(bad_name):
    with pytest.raises(InputError, match="lowercase letters"):
        render_model_data(bad_name, b"\x00")


def test_empty_model_is_rejected():
    with pytest.raises(InputError, match="empty"):
        render_model_data("kws", b"")


def test_missing_tool_names_the_debian_package(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(toolchain.MissingToolError) as caught:
        toolchain.find_compiler("arm-c++")
    message = str(caught.value)
    assert "arm-none-eabi-g++" in message
    assert "gcc-arm-none-eabi" in message and "libstdc++-arm-none-eabi-newlib" in message


def test_compile_error_carries_the_compiler_output(tmp_path):
    compiler("host-c")
    broken = tmp_path / "broken.c"
    broken.write_text("int main(void) { return undeclared_name; }\n")
    with pytest.raises(toolchain.CompileError, match="undeclared_name"):
        toolchain.compile_object(broken, ["-std=c11"], kind="host-c")


def test_examples_use_the_generated_names(testdata):
    model = TfliteModel.from_file(testdata / MODELS["hello_world"])
    graph = model.subgraphs[0]
    inp = TensorDesc.from_tensor(graph.tensors[graph.inputs[0]])
    assert (inp.dtype, inp.shape, inp.quantized, inp.zero_point) == ("int8", (1, 1), True, -128)

    out = TensorDesc.from_tensor(graph.tensors[graph.outputs[0]])
    files = render_examples("hello_world", "hello_world_model_arena.h",
                            "hello_world_model_ops.h", inp, out)

    assert sorted(files) == ["CMakeLists.txt", "hello_world/hello_world.ino", "main.cc"]
    main = files["main.cc"]
    for needed in ('#include "hello_world_model_ops.h"', '#include "hello_world_model_arena.h"',
                   "tflite::GetModel(g_hello_world_model_data)", "TFLITE_SCHEMA_VERSION",
                   "static hello_world_model::OpResolver resolver;",
                   "hello_world_model::RegisterOps(resolver)",
                   "alignas(16) static uint8_t tensor_arena[hello_world_model::kTensorArenaSize];",
                   "interpreter.arena_used_bytes()", "input->data.int8[i]", "interpreter.Invoke()"):
        assert needed in main
    sketch = files["hello_world/hello_world.ino"]
    assert "void setup()" in sketch and "void loop()" in sketch and "Serial.begin" in sketch
    cmake = files["CMakeLists.txt"]
    assert "add_library(hello_world_model STATIC hello_world_model_data.cc)" in cmake
    generated = {"hello_world_model_data.cc": "", "hello_world_model_ops.h": "", **files}
    assert sketch_files("hello_world", generated) == {
        "hello_world_model_data.cc": "hello_world/hello_world_model_data.cpp",
        "hello_world_model_ops.h": "hello_world/hello_world_model_ops.h",
    }


def test_float_and_unquantized_tensors_skip_the_conversion_helpers():
    files = render_examples("f", "f_model_arena.h", "f_model_ops.h",
                            TensorDesc((1, 4), "float32"), TensorDesc((1, 3), "int32"))
    main = files["main.cc"]
    assert "Quantize(" not in main and "Dequantize(" not in main
    assert "input->data.f[i] = ExampleInput(i);" in " ".join(main.split())


def test_unknown_tensor_type_is_rejected():
    with pytest.raises(InputError, match="handle int8"):
        TensorDesc((1,), "complex64")


def test_the_arena_header_picks_the_plan_for_the_pointer_size(tmp_path):
    """kTensorArenaSize is the 32-bit plan on a Cortex-M and the 64-bit plan on a PC, from one
    header, so the generated main.cc runs on both (TFLM's structs hold wider pointers on a PC)."""
    from edgeserve.converters.tflm.arena_header import render_arena_header

    header = render_arena_header("m", arena_bytes=5040, head_bytes=3072, tail_bytes=1956, temp_peak_bytes=0,
                                 host_arena_bytes=6048, terms={}, kernels="reference")
    (tmp_path / "m_model_arena.h").write_text(header)
    (tmp_path / "probe.cc").write_text('#include <cstdio>\n#include "m_model_arena.h"\n'
                                       'int main() { std::printf("%zu", m_model::kTensorArenaSize); }\n')
    run([compiler("host-c++"), *STRICT_CXX, "-I", tmp_path, tmp_path / "probe.cc", "-o", tmp_path / "probe"])
    host = subprocess.run([tmp_path / "probe"], capture_output=True, text=True, check=True).stdout
    assert host == "6048"  # x86-64
    arm = compiler("arm-c++")
    run([arm, "-mcpu=cortex-m4", "-mthumb", "-std=c++17", "-I", tmp_path, "-E", "-dM", tmp_path / "probe.cc",
         "-o", tmp_path / "macros.txt"])
    assert "#define M_MODEL_TENSOR_ARENA_SIZE 5040u" in (tmp_path / "macros.txt").read_text()
