"""`-t mcu-c --cmsis-nn DIR`: the generated C calls the user's CMSIS-NN where a layer fits.

Checked against independent references, with the CMSIS-NN TFLM pins (../shared/tflm's
downloads; the project ships none):
- on the host (CMSIS-NN's plain C path), every shared MLPerf Tiny / TFLM model's outputs
  equal TFLM's reference kernels (the tflite-micro interpreter) bit for bit on 50 random
  inputs, and every layer CMSIS-NN has a kernel for calls it;
- on the emulated Cortex-M4 (its DSP path), the outputs equal the host's, the scratch each
  layer reserves is exactly what CMSIS-NN's own buffer-size function asks for (the test
  build returns an error otherwise), and the instructions fall far below the portable C's;
- AddressSanitizer and the per-kernel region check run clean with CMSIS-NN's kernels;
- the CMake snippet written beside the C builds the model with the listed sources alone;
- bad input (not a CMSIS-NN tree, a tree too old for an operator, a core without DSP) gets
  one error line and nothing written.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from edgeserve.converters.mcu_c import check
from edgeserve.converters.mcu_c.cmsis_nn import FUNCTIONS
from edgeserve.converters.mcu_c.cmsis_nn_tree import locate
from edgeserve.converters.mcu_c.generate import Generated, generate
from edgeserve.tflite.model import TfliteModel
from generated_c import random_inputs, write_files
from tools_required import require_compiler, require_qemu

MODELS = ("mlperf-tiny/kws_ref_model.tflite", "mlperf-tiny/vww_96_int8.tflite",
          "mlperf-tiny/pretrainedResnet_quant.tflite", "mlperf-tiny/ad01_int8.tflite",
          "mlperf-tiny/str_ww_ref_model.tflite", "tflm/person_detect.tflite", "tflm/micro_speech_quantized.tflite",
          "tflm/hello_world_int8.tflite")
SAMPLES = 50


def _generate(testdata: Path, rel: str, tree_dir: Path | None) -> tuple[TfliteModel, Generated]:
    model = TfliteModel.from_file(testdata / rel)
    return model, generate(model, "model", Path(rel).name, cmsis_nn=locate(tree_dir) if tree_dir else None)


@pytest.mark.parametrize("rel", MODELS)
def test_cmsis_nn_layers_are_bit_exact_with_tflm_on_the_host(testdata, cmsis_nn_dir, tmp_path, rel):
    require_compiler("host-c")
    from edgeserve.converters.mcu_c.reference import reference_outputs

    model, generated = _generate(testdata, rel, cmsis_nn_dir)
    # Every layer CMSIS-NN has a kernel for calls it (none of these models broadcasts an ADD
    # or pools a batch), and the rest say they are portable.
    covered = [c for c in generated.choices if c.op in FUNCTIONS]
    assert covered and all(c.library == "cmsis-nn" and c.kernel == FUNCTIONS[c.op] for c in covered), covered
    assert all(c.library == "portable" for c in generated.choices if c.op not in FUNCTIONS)
    assert generated.library_sources and all((cmsis_nn_dir / s).is_file() for s in generated.library_sources)
    directory = write_files(generated, tmp_path / "out")
    harness = check.build_host(directory, "model", tmp_path / "harness", cmsis_nn=cmsis_nn_dir)
    inputs = random_inputs(model, SAMPLES)
    ours = check.run_host(harness, inputs, (generated.output_bytes,))
    which, reference = reference_outputs(model.file_bytes, inputs)
    assert which == "tflm-reference"
    # The comparison can fail only if the reference outputs vary with the input.
    assert len(np.unique(reference.reshape(SAMPLES, -1), axis=0)) > 1
    np.testing.assert_array_equal(ours, reference.reshape(ours.shape))


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    import mcu_c_models

    out = tmp_path_factory.mktemp("cmsis_nn_synthetic")
    return {kind: mcu_c_models.int8_tflite(kind, out) for kind in ("pad", "misc")}


@pytest.mark.parametrize("kind", ["pad", "misc"])
def test_models_built_here_mix_cmsis_nn_and_portable_kernels_bit_exactly(synthetic, cmsis_nn_dir, tmp_path, kind):
    """MAXIMUM/MINIMUM (with CMSIS-NN's broadcasting), pooling with padding, and ADD/MUL of a
    broadcast constant, which CMSIS-NN does not take and which stay portable, saying why."""
    require_compiler("host-c")
    from edgeserve.converters.mcu_c.reference import reference_outputs

    model = TfliteModel.from_file(synthetic[kind])
    generated = generate(model, "model", kind, cmsis_nn=locate(cmsis_nn_dir))
    on = {c.op for c in generated.choices if c.library == "cmsis-nn"}
    portable = {c.op: c.why for c in generated.choices if c.library == "portable"}
    if kind == "misc":
        assert {"MAXIMUM", "MINIMUM", "CONV_2D", "FULLY_CONNECTED"} <= on and "SUB" in portable
    else:
        assert {"MAX_POOL_2D", "AVERAGE_POOL_2D", "CONV_2D"} <= on
        assert any(why and "broadcast" in why for why in portable.values())
    directory = write_files(generated, tmp_path / "out")
    harness = check.build_host(directory, "model", tmp_path / "harness", cmsis_nn=cmsis_nn_dir)
    rng = np.random.default_rng(1)
    levels = rng.integers(-100, 100, size=(SAMPLES, 1, 1, 1, 1))
    inputs = np.clip(random_inputs(model, SAMPLES).astype(np.int32) // 4 + levels, -128, 127).astype(np.int8)
    ours = check.run_host(harness, inputs, (generated.output_bytes,))
    which, reference = reference_outputs(model.file_bytes, inputs)
    assert which == "tflm-reference" and len(np.unique(reference.reshape(SAMPLES, -1), axis=0)) > 1
    np.testing.assert_array_equal(ours, reference.reshape(ours.shape))


@pytest.mark.parametrize("rel", ["mlperf-tiny/kws_ref_model.tflite", "mlperf-tiny/pretrainedResnet_quant.tflite"])
def test_cortex_m4_runs_cmsis_nn_dsp_kernels_with_exactly_the_scratch_they_ask_for(testdata, cmsis_nn_dir, tmp_path,
                                                                                   rel):
    require_qemu()
    model, library = _generate(testdata, rel, cmsis_nn_dir)
    _, portable = _generate(testdata, rel, None)
    inputs = random_inputs(model, 2, seed=5)
    lib_dir, port_dir = write_files(library, tmp_path / "lib"), write_files(portable, tmp_path / "port")
    host = check.run_host(check.build_host(lib_dir, "model", tmp_path / "host", cmsis_nn=cmsis_nn_dir), inputs,
                          (library.output_bytes,))
    # The test build checks each layer's reservation against CMSIS-NN's own
    # arm_*_get_buffer_size on this DSP core (exact equality), returning an error otherwise.
    run = check.run_cortex_m4(check.build_cortex_m4(lib_dir, "model", inputs, tmp_path / "m4", cmsis_nn=cmsis_nn_dir),
                              "model", library.output_bytes)
    np.testing.assert_array_equal(run.outputs, host.reshape(2, -1))
    assert len(np.unique(host.reshape(2, -1), axis=0)) == 2  # the inputs give different outputs
    base = check.run_cortex_m4(check.build_cortex_m4(port_dir, "model", inputs, tmp_path / "m4p"), "model",
                               portable.output_bytes)
    np.testing.assert_array_equal(base.outputs, run.outputs)
    # Instruction counts are deterministic under -icount: CMSIS-NN's DSP paths take well
    # under half the portable C's on these convolutional models (measured 0.22x and 0.29x).
    assert run.instructions[-1] < 0.5 * base.instructions[-1]
    # The library's kernels are in the image, and none of its objects calls software
    # double-precision arithmetic (newlib's printf in the test harness does; not counted).
    nm = shutil.which("arm-none-eabi-nm") or "arm-none-eabi-nm"
    symbols = subprocess.run([nm, str(tmp_path / "m4" / "model.elf")], capture_output=True, text=True,
                             check=True).stdout
    assert "arm_convolve_wrapper_s8" in symbols
    _, objects = check.cortex_m4_library(lib_dir, cmsis_nn_dir)  # the objects that image linked
    assert len(objects) == len(library.library_sources)
    for obj in objects:
        undefined = subprocess.run([nm, "-u", str(obj)], capture_output=True, text=True, check=True).stdout
        assert "__aeabi_d" not in undefined, obj


def test_a_scratch_reservation_one_byte_short_is_caught_on_the_board(testdata, cmsis_nn_dir, tmp_path):
    """The exact-scratch check can fail: cut one layer's reservation and the firmware says so."""
    require_qemu()
    model, generated = _generate(testdata, "mlperf-tiny/kws_ref_model.tflite", cmsis_nn_dir)
    directory = write_files(generated, tmp_path / "lib")
    source = directory / "model.c"
    text = source.read_text()
    first = re.search(r"MODEL_SCRATCH\((.*), (\d+)\);", text)
    assert first is not None and int(first.group(2)) > 0
    source.write_text(text.replace(first.group(0), f"MODEL_SCRATCH({first.group(1)}, {int(first.group(2)) - 1});", 1))
    image = check.build_cortex_m4(directory, "model", random_inputs(model, 1), tmp_path / "m4", cmsis_nn=cmsis_nn_dir)
    with pytest.raises(RuntimeError, match="error -3"):
        check.run_cortex_m4(image, "model", generated.output_bytes)


def test_sanitizers_and_region_check_run_clean_with_cmsis_nn(testdata, cmsis_nn_dir, tmp_path):
    require_compiler("host-c")
    # ResNet-8: im2col scratch on every convolution, and ADDs that write over an operand.
    model, generated = _generate(testdata, "mlperf-tiny/pretrainedResnet_quant.tflite", cmsis_nn_dir)
    assert any(s.scratch_bytes for s in generated.steps) and generated.plan.inplace_sources
    directory = write_files(generated, tmp_path / "out")
    inputs = random_inputs(model, 2)
    sanitized = check.build_host(directory, "model", tmp_path / "asan", sanitize=True, cmsis_nn=cmsis_nn_dir)
    plain = check.build_host(directory, "model", tmp_path / "plain", cmsis_nn=cmsis_nn_dir)
    np.testing.assert_array_equal(check.run_host(sanitized, inputs, (generated.output_bytes,)),
                                  check.run_host(plain, inputs, (generated.output_bytes,)))


def test_the_cmake_snippet_builds_the_model_with_the_listed_sources(testdata, cmsis_nn_dir, tmp_path):
    require_compiler("host-c")
    cmake = shutil.which("cmake")
    if cmake is None:
        message = "cmake is not on PATH (Debian package cmake; `make toolchain` installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    model, generated = _generate(testdata, "tflm/micro_speech_quantized.tflite", cmsis_nn_dir)
    directory = write_files(generated, tmp_path / "mcu-c")
    harness = Path(str(check._board_file("host", "es_harness.c")))
    project = tmp_path / "user"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(f"""cmake_minimum_required(VERSION 3.13)
project(user_firmware C)
set(CMSIS_NN_DIR {cmsis_nn_dir})
include({directory}/model.cmake)
add_executable(harness {harness})
target_compile_definitions(harness PRIVATE ES_HEADER="model.h" ES_INVOKE=model_invoke
  ES_INPUT_BYTES=MODEL_INPUT_BYTES ES_OUTPUT_BYTES=MODEL_OUTPUT_BYTES ES_OUTPUT_TYPE=MODEL_OUTPUT_TYPE)
target_link_libraries(harness PRIVATE model)
""")
    build = tmp_path / "build"
    for command in ([cmake, "-S", str(project), "-B", str(build)], [cmake, "--build", str(build)]):
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    inputs = random_inputs(model, 5)
    by_cmake = check.run_host(build / "harness", inputs, (generated.output_bytes,))
    direct = check.run_host(check.build_host(directory, "model", tmp_path / "direct", cmsis_nn=cmsis_nn_dir), inputs,
                            (generated.output_bytes,))
    np.testing.assert_array_equal(by_cmake, direct)
    assert len(np.unique(direct, axis=0)) > 1


@pytest.fixture
def cli():
    from click.testing import CliRunner

    from edgeserve.cli import cli as command

    return lambda *args, env=None: CliRunner().invoke(command, list(args), env=env)


def test_convert_reports_the_library_per_layer_and_verify_regenerates(testdata, cmsis_nn_dir, tmp_path, cli):
    require_compiler("host-c")
    out = tmp_path / "kws"
    result = cli("convert", str(testdata / "mlperf-tiny/kws_ref_model.tflite"), "-t", "mcu-c", "--name", "kws",
                 "--cmsis-nn", str(cmsis_nn_dir), "-o", str(out), "--json")
    assert result.exit_code == 0, result.output
    entry = next(a for a in json.loads(result.output)["artifacts"] if a["target"] == "mcu-c")
    assert entry["verification"]["bit_exact"] and entry["verification"]["samples"] == 50
    library = entry["cmsis_nn"]
    assert library["layers"] == library["of"] == 12  # KWS: 5 conv, 4 depthwise, pool, FC, softmax
    assert (out / "mcu-c" / "kws.cmake").is_file()
    assert (out / "mcu-c" / "cmsis_nn_sources.txt").read_text().split() == library["sources"]
    report = json.loads((out / "reports" / "mcu-c.json").read_text())
    conv = next(s for s in report["steps"] if s["op"] == "CONV_2D")
    assert conv["library"] == "cmsis-nn" and conv["kernel"] == "arm_convolve_wrapper_s8" and conv["scratch_bytes"] > 0
    assert cli("verify", str(out)).exit_code == 0
    # CMSIS_NN_DIR works as well as the flag.
    again = cli("convert", str(testdata / "tflm/hello_world_int8.tflite"), "-t", "mcu-c", "-o", str(tmp_path / "hw"),
                "--json", env={"CMSIS_NN_DIR": str(cmsis_nn_dir)})
    assert again.exit_code == 0, again.output
    hw = next(a for a in json.loads(again.output)["artifacts"] if a["target"] == "mcu-c")
    assert hw["cmsis_nn"]["functions"] == ["arm_fully_connected_wrapper_s8"]


def _refused(result, out: Path, *needles: str) -> None:
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len([line for line in lines if line.startswith("error:")]) == 1, result.output
    for needle in needles:
        assert needle in result.output, result.output
    assert not out.exists() or not any(out.rglob("*.c")), "nothing may be written"


def test_bad_cmsis_nn_input_is_refused_in_one_line_with_nothing_written(testdata, cmsis_nn_dir, tmp_path, cli):
    model = str(testdata / "mlperf-tiny/kws_ref_model.tflite")
    out = tmp_path / "out"
    _refused(cli("convert", model, "-t", "mcu-c", "--cmsis-nn", str(tmp_path / "nowhere"), "-o", str(out)), out,
             "CMSIS-NN folder", "is not a folder")
    (tmp_path / "empty").mkdir()
    _refused(cli("convert", model, "-t", "mcu-c", "--cmsis-nn", str(tmp_path / "empty"), "-o", str(out)), out,
             "Include/arm_nnfunctions.h", "has neither")
    _refused(cli("convert", model, "-t", "mcu-c", "-o", str(out), env={"CMSIS_NN_DIR": str(tmp_path / "empty")}),
             out, "CMSIS_NN_DIR")
    # A core CMSIS-NN's DSP kernels are not for (Xtensa).
    _refused(cli("convert", model, "-t", "mcu-c", "--cmsis-nn", str(cmsis_nn_dir), "-p", "esp32-s3", "-o", str(out)),
             out, "esp32-s3 is xtensa")
    # A tree too old for an operator: its header does not declare the function a layer needs.
    old = tmp_path / "old"
    shutil.copytree(cmsis_nn_dir, old)
    header = old / "Include" / "arm_nnfunctions.h"
    header.write_text(header.read_text().replace("arm_softmax_s8(", "arm_softmax_s8_removed("))
    _refused(cli("convert", model, "-t", "mcu-c", "--cmsis-nn", str(old), "-o", str(out)), out,
             "too old for SOFTMAX", "arm_softmax_s8")
