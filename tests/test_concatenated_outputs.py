"""An output that concatenates ranges one int8 scale cannot hold (a YOLOv8 head's boxes and class
scores) is judged channel group by channel group (edgeserve/quality/gate.py small_range_channels).

The unit tests build such outputs with a known quantization; the real model is nudenet's
YOLOv8n (ONNX, from its wheel), whose all-INT8 model keeps the boxes and flattens every class
score to 0 or one step while the output as a whole measures about 30 dB; tflite-int8 finds the
mixed output before quantizing and keeps only its final concatenation in float.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from edgeserve.quality.gate import judge, mixed_range_outputs, small_range_channels
from edgeserve.quality.options import DEFAULT_MIN_SQNR_DB


def _detector_output(samples: int = 16) -> np.ndarray:
    """[samples, 4 + 3, 50]: boxes in pixels (0-320), then three class scores in [0, 0.9]."""
    rng = np.random.default_rng(0)
    boxes = rng.uniform(0, 320, (samples, 4, 50))
    scores = rng.uniform(0, 0.9, (samples, 3, 50))
    return np.concatenate([boxes, scores], axis=1)


def _quantized(x: np.ndarray, steps: int) -> np.ndarray:
    scale = (x.max() - x.min()) / (steps - 1)
    return np.round((x - x.min()) / scale) * scale + x.min()


def test_score_channels_flattened_by_one_int8_scale_fail_the_gate() -> None:
    reference = _detector_output()
    int8 = _quantized(reference, 256)
    assert judge("mae", [reference], [int8], None, max_drop=1.0, min_sqnr_db=0.0).ok  # the whole output alone
    axis, channels, db = small_range_channels(reference, int8)
    assert (axis, channels) == (1, [4, 5, 6]) and db < 5.0
    verdict = judge("mae", [reference], [int8], None, max_drop=1.0, min_sqnr_db=DEFAULT_MIN_SQNR_DB)
    assert verdict.outputs[0].sqnr_db > 30.0  # what the gate used to pass on
    assert not verdict.ok and "channels 4-6 of axis 1" in verdict.outputs[0].reason
    # int16 steps hold both ranges: the same output passes.
    assert judge("mae", [reference], [_quantized(reference, 65536)], None, max_drop=1.0,
                 min_sqnr_db=DEFAULT_MIN_SQNR_DB).ok


def test_mixed_outputs_are_found_from_the_float_outputs_alone() -> None:
    # Four softmax rows where one class never rises above 3e-4: a classifier, judged by its top-1.
    probabilities = np.random.default_rng(3).dirichlet(np.full(10, 0.05), size=4)
    assert 0 in mixed_range_outputs([probabilities], ["probs"])  # what its ranges alone would say
    found = mixed_range_outputs([probabilities, _detector_output()], ["probs", "detections"], skip_first=True)
    assert list(found) == [1]  # the classifier's first output is skipped
    assert found[1]["output"] == "detections" and found[1]["axis"] == 1 and found[1]["small_channels"] == "4-6"
    assert found[1]["range_ratio"] > 300  # boxes to ~320 against scores under 0.9


def test_outputs_of_one_range_are_not_split() -> None:
    reference = np.random.default_rng(1).normal(size=(16, 10, 50))
    reference[:, 3] *= 20  # one channel 20x the others: within what one scale holds
    assert small_range_channels(reference, reference + 0.01) is None
    assert small_range_channels(np.zeros((4, 3, 8)), np.zeros((4, 3, 8))) is None  # no signal: nothing to split
    # A channel that is 0 up to float noise (the hand model's wrist depth) is no range of its own.
    reference[:, 7] = 1e-7 * np.random.default_rng(2).normal(size=(16, 50))
    assert small_range_channels(reference, reference + 0.01) is None


def test_a_real_yolov8_keeps_its_final_concatenation_in_float(tmp_path: Path) -> None:
    """Found before quantization: the float outputs join boxes (to 320) and class scores (under
    1); all-INT8 flattens the scores, the float tail keeps every convolution int8 and passes.
    The microcontroller targets take the same model with the join split off: two int8 outputs."""
    pytest.importorskip("torch")
    ort = pytest.importorskip("onnxruntime")
    from corpus import views
    from edgeserve.runtime.backends.litert_run import TfliteRunner
    from registry_models import YOLOV8N, registry_model

    from edgeserve.quality.metrics import sqnr_db
    from edgeserve.conversion.convert import convert
    from edgeserve.tflite.model import TfliteModel

    source = registry_model(YOLOV8N, tmp_path)
    x = views((320, 320), 24).transpose(0, 3, 1, 2).astype(np.float32)  # YOLOv8 takes RGB in [0, 1]
    np.savez(tmp_path / "calib.npz", images=x)
    result = convert(source, ["tflite-int8", "onnx", "onnx-int8", "mcu", "mcu-c", "executorch-int8"], tmp_path / "out",
                     calib=tmp_path / "calib.npz", input_shapes={"images": (1, 3, 320, 320)},
                     options={"max_drop": 100.0, "fit_check": False})
    entry, onnx_int8, mcu, mcu_c, pte = (next(a for a in result.manifest["artifacts"] if a["target"] == t)
                                         for t in ("tflite-int8", "onnx-int8", "mcu", "mcu-c", "executorch-int8"))
    (mixed,) = entry["mixed_range_outputs"]
    assert mixed["output"] == "output0" and mixed["axis"] == 1 and mixed["range_ratio"] > 64
    assert int(re.match(r"\d+", mixed["small_channels"]).group()) >= 4  # class scores, never a box coordinate
    first, chosen = entry["attempts"][0], entry["attempts"][1]
    # The class-score channels (4 and up; a class these photos never show can sit under the
    # int16 floor and is left out), named with the reason.
    named = re.search(r"channels (\d+)\D.* of axis 1 .* one scale cannot hold", first["reason"])
    assert first["remedy"] == "int8" and named and int(named.group(1)) >= 4, first
    assert chosen["remedy"] == "float-tail" and chosen["status"] == "ok", chosen
    assert entry["quantization"]["float_layers"] == ["CONCATENATION 'output0'"]
    artifact = (tmp_path / "out" / entry["path"]).read_bytes()
    ops = TfliteModel.from_bytes(artifact).op_counts()
    assert ops["CONCATENATION"] >= 1 and ops["DEQUANTIZE"] == 2  # the boxes and the scores, each from int8
    assert not any("CONV_2D" in p for p in entry["float_ops"]), entry["float_ops"]  # the network stays int8
    session = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"])
    expected = np.concatenate([session.run(None, {"images": x[i:i + 1]})[0] for i in range(8)])
    got = got_tflite = TfliteRunner(artifact).predict([x[:8]])[0][0]
    assert sqnr_db(expected[:, 4:], got[:, 4:]) >= DEFAULT_MIN_SQNR_DB  # the class scores, against ONNX Runtime
    assert sqnr_db(expected[:, :4], got[:, :4]) >= 25.0  # the boxes (measured 31 dB)
    # mcu and mcu-c: the int8 tensors the float join read are the outputs; joined, they are the
    # tflite-int8 artifact's output value for value. TFLM and mcu-c's C agree with LiteRT bit for bit.
    split = [{"output": "output0", "axis": 1, "parts": [{"name": "output0_part0", "shape": [1, 4, 2100]},
                                                        {"name": "output0_part1", "shape": [1, 18, 2100]}]}]
    assert mcu["outputs_split"] == mcu_c["outputs_split"] == split
    assert mcu["from_sha256"] == mcu_c["from_sha256"] == entry["sha256"]
    split_model = TfliteModel.from_bytes((tmp_path / "out" / "mcu" / f"{mcu['name']}_model.tflite").read_bytes())
    assert split_model.is_full_integer()[0] and "BROADCAST_TO" not in split_model.op_counts()
    parts = TfliteRunner((tmp_path / "out" / "mcu" / f"{mcu['name']}_model.tflite").read_bytes()).predict([x[:8]])[0]
    assert np.array_equal(np.concatenate(parts, axis=1), got_tflite)
    assert mcu["verification"]["bit_exact"] and mcu_c["verification"]["bit_exact"]
    assert mcu_c["verification"]["cortex_m4"]["matches_host"]
    # onnx-int8 finds the same output and leaves its final Concat unquantized (not int16 activations,
    # which ONNX Runtime's CPU provider runs in float).
    assert onnx_int8["mixed_range_outputs"] == [mixed]
    assert [(a["remedy"], a["status"]) for a in onnx_int8["attempts"]] == [("int8", "sqnr too low"),
                                                                          ("float-tail", "ok")]
    assert onnx_int8["quantization"]["activations"] == "int8" and len(onnx_int8["quantization"]["float_nodes"]) == 1
    quantized = ort.InferenceSession(str(tmp_path / "out" / onnx_int8["path"]), providers=["CPUExecutionProvider"])
    got = np.concatenate([quantized.run(None, {"images": x[i:i + 1]})[0] for i in range(8)])
    assert sqnr_db(expected[:, 4:], got[:, 4:]) >= DEFAULT_MIN_SQNR_DB
    # executorch-int8: XNNPACK's quantizer gives a cat one scale for all its inputs; the join is
    # left out of quantization and each part keeps its own (judged in executorch.runtime against ORT).
    assert [(a["remedy"], a["status"]) for a in pte["attempts"]] == [("int8", "failed"), ("int8-float-tail", "ok")]
    assert pte["quantization"]["remedy"] == "int8-float-tail" and pte["mixed_range_outputs"] == [mixed]
    assert "the concatenations that make output0 in float" in pte["route"]["export"] and pte["quality"]["ok"]


def _joins_model() -> bytes:
    """x [1, 4, 6] -> a = 100 x (a "box" range), b = sigmoid(x) (a "score" range); joined along
    the channels (joined), along the last axis (lengthwise) and joined then transposed (turned)."""
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Mul", ["x", "hundred"], ["a"]), helper.make_node("Sigmoid", ["x"], ["b"]),
             helper.make_node("Concat", ["a", "b"], ["joined"], axis=1, name="join_channels"),
             helper.make_node("Concat", ["a", "b"], ["lengthwise"], axis=-1, name="join_length"),
             helper.make_node("Concat", ["a", "b"], ["before_turn"], axis=1, name="join_again"),
             helper.make_node("Transpose", ["before_turn"], ["turned"], perm=[0, 2, 1], name="turn")]
    graph = helper.make_graph(
        nodes, "joins", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
         for n, s in (("joined", [1, 8, 6]), ("lengthwise", [1, 4, 12]), ("turned", [1, 6, 8]))],
        [numpy_helper.from_array(np.array(100.0, np.float32), "hundred")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def test_only_a_join_along_the_channel_axis_is_kept_float() -> None:
    onnx = pytest.importorskip("onnx")
    from edgeserve.converters.onnx.float_tail import concat_tail

    model = onnx.load_model_from_string(_joins_model())
    assert concat_tail(model, [(0, 1)]) == ["join_channels"]
    assert concat_tail(model, [(1, 1)]) is None  # joined along the last axis: each part holds both ranges
    assert concat_tail(model, [(2, 2)]) == ["turn", "join_again"]  # axis 2 after the transpose is axis 1 before
    assert concat_tail(model, [(2, 1)]) is None


def test_the_tflite_tail_follows_the_same_axes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("litert_torch")
    from edgeserve.converters.tflite_int8.float_tail import concatenation_tail
    from edgeserve.sources.onnx.source import ROUTE_ENV, load_onnx
    from edgeserve.tflite.model import TfliteModel

    monkeypatch.setenv(ROUTE_ENV, "reader")
    (tmp_path / "joins.onnx").write_bytes(_joins_model())
    model = load_onnx(tmp_path / "joins.onnx").float_tflite(tmp_path).model
    graph = TfliteModel.from_bytes(model).subgraphs[0]
    position = {tuple(graph.tensors[t].shape): i for i, t in enumerate(graph.outputs)}
    joined, lengthwise, turned = position[(1, 8, 6)], position[(1, 4, 12)], position[(1, 6, 8)]
    assert [op for op, _ in concatenation_tail(model, [(joined, 1)])] == ["CONCATENATION"]
    assert concatenation_tail(model, [(lengthwise, 1)]) is None
    assert concatenation_tail(model, [(turned, 1)]) is None
    tail = concatenation_tail(model, [(turned, 2)])
    assert tail is not None and [op for op, _ in tail] == ["TRANSPOSE", "CONCATENATION"]


def _per_level_head() -> bytes:
    """A YOLOX-style head (ddddocr's detector, YOLOv5, YOLOv7): two feature levels (x [1, 3, 8, 8]
    and a 2x2 max pool of it), each joining 4 "box" channels (a convolution x 100) and 2 "score"
    channels (a sigmoid) along the channels, reshaped to [1, 6, H*W], the levels joined along the
    anchors and transposed: [1, 80, 6], the mixed channels on axis 2."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    nodes = [helper.make_node("MaxPool", ["x"], ["f1"], kernel_shape=[2, 2], strides=[2, 2])]
    initializers = [numpy_helper.from_array(np.array(100.0, np.float32), "hundred"),
                    numpy_helper.from_array(np.array([1, 6, -1], np.int64), "rows")]
    for level, features in enumerate(("x", "f1")):
        for part, channels in (("box", 4), ("score", 2)):
            initializers.append(numpy_helper.from_array(
                rng.standard_normal((channels, 3, 1, 1)).astype(np.float32), f"w_{part}{level}"))
            nodes.append(helper.make_node("Conv", [features, f"w_{part}{level}"], [f"{part}{level}_conv"]))
        nodes += [helper.make_node("Mul", [f"box{level}_conv", "hundred"], [f"box{level}"]),
                  helper.make_node("Sigmoid", [f"score{level}_conv"], [f"score{level}"]),
                  helper.make_node("Concat", [f"box{level}", f"score{level}"], [f"level{level}"], axis=1,
                                   name=f"join_level{level}"),
                  helper.make_node("Reshape", [f"level{level}", "rows"], [f"rows{level}"], name=f"rows{level}")]
    nodes += [helper.make_node("Concat", ["rows0", "rows1"], ["anchors"], axis=2, name="join_anchors"),
              helper.make_node("Transpose", ["anchors"], ["detections"], perm=[0, 2, 1], name="turn")]
    graph = helper.make_graph(nodes, "per_level", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("detections", TensorProto.FLOAT, [1, 80, 6])],
                              initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def test_per_level_joins_behind_an_anchor_join_are_the_tail_in_every_ir(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Walking back from the output: the anchor join is followed into each level, each level's
    reshape maps the channel axis back, and each level's channel join ends its branch. The same
    joins in ONNX, in the reader's .tflite and in the torch.export graph ExecuTorch quantizes."""
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("litert_torch")
    from edgeserve.converters.onnx.float_tail import concat_tail
    from edgeserve.converters.tflite_int8.float_tail import concatenation_tail
    from edgeserve.sources.onnx.source import ROUTE_ENV, load_onnx

    model = onnx.load_model_from_string(_per_level_head())
    assert concat_tail(model, [(0, 2)]) == ["turn", "join_anchors", "rows0", "join_level0", "rows1", "join_level1"]
    assert concat_tail(model, [(0, 0)]) is None  # no join along that axis: every branch ends in a convolution
    monkeypatch.setenv(ROUTE_ENV, "reader")
    (tmp_path / "head.onnx").write_bytes(_per_level_head())
    source = load_onnx(tmp_path / "head.onnx")
    tail = concatenation_tail(source.float_tflite(tmp_path).model, [(0, 2)])
    assert tail is not None and sum(op == "CONCATENATION" for op, _ in tail) == 3, tail
    from edgeserve.converters.executorch.lower import _output_joins

    module = source.program.module()
    cats = {n.name for n in module.graph.nodes if n.target is not None and "cat" in str(n.target)}
    joins = _output_joins(module, ((0, 2),))
    assert len(cats) == 3 and cats <= joins, (cats, joins)
    assert _output_joins(module, ((0, 0),)) == set()



def test_core_ml_w8a8_keeps_a_range_per_part_for_a_mixed_output(tmp_path: Path) -> None:
    """coremltools quantizes around convolutions and their activations and joins in float, but a
    concat whose parts share one range (what edgeserve gives every other concat) put the sigmoid
    scores on the boxes' scale: the gate failed the score channels (measured with the tail turned
    off). Found before quantizing, the head's three joins keep a range per part."""
    pytest.importorskip("coremltools")
    import json

    from edgeserve.conversion.convert import convert

    (tmp_path / "head.onnx").write_bytes(_per_level_head())
    np.savez(tmp_path / "calib.npz", x=np.random.default_rng(8).standard_normal((24, 3, 8, 8)).astype(np.float32))
    result = convert(tmp_path / "head.onnx", ["coreml"], tmp_path / "out", calib=tmp_path / "calib.npz",
                     options={"coreml_precision": "w8a8", "max_drop": 100.0})
    (entry,) = result.manifest["artifacts"]
    assert [m["output"] for m in entry["quantization"]["mixed_range_outputs"]] == ["detections"]
    assert len(entry["quantization"]["float_tail"]) == 3  # the two level joins and the anchor join
    rows = json.loads((tmp_path / "out" / "reports" / "coreml.json").read_text())["activation_quantization"]
    scores = [r for r in rows if "sigmoid" in r["tensor"]]
    assert len(scores) == 2 and all(r["rmax"] <= 1.0 for r in scores), rows  # their own range, not the boxes'
    assert entry["status"] == "ok" and entry["quality"]["outputs"][0]["ok"], entry["quality"]


def test_a_per_level_head_is_int8_with_its_float_tail_and_refused_by_name_on_microcontrollers(tmp_path: Path) -> None:
    """tflite-int8 keeps the three joins (and the reshapes and transposes between them) in float;
    the microcontroller targets split off only one final join, and say so in one line."""
    pytest.importorskip("litert_torch")
    import json

    from click.testing import CliRunner

    from edgeserve.cli import cli

    (tmp_path / "head.onnx").write_bytes(_per_level_head())
    np.savez(tmp_path / "calib.npz", x=np.random.default_rng(8).standard_normal((24, 3, 8, 8)).astype(np.float32))
    result = CliRunner().invoke(cli, ["convert", str(tmp_path / "head.onnx"), "-t", "tflite-int8", "-t", "mcu-c",
                                      "-o", str(tmp_path / "out"), "--calib", str(tmp_path / "calib.npz")])
    assert result.exit_code != 0
    assert re.search(r"error: mcu-c: refused: output 'detections' of tflite-int8's artifact is a float tail of 3 "
                     r"concatenations over 4 int8 parts", result.output), result.output
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    (entry,) = [a for a in manifest["artifacts"] if a["target"] == "tflite-int8"]
    assert [(a["remedy"], a["status"]) for a in entry["attempts"]][:2] == [("int8", "sqnr too low"), ("float-tail", "ok")]
    assert entry["status"] == "ok" and sum("CONCATENATION" in f for f in entry["quantization"]["float_layers"]) == 3
