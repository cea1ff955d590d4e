"""A check that cannot fail is reported as such (issue 13).

The probe converted a model whose float outputs are constant "ok" with sqnr_db 0 and
top-1 agreement 1: every comparison agrees with a constant. Such a model is now marked
degenerate in the manifest and the report, and `verify` does not call it verified.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgeserve.cli import cli
from edgeserve.quality.metrics import degenerate, evaluate


def test_degenerate_means_no_spread_over_the_samples() -> None:
    rng = np.random.default_rng(0)
    varied = [rng.random((20, 10))]
    assert degenerate(varied) is None
    constant = [np.tile(rng.random((1, 10)), (20, 1))]
    assert degenerate(constant).startswith("degenerate: constant reference outputs over 20 samples")
    tiny = [constant[0] + rng.random((20, 10)) * 1e-4]  # varies, but below one output step
    assert degenerate(tiny, steps=[0.004]) is not None and degenerate(tiny) is None
    assert degenerate([np.ones((1, 3))]) is None  # one sample: nothing to say either way


def test_relative_error_never_divides_by_a_zero_baseline() -> None:
    """Core ML on a PyTorch model scored against its own outputs reported a 100 % drop."""
    reference = np.linspace(0, 1, 40, dtype=np.float32).reshape(4, 10)
    result = evaluate("mae", reference, reference + 2.7e-9, labels=reference)
    assert np.isfinite(result.drop_points) and abs(result.drop_points) < 1e-3


@pytest.fixture(scope="module")
def constant_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    keras = pytest.importorskip("keras")
    inputs = keras.Input((8,))
    dense = keras.layers.Dense(4, kernel_initializer="zeros", bias_initializer="ones")
    outputs = keras.layers.Softmax()(dense(inputs))
    path = tmp_path_factory.mktemp("constant") / "constant.keras"
    keras.Model(inputs, outputs).save(path)
    return path


def test_a_constant_model_is_converted_but_not_called_verified(constant_model: Path, tmp_path: Path) -> None:
    import json

    out = tmp_path / "OUT"
    result = CliRunner().invoke(cli, ["convert", str(constant_model), "-t", "tflite-int8", "--calib-random",
                                      "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "NOT VERIFIED: degenerate: constant reference outputs" in result.stdout
    entry = json.loads((out / "manifest.json").read_text())["artifacts"][0]
    assert entry["verification"]["degenerate"].startswith("degenerate: constant reference outputs")
    checked = CliRunner().invoke(cli, ["verify", str(out)])
    assert checked.exit_code == 1
    assert "[FAIL] reference outputs vary: degenerate" in checked.stdout


def test_w8a8_with_an_all_zero_activation_converts(tmp_path: Path) -> None:
    """The probe: coremltools' "quantize op: scale cannot be 0" traceback after the whole run."""
    keras = pytest.importorskip("keras")
    pytest.importorskip("coremltools")
    inputs = keras.Input((8,))
    dead = keras.layers.ReLU()(keras.layers.Dense(4, kernel_initializer="zeros", bias_initializer="zeros")(inputs))
    live = keras.layers.Dense(4)(inputs)
    path = tmp_path / "dead_branch.keras"
    keras.Model(inputs, keras.layers.Add()([dead, live])).save(path)
    out = tmp_path / "OUT"
    # Random weights and calibration: the accuracy bound is not what this test is about.
    result = CliRunner().invoke(cli, ["convert", str(path), "-t", "coreml", "--coreml-precision", "w8a8",
                                      "--calib-random", "--max-drop", "50", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "model.mlpackage").is_dir()


def test_a_float_error_that_is_nearly_zero_is_not_the_baseline() -> None:
    """A baseline of 1e-12 turns a 1e-4 difference into a 1e10 % drop: the spread is used instead."""
    reference = np.linspace(0, 1, 40, dtype=np.float64).reshape(4, 10)
    labels = reference + 1e-12
    result = evaluate("mae", reference, reference + 1e-4, labels=labels)
    spread = float(np.mean(np.abs(reference - reference.mean())))  # 0.256
    assert result.drop_points == pytest.approx(100 * 1e-4 / spread, abs=1e-4)  # 0.039 %
    constant = np.full((4, 10), 0.25)  # no spread at all: relative to the outputs' own size
    assert evaluate("mae", constant, constant + 0.0025, labels=None).drop_points == pytest.approx(1.0)


def test_every_target_built_from_a_constant_model_is_not_called_verified(constant_model: Path,
                                                                         tmp_path: Path) -> None:
    import json

    out = tmp_path / "OUT"
    result = CliRunner().invoke(cli, ["convert", str(constant_model), "-t", "tflite-int8", "-t", "mcu", "-t", "coreml",
                                      "-p", "arduino-nano-33-ble", "--calib-random", "-o", str(out)])
    assert result.exit_code == 0, result.output
    entries = {e["target"]: e for e in json.loads((out / "manifest.json").read_text())["artifacts"]}
    for target in ("tflite-int8", "mcu", "coreml"):
        assert entries[target]["verification"]["degenerate"].startswith("degenerate: constant reference outputs")
    report = json.loads((out / "reports" / "coreml.json").read_text())
    assert report["verification"]["degenerate"].startswith("degenerate: constant reference outputs")
    checked = CliRunner().invoke(cli, ["verify", str(out), "--json"])
    assert checked.exit_code == 1
    failed = {a["target"]: [c["name"] for c in a["checks"] if not c["ok"]]
              for a in json.loads(checked.stdout)["artifacts"]}
    assert failed == {"tflite-int8": ["reference outputs vary"], "mcu": ["reference outputs vary"],
                      "coreml": ["reference outputs vary"]}
