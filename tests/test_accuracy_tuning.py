"""Accuracy-aware tuning: remedies tried in order, each reported, the first within bound kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgeserve.cli import cli
from edgeserve.errors import AccuracyError
from edgeserve.conversion.convert import convert
from sine_model import build_sine

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_sine(tmp_path_factory.mktemp("sine"))


@pytest.fixture(scope="module")
def all_attempts(sine: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Every remedy's measured MAE increase, from a run that no remedy can satisfy (max 0%)."""
    out = tmp_path_factory.mktemp("sine_all")
    with pytest.raises(AccuracyError) as err:
        convert(sine / "sine.keras", ["tflite-int8"], out, calib=sine / "calib.npz", eval_data=sine / "eval.npz",
                options={"max_drop": 0.0, "metric": "mae"})
    entry = err.value.result.manifest["artifacts"][0]
    assert entry["status"] == "failed"
    return {a["description"]: a for a in entry["attempts"]}


def _drop(attempts: dict[str, dict], prefix: str) -> float:
    (attempt,) = [a for d, a in attempts.items() if d.startswith(prefix)]
    return attempt["metrics"]["drop_points"]


def test_every_remedy_is_tried_in_order_and_reported(all_attempts: dict[str, dict]) -> None:
    remedies = [a["remedy"] for a in all_attempts.values()]
    assert remedies[0] == "int8" and remedies[1] == "int16x8"
    assert set(remedies[2:]) == {"float-layers"} and len(remedies) >= 3
    for attempt in all_attempts.values():
        assert attempt["status"] == "drop too large"
        assert attempt["metrics"]["metric"] == "mae" and attempt["metrics"]["labelled"] is True
        assert attempt["reason"].startswith("mae drop")
    # the remedies help on this model: each later attempt loses less than plain int8
    int8 = _drop(all_attempts, "int8 activations")
    assert _drop(all_attempts, "int16 activations") < int8
    assert min(a["metrics"]["drop_points"] for a in all_attempts.values() if a["remedy"] == "float-layers") < int8


