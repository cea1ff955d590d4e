"""One target's refusal does not throw away the others (issue 27: `-t tflite-int8 -t mcu-c -t
onnx` on a model mcu-c has no kernel for printed only the refusal, and nothing was written)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgeserve.cli import cli


@pytest.fixture(scope="module")
def upsampler(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small Keras model with a transposed convolution: TFLM has an int8 kernel for it (so
    tflite-int8 and mcu build it), mcu-c does not."""
    import keras

    keras.utils.set_random_seed(0)
    x = inputs = keras.Input((8, 8, 3), batch_size=1)
    x = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(x)
    x = keras.layers.Conv2DTranspose(4, 3, strides=2, padding="same")(x)
    model = keras.Model(inputs, keras.layers.GlobalAveragePooling2D()(x))
    root = tmp_path_factory.mktemp("upsampler")
    model.save(root / "up.keras")
    np.savez(root / "calib.npz", x=np.random.default_rng(0).random((40, 8, 8, 3), dtype=np.float32))
    return root


def test_a_refused_target_is_recorded_and_the_rest_is_written(upsampler: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["convert", str(upsampler / "up.keras"), "-t", "tflite-int8", "-t", "mcu-c",
                                      "-t", "mcu", "--calib", str(upsampler / "calib.npz"), "--no-fit-check",
                                      "--max-drop", "100", "-o", str(out)])
    assert result.exit_code == 1, result.output
    assert "mcu-c  REFUSED" in result.output and "TRANSPOSE_CONV" in result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("error: mcu-c: refused: the mcu-c target has no kernel for TRANSPOSE_CONV"), last
    manifest = json.loads((out / "manifest.json").read_text())
    # The work that could be done is kept: mcu (after mcu-c was refused) too.
    assert [a["target"] for a in manifest["artifacts"]] == ["tflite-int8", "mcu"]
    assert all(a["status"] == "ok" for a in manifest["artifacts"])
    assert manifest["artifacts"][0]["ops"]["TRANSPOSE_CONV"] == 1
    assert [r["target"] for r in manifest["refused"]] == ["mcu-c"] and "TRANSPOSE_CONV" in manifest["refused"][0]["reason"]
    assert not (out / "mcu-c").exists() and (out / "mcu").is_dir()
    assert CliRunner().invoke(cli, ["verify", str(out)]).exit_code == 0  # what was written stands
