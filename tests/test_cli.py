"""CLI behaviour that needs no conversion: exit codes, one-line errors, JSON on stdout."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from edgeserve.cli import cli


def invoke(*args: str) -> "CliRunner.invoke":
    return CliRunner().invoke(cli, list(args))


def test_help_lists_the_commands() -> None:
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("convert", "inspect", "verify", "profiles", "targets"):
        assert command in result.stdout


def test_usage_errors_exit_2() -> None:
    assert invoke("--no-such-flag").exit_code == 2
    assert invoke("convert", "m.keras", "-o", "out").exit_code == 2  # no -t
    assert invoke("convert", "m.keras", "-t", "tflite-int8", "-o", "o", "--io", "int4").exit_code == 2
    both = invoke("convert", "m.keras", "-t", "tflite-int8", "-o", "o", "--calib", "c.npz", "--calib-random")
    assert both.exit_code == 2 and "either --calib or --calib-random" in both.stderr


def test_user_error_is_one_line_exit_1_without_traceback(tmp_path: Path) -> None:
    result = invoke("convert", str(tmp_path / "missing.keras"), "-t", "tflite-int8", "-o", str(tmp_path / "o"))
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert lines == [f"error: source model not found: {tmp_path / 'missing.keras'}"]
    assert "Traceback" not in result.output


def test_debug_keeps_the_exception(tmp_path: Path) -> None:
    from edgeserve.errors import SourceModelError

    result = invoke("--debug", "convert", str(tmp_path / "missing.keras"), "-t", "tflite-int8", "-o", str(tmp_path))
    assert result.exit_code == 1
    assert isinstance(result.exception, SourceModelError)


def test_unknown_target_suggests_the_close_one(tmp_path: Path) -> None:
    result = invoke("convert", "m.keras", "-t", "tflite-int9", "-o", str(tmp_path))
    assert result.exit_code == 1
    assert 'unknown target "tflite-int9". Did you mean "tflite-int8"?' in result.stderr


def test_unknown_source_format_names_the_accepted_ones(tmp_path: Path) -> None:
    model = tmp_path / "model.caffemodel"
    model.write_bytes(b"\x08\x07")
    result = invoke("convert", str(model), "-t", "tflite-int8", "-o", str(tmp_path / "o"))
    assert result.exit_code == 1
    for kind in (".keras file", "SavedModel directory", "ExportedProgram (.pt2)", "ONNX (.onnx) file", ".tflite file"):
        assert kind in result.stderr, kind


def test_targets_json() -> None:
    result = invoke("targets", "--json")
    assert result.exit_code == 0
    assert "tflite-int8" in [t["name"] for t in json.loads(result.stdout)]


def test_profiles_list_and_show_json() -> None:
    listing = json.loads(invoke("profiles", "--json").stdout)
    names = {p["name"] for p in listing}
    assert {"raspberry-pi-4", "raspberry-pi-5", "jetson-nano", "jetson-orin-nano", "coral-dev-board",
            "iphone-15-pro", "pixel-8", "stm32f746-discovery", "arduino-nano-33-ble", "esp32-s3", "host"} <= names
    shown = invoke("profiles", "show", "stm32f746-discovery", "--json")
    assert shown.exit_code == 0
    profile = json.loads(shown.stdout)
    assert profile["kind"] == "mcu" and profile["memory"]["flash_bytes"] == 1048576


def test_unknown_profile_is_a_user_error() -> None:
    result = invoke("profiles", "show", "raspbery-pi-5")
    assert result.exit_code == 1
    assert 'Did you mean "raspberry-pi-5"?' in result.stderr


def test_inspect_reference_int8_model(testdata: Path) -> None:
    result = invoke("inspect", str(testdata / "mlperf-tiny" / "kws_ref_model.tflite"), "--json")
    assert result.exit_code == 0, result.stderr
    info = json.loads(result.stdout)
    (inp,) = info["inputs"]
    assert inp["shape"] == [1, 49, 10, 1] and inp["dtype"] == "int8"
    assert abs(inp["scale"] - 0.5847) < 1e-4 and inp["zero_point"] == 83
    assert info["integer_only"] is True
    assert info["outputs"][0]["shape"] == [1, 12]


def test_inspect_float_model_reports_float_ops(testdata: Path) -> None:
    info = json.loads(invoke("inspect", str(testdata / "tflm" / "hello_world_float.tflite"), "--json").stdout)
    assert info["integer_only"] is False and info["float_ops"]


def test_inspect_corrupt_model_is_a_user_error(testdata: Path, tmp_path: Path) -> None:
    data = bytearray((testdata / "tflm" / "hello_world_int8.tflite").read_bytes())
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(bytes(data[: len(data) // 3]))
    result = invoke("inspect", str(bad))
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ") and "Traceback" not in result.output


def test_verify_missing_and_malformed_manifest(tmp_path: Path) -> None:
    assert invoke("verify", str(tmp_path / "nope.json")).exit_code == 1
    bad = tmp_path / "manifest.json"
    bad.write_text('{"schema": "something/else", "artifacts": []}')
    result = invoke("verify", str(bad))
    assert result.exit_code == 1 and "expected schema 'edgeserve.manifest/1'" in result.stderr
