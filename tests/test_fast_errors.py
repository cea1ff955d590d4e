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
from edgeserve.conversion.convert import convert
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


def _keras3_config(batch_shape: list) -> bytes:
    """A .keras archive's config.json as Keras 3 writes it for a one-input functional model."""
    import io
    import json
    import zipfile

    config = {"class_name": "Functional", "config": {"name": "m", "input_layers": ["input_layer", 0, 0], "layers": [
        {"class_name": "InputLayer", "name": "input_layer",
         "config": {"batch_shape": batch_shape, "dtype": "float32", "name": "input_layer"}}]}}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("config.json", json.dumps(config))
    return buffer.getvalue()


@pytest.mark.parametrize("kind", ["keras", "h5"])
def test_calibration_of_the_wrong_shape_is_said_from_the_saved_config(testdata: Path, tmp_path: Path,
                                                                       kind: str) -> None:
    """Issue 27: calibration of the wrong shape took ~40 s (TensorFlow's import, then the load)
    to report. The input shape is read from the file's own config (config.json in a .keras zip,
    model_config in a Keras 2 .h5) with no framework."""
    import numpy as np

    if kind == "keras":
        model = tmp_path / "model.keras"
        model.write_bytes(_keras3_config([None, 28, 28, 1]))
        expected = "the model input 'input_layer' expects (N, 28, 28, 1)"
    else:
        model = testdata / "mlperf-tiny" / "vww_96.h5"  # Keras 2: batch_input_shape [None, 96, 96, 3]
        expected = "the model input 'input_1' expects (N, 96, 96, 3)"
    np.savez(tmp_path / "calib.npz", x=np.zeros((4, 32, 32, 3), np.float32))
    done = subprocess.run([sys.executable, "-c", _PROBE, str(model), str(tmp_path / "out"),
                           str(tmp_path / "calib.npz"), ""], capture_output=True, text=True, timeout=120)
    lines = done.stdout.splitlines()
    assert lines[0] == f"error: {tmp_path / 'calib.npz'}:x has shape (4, 32, 32, 3), i.e. samples of shape " \
                       f"(32, 32, 3); {expected}", done.stdout + done.stderr
    assert lines[1] == "imported: []"


def test_the_saved_config_is_read_for_every_keras_layout(tmp_path: Path) -> None:
    """Sequential (first layer or build_config), functional with one or several inputs, Keras 2
    and 3 spellings; a config that says nothing plainly gives None (the full check runs later)."""
    import io
    import json
    import zipfile

    from edgeserve.sources.keras_peek import keras_input_shapes

    def keras(config: dict) -> Path:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr("config.json", json.dumps(config))
        path = tmp_path / f"m{len(list(tmp_path.iterdir()))}.keras"
        path.write_bytes(buffer.getvalue())
        return path

    def layer(name: str, shape: list, key: str = "batch_shape") -> dict:
        return {"class_name": "InputLayer", "name": name, "config": {key: shape, "name": name}}

    two = {"class_name": "Functional", "config": {
        "input_layers": [["a", 0, 0], ["b", 0, 0]],
        "layers": [layer("a", [None, 4]), layer("b", [None, 6], "batch_input_shape")]}}
    assert keras_input_shapes(keras(two)) == [("a", (None, 4)), ("b", (None, 6))]
    built = {"class_name": "Sequential", "config": {"layers": [{"class_name": "Dense", "config": {"name": "d"}}]},
             "build_config": {"input_shape": [None, 7]}}
    assert keras_input_shapes(keras(built)) == [("d", (None, 7))]
    first = {"class_name": "Sequential", "config": {"layers": [layer("in", [None, 5])]}}
    assert keras_input_shapes(keras(first)) == [("in", (None, 5))]
    unplain = {"class_name": "Functional", "config": {"input_layers": [["x", 0, 0]], "layers": [layer("y", [None, 3])]}}
    assert keras_input_shapes(keras(unplain)) is None
    (tmp_path / "cut.keras").write_bytes(b"PK\x03\x04 cut short")
    assert keras_input_shapes(tmp_path / "cut.keras") is None