def test_failing_bound_exits_1_with_the_table_and_marks_the_manifest(sine: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, [
        "convert", str(sine / "sine.keras"), "-t", "tflite-int8", "--calib", str(sine / "calib.npz"),
        "--eval", str(sine / "eval.npz"), "--metric", "mae", "--max-drop", "0", "-p", "coral-dev-board",
        "-o", str(tmp_path),
    ])
    assert result.exit_code == 1
    assert "exceeds --max-drop 0.0" in result.stderr and "% more error" in result.stderr
    assert "attempts" in result.stdout and "profile coral-dev-board has no int16-activation kernels" in result.stdout
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    entry = manifest["artifacts"][0]
    assert entry["status"] == "failed"
    skipped = [a for a in entry["attempts"] if a["status"] == "skipped"]
    assert [a["remedy"] for a in skipped] == ["int16x8"]
    verify = CliRunner().invoke(cli, ["verify", str(tmp_path)])
    assert verify.exit_code == 1 and "marks this artifact 'failed'" in verify.stdout
    # --json: one document, the error with the manifest in it (json.loads fails on two).
    result = CliRunner().invoke(cli, [
        "convert", str(sine / "sine.keras"), "-t", "tflite-int8", "--calib", str(sine / "calib.npz"),
        "--eval", str(sine / "eval.npz"), "--metric", "mae", "--max-drop", "0", "-p", "coral-dev-board",
        "-o", str(tmp_path / "json"), "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["kind"] == "AccuracyError" and "exceeds --max-drop 0.0" in data["error"]
    assert data["manifest"]["artifacts"][0]["status"] == "failed"


def test_int16_activations_are_kept_when_they_meet_the_bound(sine: Path, all_attempts: dict[str, dict],
                                                             tmp_path: Path) -> None:
    int8, int16 = _drop(all_attempts, "int8 activations"), _drop(all_attempts, "int16 activations")
    bound = (int8 + int16) / 2
    result = convert(sine / "sine.keras", ["tflite-int8"], tmp_path, calib=sine / "calib.npz",
                     eval_data=sine / "eval.npz", options={"max_drop": bound, "metric": "mae"})
    entry = result.manifest["artifacts"][0]
    assert entry["status"] == "ok"
    assert [a["status"] for a in entry["attempts"]] == ["drop too large", "ok"]
    assert entry["quantization"]["scheme"] == "int16x8" and entry["quantization"]["activations"] == "int16"
    assert entry["inputs"][0]["dtype"] == "int16"  # 16x8 models take int16 (or float) I/O
    assert entry["metrics"]["drop_points"] == pytest.approx(int16)
    assert CliRunner().invoke(cli, ["verify", str(tmp_path)]).exit_code == 0


def test_worst_layers_kept_in_float_when_int16_is_not_allowed(sine: Path, all_attempts: dict[str, dict],
                                                              tmp_path: Path) -> None:
    float_attempts = [a for a in all_attempts.values() if a["remedy"] == "float-layers"]
    best = min(float_attempts, key=lambda a: a["metrics"]["drop_points"])
    bound = (best["metrics"]["drop_points"] + _drop(all_attempts, "int8 activations")) / 2
    result = convert(sine / "sine.keras", ["tflite-int8"], tmp_path, calib=sine / "calib.npz",
                     eval_data=sine / "eval.npz", profile="coral-dev-board",
                     options={"max_drop": bound, "metric": "mae"})
    entry = result.manifest["artifacts"][0]
    assert entry["status"] == "ok"
    assert entry["quantization"]["scheme"] == "float-layers" and entry["quantization"]["float_layers"]
    assert entry["integer_only"] is False and entry["float_ops"]  # honest about the float kernels
    assert entry["inputs"][0]["dtype"] == "int8"
    assert entry["metrics"]["drop_points"] <= bound
    assert CliRunner().invoke(cli, ["verify", str(tmp_path)]).exit_code == 0


def test_uint8_io_skips_float_layers_once_with_the_reason(sine: Path, tmp_path: Path) -> None:
    with pytest.raises(AccuracyError) as err:
        convert(sine / "sine.keras", ["tflite-int8"], tmp_path, calib=sine / "calib.npz",
                eval_data=sine / "eval.npz", profile="coral-dev-board",
                options={"max_drop": 0.0, "metric": "mae", "io": "uint8"})
    attempts = err.value.result.manifest["artifacts"][0]["attempts"]
    assert [(a["remedy"], a["status"]) for a in attempts] == [
        ("int8", "drop too large"), ("int16x8", "skipped"), ("float-layers", "skipped")]
    assert attempts[2]["reason"] == "keeping layers in float is not available with --io uint8"
    assert err.value.result.manifest["artifacts"][0]["inputs"][0]["dtype"] == "uint8"


@pytest.mark.parametrize(("tensor", "shown"), [
    # litert-torch: each module's class and attribute name; read as the module path
    ("torch.nn.modules.container.Sequential_features/torch.nn.modules.conv.Conv2d_0;"
     "torch.nn.modules.container.Sequential_features/x", "features.0 (Conv2d)"),
    ("torch.nn.modules.container.Sequential_f/torch.nn.modules.pooling.MaxPool2d_2", "f.2 (MaxPool2d)"),
    # computed in the root module (nodes inside an ONNX If or Loop body): the operator and number
    ("edgeserve.sources.onnx.reader.OnnxGraph;6", "CONV_2D #6 (OnnxGraph)"),
    ("edgeserve.sources.onnx.reader.OnnxGraph;;edgeserve.sources.onnx.reader.OnnxGraph;9", "CONV_2D #9 (OnnxGraph)"),
    ("edgeserve.sources.onnx.reader.OnnxGraph", "OnnxGraph"),
    # the ONNX reader: one submodule per node, a class per operator type
    ("edgeserve.sources.onnx.reader.OnnxGraph/edgeserve.sources.onnx.nodes.Conv_n3_conv2d_1_tmp_0;;"
     "edgeserve.sources.onnx.reader.OnnxGraph/x", "n3_conv2d_1_tmp_0 (Conv)"),
    # TensorFlow and ONNX names keep their own spelling, without the model prefix
    ("sequential/dense_1/MatMul", "dense_1/MatMul"),
    ("model/conv2d/BiasAdd;model/conv2d/Conv2D", "conv2d/BiasAdd"),
    ("/backbone/layer1.0/conv1/Conv", "backbone/layer1.0/conv1/Conv"),
    ("y", "y"),
])
def test_layer_names_read_as_the_source_names_them(tensor: str, shown: str) -> None:
    """Issue 27: every row of the per-layer table of a PyTorch source read
    `torch.nn.modules.container.Sequential_f/torch.nn.modules.poo` (the first 40 characters)."""
    from edgeserve.converters.tflite_int8.layer_errors import LayerError

    assert LayerError(tensor, "CONV_2D", 1, 0.3, 40.0, 0.01, 0.01).short_name == shown


def test_an_attempt_litert_cannot_run_is_that_attempts_error_in_litert_s_words() -> None:
    """A remedy's model that LiteRT refuses to prepare (here a RESHAPE of 4 values into 5) is that
    attempt's error, with LiteRT's words, not a traceback out of the whole target."""
    from types import SimpleNamespace

    import numpy as np

    from edgeserve.converters.tflite_int8.attempts import Attempt, Remedy
    from edgeserve.converters.tflite_int8.converter import Options, TfliteInt8Converter
    from tflite_builder import INT8, INT32, tflite

    model = tflite([("x", [1, 4], INT8, None, (0.1, 0)), ("shape", [2], INT32, np.array([1, 5], np.int32), None),
                    ("y", [1, 5], INT8, None, (0.1, 0))], [("RESHAPE", [0, 1], [2], None)], [0], [2])
    attempt = Attempt(Remedy("int8", "all int8"), "")
    attempt.model = model
    ctx = SimpleNamespace(evaluation=SimpleNamespace(inputs=[np.zeros((2, 1, 4), np.float32)]),
                          progress=SimpleNamespace(track=lambda *args: None))
    TfliteInt8Converter().verify(ctx, attempt, "sqnr", Options.from_mapping({}))
    assert attempt.status == "error" and attempt.verdict is None
    assert attempt.reason.startswith("LiteRT could not run this model:") and "failed to prepare" in attempt.reason
