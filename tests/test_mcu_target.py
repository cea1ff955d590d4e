"""`-t mcu` end to end: the files it writes, checked against TFLM, the compilers and the profile."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from edgeserve.errors import DoesNotFitError, InputError
from edgeserve.converters.microcontroller import tflm
from edgeserve.conversion.convert import convert
from edgeserve.tflite.model import TfliteModel

INT8_MODELS = {
    # name: path under ../shared/testdata
    "kws": "mlperf-tiny/kws_ref_model.tflite",
    "vww": "mlperf-tiny/vww_96_int8.tflite",
    "resnet8": "mlperf-tiny/pretrainedResnet_quant.tflite",
    "ad01": "mlperf-tiny/ad01_int8.tflite",
    "str_ww": "mlperf-tiny/str_ww_ref_model.tflite",
    "person_detect": "tflm/person_detect.tflite",
    "micro_speech": "tflm/micro_speech_quantized.tflite",
    "hello_world": "tflm/hello_world_int8.tflite",
}


def _mcu_entry(out):
    manifest = json.loads((out / "manifest.json").read_text())
    return next(a for a in manifest["artifacts"] if a["target"] == "mcu")


@pytest.fixture(scope="module")
def kws_build(testdata, tmp_path_factory):
    out = tmp_path_factory.mktemp("kws_mcu")
    convert(testdata / INT8_MODELS["kws"], ["mcu"], out, profile="stm32f746-discovery", options={"name": "kws"})
    return out


@pytest.mark.parametrize("name", sorted(INT8_MODELS))
def test_planned_arena_against_tflm(testdata, tmp_path, name):
    """The acceptance table: head equal to TFLM's, host arena within [smallest working, +5 %]."""
    source = testdata / INT8_MODELS[name]
    convert(source, ["mcu"], tmp_path, options={"name": name})
    entry = _mcu_entry(tmp_path)
    data = source.read_bytes()

    reported = tflm.arena_use(data, 8 << 20)
    smallest = tflm.smallest_arena(data)
    assert entry["arena_head_bytes"] == reported.head
    assert smallest <= entry["arena_bytes_host"] <= 1.05 * smallest, (smallest, entry["arena_bytes_host"])
    # 32-bit pointers make the persistent part smaller than on the 64-bit host.
    assert entry["arena_tail_bytes"] < reported.tail
    assert entry["arena_bytes"] == int(
        (tmp_path / "mcu" / f"{name}_model_arena.h").read_text().split(f"{name.upper()}_MODEL_TENSOR_ARENA_SIZE ")[1].split("u")[0]
    )
    check = entry["verification"]
    assert check["method"] == "tflm-vs-litert-reference"
    assert check["arena_bytes"] == entry["arena_bytes_host"]
    assert check["tflm_head"] == entry["arena_head_bytes"]
    if name == "person_detect":  # LiteRT 2.3 refuses this model ("quantized_dimension 3")
        assert check["max_abs_diff"] is None and "LiteRT" in check["litert_note"]
    elif name == "ad01":
        # TFLM's and LiteRT's reference FULLY_CONNECTED differ by 1-3 steps from its second
        # layer on, given identical inputs (measured layer by layer); not bit-exact.
        assert 0 < check["max_abs_diff"] <= 3 and check["bit_exact"] is False
    else:
        assert check["max_abs_diff"] == 0 and check["bit_exact"] is True


def test_manifest_entry_has_every_field(kws_build, testdata):
    entry = _mcu_entry(kws_build)
    model = TfliteModel.from_file(testdata / INT8_MODELS["kws"])
    assert entry["status"] == "ok"
    assert entry["model_bytes"] == model.file_bytes.__len__()
    assert entry["ops"] == model.op_counts()
    assert entry["fits"] == {"flash": True, "ram": True, "profile": "stm32f746-discovery"}
    for key in ("arena_bytes", "arena_head_bytes", "arena_tail_bytes", "arena_bytes_host"):
        assert isinstance(entry[key], int) and entry[key] > 0
    assert entry["arena_bytes"] >= entry["arena_head_bytes"] + entry["arena_tail_bytes"]
    names = {f["path"] for f in entry["files"]}
    assert {"mcu/kws_model_data.h", "mcu/kws_model_data.cc", "mcu/kws_model_ops.h", "mcu/kws_model_arena.h"} <= names


