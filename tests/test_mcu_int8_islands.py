"""`-t mcu` of an int16x8 model with a bilinear resize (converters/mcu/int8_islands.py): TFLM's
RESIZE_BILINEAR has no int16 kernel, so the resize runs in int8 between two requantizations,
and the rewritten model is judged against the float source before TFLM runs it.

Two float models whose int8 activations fail the gate and whose int16 ones pass: one tensor
holds a channel 1000 times the other's, so an int8 scale leaves the small one no step. In the
first the resize reads only the small channel (its island keeps it: built); in the second the
resize reads the wide tensor (its island loses the small channel: refused, with the figure).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

pytest.importorskip("ai_edge_quantizer")
pytest.importorskip("tflite_micro")
tf = pytest.importorskip("tensorflow")

from edgeserve.cli import cli  # noqa: E402
from edgeserve.tflite_model import TfliteModel  # noqa: E402


def _float_tflite(path: Path, resize_before_pick: bool) -> Path:
    import keras

    inputs = keras.Input((8, 8, 2), batch_size=1)
    wide = keras.layers.Conv2D(2, 1, use_bias=False, kernel_initializer=keras.initializers.Constant(
        np.array([[[[1000.0, 0.0], [0.0, 1.0]]]], np.float32)))(inputs)  # channel 0 x1000, channel 1 as given

    def pick(t):  # channel 1 only
        return keras.layers.Conv2D(1, 1, use_bias=False, kernel_initializer=keras.initializers.Constant(
            np.array([[[[0.0], [1.0]]]], np.float32)))(t)

    def resize(t):
        return keras.layers.UpSampling2D(2, interpolation="bilinear")(t)

    out = pick(resize(wide)) if resize_before_pick else resize(pick(wide))
    path.write_bytes(tf.lite.TFLiteConverter.from_keras_model(keras.Model(inputs, out)).convert())
    return path


def _convert(tmp_path: Path, resize_before_pick: bool) -> tuple[object, dict]:
    source = _float_tflite(tmp_path / "wide.tflite", resize_before_pick)
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "calib.npz", x=rng.standard_normal((32, 8, 8, 2)).astype(np.float32))
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["convert", str(source), "-t", "tflite-int8", "-t", "mcu", "--calib",
                                      str(tmp_path / "calib.npz"), "--no-fit-check", "-o", str(out)])
    return result, json.loads((out / "manifest.json").read_text())


def _artifact(manifest: dict, target: str) -> dict:
    return next(a for a in manifest["artifacts"] if a["target"] == target)


def test_a_resize_on_a_narrow_tensor_runs_in_int8_and_tflm_builds_the_int16_model(tmp_path: Path) -> None:
    from edgeserve.converters.mcu.ops import resolve_ops

    result, manifest = _convert(tmp_path, resize_before_pick=False)
    assert result.exit_code == 0, result.output
    int8 = _artifact(manifest, "tflite-int8")
    attempts = {a["remedy"]: a for a in int8["attempts"]}
    assert attempts["int8"]["status"] == "sqnr too low"  # the premise: int8 activations lose the small channel
    assert int8["quantization"]["activations"] == "int16"
    mcu = _artifact(manifest, "mcu")
    assert mcu["int8_islands"] == {"RESIZE_BILINEAR": 1}
    assert mcu["from_sha256"] == int8["sha256"] != mcu["model_sha256"]
    # Judged against the float source: the island costs little next to the int16 model.
    island_db = min(mcu["output_sqnr_db"].values())
    int16_db = min(attempts["int16x8"]["output_sqnr_db"].values())
    assert mcu["quality"]["ok"] and island_db > 25.0 and island_db > int16_db - 6.0, (island_db, int16_db)
    # The C array holds the rewritten model: its resize is int8 on one scale, between requantizations.
    model = TfliteModel.from_file(tmp_path / "out" / "mcu" / f"{mcu['name']}_model.tflite")
    graph = model.subgraphs[0]
    (resize,) = [op for op in graph.operators if op.op_name == "RESIZE_BILINEAR"]
    x, y = graph.tensors[resize.inputs[0]], graph.tensors[resize.outputs[0]]
    assert (x.dtype_name, y.dtype_name) == ("int8", "int8") and x.quantization.scale == y.quantization.scale
    assert model.op_counts()["QUANTIZE"] == 2 + TfliteModel.from_file(tmp_path / "out" / int8["path"]).op_counts().get(
        "QUANTIZE", 0)
    resolve_ops(model)  # nothing left for TFLM to refuse
    # TFLM ran it in the planned arena against LiteRT: within one int8 step (256 int16 steps).
    check = mcu["verification"]
    assert check["output_steps"] == "int16" and check["max_abs_diff"] is not None and check["max_abs_diff"] <= 256
    assert CliRunner().invoke(cli, ["verify", str(tmp_path / "out")]).exit_code == 0  # not stale: from_sha256


def test_a_resize_on_the_wide_tensor_is_refused_with_the_figure_it_missed(tmp_path: Path) -> None:
    result, manifest = _convert(tmp_path, resize_before_pick=True)
    assert result.exit_code == 1, result.output
    assert _artifact(manifest, "tflite-int8")["quantization"]["activations"] == "int16"
    (refused,) = manifest["refused"]
    assert refused["target"] == "mcu"
    reason = refused["reason"]
    assert "RESIZE_BILINEAR kernel takes float and int8 only" in reason and "misses the bound" in reason, reason
    assert "--min-sqnr" in reason and "SQNR 0.0 dB < min 10 dB" in reason, reason
