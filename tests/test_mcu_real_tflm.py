"""What `-t mcu` writes, compiled against real TFLM and run: main.cc, the model data, the
exact ops header and the planned arena header, exactly as the converter wrote them.

TFLM comes from ``../shared/tflm`` (built once and cached, see tests/tflm_build.py) or from
``EDGESERVE_TFLM_DIR``. The program's printed raw outputs are compared with the tflite-micro
Python interpreter (the same reference kernels) fed the same example input, and the
planned arena is shown to be needed: half of it fails with the generated message.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tflm_build import STRICT_CXX, TflmBuild

MODELS = {  # name -> file under the shared test data
    "hello_world": "tflm/hello_world_int8.tflite",
    "kws": "mlperf-tiny/kws_ref_model.tflite",
    "micro_speech": "tflm/micro_speech_quantized.tflite",
    "resnet8": "mlperf-tiny/pretrainedResnet_quant.tflite",
}


def _convert(testdata: Path, model: str, out: Path) -> tuple[Path, int]:
    """The mcu build for ``model`` and its 64-bit host arena size (from the manifest)."""
    from edgeserve.conversion.convert import convert

    result = convert(testdata / MODELS[model], ["mcu"], out, profile="stm32f746-discovery",
                     options={"name": model, "fit_check": False})
    entry = next(a for a in result.manifest["artifacts"] if a["target"] == "mcu")
    return out / "mcu", int(entry["arena_bytes_host"])


def _set_arena(build: Path, size: int) -> None:
    arena_h = next(build.glob("*_arena.h"))
    arena_h.write_text(re.sub(r"(_TENSOR_ARENA_SIZE )\d+u", rf"\g<1>{size}u", arena_h.read_text()))


def _compile(build: Path, tflm: TflmBuild, exe: Path) -> None:
    from edgeserve.converters.microcontroller import toolchain

    sources = sorted(str(p) for p in build.glob("*.cc"))
    command = [str(toolchain.find_compiler("host-c++")), *STRICT_CXX, "-I", str(build), *tflm.include_flags,
               *sources, str(tflm.library), "-o", str(exe)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-4000:]


def _example_input(detail: dict) -> np.ndarray:
    """main.cc's ExampleInput(i) = (i % 16) / 16, quantized as its Quantize() does: in
    float32, half away from zero by adding 0.5 and truncating, then clamped."""
    shape = tuple(int(d) for d in detail["shape"])
    values = ((np.arange(int(np.prod(shape))) % 16) / np.float32(16)).astype(np.float32)
    if detail["dtype"] == np.float32:
        return values.reshape(shape)
    params = detail["quantization_parameters"]
    scale, zero = np.float32(params["scales"][0]), int(params["zero_points"][0])
    scaled = values / scale
    rounded = np.trunc(np.where(scaled >= 0, scaled + np.float32(0.5), scaled - np.float32(0.5)))
    info = np.iinfo(detail["dtype"])
    return np.clip(rounded.astype(np.int64) + zero, info.min, info.max).astype(detail["dtype"]).reshape(shape)


@pytest.mark.parametrize("model", sorted(MODELS))
def test_generated_build_runs_in_real_tflm(testdata: Path, tmp_path: Path, tflm: TflmBuild, model: str) -> None:
    from tflite_micro.python.tflite_micro import runtime

    build, host_arena = _convert(testdata, model, tmp_path / "out")
    exe = tmp_path / "main"  # the header picks the 64-bit plan on this host by itself
    _compile(build, tflm, exe)
    done = subprocess.run([exe], capture_output=True, text=True, timeout=120, check=False)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log
    printed = [int(raw) for raw in re.findall(r"output\[\d+\] = \S+ \(raw (-?\d+)\)", log)]
    assert printed, log

    reference = runtime.Interpreter.from_bytes((testdata / MODELS[model]).read_bytes())
    reference.set_input(_example_input(reference.get_input_details(0)), 0)
    reference.invoke()
    expected = reference.get_output(0).reshape(-1)[: len(printed)]
    assert printed == [int(v) for v in expected], log

    # The planned arena is needed, not padded: half of it fails, with the generated advice.
    _set_arena(build, host_arena // 2)
    _compile(build, tflm, exe)
    small = subprocess.run([exe], capture_output=True, text=True, timeout=120, check=False)
    # Half of a model as small as hello_world's arena does not even hold TFLM's persistent
    # data (the tail), which TFLM itself does not survive (a kernel's Init gets no memory
    # and its Prepare aborts): main.cc checks the planned tail first. The larger models
    # fail later, in AllocateTensors, which TFLM reports.
    log = small.stdout + small.stderr
    assert small.returncode == 1, log
    assert (f"AllocateTensors failed in a {host_arena // 2}-byte arena" in log
            or f"AllocateTensors not tried: a {host_arena // 2}-byte arena cannot hold the" in log), log
    if model == "hello_world":
        assert "AllocateTensors not tried" in log, log
    assert "Raise " in log and "_MODEL_TENSOR_ARENA_SIZE" in log, log
