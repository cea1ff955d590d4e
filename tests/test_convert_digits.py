"""The bundled digits example through tflite-int8: accuracy, manifest, verification, bad input."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgeserve.cli import cli
from edgeserve.manifest.record import stamp
from edgeserve.tflite.model import TfliteModel

pytestmark = pytest.mark.slow


def invoke(*args: object) -> "CliRunner.invoke":
    return CliRunner().invoke(cli, [str(a) for a in args])


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest_of(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def entry_of(out: Path) -> dict:
    (entry,) = [a for a in manifest_of(out)["artifacts"] if a["target"] == "tflite-int8"]
    return entry


# ----- accuracy and the independent check ----------------------------------------------------
def test_int8_top1_within_one_point_of_float(digits_conversion: Path) -> None:
    m = entry_of(digits_conversion)["metrics"]
    assert m["metric"] == "top1" and m["labelled"] is True and m["samples"] == 360
    assert m["float"] > 0.95
    assert m["drop_points"] <= 1.0
    assert m["drop_points"] == pytest.approx(100 * (m["float"] - m["quantized"]), abs=1e-3)


def test_written_model_scored_independently_matches_the_manifest(digits_conversion: Path, digits_example: Path) -> None:
    """Run the file with LiteRT directly (not edgeserve's runner) and recompute top-1."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(digits_conversion / "model_int8.tflite"))
    interpreter.allocate_tensors()
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    scale, zero = inp["quantization"]
    data = np.load(digits_example / "eval.npz")
    hits = 0
    for x, y in zip(data["x"], data["y"]):
        q = np.clip(np.round(x / scale) + zero, -128, 127).astype(np.int8)[None]
        interpreter.set_tensor(inp["index"], q)
        interpreter.invoke()
        hits += int(interpreter.get_tensor(out["index"])[0].argmax() == y)
    assert hits / len(data["y"]) == pytest.approx(entry_of(digits_conversion)["metrics"]["quantized"], abs=1e-9)


def test_every_operator_runs_on_integer_tensors(digits_conversion: Path) -> None:
    model = TfliteModel.from_file(digits_conversion / "model_int8.tflite")
    ok, problems = model.is_full_integer()
    assert ok, problems
    sg = model.subgraphs[0]
    assert sg.tensors[sg.inputs[0]].dtype_name == "int8" and sg.tensors[sg.outputs[0]].dtype_name == "int8"
    conv_weights = [sg.tensors[op.inputs[1]] for op in sg.operators if op.op_name == "CONV_2D"]
    assert conv_weights and all(len(w.quantization.scale) == w.shape[0] > 1 for w in conv_weights), "per-channel"


# ----- the manifest ------------------------------------------------------------------------------
def test_manifest_fields(digits_conversion: Path, digits_example: Path) -> None:
    manifest = manifest_of(digits_conversion)
    assert manifest["schema"] == "edgeserve.manifest/1"
    assert manifest["edgeserve_version"] and manifest["created"]
    src = manifest["source"]
    assert src["sha256"] == sha256(digits_example / "digits_cnn.keras")
    assert src["framework"] == "tensorflow" and "keras 3" in src["framework_version"]
    assert manifest["preprocess"]["color"] == "gray" and manifest["preprocess"]["size"] == [8, 8]
    assert manifest["calibration"]["samples"] == 300 and manifest["calibration"]["random"] is False
    entry = entry_of(digits_conversion)
    assert entry["path"] == "model_int8.tflite" and entry["status"] == "ok"
    artifact = digits_conversion / entry["path"]
    assert entry["sha256"] == sha256(artifact) and entry["bytes"] == artifact.stat().st_size
    (inp,), (out,) = entry["inputs"], entry["outputs"]
    assert inp["shape"] == [1, 8, 8, 1] and inp["dtype"] == "int8"
    assert inp["scale"] == pytest.approx(1 / 255, rel=1e-3) and inp["zero_point"] == -128
    assert out["shape"] == [1, 10] and out["dtype"] == "int8"
    assert entry["ops"] == {"CONV_2D": 3, "MAX_POOL_2D": 1, "MEAN": 1, "FULLY_CONNECTED": 1, "SOFTMAX": 1}
    assert set(entry["metrics"]) >= {"metric", "float", "quantized", "drop_points"}
    assert entry["attempts"][0]["remedy"] == "int8" and entry["attempts"][0]["status"] == "ok"
    report = json.loads((digits_conversion / entry["report"]["path"]).read_text())
    # the int8 model passed at once: no remedy needed the per-layer table (--per-layer measures it)
    assert report["layers"] == [] and report["layers_note"].startswith("not measured: no remedy needed it")


def test_provenance_is_stamped_into_the_tflite_file(digits_conversion: Path) -> None:
    model = TfliteModel.from_file(digits_conversion / "model_int8.tflite")
    stamp = json.loads(bytes(model.metadata["edgeserve"]))
    manifest = manifest_of(digits_conversion)
    assert stamp["source_sha256"] == manifest["source"]["sha256"]
    assert stamp["calibration_sha256"] == manifest["calibration"]["sha256"]
    assert stamp["preprocess"]["color"] == "gray"


# ----- verify ------------------------------------------------------------------------------------
def test_verify_passes_and_catches_tampering(digits_conversion: Path, tmp_path: Path) -> None:
    ok = invoke("verify", digits_conversion / "manifest.json", "--json")
    assert ok.exit_code == 0, ok.output
    checks = {c["name"]: c for c in json.loads(ok.stdout)["artifacts"][0]["checks"]}
    assert checks["outputs equal the recorded ones"]["ok"]

    copy = tmp_path / "build"
    shutil.copytree(digits_conversion, copy)
    artifact = copy / "model_int8.tflite"
    data = bytearray(artifact.read_bytes())
    data[len(data) // 2] ^= 0x55
    artifact.write_bytes(bytes(data))
    bad = invoke("verify", copy)
    assert bad.exit_code == 1
    assert "does not match the manifest" in bad.stdout


def test_verify_catches_a_model_whose_outputs_changed(digits_conversion: Path, tmp_path: Path) -> None:
    """Hashes re-stamped to match, but the weights differ: the re-run must notice."""
    copy = tmp_path / "build"
    shutil.copytree(digits_conversion, copy)
    model = TfliteModel.from_file(copy / "model_int8.tflite")
    sg = model.subgraphs[0]
    fc = next(op for op in sg.operators if op.op_name == "FULLY_CONNECTED")
    weights = sg.tensors[fc.inputs[1]]
    buf = model.buffers[weights.buffer_index]
    data = bytearray(model.file_bytes)
    data[buf.offset : buf.offset + buf.size] = (-np.frombuffer(data[buf.offset : buf.offset + buf.size], np.int8)
                                                 .clip(-127, 127)).astype(np.int8).tobytes()
    (copy / "model_int8.tflite").write_bytes(bytes(data))
    manifest = manifest_of(copy)
    manifest["artifacts"][0]["sha256"] = sha256(copy / "model_int8.tflite")
    (copy / "manifest.json").write_text(json.dumps(stamp(manifest)))  # re-stamped, as a knowing editor would
    result = invoke("verify", copy)
    assert result.exit_code == 1
    assert "[FAIL] outputs equal the recorded ones" in result.stdout


# ----- CLI: JSON, sources, I/O types, untouched inputs --------------------------------------------
def test_cli_json_prints_only_the_manifest(digits_example: Path, tmp_path: Path) -> None:
    source = tmp_path / "digits_cnn.keras"
    shutil.copy(digits_example / "digits_cnn.keras", source)
    os.chmod(source, stat.S_IREAD)  # the converter must never write to the source
    before = sha256(source)
    result = invoke("convert", source, "-t", "tflite-int8", "--calib", digits_example / "calib.npz",
                    "--io", "uint8", "-o", tmp_path / "out", "--json")
    assert result.exit_code == 0, result.output
    manifest = json.loads(result.stdout)  # nothing but JSON on stdout
    assert sha256(source) == before
    entry = manifest["artifacts"][0]
    assert entry["inputs"][0]["dtype"] == "uint8" and entry["outputs"][0]["dtype"] == "uint8"
    assert entry["inputs"][0]["zero_point"] == 0
    # no --eval: scored against the float model on the calibration set
    assert entry["metrics"]["labelled"] is False and entry["verification"]["evaluated_on"] == "npz"
    assert entry["metrics"]["drop_points"] <= 1.0


def test_a_real_convert_prints_none_of_the_libraries_noise(digits_example: Path, tmp_path: Path) -> None:
    """TensorFlow's "tf.lite.Interpreter is deprecated" block (its quantization debugger opens one),
    its C++ start-up lines and Python warnings of the libraries under the converters never reach
    the user's terminal: a whole convert in a real process, both streams read. --per-layer has
    the debugger measure its table although the int8 model passes."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "edgeserve", "convert", str(digits_example / "digits_cnn.keras"),
                           "-t", "tflite-int8", "-t", "mcu", "--calib", str(digits_example / "calib.npz"),
                           "--per-layer", "-o", str(tmp_path / "out")], capture_output=True, text=True, timeout=900)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "per-layer error" in done.stderr  # the debugger ran, so its Interpreter was opened
    report = json.loads((tmp_path / "out" / "reports" / "tflite-int8.json").read_text())
    assert len(report["layers"]) >= 5 and "layers_note" not in report
    assert all(l["rmse_per_scale"] >= 0 for l in report["layers"])
    for noise in ("deprecated", "tf.lite.Interpreter", "oneDNN", "absl::", "Warning:", "Traceback"):
        assert noise not in output, f"{noise!r} in:\n{output}"


def test_float_io_keeps_integer_kernels(digits_example: Path, tmp_path: Path) -> None:
    result = invoke("convert", digits_example / "digits_cnn.keras", "-t", "tflite-int8", "--io", "float",
                    "--calib", digits_example / "calib.npz", "--eval", digits_example / "eval.npz",
                    "-o", tmp_path, "--json")
    assert result.exit_code == 0, result.output
    entry = json.loads(result.stdout)["artifacts"][0]
    assert entry["inputs"][0]["dtype"] == "float32"
    assert entry["integer_only"] is True  # only the boundary QUANTIZE / DEQUANTIZE touch floats
    assert entry["ops"]["QUANTIZE"] == 1 and entry["ops"]["DEQUANTIZE"] == 1
    assert invoke("verify", tmp_path).exit_code == 0


def test_savedmodel_and_keras_h5_sources(digits_example: Path, tmp_path: Path) -> None:
    import keras

    model = keras.models.load_model(digits_example / "digits_cnn.keras")
    model.export(str(tmp_path / "saved_model"), verbose=False)
    model.save(tmp_path / "digits.h5")
    for source in (tmp_path / "saved_model", tmp_path / "digits.h5"):
        out = tmp_path / f"out_{source.name}"
        result = invoke("convert", source, "-t", "tflite-int8", "--calib", digits_example / "calib.npz",
                        "--eval", digits_example / "eval.npz", "-o", out, "--json")
        assert result.exit_code == 0, result.output
        entry = json.loads(result.stdout)["artifacts"][0]
        assert entry["metrics"]["drop_points"] <= 1.0 and entry["integer_only"]
        assert json.loads(result.stdout)["source"]["kind"] == ("saved_model" if source.is_dir() else "keras-h5")


def test_image_folder_calibration_through_the_preprocess_spec(digits_example: Path, tmp_path: Path) -> None:
    from PIL import Image

    frames = np.load(digits_example / "frames.npz")["frames"]
    folder = tmp_path / "frames"
    folder.mkdir()
    for i, frame in enumerate(frames[:120]):
        Image.fromarray(frame[:, :, 0]).save(folder / f"{i:03d}.png")
    result = invoke("convert", digits_example / "digits_cnn.keras", "-t", "tflite-int8", "--calib", folder,
                    "--color", "gray", "--eval", digits_example / "eval.npz", "-o", tmp_path / "out", "--json")
    assert result.exit_code == 0, result.output
    manifest = json.loads(result.stdout)
    assert manifest["calibration"]["origin"] == "images" and manifest["calibration"]["samples"] == 120
    assert manifest["artifacts"][0]["metrics"]["drop_points"] <= 1.0


# ----- bad input ---------------------------------------------------------------------------------
def test_no_calibration_explains_why_random_data_is_wrong(digits_example: Path, tmp_path: Path) -> None:
    result = invoke("convert", digits_example / "digits_cnn.keras", "-t", "tflite-int8", "-o", tmp_path)
    assert result.exit_code == 1
    assert "Random data gives ranges unlike real inputs" in result.stderr and "--calib-random" in result.stderr
    assert not any(tmp_path.iterdir())


def test_calib_random_is_recorded(digits_example: Path, tmp_path: Path) -> None:
    result = invoke("convert", digits_example / "digits_cnn.keras", "-t", "tflite-int8", "--calib-random",
                    "-o", tmp_path, "--json", "--max-drop", "100")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["calibration"]["random"] is True


@pytest.mark.parametrize(
    "x, message",
    [
        (np.zeros((120, 9, 9, 1), np.float32), "shape (120, 9, 9, 1)"),
        (np.full((120, 8, 8, 1), np.nan, np.float32), "NaN/Inf"),
    ],
    ids=["shape", "nan"],
)
def test_bad_calibration_data_is_refused(digits_example: Path, tmp_path: Path, x: np.ndarray, message: str) -> None:
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=x)
    result = invoke("convert", digits_example / "digits_cnn.keras", "-t", "tflite-int8", "--calib", calib,
                    "-o", tmp_path / "out")
    assert result.exit_code == 1
    assert message in result.stderr
    if message.startswith("shape"):
        assert "(N, 8, 8, 1)" in result.stderr  # both shapes named
    assert not (tmp_path / "out" / "model_int8.tflite").exists()


def test_interrupted_conversion_leaves_no_artifact(digits_example: Path, tmp_path: Path, monkeypatch) -> None:
    from edgeserve.converters import tflite_int8

    from edgeserve.conversion.convert import convert

    def interrupt(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(tflite_int8.TfliteInt8Converter, "verify", interrupt)
    with pytest.raises(KeyboardInterrupt):
        convert(digits_example / "digits_cnn.keras", ["tflite-int8"], tmp_path,
                calib=digits_example / "calib.npz")
    assert sorted(p.name for p in tmp_path.rglob("*")) == []
