"""A preprocessing nobody asked for (issue 48): calibrated from a plain .npz with no image flags,
a model whose data spans -0.996..0.996 got "scale 1/255, mean 0, std 1" recorded, and `run
--input face.png` then fed it 0..1 without a word. The default image preprocessing is now
recorded only when the .npz holds values it can give; the manifest records the value range
the calibration data holds either way.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgeserve.cli import cli

pytest.importorskip("ai_edge_quantizer")


def _convert(testdata: Path, folder: Path, low: float, high: float, caplog: pytest.LogCaptureFixture) -> tuple[dict, str]:
    x = np.random.default_rng(0).uniform(low, high, (24, 96, 96, 3)).astype(np.float32)
    np.savez(folder / "calib.npz", x=x)
    out = folder / "out"
    # The CLI's "edgeserve" logger does not propagate (it has a handler of its own): listen on the
    # pipeline's logger itself.
    pipeline_log = logging.getLogger("edgeserve.conversion.convert")
    pipeline_log.addHandler(caplog.handler)
    try:
        result = CliRunner().invoke(cli, ["convert", str(testdata / "mlperf-tiny" / "vww_96_float.tflite"), "-t",
                                          "tflite-int8", "--calib", str(folder / "calib.npz"), "--min-agreement", "0",
                                          "-o", str(out)])
    finally:
        pipeline_log.removeHandler(caplog.handler)
    assert result.exit_code == 0, result.output
    return json.loads((out / "manifest.json").read_text()), " ".join(caplog.text.split())


def test_data_the_default_preprocessing_cannot_give_records_none(testdata: Path, tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    manifest, said = _convert(testdata, tmp_path, -0.996, 0.996, caplog)
    assert manifest["preprocess"] is None
    ranges = manifest["calibration"]["value_ranges"]
    assert ranges[0][0] == pytest.approx(-0.996, abs=0.01) and ranges[0][1] == pytest.approx(0.996, abs=0.01)
    assert "cannot give: no preprocessing is recorded; give --scale/--mean/--std" in said
    photo = tmp_path / "face.png"
    from PIL import Image

    Image.fromarray(np.zeros((120, 160, 3), np.uint8)).save(photo)
    ran = CliRunner().invoke(cli, ["run", str(tmp_path / "out"), "--input", str(photo)])
    assert ran.exit_code != 0 and "images need preprocessing" in ran.output, ran.output


def test_data_in_the_default_range_keeps_the_default(testdata: Path, tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    manifest, said = _convert(testdata, tmp_path, 0.0, 1.0, caplog)
    assert manifest["preprocess"]["scale"] == pytest.approx(1 / 255) and manifest["preprocess"]["color"] == "rgb"
    assert "no preprocessing is recorded" not in said


def test_an_output_is_ranked_as_classes_only_when_it_is_one(testdata: Path, tmp_path: Path) -> None:
    """A landmark output ranked as class scores ("1=0.772, 4=0.753, ...") read as an answer. An
    output the conversion did not judge as class scores (the anomaly autoencoder's 640 values,
    judged by their error) is described by its shape and range; a classifier's is ranked."""
    out = tmp_path / "ad"
    made = CliRunner().invoke(cli, ["convert", str(testdata / "mlperf-tiny" / "ad01_fp32.tflite"), "-t", "tflite-int8",
                                    "--calib-random", "-o", str(out)])
    assert made.exit_code == 0, made.output
    np.save(tmp_path / "x.npy", np.random.default_rng(0).normal(0, 1, (1, 640)).astype(np.float32))
    ran = CliRunner().invoke(cli, ["run", str(out), "--input", str(tmp_path / "x.npy"), "--json"])
    assert ran.exit_code == 0, ran.output
    (result,) = json.loads(ran.stdout)["results"]
    assert "top_k" not in result and result["outputs_summary"][0]["shape"] == [1, 640]
    kws = tmp_path / "kws"
    np.savez(tmp_path / "kws.npz", x=np.random.default_rng(1).normal(0, 20, (40, 49, 10, 1)).astype(np.float32))
    made = CliRunner().invoke(cli, ["convert", str(testdata / "mlperf-tiny" / "kws_ref_model_float32.tflite"), "-t",
                                    "tflite-int8", "--calib", str(tmp_path / "kws.npz"), "--min-agreement", "0",
                                    "-o", str(kws)])
    assert made.exit_code == 0, made.output
    np.save(tmp_path / "f.npy", np.zeros((1, 49, 10, 1), np.float32))
    ran = CliRunner().invoke(cli, ["run", str(kws), "--input", str(tmp_path / "f.npy"), "--json"])
    assert ran.exit_code == 0, ran.output
    assert len(json.loads(ran.stdout)["results"][0]["top_k"]) == 5


def test_a_bare_file_is_ranked_only_when_output_0_is_one_vector_of_scores(testdata: Path, tmp_path: Path) -> None:
    """A bare .tflite records nothing: TFLM's sine model gives one value ([1, 1]), which ranked as
    "class 0 = 0.84" would read as an answer; it is described instead, saying why. An ImageNet
    classifier's logits ([1, 1000], bare too) are still ranked (tests/test_runtime_cli.py)."""
    np.save(tmp_path / "x.npy", np.array([[1.0]], np.float32))
    ran = CliRunner().invoke(cli, ["run", str(testdata / "tflm" / "hello_world_float.tflite"), "--input",
                                   str(tmp_path / "x.npy"), "--json"])
    assert ran.exit_code == 0, ran.output
    (result,) = json.loads(ran.stdout)["results"]
    assert "top_k" not in result and result["outputs_summary"][0]["shape"] == [1, 1]
    assert "a bare model file does not say what its outputs are" in result["not_ranked"]
    assert result["outputs_summary"][0]["min"] == pytest.approx(np.sin(1.0), abs=0.05)
    shown = CliRunner().invoke(cli, ["run", str(testdata / "tflm" / "hello_world_float.tflite"), "--input",
                                     str(tmp_path / "x.npy")])
    assert "not ranked as classes: a bare model file" in shown.stdout and "--outputs" in shown.stdout