def test_the_model_array_holds_the_exact_bytes(kws_build, testdata):
    source = (kws_build / "mcu" / "kws_model_data.cc").read_text()
    body = source[source.index("{") + 1 : source.rindex("}")]
    values = bytes(int(v, 16) for v in body.replace("\n", " ").replace(",", " ").split() if v.startswith("0x"))
    assert values == (testdata / INT8_MODELS["kws"]).read_bytes()


def test_verify_rechecks_the_build_and_catches_tampering(kws_build, tmp_path):
    from edgeserve.manifest.verify import verify_manifest

    copy = tmp_path / "build"
    shutil.copytree(kws_build, copy)
    assert all(verify_manifest(copy))
    arena = copy / "mcu" / "kws_model_arena.h"
    arena.write_text(arena.read_text().replace("KWS_MODEL_TENSOR_ARENA_SIZE ", "KWS_MODEL_TENSOR_ARENA_SIZE 1"))
    results = verify_manifest(copy)
    assert not all(results)


def test_a_model_bigger_than_the_flash_fails_the_fit_check(testdata, tmp_path):
    source = testdata / "tflm/mobilenet_v2_quantized_1x3x224x224.tflite"  # 3.98 MB vs 1 MB of flash
    with pytest.raises(DoesNotFitError) as caught:
        convert(source, ["mcu"], tmp_path, profile="stm32f746-discovery")
    message = str(caught.value)
    assert "flash needs" in message and "1,048,576" in message
    assert "RAM needs" in message and "327,680" in message  # its 2.4 MB of activations don't fit either
    assert "largest activation buffers" in message and "What would help" in message
    assert caught.value.report["flash"]["needed"] > 3_900_000
    assert not (tmp_path / "mcu").exists()  # nothing written before the check


def test_no_fit_check_writes_the_build_and_records_the_misfit(testdata, tmp_path):
    import importlib.resources

    # vww needs about 100 KB of arena: a copy of the STM32 profile with 64 KB of RAM.
    base = (importlib.resources.files("edgeserve._profiles") / "stm32f746-discovery.toml").read_text()
    profile = tmp_path / "tiny.toml"
    profile.write_text(base.replace('name = "stm32f746-discovery"', 'name = "tiny"')
                       .replace("ram_bytes = 327680", "ram_bytes = 65536"))
    source = testdata / "mlperf-tiny/vww_96_int8.tflite"
    with pytest.raises(DoesNotFitError, match="RAM needs"):
        convert(source, ["mcu"], tmp_path / "a", profile=str(profile))
    convert(source, ["mcu"], tmp_path / "b", profile=str(profile), options={"fit_check": False})
    entry = _mcu_entry(tmp_path / "b")
    assert entry["fits"] == {"flash": True, "ram": False, "profile": "tiny"}


def test_a_too_small_arena_is_caught_by_the_interpreter_with_the_shortfall(kws_build):
    entry = _mcu_entry(kws_build)
    data = (kws_build / "mcu" / "kws_model.tflite").read_bytes()
    with pytest.raises(tflm.ArenaTooSmallError) as caught:
        tflm.arena_use(data, entry["arena_bytes_host"] // 2)
    assert "missing" in str(caught.value)  # TFLM says how many bytes it lacked
    assert tflm.fits(data, entry["arena_bytes_host"])


def test_float_models_are_refused_with_the_fix(testdata, tmp_path):
    with pytest.raises(InputError, match="full-integer"):
        convert(testdata / "tflm/hello_world_float.tflite", ["mcu"], tmp_path)
    assert not (tmp_path / "mcu").exists()


def test_a_tflite_source_refuses_calibration_flags(testdata, tmp_path):
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=np.zeros((2, 1), np.float32))
    with pytest.raises(InputError, match="already a .tflite"):
        convert(testdata / INT8_MODELS["hello_world"], ["mcu"], tmp_path / "out", calib=calib)


def test_profile_of_another_kind_is_refused(testdata, tmp_path):
    with pytest.raises(InputError, match="microcontroller profile"):
        convert(testdata / INT8_MODELS["hello_world"], ["mcu"], tmp_path, profile="raspberry-pi-5")


