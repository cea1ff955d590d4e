"""One target's refusal does not throw away the others (issue 27: `-t tflite-int8 -t mcu-c -t
onnx` on a model mcu-c has no kernel for printed only the refusal, and nothing was written)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from edgeserve.cli import cli


def test_a_refused_target_is_recorded_and_the_rest_is_written(testdata: Path, tmp_path: Path) -> None:
    """TFLM's LSTM model: TFLM has an int8 kernel for UNIDIRECTIONAL_SEQUENCE_LSTM (so mcu
    builds it), mcu-c does not (so it is refused, after which mcu is still built)."""
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["convert", str(testdata / "tflm/trained_lstm_int8.tflite"), "-t", "mcu-c",
                                      "-t", "mcu", "--no-fit-check", "-o", str(out)])
    assert result.exit_code == 1, result.output
    assert "mcu-c  REFUSED" in result.output and "UNIDIRECTIONAL_SEQUENCE_LSTM" in result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("error: mcu-c: refused: the mcu-c target has no kernel for UNIDIRECTIONAL_SEQUENCE_LSTM"), last
    manifest = json.loads((out / "manifest.json").read_text())
    # The work that could be done is kept: mcu (after mcu-c was refused) too.
    assert [a["target"] for a in manifest["artifacts"]] == ["mcu"]
    assert all(a["status"] == "ok" for a in manifest["artifacts"])
    assert [r["target"] for r in manifest["refused"]] == ["mcu-c"]
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" in manifest["refused"][0]["reason"]
    assert not (out / "mcu-c").exists() and (out / "mcu").is_dir()
    assert CliRunner().invoke(cli, ["verify", str(out)]).exit_code == 0  # what was written stands


def test_tflm_refusing_the_model_is_the_mcu_targets_refusal_not_the_end_of_the_run(tmp_path: Path) -> None:
    """A CONCATENATION of 11 inputs: LiteRT runs it, TFLM's kernel takes at most 10
    (kMaxInputNum), so TFLM refuses it while preparing. That used to end the whole run with
    nothing written; now it is mcu's refusal, and the tflite-int8 artifact is kept."""
    import keras
    import numpy as np

    inputs = keras.Input((4,), batch_size=1)
    parts = [keras.layers.Dense(2)(inputs) for _ in range(11)]
    keras.Model(inputs, keras.layers.Concatenate()(parts)).save(tmp_path / "wide.keras")
    np.savez(tmp_path / "calib.npz", x=np.random.default_rng(0).standard_normal((32, 4)).astype(np.float32))
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["convert", str(tmp_path / "wide.keras"), "-t", "tflite-int8", "-t", "mcu",
                                      "--calib", str(tmp_path / "calib.npz"), "--no-fit-check", "-o", str(out)])
    assert result.exit_code == 1, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert [(a["target"], a["status"]) for a in manifest["artifacts"]] == [("tflite-int8", "ok")]
    (refused,) = manifest["refused"]
    assert refused["target"] == "mcu" and "TFLM could not prepare" in refused["reason"]
    assert "kMaxInputNum" in refused["reason"]
