"""mcu-c on int16 activations with int8 weights (the 16x8 scheme the INT8 retry chooses when int8
activations miss the bound): models converted by TensorFlow's own 16x8 converter, checked bit
for bit against the tflite-micro interpreter (TFLM's reference kernels), or LiteRT's reference
kernels where TFLM cannot run the model, on inputs over the whole int16 range, on the host and
on the emulated Cortex-M4. MediaPipe's palm and pose detectors, the real models this is for,
run in tests/test_corpus.py."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest

from edgeserve.converters.microcontroller.samples import sample_inputs
from edgeserve.converters.mcu_c import check
from edgeserve.converters.mcu_c.generate import generate
from edgeserve.converters.mcu_c.lower import UnsupportedOperatorError
from edgeserve.tflite.model import TfliteModel
from tools_required import require_compiler, require_qemu

SAMPLES = 50


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    import mcu_c_models

    out = tmp_path_factory.mktemp("mcu_c_int16")
    return {"wide": mcu_c_models.int16x8_tflite("wide", out),  # int64 biases: 64-bit accumulators
            "move_int32_bias": mcu_c_models.int16x8_tflite("move", out, int32_bias=True),
            "wide_tflm": mcu_c_models.int16x8_tflite("wide_tflm", out),
            "wide_act": mcu_c_models.int16x8_tflite("wide_act", out),
            "wide_sig": mcu_c_models.int16x8_tflite("wide_sig", out),
            "wide_tconv": mcu_c_models.int16x8_tflite("wide_tconv", out),
            "wide_int32_bias": mcu_c_models.int16x8_tflite("wide", out, int32_bias=True),
            "softmax": mcu_c_models.int16x8_tflite("pad", out)}


def _write(generated, directory):
    for rel, text in generated.files.items():
        (directory / rel).parent.mkdir(parents=True, exist_ok=True)
        (directory / rel).write_text(text)
    return directory


@pytest.mark.parametrize(("kind", "ops", "kernels", "reference"), [
    ("wide", {"PAD", "STRIDED_SLICE", "CONCATENATION", "SUB", "MAXIMUM", "MINIMUM"},
     {"es_conv2d_s16", "es_depthwise_conv2d_s16", "es_fully_connected_s16", "es_max_pool_s16", "es_average_pool_s16",
      "es_add_s16", "es_sub_s16", "es_mul_s16", "es_maximum_s16", "es_minimum_s16", "es_requantize16", "es_pad",
      "es_copy4d", "es_concatenation"}, "tflm"),
    ("move_int32_bias", {"TRANSPOSE"}, {"es_conv2d_s16", "es_fully_connected_s16", "es_copy4d", "es_concatenation"},
     "tflm"),
    # RELU6 between two scales: TFLM clamps in the input's quantization (the C follows it here).
    ("wide_tflm", {"RELU", "RELU6", "MEAN", "RESIZE_NEAREST_NEIGHBOR"},
     {"es_requantize16", "es_mean_s16", "es_resize_nearest", "es_fully_connected_s16"}, "tflm"),
    # LOGISTIC interpolates in TFLite's sigmoid table (test_the_sigmoid_table_is_tflites).
    ("wide_sig", {"LOGISTIC"}, {"es_logistic_s16"}, "tflm"),
    ("wide_tconv", {"TRANSPOSE_CONV", "RELU"}, {"es_transpose_conv2d_s16"}, "tflm"),
    # TFLM has no int16 RESIZE_BILINEAR: LiteRT judges, and the C follows LiteRT's RELU6 here.
    ("wide_act", {"RELU", "RELU6", "MEAN", "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "MUL"},
     {"es_resize_bilinear_s16", "es_requantize16", "es_mean_s16", "es_mul_s16"}, "litert"),
])
def test_int16_kernels_are_bit_exact_with_the_reference(models, tmp_path, kind, ops, kernels, reference):
    from edgeserve.converters.mcu_c.reference import reference_outputs

    require_compiler("host-c")
    model = TfliteModel.from_file(models[kind])
    graph = model.subgraphs[0]
    assert graph.tensors[graph.inputs[0]].dtype_name == "int16"
    assert ops <= set(model.op_counts())
    generated = generate(model, "model", kind)
    assert kernels <= {s.kernel for s in generated.steps if s.kernel}
    harness = check.build_host(_write(generated, tmp_path / "out"), "model", tmp_path / "harness")
    # Half over the whole int16 range (as convert checks), half around levels that differ per
    # sample (values like the calibration's, where a model with clamps does not saturate).
    wide = np.stack([s[0] for s in sample_inputs(model, SAMPLES // 2)])
    rng = np.random.default_rng(1)
    levels = rng.integers(-8000, 8000, size=(SAMPLES - len(wide),) + (1,) * (wide.ndim - 1))
    typical = np.clip(rng.standard_normal((SAMPLES - len(wide), *wide.shape[1:])) * 8000 + levels, -32768, 32767)
    inputs = np.concatenate([wide, typical.astype(np.int16)])
    ours = check.run_host(harness, inputs, tuple(graph.tensors[graph.outputs[0]].shape), "int16")
    which, expected = reference_outputs(model.file_bytes, inputs)
    assert which.startswith(f"{reference}-reference"), which
    assert len(np.unique(expected.reshape(SAMPLES, -1), axis=0)) >= SAMPLES // 3  # outputs vary: it can fail
    np.testing.assert_array_equal(ours, expected.reshape(ours.shape))


def test_what_tflm_cannot_run_in_int16_is_refused_by_name(models):
    # TFLM's int16 depthwise kernel reads its bias as int64 (measured: 64,554 steps off with an
    # int32 one), so there is nothing to be exact with.
    with pytest.raises(UnsupportedOperatorError, match="DEPTHWISE_CONV_2D .* int32 bias"):
        generate(TfliteModel.from_file(models["wide_int32_bias"]), "model", "x")
    with pytest.raises(UnsupportedOperatorError, match="SOFTMAX .* on int16 tensors .* -t mcu"):
        generate(TfliteModel.from_file(models["softmax"]), "model", "x")


def test_convert_runs_an_int16_model_on_the_emulated_cortex_m4(models, tmp_path):
    """The whole target from the CLI: bit-exact on the host, AddressSanitizer and the region check
    clean, and the Cortex-M4 build (64-bit accumulators on a 32-bit core) prints the host's
    outputs. The objects call no soft-float double routine."""
    from click.testing import CliRunner

    from edgeserve.cli import cli

    require_qemu()
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["convert", str(models["wide"]), "-t", "mcu-c", "--name", "wide", "-o", str(out),
                                      "--json"])
    assert result.exit_code == 0, result.output
    entry = next(a for a in json.loads(result.stdout)["artifacts"] if a["target"] == "mcu-c")
    verification = entry["verification"]
    assert verification["bit_exact"] and verification["reference"] == "tflm-reference"
    assert verification["sanitizers"]["ok"] is True
    assert verification["cortex_m4"]["matches_host"] is True
    header = (out / "mcu-c" / "wide.h").read_text()
    assert "int wide_invoke(const int16_t *input, int16_t *output);" in header
    assert "#define WIDE_INPUT_TYPE int16_t" in header
    nm = shutil.which("arm-none-eabi-nm")
    if nm is None:
        pytest.skip("arm-none-eabi-nm is not installed")
    from edgeserve.converters.microcontroller.toolchain import find_compiler

    directory = out / "mcu-c"
    for source in [directory / "wide.c", *sorted((directory / "kernels").glob("*.c"))]:
        obj = tmp_path / f"{source.stem}.o"
        subprocess.run([str(find_compiler("arm-c")), *check.CORTEX_M4_C_FLAGS, f"-I{directory}",
                        f"-I{directory / 'kernels'}", "-c", str(source), "-o", str(obj)], check=True)
        undefined = subprocess.run([nm, "-u", str(obj)], capture_output=True, text=True, check=True).stdout
        assert "__aeabi_d" not in undefined, (source.name, undefined)


def test_the_sigmoid_table_is_tflites():
    """int16 LOGISTIC interpolates in TFLite's 256-entry table of sigmoid(i / 24); edgeserve
    computes it (rounded, one more at the entries TFLite's has one more) and this compares it
    with the table in ../shared/tflm's source, entry by entry."""
    import re

    from conftest import TESTDATA, require_testdata

    from edgeserve.converters.mcu_c import int16

    header = require_testdata(TESTDATA.parent / "tflm" / "src" / "tensorflow" / "lite" / "kernels" / "internal"
                              / "common.h")
    body = header.read_text().split("sigmoid_table_uint16[256] = {")[1].split("};")[0]
    theirs = np.array([int(v) for v in re.findall(r"\d+", body)])
    assert len(theirs) == 256
    np.testing.assert_array_equal(int16.sigmoid_table(), theirs)


def test_a_model_past_the_emulated_boards_memory_is_checked_on_the_host_only():
    """PP-PicoDet's int16 model needs a 23 MB arena: the Cortex-M4 run is skipped with the reason
    (the host check still ran), where it used to fail the whole target at link time."""
    assert check.board_room(1_000_000, 500_000, 10_000) is None
    ram = check.board_room(23_347_200, 1_952_412, 10_000)
    assert ram is not None and "arena (23,347,200 bytes)" in ram and "4 MB of RAM" in ram
    flash = check.board_room(100_000, 4_000_000, 10_000)
    assert flash is not None and "4 MB of flash" in flash


def test_inspect_says_what_the_microcontroller_targets_would(models):
    """inspect runs mcu-c's lowering and TFLM's resolver check (pure Python, no framework) on a
    full-integer .tflite, so a model they refuse is not called ready."""
    from edgeserve.inspect import inspect_path

    routes = {r["target"]: r for r in inspect_path(models["softmax"])["routes"]}
    assert routes["mcu"]["ready"] is True
    assert routes["mcu-c"]["ready"] is False and "SOFTMAX" in routes["mcu-c"]["reason"]
    routes = {r["target"]: r for r in inspect_path(models["wide"])["routes"]}
    assert routes["mcu-c"]["ready"] is True
