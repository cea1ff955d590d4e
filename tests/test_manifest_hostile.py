"""Manifests edited and re-stamped with a valid manifest_sha256 over bad content (issue 28:
what a careless or hostile tool writes). `verify` and `run` each refuse with one `error:`
line naming what was expected, exit 1, and never serve another target instead."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

import pytest
from click.testing import CliRunner

from edgeserve.cli import cli
from edgeserve.manifest.record import stamp

MODEL = "tflm/hello_world_int8.tflite"


@pytest.fixture(scope="module")
def conversion(testdata: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("hostile") / "OUT"
    result = CliRunner().invoke(cli, ["convert", str(testdata / MODEL), "-t", "mcu", "-t", "mcu-c", "--name", "hw",
                                      "--no-fit-check", "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _entry(manifest: dict[str, Any], target: str) -> dict[str, Any]:
    return next(a for a in manifest["artifacts"] if a["target"] == target)


def _set(target: str, key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(manifest: dict[str, Any]) -> None:
        _entry(manifest, target)[key] = value
    return edit


def _report(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(manifest: dict[str, Any]) -> None:
        _entry(manifest, "mcu-c")["report"][key] = value
    return edit


RESTAMPED = {
    "a NUL byte in a path": (_report("path", "reports/mcu\x00-c.json"), "printable characters"),
    "a backslash path": (_report("path", "reports\\mcu-c.json"), "with '/' between folders"),
    "a 5,000-character path": (_report("path", "a" * 5000), "at most 1024 printable characters"),
    "sha256 as a number": (_report("sha256", 12345), "expected sha256 to be 64 lowercase hex digits"),
    "bytes as a string": (_report("bytes", "12"), "expected bytes to be a whole number of bytes"),
    "a 5,000-digit number": (None, "no such number"),
    "a key twice": (None, "appears twice in one object"),
    "100,000 levels of nesting": (None, "nested too deeply"),
}


@pytest.mark.parametrize("case", sorted(RESTAMPED))
def test_a_restamped_manifest_with_bad_content_is_refused(conversion: Path, tmp_path: Path, case: str) -> None:
    edit, expected = RESTAMPED[case]
    out = tmp_path / "OUT"
    out.mkdir()
    for item in conversion.rglob("*"):
        if item.is_file():
            (out / item.relative_to(conversion)).parent.mkdir(parents=True, exist_ok=True)
            (out / item.relative_to(conversion)).write_bytes(item.read_bytes())
    manifest = json.loads((out / "manifest.json").read_text())
    if edit is not None:
        edit(manifest)
        text = json.dumps(stamp(manifest))
    else:  # what json.dumps cannot write: edited in the text, then stamped as a tool would
        text = json.dumps(stamp(manifest))
        if case == "a 5,000-digit number":
            text = text[:-1] + ', "extra": ' + "7" * 5000 + "}"
        elif case == "a key twice":
            text = text[:-1] + ', "schema": "edgeserve.manifest/1"}'
        else:
            text = text[:-1] + ', "extra": ' + "[" * 100_000 + "]" * 100_000 + "}"
    (out / "manifest.json").write_text(text)
    for command in (["verify", str(out)], ["run", str(out), "--input", "synthetic:1x1"]):
        result = CliRunner().invoke(cli, command)
        assert result.exit_code == 1, (command, result.output)
        assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)  # a clean exit
        assert expected in result.output, (command, result.output)


def test_a_manifest_that_is_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    out = tmp_path / "OUT"
    out.mkdir()
    os.mkfifo(out / "manifest.json")
    for command in (["verify", str(out)], ["run", str(out), "--input", "synthetic:1x1"]):
        result = CliRunner().invoke(cli, command)
        assert result.exit_code == 1 and "not a regular file" in result.output, result.output


@pytest.mark.parametrize("path", [".", "mcu", "reports/mcu.json"])
def test_a_served_artifact_whose_path_is_no_model_is_refused_not_skipped(testdata: Path, tmp_path: Path,
                                                                         path: str) -> None:
    """Issue 28: a tflite-int8 entry pointing at a folder made `run` serve the onnx artifact
    without a word. Built from a float model so that two servable targets exist."""
    import numpy as np

    out = tmp_path / "OUT"
    built = CliRunner().invoke(cli, ["convert", str(testdata / "tflm" / "hello_world_float.tflite"), "-t", "tflite-int8", "-t", "onnx", "--calib-random",
                                     "-o", str(out), "-q"])
    assert built.exit_code == 0, built.output
    manifest = json.loads((out / "manifest.json").read_text())
    _entry(manifest, "tflite-int8")["path"] = path
    (out / "manifest.json").write_text(json.dumps(stamp(manifest)))
    np.save(tmp_path / "x.npy", np.zeros((1, 1), np.float32))
    for extra in ([], ["--target", "tflite-int8"]):
        result = CliRunner().invoke(cli, ["run", str(out), *extra, "--input", str(tmp_path / "x.npy")])
        assert result.exit_code == 1, result.output
        assert "artifact 'tflite-int8': expected its path to name a model file" in result.output, result.output
    served = CliRunner().invoke(cli, ["run", str(out), "--target", "onnx", "--input", str(tmp_path / "x.npy")])
    assert served.exit_code == 0, served.output  # asked for by name, the sound artifact still runs


def test_a_damaged_fixture_is_one_reason_never_an_exception(tmp_path: Path) -> None:
    """Issue 28: a fixture holding a pickled object gave IndexError in verify; the fuzz found a
    truncated one (EOFError, shown as "Aborted!") and one with a bad zip version (NotImplementedError)."""
    import numpy as np

    from edgeserve.errors import ManifestError
    from edgeserve.quality.fixtures import load_arrays

    np.savez(tmp_path / "good.npz", inputs_0=np.ones(2, np.float32))
    good = (tmp_path / "good.npz").read_bytes()
    assert load_arrays(tmp_path / "good.npz")["inputs_0"].tolist() == [1.0, 1.0]
    np.savez(tmp_path / "pickled.npz", inputs_0=np.array([{"a": 1}], dtype=object))
    (tmp_path / "cut.npz").write_bytes(good[:40])
    np.save(tmp_path / "bare.npy", np.zeros(2))
    damaged = bytearray(good)
    central = good.index(b"PK\x01\x02")  # the central directory's entry: its "version needed to extract"
    damaged[central + 6 : central + 8] = (224).to_bytes(2, "little")  # 22.4, which zipfile does not read
    (tmp_path / "version.npz").write_bytes(bytes(damaged))
    for name in ("pickled.npz", "cut.npz", "bare.npy", "version.npz", "missing.npz"):
        with pytest.raises(ManifestError, match=f"fixture {name} cannot be read as named arrays"):
            load_arrays(tmp_path / name)


def test_a_fifo_where_a_file_belongs_is_refused_without_blocking(conversion: Path, tmp_path: Path) -> None:
    """Issue 28: a model file that is a FIFO blocked verify and run for ever (the manifest
    itself was already refused); so did a FIFO given as the model, an input or the calibration."""
    import shutil
    import subprocess
    import sys

    out = tmp_path / "OUT"
    shutil.copytree(conversion, out)
    listed = out / "mcu" / "hw_model.tflite"
    listed.unlink()
    os.mkfifo(listed)  # reading it would block until a writer came
    bare = tmp_path / "model.tflite"
    os.mkfifo(bare)
    frames = tmp_path / "frames.npy"
    os.mkfifo(frames)
    real = str(conversion / "mcu" / "hw_model.tflite")
    cases = [(["verify", str(out)], "hw_model.tflite is not a regular file"),
             (["run", str(bare), "--input", "x.npy"], "model.tflite is not a regular file"),
             (["inspect", str(bare)], "model.tflite is not a regular file"),
             (["convert", str(bare), "-t", "mcu", "-o", str(tmp_path / "o1")], "model.tflite is not a regular file"),
             (["run", real, "--input", str(frames)], "frames.npy is not a regular file"),
             (["convert", real, "-t", "onnx", "--calib", str(frames), "-o", str(tmp_path / "o2")],
              "frames.npy is not a regular file")]
    for command, expected in cases:
        done = subprocess.run([sys.executable, "-m", "edgeserve", *command], capture_output=True, text=True,
                              timeout=120)  # a hang fails here instead of blocking the suite
        assert done.returncode == 1 and expected in done.stdout + done.stderr, (command, done.stdout, done.stderr)


@pytest.mark.parametrize(("field", "said"), [
    ("bytes", "bytes; the manifest says"),
    ("scale", "output 0 scale: the manifest says"),
    ("zero_point", "output 0 zero_point: the manifest says"),
    ("macs", "[FAIL] multiply-accumulates by type as recorded: the file has"),
])
def test_a_restamped_size_or_quantization_that_lies_fails_verify(digits_conversion: Path, tmp_path: Path,
                                                                field: str, said: str) -> None:
    """verify compared hashes but not the manifest's `bytes` and output scale with the file: a
    re-stamped manifest could say anything there (and the runtime dequantizes with what it says)."""
    import shutil

    out = tmp_path / "OUT"
    shutil.copytree(digits_conversion, out)
    manifest = json.loads((out / "manifest.json").read_text())
    entry = _entry(manifest, "tflite-int8")
    if field == "bytes":
        entry["bytes"] += 1
    elif field == "scale":
        entry["outputs"][0]["scale"] *= 2
    elif field == "macs":  # a float model passed off as int8
        entry["macs"]["float"], entry["macs"]["int8"] = entry["macs"]["int8"], 0
    else:
        entry["outputs"][0]["zero_point"] += 1
    (out / "manifest.json").write_text(json.dumps(stamp(manifest)))
    result = CliRunner().invoke(cli, ["verify", str(out)])
    assert result.exit_code == 1 and said in result.output, result.output
    assert "Traceback" not in result.output


def test_a_restamped_manifest_listing_a_target_twice_is_refused_at_once(conversion: Path, tmp_path: Path) -> None:
    """2,000 entries (the same targets over and over) kept verify and bench running past two
    minutes: a conversion writes one entry per target, so a second one is refused on load."""
    import shutil

    out = tmp_path / "OUT"
    shutil.copytree(conversion, out)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["artifacts"] = manifest["artifacts"] * 1000
    (out / "manifest.json").write_text(json.dumps(stamp(manifest)))
    for command in (["verify", str(out)], ["bench", str(out), "--frames", "1"]):
        result = CliRunner().invoke(cli, command)
        assert result.exit_code == 1 and "artifact twice" in result.output, result.output
        assert "[ok]" not in result.output  # refused on load, before any entry was checked
