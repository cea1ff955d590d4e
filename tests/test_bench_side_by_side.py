"""`edgeserve bench OUT`: every artifact of a conversion folder on the same input, one table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgeserve.cli import cli


@pytest.fixture(scope="module")
def four_formats(digits_example: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The digits CNN as tflite-int8, onnx, onnx-int8 and mcu-c, with a recorded PreprocessSpec."""
    from edgeserve.pipeline import convert
    from edgeserve.preprocess import PreprocessSpec

    out = tmp_path_factory.mktemp("four_formats")
    spec = PreprocessSpec.from_dict({"size": [8, 8], "color": "gray", "mean": [0.0], "std": [16.0]})
    result = convert(digits_example / "digits_cnn.keras", ["tflite-int8", "onnx", "onnx-int8", "mcu-c"], out,
                     calib=digits_example / "calib.npz", eval_data=digits_example / "eval.npz", preprocess=spec)
    assert all(a["status"] == "ok" for a in result.manifest["artifacts"])
    return out


def test_every_artifact_runs_on_the_same_frame_with_its_size_and_quality(four_formats):
    result = CliRunner().invoke(cli, ["bench", str(four_formats), "--frames", "30", "--warmup", "5", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["target"]: r for r in json.loads(result.output)["artifacts"]}
    assert set(rows) == {"tflite-int8", "onnx", "onnx-int8", "mcu-c"}
    timed = [rows[t] for t in ("tflite-int8", "onnx", "onnx-int8")]
    assert [r["backend"].split(":")[0] for r in timed] == ["litert", "onnxruntime", "onnxruntime"]
    assert all(r["input"] == "640x480 frame" and 0 < r["p50_ms"] <= r["p95_ms"] for r in timed)
    assert min(r["ratio"] for r in timed) == 1.0 and all(r["ratio"] >= 1.0 for r in timed)
    manifest = json.loads((four_formats / "manifest.json").read_text())
    for entry in manifest["artifacts"]:
        row = rows[entry["target"]]
        path = four_formats / entry["path"]
        expected = path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        assert row["bytes"] == expected
        if "metrics" in entry:
            assert row["quality"] == (f"top1 {entry['metrics']['quantized']:.3f} "
                                      f"(drop {entry['metrics']['drop_points']:.2f} pts)")
    # The microcontroller build is accounted for, with its figure from the emulated board.
    assert "p50_ms" not in rows["mcu-c"] and "runs on the board" in rows["mcu-c"]["skipped"]
    assert rows["mcu-c"]["quality"].startswith("bit-exact")


def test_the_table_and_the_flags_that_need_one_artifact(four_formats):
    table = CliRunner().invoke(cli, ["bench", str(four_formats), "--frames", "10", "--warmup", "2"])
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert lines[0].split()[:3] == ["artifact", "backend", "size"]
    assert sum(line.startswith(("tflite-int8 ", "onnx ", "onnx-int8 ", "mcu-c ")) for line in lines) == 4
    refused = CliRunner().invoke(cli, ["bench", str(four_formats), "--synthetic", "64x64"])
    assert refused.exit_code == 2 and "--target" in refused.output
    one = CliRunner().invoke(cli, ["bench", str(four_formats), "--target", "onnx", "--frames", "5", "--json"])
    assert one.exit_code == 0, one.output
    assert json.loads(one.output)["backend"].startswith("onnxruntime")


def test_plot_draws_latency_against_size(four_formats, tmp_path):
    plot = tmp_path / "side_by_side.png"
    result = CliRunner().invoke(cli, ["bench", str(four_formats), "--frames", "5", "--warmup", "1", "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    data = plot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    single = CliRunner().invoke(cli, ["bench", str(four_formats / "manifest.json"), "--plot", str(tmp_path / "x.png")])
    assert single.exit_code == 2 and "conversion folder" in single.output and not (tmp_path / "x.png").exists()
