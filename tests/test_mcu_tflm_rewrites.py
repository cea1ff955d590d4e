"""What `-t mcu` rewrites for TFLM's kernels, judged against the float source before TFLM runs it.

An int16x8 model with a bilinear resize (converters/tflm/int8_islands.py): TFLM's
RESIZE_BILINEAR has no int16 kernel, so the resize runs in int8 between two requantizations.
An int8 SQRT (converters/tflm/int8_lookup.py): TFLM's SQRT is float only, so it is looked up in
a table of LiteRT's own int8 results.

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
from edgeserve.tflite.model import TfliteModel  # noqa: E402


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
    from edgeserve.converters.microcontroller.ops import resolve_ops

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
    assert "no kernel for tflite-int8's RESIZE_BILINEAR in its data type" in reason, reason
    assert "with 1 RESIZE_BILINEAR in int8 the model misses the bound" in reason, reason
    assert "--min-sqnr" in reason and "SQNR 0.0 dB < min 10 dB" in reason, reason


def test_an_int8_sqrt_is_a_table_of_litert_results_that_tflm_looks_up(tmp_path: Path) -> None:
    """Every one of the 256 int8 inputs through LiteRT's SQRT, its table, and TFLM's lookup."""
    import keras

    from edgeserve.converters.microcontroller import tflm
    from edgeserve.converters.microcontroller.arena import plan_head
    from edgeserve.converters.tflm.int8_lookup import by_value, int8_lookups
    from edgeserve.converters.microcontroller.quant import lookup_table
    from edgeserve.converters.microcontroller.ops import resolve_ops
    from edgeserve.converters.tflm.persistent import estimate_arena
    from edgeserve.converters.tflite_int8.quantizer_route import QuantizerRoute
    from edgeserve.datasets import SampleSet
    from edgeserve.runtime.backends.litert_run import TfliteRunner

    inputs = keras.Input((256,), batch_size=1)
    float_model = tf.lite.TFLiteConverter.from_keras_model(keras.Model(inputs, keras.ops.sqrt(inputs))).convert()
    calib = np.random.default_rng(0).uniform(0.0, 50.0, (16, 256)).astype(np.float32)
    model = QuantizerRoute(float_model, SampleSet((calib,), None, "npz", None, None), "int8").emit_scheme("int8")
    parsed = TfliteModel.from_bytes(model)
    graph = parsed.subgraphs[0]
    (sqrt,) = [op for op in graph.operators if op.op_name == "SQRT"]
    x, y = graph.tensors[sqrt.inputs[0]], graph.tensors[sqrt.outputs[0]]
    assert (x.dtype_name, y.dtype_name, sqrt.inputs[0], sqrt.outputs[0]) == ("int8", "int8", *graph.inputs, *graph.outputs)
    every = np.arange(-128, 128, dtype=np.int8).reshape(1, 256)
    (litert,) = TfliteRunner(model, reference_kernels=True).run_raw([every])
    table = by_value(lookup_table("SQRT", x.quantization.scale[0], x.quantization.zero_point[0],
                                  y.quantization.scale[0], y.quantization.zero_point[0]))
    assert np.array_equal(np.asarray(litert).reshape(-1), table)  # LiteRT's int8 SQRT, all 256 inputs
    assert len(set(table.tolist())) > 64  # a table that varies: the check above could fail

    from edgeserve.errors import UnsupportedOpError

    with pytest.raises(UnsupportedOpError, match="SQRT kernel takes float only, and this layer is integer"):
        resolve_ops(parsed)  # as given (an INT8 .tflite source): refused by name, not at TFLM's Invoke
    rewritten, lookups = int8_lookups(model)
    assert lookups == {"SQRT": 1}
    looked_up = TfliteModel.from_bytes(rewritten)
    assert "SQRT" not in looked_up.op_counts() and {"CAST", "ADD", "GATHER"} <= set(looked_up.op_counts())
    resolve_ops(looked_up)  # TFLM has every kernel now
    (again,) = TfliteRunner(rewritten, reference_kernels=True).run_raw([every])
    assert np.array_equal(again, litert)
    (tflm_out,) = tflm.run(rewritten, 1 << 20, [[every]])[0]
    assert np.array_equal(np.asarray(tflm_out).reshape(-1), table)
    # The arena edgeserve plans for CAST, the int32 ADD and GATHER is what TFLM needs, or at most 5 % over.
    head = plan_head(looked_up, pointer_bytes=8)
    planned = estimate_arena(looked_up, head.head_bytes, pointer_bytes=8, recording=True).total_bytes
    smallest = tflm.smallest_arena(rewritten)
    assert smallest <= planned <= 1.05 * smallest, (smallest, planned)
