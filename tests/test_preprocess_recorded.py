"""A preprocessing nobody asked for (issue 48): calibrated from a plain .npz with no image flags,
a model whose data spans -0.996..0.996 got "scale 1/255, mean 0, std 1" recorded, and `run
--input face.png` then fed it 0..1 without a word. The default image preprocessing is now
recorded only when the .npz holds values it can give; the manifest records the value range
the calibration data holds either way.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgeserve.cli import cli

pytest.importorskip("ai_edge_quantizer")


def _convert(testdata: Path, folder: Path, low: float, high: float) -> tuple[dict, str]:
    x = np.random.default_rng(0).uniform(low, high, (24, 96, 96, 3)).astype(np.float32)
    np.savez(folder / "calib.npz", x=x)
    out = folder / "out"
    result = CliRunner().invoke(cli, ["convert", str(testdata / "mlperf-tiny" / "vww_96_float.tflite"), "-t",
                                      "tflite-int8", "--calib", str(folder / "calib.npz"), "--min-agreement", "0",
                                      "-o", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads((out / "manifest.json").read_text()), " ".join(result.output.split())  # log lines wrap


def test_data_the_default_preprocessing_cannot_give_records_none(testdata: Path, tmp_path: Path) -> None:
    manifest, said = _convert(testdata, tmp_path, -0.996, 0.996)
    assert manifest["preprocess"] is None
    ranges = manifest["calibration"]["value_ranges"]
    assert ranges[0][0] == pytest.approx(-0.996, abs=0.01) and ranges[0][1] == pytest.approx(0.996, abs=0.01)
    assert "cannot give: no preprocessing is recorded; give --scale/--mean/--std" in said
    photo = tmp_path / "face.png"
    from PIL import Image

    Image.fromarray(np.zeros((120, 160, 3), np.uint8)).save(photo)
    ran = CliRunner().invoke(cli, ["run", str(tmp_path / "out"), "--input", str(photo)])
    assert ran.exit_code != 0 and "images need preprocessing" in ran.output, ran.output


def test_data_in_the_default_range_keeps_the_default(testdata: Path, tmp_path: Path) -> None:
    manifest, said = _convert(testdata, tmp_path, 0.0, 1.0)
    assert manifest["preprocess"]["scale"] == pytest.approx(1 / 255) and manifest["preprocess"]["color"] == "rgb"
    assert "no preprocessing is recorded" not in said
