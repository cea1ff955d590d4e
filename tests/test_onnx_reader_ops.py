"""The reader's ReduceMax/ReduceMin/ReduceSum, LayerNormalization, Erf, Where and Range against
ONNX Runtime: the operators real models from PyPI wheels needed (openwakeword's melspectrogram
and DNSMOS: ReduceMax; PP-OCRv6: Erf; a YOLOv8 detector: Range; magika: ReduceSum)."""

from __future__ import annotations

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
