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
from edgeserve.manifest import stamp

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