def test_one_line_errors_keep_our_advice_whole_and_cut_other_libraries_between_words() -> None:
    """Refusals were cut at 300 characters mid-word ("Replace LOG in th", "What to do: re-expo"),
    and the part cut was the advice: edgeserve's own messages are whole now, another library's
    long line ends at a word with a mark."""
    from edgeserve.errors import UnsupportedOpError, clip_words, first_line

    advice = "x " * 200 + "What to do: re-export the model with opset 17"
    ours = UnsupportedOpError("LOG", "mcu", ["ADD"], detail=advice)
    assert "What to do: re-export the model with opset 17" in first_line(ours)  # was cut at 300
    theirs = RuntimeError("word " * 100 + "\nsecond line")
    line = first_line(theirs, 60)
    assert line.endswith(" …") and len(line) <= 62 and line[:-2].split(" ")[-1] == "word"
    assert clip_words("short", 10) == "short" and clip_words("abcdefghijkl", 5) == "abcde …"


@pytest.mark.parametrize("where", ["fifo", "/dev/zero", "deep"])
def test_settings_files_that_are_pipes_devices_or_too_deep_are_one_error(testdata: Path, tmp_path: Path,
                                                                        where: str) -> None:
    """-p, --sign-key, --public-key and labels= pointing at a FIFO hung; at /dev/zero they ended in
    MemoryError; a profile TOML nested 100,000 deep in RecursionError. Each is one error line
    now (the commands run in a child with a time limit, so a hang is a failure, not a stuck suite)."""
    import os
    import subprocess
    import sys

    if where == "fifo":
        path = tmp_path / "settings.toml"
        os.mkfifo(path)
    elif where == "/dev/zero":
        path = Path("/dev/zero")
    else:
        path = tmp_path / "deep.toml"
        path.write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    model = str(testdata / "tflm" / "hello_world_int8.tflite")
    out = tmp_path / "out"
    built = subprocess.run([sys.executable, "-m", "edgeserve", "convert", model, "-t", "mcu", "--no-fit-check", "-o",
                            str(out)], capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    commands = [["convert", model, "-t", "mcu", "-p", str(path), "-o", str(tmp_path / "o1")],
                ["convert", model, "-t", "mcu", "--sign-key", str(path), "-o", str(tmp_path / "o2")],
                ["verify", str(out), "--public-key", str(path)],
                ["run", model, "--labels", str(path), "--input", "synthetic:1x1"]]
    for command in commands if where != "deep" else commands[:1]:
        done = subprocess.run([sys.executable, "-m", "edgeserve", *command], capture_output=True, text=True, timeout=60)
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert done.returncode in (1, 2) and len(errors) == 1, (command, done.stderr[-800:])
        assert str(path) in errors[0] and ("nests" in errors[0] if where == "deep" else "not a regular file" in
                                           errors[0]), errors[0]
        assert "Traceback" not in done.stderr and "MemoryError" not in done.stderr, command
    probe = ("from edgeserve.conversion.convert import read_labels\nfrom edgeserve.errors import InputError\n"
             f"try:\n    read_labels({str(path)!r})\nexcept InputError as e:\n    print('refused:', e)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.stdout.startswith("refused:") or where == "deep", done.stdout + done.stderr


def test_a_settings_file_past_its_limit_is_refused_unread(tmp_path: Path) -> None:
    from edgeserve.atomic import SETTINGS_LIMIT, TooLargeError, read_settings

    huge = tmp_path / "profile.toml"
    with open(huge, "wb") as f:
        f.truncate(SETTINGS_LIMIT + 1)  # sparse: no disk, and no memory unless read whole
    with pytest.raises(TooLargeError, match="more than a settings file holds"):
        read_settings(huge)
    assert read_settings(huge, limit=SETTINGS_LIMIT + 1) == b"\0" * (SETTINGS_LIMIT + 1)
