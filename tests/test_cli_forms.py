"""The command forms a new user types, as the README shows them, and how errors reach scripts.

Found by trying edgeserve as a new user (issue 12): `--input a b` refused, `-q` after the
subcommand refused, `--json` errors leaving stdout empty, Python wording on the CLI, no list
of backend names, a garbled message for an mcu-only manifest, output wrapped in pipes.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import CliRunner

from edgeserve.cli import cli
from edgeserve.manifest.record import stamp

ROOT = Path(__file__).resolve().parents[1]


def invoke(*args: object) -> object:
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def two_frames(digits_example: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("frames")
    frames = np.load(digits_example / "frames.npz")["frames"]
    paths = []
    for i in range(2):
        paths.append(folder / f"{i}.npy")
        np.save(paths[-1], frames[i].astype(np.float32).reshape(1, 8, 8, 1) / 255.0)
    return paths


def test_several_paths_after_one_input(digits_conversion: Path, two_frames: list[Path]) -> None:
    result = invoke("run", digits_conversion, "--input", *two_frames, "--json")
    assert result.exit_code == 0, result.output
    assert [Path(r["input"]).name for r in json.loads(result.stdout)["results"]] == ["0.npy", "1.npy"]


def test_run_without_any_input_is_a_usage_error(digits_conversion: Path) -> None:
    result = invoke("run", digits_conversion)
    assert result.exit_code == 2 and "give at least one input" in result.output


@pytest.mark.parametrize("where", ["before", "after"])
def test_quiet_anywhere_on_the_line(digits_conversion: Path, two_frames: list[Path], where: str) -> None:
    args = ["run", digits_conversion, "--input", two_frames[0]]
    result = invoke(*(["-q", *args] if where == "before" else [*args, "-q"]))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(str(two_frames[0]))
    assert "backend:" not in result.stderr and "skipped" not in result.stderr
    loud = invoke(*args)
    assert "backend: litert:" in loud.stderr  # the line -q removes is there without it


def test_json_errors_are_json_on_stdout(tmp_path: Path) -> None:
    missing = invoke("inspect", tmp_path / "missing.tflite", "--json")
    assert missing.exit_code in (1, 2)
    doc = json.loads(missing.stdout)
    assert set(doc) == {"error", "kind"} and "missing.tflite" in doc["error"]
    assert "error" in missing.stderr.lower()

    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"\0" * 64)
    result = invoke("inspect", bad, "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["kind"] == "ModelFileError"
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")]


def test_unknown_backend_lists_the_names_with_a_suggestion(digits_conversion: Path, two_frames: list[Path]) -> None:
    result = invoke("run", digits_conversion, "--input", two_frames[0], "--backend", "xnnpack")
    assert result.exit_code == 1
    assert "unknown backend 'xnnpack'" in result.stderr
    assert "Did you mean" in result.stderr and "litert:xnnpack" in result.stderr
    assert "litert:cpu" in result.stderr and "onnxruntime:cpu" in result.stderr


def test_cli_wording_on_the_cli_api_wording_in_the_api(testdata: Path, tmp_path: Path) -> None:
    """A model with no PreprocessSpec (a sine regressor) fed an image: flags on the CLI, arguments in Python."""
    import cv2
    from edgeserve.runtime import Session

    from edgeserve.errors import InputError

    plain = testdata / "tflm" / "hello_world_int8.tflite"
    photo = tmp_path / "photo.png"
    cv2.imwrite(str(photo), np.zeros((32, 48, 3), np.uint8))
    result = invoke("run", plain, "--input", photo)
    assert result.exit_code == 1
    assert "--size" in result.stderr and "preprocess=" not in result.stderr
    with Session(plain) as session, pytest.raises(InputError, match=r"preprocess=PreprocessSpec"):
        session.run(np.zeros((32, 48, 3), np.uint8))


def test_a_manifest_with_only_an_mcu_build(digits_conversion: Path, tmp_path: Path) -> None:
    out = tmp_path / "mcu_only"
    shutil.copytree(digits_conversion, out)
    manifest = json.loads((out / "manifest.json").read_text())
    for entry in manifest["artifacts"]:
        entry["target"], entry["path"] = "mcu", "mcu/"
    (out / "manifest.json").write_text(json.dumps(stamp(manifest)))  # re-stamped, as a knowing editor would
    result = invoke("run", out, "--input", tmp_path)
    assert result.exit_code == 1
    assert "has no an" not in result.stderr
    assert "holds nothing the runtime serves" in result.stderr and "-t tflite-int8" in result.stderr


def test_output_to_a_pipe_is_not_wrapped() -> None:
    from edgeserve.cli.report import _console

    console = _console()  # pytest's stdout is not a terminal
    assert console.soft_wrap and console.width >= 1000
    with console.capture() as captured:
        console.print("x" * 300)
    assert captured.get().strip() == "x" * 300


def test_readme_command_forms_parse() -> None:
    """Every `edgeserve ...` line in the code blocks of the README and docs/ is accepted by the
    command tree (options and arguments; `[...]` optional parts and `|` alternatives as written)."""
    lines: list[str] = []
    language = None  # None outside a fenced block
    text = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    for raw in text.replace("\\\n", " ").splitlines():
        if raw.startswith("```"):
            language = None if language is not None else raw[3:].strip()
        elif language in ("", "bash", "sh", "console"):
            lines.append(raw.split("  #")[0].strip())
    commands = [line for line in lines if line.startswith("edgeserve ")]
    assert len(commands) >= 40
    checked = 0
    for line in commands:
        # "[PreprocessSpec flags]" and the like name a group of flags in prose, not a form.
        words = re.sub(r"\[[A-Za-z][^\]-]* [^\]]*\]", "", line).split()[1:]
        # Keep the first choice of each "a|b" and drop bracketed optional parts' brackets.
        words = [w.strip("[]").split("|")[0] for w in words]
        words = [w for w in words if w and w not in ("...", "…") and not w.endswith("...")]
        assert words and words[0] in cli.commands, f"README command not known: {line}"
        command = cli.commands[words[0]]
        args = words[1:]
        while isinstance(command, click.Group) and args and args[0] in command.commands:
            command, args = command.commands[args[0]], args[1:]
        try:
            command.make_context(words[0], [a for a in args if a not in ("-q", "--quiet", "--debug")])
        except click.BadParameter:
            pass  # a placeholder such as N or WxH where a number goes: the form itself parsed
        except click.UsageError as exc:  # an unknown option, an extra argument: the form is wrong
            if not isinstance(exc, click.MissingParameter):
                raise AssertionError(f"README form refused: {line}: {exc.format_message()}") from exc
        checked += 1
    assert checked == len(commands)


def test_progress_in_a_log_is_one_line_per_finished_stage(testdata: Path, tmp_path: Path) -> None:
    """Issue 27: with stderr not a terminal (CI logs, a pipe) there was no progress at all; a
    terminal gets bars, a log one line per stage with its time, and -q neither."""
    import subprocess
    import sys

    source = str(testdata / "tflm" / "hello_world_int8.tflite")
    command = [sys.executable, "-m", "edgeserve", "convert", source, "-t", "mcu", "--no-fit-check"]
    logged = subprocess.run([*command, "-o", str(tmp_path / "a")], capture_output=True, text=True, timeout=300)
    assert logged.returncode == 0, logged.stderr
    stages = [line for line in logged.stderr.splitlines() if re.match(r"^\[ *\d+\.\d s\] ", line)]
    assert stages[0].endswith("] load hello_world_int8.tflite"), logged.stderr
    assert any("mcu: plan the tensor arena" in line for line in stages) and "\x1b" not in logged.stderr
    quiet = subprocess.run([*command, "-o", str(tmp_path / "b"), "-q"], capture_output=True, text=True, timeout=300)
    assert quiet.returncode == 0 and not re.search(r"^\[ *\d+\.\d s\] ", quiet.stderr, re.M), quiet.stderr
