"""The build files written beside `-t mcu-c`'s C (issue 27): main.c, a Makefile and a
CMakeLists.txt that build as written. Each folder is built with `make run` and with CMake on
the host, and the example's printed outputs must equal TFLM's reference kernels on the same
input (the input zero point everywhere); `make lib` with arm-none-eabi-gcc gives a Cortex-M4
library holding NAME_invoke. With --cmsis-nn, both builds take the tree from CMSIS_NN_DIR."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from tools_required import require_compiler

from edgeserve.cli import cli
from edgeserve.converters.mcu_c.reference import reference_outputs
from edgeserve.tflite.model import TfliteModel

ARM_FLAGS = "-mcpu=cortex-m4 -mthumb -mfloat-abi=hard -O2"


def _printed(stdout: str) -> np.ndarray:
    """The raw output values the example prints ("output K[i] = raw (real)"), in order."""
    values = [int(m.group(1)) for m in re.finditer(r"^output \d+\[\d+\] = (-?\d+) \(", stdout, re.M)]
    assert values, stdout
    return np.array(values)


def _expected(folder: Path, name: str) -> np.ndarray:
    model = (folder / f"{name}_model.tflite").read_bytes()
    graph = TfliteModel.from_bytes(model).subgraphs[0]
    tensor = graph.tensors[graph.inputs[0]]
    zero_point = int(tensor.quantization.zero_point[0])
    _, outputs = reference_outputs(model, np.full((1, *tensor.shape), zero_point, np.int8))
    return outputs[0].reshape(-1).astype(int)


def _build_everywhere(folder: Path, name: str, tmp_path: Path, extra: list[str]) -> None:
    require_compiler("host-c")
    if shutil.which("cmake") is None or shutil.which("make") is None:
        pytest.fail("cmake and make are installed by `make setup`")
    work = tmp_path / "copy"
    shutil.copytree(folder, work)  # the user's own build writes into the folder
    expected = _expected(work, name)
    made = subprocess.run(["make", "run", "-j2", *extra], cwd=work, capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stdout + made.stderr
    assert _printed(made.stdout).tolist() == expected.tolist()
    defines = [f"-D{e}" for e in extra]
    configured = subprocess.run(["cmake", "-S", ".", "-B", "cmake-build", *defines], cwd=work, capture_output=True,
                                text=True, timeout=600)
    assert configured.returncode == 0, configured.stdout + configured.stderr
    built = subprocess.run(["cmake", "--build", "cmake-build", "-j2"], cwd=work, capture_output=True, text=True,
                           timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    ran = subprocess.run([str(work / "cmake-build" / f"{name}_example")], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0 and _printed(ran.stdout).tolist() == expected.tolist()
    require_compiler("arm-c")
    subprocess.run(["make", "clean"], cwd=work, check=True, capture_output=True)
    lib = subprocess.run(["make", "lib", "-j2", "CC=arm-none-eabi-gcc", f"CFLAGS={ARM_FLAGS}", *extra], cwd=work,
                         capture_output=True, text=True, timeout=600)
    assert lib.returncode == 0, lib.stdout + lib.stderr
    symbols = subprocess.run(["arm-none-eabi-nm", "-g", f"lib{name}.a"], cwd=work, capture_output=True, text=True,
                             check=True).stdout
    assert re.search(rf"\bT {name}_invoke\b", symbols), symbols


def _convert(source: Path, name: str, out: Path, *flags: str) -> Path:
    result = CliRunner().invoke(cli, ["convert", str(source), "-t", "mcu-c", "--name", name, *flags, "-o", str(out),
                                      "-q"])
    assert result.exit_code == 0, result.output
    folder = out / "mcu-c"
    assert {"main.c", "Makefile", "CMakeLists.txt"} <= {p.name for p in folder.iterdir()}
    return folder


def test_the_portable_folder_builds_with_make_and_cmake(testdata: Path, tmp_path: Path) -> None:
    folder = _convert(testdata / "tflm" / "hello_world_int8.tflite", "hw", tmp_path / "out")
    _build_everywhere(folder, "hw", tmp_path, [])


def test_the_cmsis_nn_folder_builds_with_the_users_tree(testdata: Path, cmsis_nn_dir: Path, tmp_path: Path) -> None:
    folder = _convert(testdata / "mlperf-tiny" / "kws_ref_model.tflite", "kws", tmp_path / "out",
                      "--cmsis-nn", str(cmsis_nn_dir))
    assert (folder / "cmsis_nn_sources.txt").is_file()
    _build_everywhere(folder, "kws", tmp_path, [f"CMSIS_NN_DIR={cmsis_nn_dir}"])
    missing = subprocess.run(["make"], cwd=folder, capture_output=True, text=True, timeout=60)
    assert missing.returncode != 0 and "set CMSIS_NN_DIR to your CMSIS-NN folder" in missing.stderr


def test_several_outputs_are_printed_one_after_another(tmp_path: Path) -> None:
    """A detector's shape (a box head and a score head): main.c walks each output's offset."""
    import mcu_c_models

    from edgeserve.converters.mcu_c.generate import generate

    model_path = mcu_c_models.int8_tflite("heads", tmp_path)
    generated = generate(TfliteModel.from_file(model_path), "heads", "heads")
    folder = tmp_path / "heads"
    for relative, text in generated.files.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(text)
    shutil.copy(model_path, folder / "heads_model.tflite")
    assert "HEADS_OUTPUT1_OFFSET" in (folder / "main.c").read_text()
    _build_everywhere(folder, "heads", tmp_path, [])
