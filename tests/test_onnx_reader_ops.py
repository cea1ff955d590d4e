"""The reader's operator translations against ONNX Runtime, one node at a time: Resize,
ConvTranspose, DepthToSpace/SpaceToDepth, Clip, Split, and the operators real models from PyPI
wheels needed (openwakeword's melspectrogram and DNSMOS: ReduceMax; PP-OCRv6: Erf; a YOLOv8
detector: Range; magika: ReduceSum; a dynamo-exported transformer: LayerNormalization; BirdNET
through tf2onnx: ReverseSequence and auto_pad SAME)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx_graphs import one_node, reader_vs_ort  # noqa: E402


@pytest.mark.parametrize(("op", "attrs", "out_shape"), [
    ("ReduceMax", {}, [1, 1, 1]),  # no axes: the whole tensor, kept as rank 3 (openwakeword's)
    ("ReduceMax", {"axes": [1, 2], "keepdims": 0}, [1]),  # DNSMOS's global max pooling
    ("ReduceMin", {"axes": [-1]}, [1, 5, 1]),
    ("ReduceSum", {"axes": [2], "keepdims": 0}, [1, 5]),
    ("ReduceProd", {"axes": [1, 2], "keepdims": 0}, [1]),  # a tf2onnx BERT's shape arithmetic (g2p-id)
    ("ReduceProd", {}, [1, 1, 1]),
])
def test_reductions_with_axes_as_attributes(op: str, attrs: dict, out_shape: list[int]) -> None:
    assert reader_vs_ort(one_node(op, [], [1, 5, 7], out_shape, opset=12, **attrs), [1, 5, 7]) < 1e-6


def test_reduce_sum_with_axes_as_an_input_and_an_empty_axes_noop() -> None:
    from onnx import TensorProto, helper

    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    assert reader_vs_ort(one_node("ReduceSum", ["axes"], [1, 5, 7], [1, 1, 7], initializers=[axes]), [1, 5, 7]) < 1e-5
    empty = helper.make_tensor("none", TensorProto.INT64, [0], [])
    noop = one_node("ReduceSum", ["none"], [1, 5, 7], [1, 5, 7], initializers=[empty], noop_with_empty_axes=1)
    assert reader_vs_ort(noop, [1, 5, 7]) == 0.0


def test_layer_normalization_over_the_last_axes() -> None:
    from onnx import TensorProto, helper

    rng = np.random.default_rng(1)
    scale = helper.make_tensor("s", TensorProto.FLOAT, [4, 6], rng.normal(1, 0.2, 24).astype(np.float32))
    bias = helper.make_tensor("b", TensorProto.FLOAT, [4, 6], rng.normal(0, 0.2, 24).astype(np.float32))
    model = one_node("LayerNormalization", ["s", "b"], [1, 3, 4, 6], [1, 3, 4, 6], opset=17,
                     initializers=[scale, bias], axis=-2, epsilon=1e-3)
    assert reader_vs_ort(model, [1, 3, 4, 6]) < 1e-5


def test_erf_as_in_a_written_out_gelu() -> None:
    assert reader_vs_ort(one_node("Erf", [], [1, 8, 5], [1, 8, 5]), [1, 8, 5]) < 1e-6


def test_where_and_a_constant_range() -> None:
    from onnx import TensorProto, helper

    # y = where(x > 0, x, arange(0.5, 7, 1)): Range's operands are constants, as in YOLOv8's anchors.
    nodes = [helper.make_node("Range", ["start", "limit", "delta"], ["grid"]),
             helper.make_node("Greater", ["x", "zero"], ["positive"]),
             helper.make_node("Where", ["positive", "x", "grid"], ["y0"])]
    inits = [helper.make_tensor(n, TensorProto.FLOAT, [], [v]) for n, v in
             (("start", 0.5), ("limit", 7.0), ("delta", 1.0), ("zero", 0.0))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 7])],
                              [helper.make_tensor_value_info("y0", TensorProto.FLOAT, [1, 7])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    assert reader_vs_ort(model, [1, 7]) == 0.0


@pytest.mark.parametrize("mode, transform, nearest, scales", [
    ("nearest", "asymmetric", "floor", [1, 1, 2, 2]),  # PaddleOCR's text detector (FPN upsampling)
    ("nearest", "half_pixel", "round_prefer_floor", [1, 1, 2, 3]),  # the opset-11 default, whole factors
    ("nearest", "asymmetric", "floor", [1, 1, 1.5, 0.5]),
    ("linear", "half_pixel", "round_prefer_floor", [1, 1, 2, 2]),
    ("linear", "align_corners", "round_prefer_floor", [1, 1, 1.5, 2]),
])
def test_resize_translations_equal_onnx_runtime(mode: str, transform: str, nearest: str, scales: list) -> None:
    from onnx import TensorProto, helper

    model = one_node("Resize", ["", "scales"], [1, 2, 6, 8], [], initializers=[
        helper.make_tensor("scales", TensorProto.FLOAT, [4], scales)], mode=mode,
        coordinate_transformation_mode=transform, nearest_mode=nearest)
    assert reader_vs_ort(model, [1, 2, 6, 8]) < 1e-5


def test_resize_rules_torch_has_no_equal_for_are_refused_by_name() -> None:
    from onnx import TensorProto, helper

    from edgeserve.sources.onnx.reader import OnnxOpError

    model = one_node("Resize", ["", "scales"], [1, 2, 6, 8], [], initializers=[
        helper.make_tensor("scales", TensorProto.FLOAT, [4], [1, 1, 1.5, 1.5])], mode="nearest",
        coordinate_transformation_mode="half_pixel", nearest_mode="round_prefer_ceil")
    with pytest.raises(OnnxOpError, match="Resize .node 'n0'. nearest resizing with half_pixel coordinates"):
        reader_vs_ort(model, [1, 2, 6, 8])


@pytest.mark.parametrize("pads, output_padding, group", [
    ([0, 0, 0, 0], [0, 0], 1),  # PaddleOCR's detector head: 2x2 kernel, stride 2
    ([1, 0, 0, 1], [1, 1], 1),  # asymmetric pads: the unpadded result cropped
    ([1, 1, 1, 1], [0, 0], 2),
])
def test_conv_transpose_translations_equal_onnx_runtime(pads: list, output_padding: list, group: int) -> None:
    from onnx import numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(1).standard_normal((4, 6 // group, 3, 3)).astype(np.float32),
                                "w")
    b = numpy_helper.from_array(np.arange(6, dtype=np.float32), "b")
    model = one_node("ConvTranspose", ["w", "b"], [1, 4, 5, 7], [], initializers=[w, b], strides=[2, 2],
                      pads=pads, output_padding=output_padding, group=group)
    assert reader_vs_ort(model, [1, 4, 5, 7]) < 1e-4


@pytest.mark.parametrize("op, attrs", [
    ("DepthToSpace", {"mode": "DCR"}),  # tf2onnx's form of TFLite's DEPTH_TO_SPACE (MediaPipe's pose detector)
    ("DepthToSpace", {"mode": "CRD"}),
    ("SpaceToDepth", {}),
])
def test_depth_moves_equal_onnx_runtime(op: str, attrs: dict) -> None:
    # Values move, none is computed: equal to the bit.
    assert reader_vs_ort(one_node(op, [], [1, 8, 4, 6], [], blocksize=2, **attrs), [1, 8, 4, 6]) == 0.0


def test_clip_bounds_given_as_initializers_trace(tmp_path: Path) -> None:
    """tf2onnx writes ReLU6 as Clip with float initializers for min and max (MediaPipe's hand
    landmarks): read as buffers they were .item() calls torch.export could not trace."""
    import onnxruntime as ort
    import torch
    from onnx import TensorProto, helper

    from edgeserve.sources import load_source

    path = tmp_path / "clip.onnx"
    path.write_bytes(one_node("Clip", ["lo", "hi"], [1, 3, 4, 4], [1, 3, 4, 4], initializers=[
        helper.make_tensor("lo", TensorProto.FLOAT, [], [0.0]),
        helper.make_tensor("hi", TensorProto.FLOAT, [], [6.0])]))
    source = load_source(path)  # traces with torch.export
    x = np.random.default_rng(0).standard_normal((1, 3, 4, 4)).astype(np.float32) * 8
    (expected,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    with torch.no_grad():
        got = source.module(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(got, expected)
    assert got.min() == 0.0 and got.max() == 6.0


def test_split_translations_equal_onnx_runtime() -> None:
    from onnx import TensorProto, helper

    sizes = one_node("Split", ["sizes"], [1, 7, 4], [], outputs=3, axis=1,
                      initializers=[helper.make_tensor("sizes", TensorProto.INT64, [3], [2, 4, 1])])
    assert reader_vs_ort(sizes, [1, 7, 4]) == 0.0
    even = one_node("Split", [], [1, 6, 4], [], outputs=3, axis=1)
    assert reader_vs_ort(even, [1, 6, 4]) == 0.0


def test_a_clip_bound_computed_at_run_time_traces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """openwakeword's melspectrogram clips its log-mel values at their own maximum minus 80 dB:
    a bound that is a run-time value, which float() made a data-dependent guard torch.export
    refused (the whole model had no route to Core ML or LiteRT through the reader)."""
    import onnxruntime as ort
    import torch
    from onnx import TensorProto, helper

    from edgeserve.sources import load_source

    graph = helper.make_graph([
        helper.make_node("ReduceMax", ["x"], ["peak"], keepdims=0),
        helper.make_node("Sub", ["peak", "range"], ["floor"]),
        helper.make_node("Clip", ["x", "floor"], ["y"]),
    ], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 8])],
        [helper.make_tensor("range", TensorProto.FLOAT, [], [2.0])])
    path = tmp_path / "clip_at_peak.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
    source = load_source(path)  # traces with torch.export
    x = np.random.default_rng(3).standard_normal((1, 5, 8)).astype(np.float32)
    (expected,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    with torch.no_grad():
        got = source.module(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(got, expected)
    assert (got == x.max() - 2.0).sum() > 0 and (got == x).sum() > 0  # both sides of the bound are taken
    # litert-torch lowers it too (its clamp wants numbers: the bound is a maximum with a tensor).
    pytest.importorskip("litert_torch")
    from edgeserve.runtime.backends.litert_run import TfliteRunner
    from edgeserve.sources.onnx.source import ROUTE_ENV, load_onnx

    monkeypatch.setenv(ROUTE_ENV, "reader")
    lowered = load_onnx(path).float_tflite(tmp_path)
    np.testing.assert_allclose(TfliteRunner(lowered.model).predict([x])[0][0], expected, rtol=1e-6)


@pytest.mark.parametrize(("starts", "ends", "steps"), [
    ([-1], [-(2**63)], [-1]),  # the whole axis reversed (a backward LSTM's sequence, as exporters write it)
    ([5], [0], [-2]),
    ([2], [-9], [-1]),  # an end before the start of the axis, clamped as ONNX says
])
def test_a_backward_slice_equals_onnx_runtime(starts: list[int], ends: list[int], steps: list[int]) -> None:
    from onnx import TensorProto, helper

    model = one_node("Slice", ["starts", "ends", "axes", "steps"], [1, 7, 3], [], initializers=[
        helper.make_tensor(n, TensorProto.INT64, [1], v)
        for n, v in (("starts", starts), ("ends", ends), ("axes", [1]), ("steps", steps))])
    assert reader_vs_ort(model, [1, 7, 3]) == 0.0


@pytest.mark.parametrize("p", [1, 2])
def test_lp_normalization_equals_onnx_runtime(p: int) -> None:
    """A Keras hotword embedder ends in tf.math.l2_normalize, exported as LpNormalization."""
    assert reader_vs_ort(one_node("LpNormalization", [], [1, 5, 7], [1, 5, 7], opset=13, axis=1, p=p), [1, 5, 7]) < 1e-5


@pytest.mark.parametrize(("time_axis", "batch_axis", "shape", "lengths"), [
    (0, 1, [5, 3, 2], [5, 2, 0]),  # partial, whole and empty reversals side by side
    (1, 0, [3, 5, 4], [1, 5, 3]),
    (1, 0, [2, 6, 3], [6, 6]),  # tf2onnx's ReverseV2: every length the whole axis
])
def test_reverse_sequence_equals_onnx_runtime(time_axis: int, batch_axis: int, shape: list[int],
                                              lengths: list[int]) -> None:
    from onnx import TensorProto, helper

    lens = helper.make_tensor("lens", TensorProto.INT64, [len(lengths)], lengths)
    model = one_node("ReverseSequence", ["lens"], shape, shape, initializers=[lens],
                     time_axis=time_axis, batch_axis=batch_axis)
    assert reader_vs_ort(model, shape) == 0.0


@pytest.mark.parametrize("mode", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize(("size", "kernel", "strides"), [
    ([7, 8], [3, 3], [2, 2]),  # odd total padding on one axis: where the extra one goes
    ([9, 6], [4, 2], [1, 3]),
    ([6, 11], [5, 3], [2, 2]),
])
def test_auto_pad_same_equals_onnx_runtime(mode: str, size: list[int], kernel: list[int], strides: list[int]) -> None:
    from onnx import TensorProto, helper

    weights = np.random.default_rng(2).standard_normal((3, 2, *kernel)).astype(np.float32)
    w = helper.make_tensor("w", TensorProto.FLOAT, list(weights.shape), weights.reshape(-1))
    conv = one_node("Conv", ["w"], [1, 2, *size], [], initializers=[w], auto_pad=mode, strides=strides)
    assert reader_vs_ort(conv, [1, 2, *size]) < 1e-5
    if all(k >= s for k, s in zip(kernel, strides)):  # ONNX Runtime refuses a pool stride past its kernel
        pool = one_node("MaxPool", [], [1, 2, *size], [], auto_pad=mode, strides=strides, kernel_shape=kernel)
        assert reader_vs_ort(pool, [1, 2, *size]) == 0.0
