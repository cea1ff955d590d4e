"""Converting again into the same folder keeps what the previous run built from exactly the same
inputs (edgeserve/conversion/reuse.py): one more target costs that target; a change of any key rebuilds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgeserve.conversion import reuse
from edgeserve.cli import cli
from edgeserve.conversion.convert import convert

MODEL = "tflm/hello_world_int8.tflite"


def _entries(out: Path) -> dict[str, dict]:
    return {a["target"]: a for a in json.loads((out / "manifest.json").read_text())["artifacts"]}


def _reused(out: Path) -> dict[str, bool]:
    return {target: bool(entry.get("reused")) for target, entry in _entries(out).items()}


@pytest.fixture
def first(testdata: Path, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    convert(testdata / MODEL, ["mcu"], out, options={"name": "hw", "fit_check": False})
    assert _reused(out) == {"mcu": False}
    return out


def test_one_more_target_keeps_the_others_and_builds_that_one(testdata: Path, tmp_path: Path) -> None:
    first = tmp_path / "cli"
    result = CliRunner().invoke(cli, ["convert", str(testdata / MODEL), "-t", "mcu", "--name", "hw", "--no-fit-check",
                                      "-o", str(first)])
    assert result.exit_code == 0 and _reused(first) == {"mcu": False}, result.output
    before = _entries(first)["mcu"]
    files = {p.relative_to(first): p.read_bytes() for p in (first / "mcu").rglob("*") if p.is_file()}
    result = CliRunner().invoke(cli, ["convert", str(testdata / MODEL), "-t", "mcu", "-t", "mcu-c", "--name", "hw",
                                      "--no-fit-check", "-o", str(first)])
    assert result.exit_code == 0, result.output
    assert "kept from the previous run into this folder" in result.output
    assert _reused(first) == {"mcu": True, "mcu-c": False}
    kept = _entries(first)["mcu"]
    assert {k: v for k, v in kept.items() if k != "reused"} == before  # the entry as it was
    assert {p.relative_to(first): p.read_bytes() for p in (first / "mcu").rglob("*") if p.is_file()} == files
    assert CliRunner().invoke(cli, ["verify", str(first)]).exit_code == 0
    again = CliRunner().invoke(cli, ["convert", str(testdata / MODEL), "-t", "mcu", "-t", "mcu-c", "--name", "hw",
                                     "--no-fit-check", "--no-reuse", "-o", str(first)])
    assert again.exit_code == 0 and _reused(first) == {"mcu": False, "mcu-c": False}


def _copy_changed(source: Path, folder: Path) -> Path:
    """The model with one weight byte changed: the same graph, another file."""
    from edgeserve.tflite.model import TfliteModel

    data = bytearray(source.read_bytes())
    model = TfliteModel.from_bytes(bytes(data))
    weights = next(bytes(model.buffer_data(t.buffer_index)) for t in model.subgraphs[0].tensors
                   if t.buffer_index and len(model.buffer_data(t.buffer_index)) > 4)
    data[bytes(data).find(weights)] ^= 1
    changed = folder / source.name
    changed.write_bytes(bytes(data))
    return changed


@pytest.mark.parametrize("change", ["source byte", "option", "profile", "tool version", "edgeserve code",
                                    "route variable", "damaged file"])
def test_a_change_of_any_key_builds_the_target_again(testdata: Path, first: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    source, options, profile = testdata / MODEL, {"name": "hw", "fit_check": False}, None
    convert(source, ["mcu"], first, options=options)
    assert _reused(first) == {"mcu": True}  # the same run again: kept
    if change == "source byte":
        source = _copy_changed(source, tmp_path)
    elif change == "option":
        options = {"name": "hw2", "fit_check": False}
    elif change == "profile":
        profile = "stm32f746-discovery"
    elif change == "tool version":
        versions = dict(reuse.tool_versions())
        monkeypatch.setattr(reuse, "tool_versions", lambda: versions | {"tflite-micro": "0.dev0"})
    elif change == "edgeserve code":
        monkeypatch.setattr(reuse, "code_digest", lambda: "0" * 64)
    elif change == "route variable":
        monkeypatch.setenv("EDGESERVE_ONNX_ROUTE", "reader")
    else:
        header = next((first / "mcu").glob("*_model_data.h"))
        header.write_text(header.read_text() + "\n")
    convert(source, ["mcu"], first, options=options, profile=profile)
    assert _reused(first) == {"mcu": False}, change


def test_a_target_that_failed_is_built_again(testdata: Path, tmp_path: Path) -> None:
    """Only a passing entry is kept: a failed one is what the user is converting again to fix."""
    out = tmp_path / "out"
    shutil.copytree(testdata / "tflm", tmp_path / "tflm")
    convert(tmp_path / "tflm" / "hello_world_int8.tflite", ["mcu"], out, options={"name": "hw", "fit_check": False})
    manifest_path = out / "manifest.json"
    from edgeserve.manifest.record import stamp

    manifest = json.loads(manifest_path.read_text())
    manifest["artifacts"][0]["status"] = "failed"
    manifest_path.write_text(json.dumps(stamp(manifest)))
    convert(tmp_path / "tflm" / "hello_world_int8.tflite", ["mcu"], out, options={"name": "hw", "fit_check": False})
    assert _reused(out) == {"mcu": False} and _entries(out)["mcu"]["status"] == "ok"