@pytest.mark.parametrize("compiler, flags", [
    ("g++", ["-std=c++17", "-Wall", "-Wextra", "-Werror", "-DTF_LITE_STATIC_MEMORY"]),
    ("arm-none-eabi-g++", ["-std=c++17", "-mcpu=cortex-m4", "-mthumb", "-Os", "-Wall", "-Wextra", "-Werror",
                           "-DTF_LITE_STATIC_MEMORY"]),
])
def test_every_generated_file_compiles(kws_build, tmp_path, compiler, flags, tflm):
    """The data, ops and arena files of one build, together, against real TFLM's headers, with
    the host and the Arm compiler (TFLM's headers are the same for both: only objects differ)."""
    import os
    import subprocess

    if shutil.which(compiler) is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{compiler} is missing; `make setup` installs it")
        pytest.skip(f"{compiler} is not installed")
    unit = tmp_path / "use_all.cc"
    unit.write_text(
        '#include "kws_model_data.h"\n#include "kws_model_ops.h"\n#include "kws_model_arena.h"\n'
        "alignas(16) static unsigned char arena[kws_model::kTensorArenaSize];\n"
        "int use_all() {\n"
        "  static kws_model::OpResolver resolver;\n"
        "  static_assert(kws_model::kTensorArenaSize == KWS_MODEL_TENSOR_ARENA_SIZE, \"C and C++ agree\");\n"
        "  return kws_model::RegisterOps(resolver) == kTfLiteOk && arena[0] == 0 && g_kws_model_data_len > 0;\n"
        "}\n"
    )
    mcu = kws_build / "mcu"
    for source in (unit, mcu / "kws_model_data.cc"):
        done = subprocess.run(
            [compiler, *flags, f"-I{mcu}", *tflm.include_flags, "-c", str(source), "-o", str(tmp_path / "x.o")],
            capture_output=True, text=True,
        )
        assert done.returncode == 0, done.stderr[-4000:]


def test_a_model_that_would_abort_tflm_is_one_error_line_and_nothing_written(testdata, tmp_path):
    """The probe's SIGABRT: a SOFTMAX whose beta * input scale is below 2**-26 aborts TFLM (and
    LiteRT) in PreprocessSoftmaxScaling. The runtime's validator refuses it before TFLM runs."""
    from click.testing import CliRunner

    from edgeserve.cli import cli
    from test_model_validation import _sg, edited, model_bytes

    schema = pytest.importorskip("ai_edge_litert.schema_py_generated")
    bad = edited(schema, model_bytes(testdata, "mlperf-tiny/kws_ref_model"),
                 lambda m: setattr(_sg(m).operators[-1].builtinOptions, "beta", 0.0))
    source = tmp_path / "softmax_beta0.tflite"
    source.write_bytes(bad)
    out = tmp_path / "OUT"  # new: a folder holding anything but an edgeserve output is refused first
    result = CliRunner().invoke(cli, ["convert", str(source), "-t", "mcu", "--no-fit-check", "-o", str(out)])
    assert result.exit_code == 1, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "SOFTMAX: beta 0 * input scale 0.144693 must exceed 2**-26" in errors[0]
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["softmax_beta0.tflite"]
    assert source.read_bytes() == bad  # the input is never modified


@pytest.mark.parametrize(("crasher", "signal_name"), [("segfault", "SIGSEGV"), ("abort", "SIGABRT")])
def test_a_crash_inside_tflm_is_one_error_line(testdata, tmp_path, monkeypatch, crasher, signal_name):
    """What the fuzz probe found (SIGSEGV and SIGFPE inside TFLM's invoke killing convert):
    TFLM runs in a child process, so its death is reported, and OUT stays as it was."""
    from pathlib import Path

    from click.testing import CliRunner

    from edgeserve.cli import cli
    from edgeserve.converters.tflm import converter

    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    monkeypatch.setattr(converter, "TFLM_CHECK", f"crashers:{crasher}")
    out = tmp_path / "OUT"
    result = CliRunner().invoke(cli, ["convert", str(testdata / "tflm/hello_world_int8.tflite"), "-t", "mcu",
                                      "--no-fit-check", "-o", str(out)])
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: TFLM crashed ({signal_name}) while running the model in the planned arena"] or (
        len(errors) == 1 and errors[0].startswith(f"error: TFLM crashed ({signal_name}) while running")), errors
    assert not out.exists()


