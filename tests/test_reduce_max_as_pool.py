"""REDUCE_MAX, which ai-edge-quantizer 0.10 refuses, written as MAX_POOL_2D between RESHAPEs.

DNSMOS (the speechmos wheel) and openwakeword's melspectrogram end a convolution stack in a
global max pool (ONNX ReduceMax over the spatial axes): the whole model had no INT8 artifact.
The rewrite is exact in float (checked against the model before it), the INT8 model is checked
against ONNX Runtime on the source, and a reduction over axes that are not neighbours is left
as it was.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("litert_torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def _global_max_pool(axes: list[int], out_shape: list[int]) -> bytes:
    """x [1, 3, 12, 10] -> a 1x1 convolution to 6 channels -> ReLU -> ReduceMax over ``axes``."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(2).standard_normal((6, 3, 1, 1)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["r"]),
                               helper.make_node("ReduceMax", ["r"], ["y"], axes=axes, keepdims=0)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def test_a_global_max_pool_is_rewritten_exactly_and_quantizes(tmp_path: Path) -> None:
    from edgeserve.converters.tflite_int8.float_prep import prepare_float_tflite
    from edgeserve.quality.metrics import sqnr_db
    from edgeserve.conversion.convert import convert
    from edgeserve.runtime.backends.litert_run import TfliteRunner
    from edgeserve.sources import load_source
    from edgeserve.tflite.model import TfliteModel

    (tmp_path / "gmp.onnx").write_bytes(_global_max_pool([2, 3], [1, 6]))
    float_model = load_source(tmp_path / "gmp.onnx").float_tflite(tmp_path).model
    assert TfliteModel.from_bytes(float_model).op_counts().get("REDUCE_MAX") == 1
    prepared = prepare_float_tflite(float_model)
    ops = TfliteModel.from_bytes(prepared.model).op_counts()
    assert "REDUCE_MAX" not in ops and ops.get("MAX_POOL_2D") == 1, ops
    assert any("REDUCE_MAX as MAX_POOL_2D" in step for step in prepared.steps)
    x = np.random.default_rng(3).standard_normal((16, 3, 12, 10)).astype(np.float32)
    before, after = TfliteRunner(float_model).predict([x])[0][0], TfliteRunner(prepared.model).predict([x])[0][0]
    np.testing.assert_array_equal(after, before)  # a maximum is a maximum: the same floats

    np.savez(tmp_path / "calib.npz", x=x)
    result = convert(tmp_path / "gmp.onnx", ["tflite-int8"], tmp_path / "out", calib=tmp_path / "calib.npz")
    (entry,) = result.manifest["artifacts"]
    assert entry["status"] == "ok" and entry["integer_only"] and "MAX_POOL_2D" in entry["ops"], entry["ops"]
    artifact = (tmp_path / "out" / entry["path"]).read_bytes()
    got = TfliteRunner(artifact).predict([x])[0][0]
    session = ort.InferenceSession(str(tmp_path / "gmp.onnx"))
    reference = np.concatenate([session.run(None, {"x": x[i:i + 1]})[0] for i in range(len(x))])
    assert got.shape == reference.shape == (16, 6) and float(np.std(reference)) > 0.1  # a signal to compare
    assert sqnr_db(reference, got) > 30.0  # measured 47.9 dB


def test_a_reduction_over_axes_that_are_not_neighbours_is_left_alone(tmp_path: Path) -> None:
    from edgeserve.converters.tflite_int8.quantizable_forms import reduce_max_as_max_pool
    from edgeserve.sources import load_source
    from edgeserve.tflite.metadata import unpack_model

    from edgeserve.tflite.model import TfliteModel

    (tmp_path / "spread.onnx").write_bytes(_global_max_pool([1, 3], [1, 12]))
    data = load_source(tmp_path / "spread.onnx").float_tflite(tmp_path).model
    assert TfliteModel.from_bytes(data).op_counts().get("REDUCE_MAX") == 1  # the case is there to leave alone
    assert reduce_max_as_max_pool(unpack_model(data)) is None
