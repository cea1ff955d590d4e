"""Data mistakes that need no model are said before the model is loaded (issue 27, "slow
errors"): loading a Keras model imports TensorFlow (~10 s), so a missing --calib file used to
take 40 s to report. Each case runs `edgeserve convert` in a fresh process and asserts the
error line and that no framework was imported (the time is a benchmark figure, not asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

_PROBE = """
import sys
from edgeserve.pipeline import convert
from edgeserve.errors import EdgeServeError
try:
    convert(sys.argv[1], ["tflite-int8"], sys.argv[2], calib=sys.argv[3] or None, eval_data=sys.argv[4] or None)
except EdgeServeError as exc:
    print("error:", exc)
print("imported:", sorted(m for m in ("tensorflow", "torch", "keras", "coremltools") if m in sys.modules))
"""


@pytest.mark.parametrize(("calib", "eval_data", "message"), [
    ("missing.npz", "", "calibration data not found"),
    ("", "", "full-integer quantization needs calibration data"),
    ("calib.npz", "missing_eval.npz", "evaluation data not found"),
    ("calib.npz", "folder", "evaluation data must be an .npz file"),
])
def test_a_data_mistake_is_said_before_any_framework_is_imported(tmp_path: Path, calib: str, eval_data: str,
                                                                   message: str) -> None:
    (tmp_path / "model.keras").write_bytes(b"not read: the data is checked first")
    (tmp_path / "calib.npz").write_bytes(b"")
    (tmp_path / "folder").mkdir()
    done = subprocess.run([sys.executable, "-c", _PROBE, str(tmp_path / "model.keras"), str(tmp_path / "out"),
                           str(tmp_path / calib) if calib else "", str(tmp_path / eval_data) if eval_data else ""],
                          capture_output=True, text=True, timeout=120)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("error: ") and message in lines[0], done.stdout + done.stderr
    assert lines[1] == "imported: []"
    assert not (tmp_path / "out").exists()


def test_a_missing_model_is_named_before_its_missing_data(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE, str(tmp_path / "gone.keras"), str(tmp_path / "out"),
                           str(tmp_path / "missing.npz"), ""], capture_output=True, text=True, timeout=120)
    assert "gone.keras" in done.stdout.splitlines()[0], done.stdout