def test_tflm_refusals_cross_the_process_boundary_with_their_type(testdata):
    from edgeserve.converters.microcontroller.child import call_in_child
    from edgeserve.converters.microcontroller.tflm import ArenaTooSmallError, TflmError

    data = (testdata / "tflm/hello_world_int8.tflite").read_bytes()
    assert call_in_child("edgeserve.converters.microcontroller.tflm:fits", data, 4096, what="allocating") is True
    with pytest.raises(ArenaTooSmallError, match="1024-byte arena"):
        call_in_child("edgeserve.converters.microcontroller.tflm:arena_use", data, 1024, what="allocating")
    # A real one: TFLM's Python interpreter segfaults on hello_world in a 64-byte arena (found
    # while writing this test); in the child it is an error, in-process it killed the caller.
    with pytest.raises(TflmError, match=r"TFLM crashed \(SIGSEGV\) while allocating"):
        call_in_child("edgeserve.converters.microcontroller.tflm:fits", data, 64, what="allocating")


def test_a_remedy_that_kept_layers_in_float_is_named_with_the_bound_it_saved(tmp_path):
    """tflite-int8 may pass its gate by keeping layers in float (MediaPipe's hand landmarks at
    --min-sqnr 7); a microcontroller target then says which layers, and which bound the
    all-INT8 model missed, instead of "allow a larger --max-drop" whatever the bound was."""
    from types import SimpleNamespace

    from edgeserve.converters.microcontroller.int8_source import full_int8_model

    entry = {"status": "ok", "path": "model_int8.tflite",
             "quantization": {"float_layers": ["Identity_3", "model/re_lu_31/Relu6"]},
             "attempts": [{"remedy": "int8", "reason": "Identity_1_dequant: SQNR 5.1 dB < min 7 dB"},
                          {"remedy": "float-layers", "reason": ""}]}
    ctx = SimpleNamespace(source=SimpleNamespace(kind="tflite-float"), artifacts={"tflite-int8": entry},
                          out_dir=tmp_path)
    with pytest.raises(InputError) as err:
        full_int8_model(ctx, "mcu-c")
    assert str(err.value) == (
        "the mcu-c target needs a full-integer model, and tflite-int8 met its quality gate only by keeping 2 layer(s) "
        "in float (Identity_3, model/re_lu_31/Relu6); all-INT8 it missed Identity_1_dequant: SQNR 5.1 dB < min 7 dB "
        "(--min-sqnr). Give calibration data closer to what the model sees, or accept that error with the bound named")


@pytest.mark.parametrize(("arena", "region"), [(100_000, "sram"), (2_400_000, "psram"), (9_000_000, None)])
def test_mcu_and_mcu_c_place_the_arena_in_the_same_ram_region(arena, region):
    """Issue 27: `-t mcu` put MobileNetV2 (2.4 MB of activations) nowhere on an ESP32-S3 while
    `-t mcu-c` placed its arena in the same profile's PSRAM. Both now take the fastest of the
    profile's RAM regions that holds what they need (320 KB of internal SRAM, then 8 MB PSRAM)."""
    from types import SimpleNamespace

    from edgeserve.converters.microcontroller.memory import check_fit, memory_report
    from edgeserve.converters.mcu_c.converter import fit
    from edgeserve.device_profiles import load_profile

    profile = load_profile("esp32-s3")
    tflm = memory_report(model_bytes=1_000_000, core_code_bytes=30_000, op_code_bytes=20_000, op_count=10,
                         arena_bytes=arena, profile=profile)
    generated = SimpleNamespace(plan=SimpleNamespace(arena_bytes=arena), state_bytes=0, kernel_files=["a"] * 5,
                                steps=[None] * 60, library_sources=[], weight_bytes=1_000_000)
    plain_c = fit(generated, profile)
    assert tflm.to_dict()["arena_region"] == plain_c["arena_region"] == region
    assert tflm.fits_ram is plain_c["fits"] is (region is not None)
    if region is None:
        with pytest.raises(DoesNotFitError, match=r"largest RAM region of esp32-s3 \(psram\) has 8,388,608"):
            check_fit(tflm, [])
    else:
        check_fit(tflm, [])  # fits: no error
