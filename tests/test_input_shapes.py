"""--input-shape where a model's own shape leaves the size open (issue 48's trial): a Keras model's
free sequence length (SpliceAI), and an ONNX input declared at a fixed placeholder size
(CenterFace's [10, 3, 32, 32])."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgeserve.cli import cli
from edgeserve.errors import SourceModelError

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")


def test_a_keras_model_with_a_free_length_takes_input_shape(tmp_path: Path) -> None:
    """A Keras 2 .h5 with a free sequence length ([None, None, 4], SpliceAI's form): random
    calibration says how to fix it; --input-shape fixes it, and the INT8 model agrees with Keras."""
    keras = pytest.importorskip("keras")
    keras.utils.set_random_seed(0)
    x = keras.Input((None, 4), name="seq")
    y = keras.layers.Conv1D(3, 5, padding="same", dilation_rate=2, activation="relu")(x)
    model = keras.Model(x, keras.layers.Conv1D(2, 1)(y))
    source = tmp_path / "free.h5"
    model.save(source)
    refused = CliRunner().invoke(cli, ["convert", str(source), "-t", "tflite-int8", "--calib-random", "-o",
                                       str(tmp_path / "a")])
    assert refused.exit_code != 0 and "--input-shape seq=1x64x4" in refused.output
    made = CliRunner().invoke(cli, ["convert", str(source), "-t", "tflite-int8", "--calib-random", "--input-shape",
                                    "seq=1x50x4", "-o", str(tmp_path / "b"), "--json"])
    assert made.exit_code == 0, made.output
    (entry,) = json.loads(made.stdout)["artifacts"]
    assert entry["inputs"][0]["shape"] == [1, 50, 4] and entry["status"] == "ok"
    assert min(o["sqnr_db"] for o in entry["quality"]["outputs"]) > 25


def test_a_placeholder_input_size_is_replaced_by_input_shape(tmp_path: Path) -> None:
    """A fully convolutional ONNX exported at a placeholder size (CenterFace declares [10, 3, 32,
    32]; its package rewrites it at run time): --input-shape of the same rank replaces it, with a
    warning, and the graph is run at the new size; a graph whose Reshape bakes in the old size
    cannot, and the error says ONNX Runtime could not run it."""
    from onnx import TensorProto, helper, numpy_helper

    from edgeserve.sources import load_source

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "w")
    conv = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph([conv], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [10, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [10, 4, 8, 8])], [weight])
    path = tmp_path / "placeholder.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    source = load_source(path, {"x": (1, 3, 16, 16)})
    assert source.signature.inputs[0].shape == (1, 3, 16, 16) and source.signature.outputs[0].shape == (1, 4, 16, 16)
    assert source.describe()["reshaped_inputs"] == {"x": {"declared": [10, 3, 8, 8], "given": [1, 3, 16, 16]}}
    x = rng.normal(size=(1, 3, 16, 16)).astype(np.float32)
    expected = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(numpy_helper.to_array(weight)),
                                          padding=1).numpy()
    assert np.allclose(source.predict([x])[0], expected, atol=1e-5)
    with pytest.raises(SourceModelError, match="does not fit the declared shape"):
        load_source(path, {"x": (1, 3, 16)})  # another rank: not a size

    shape = numpy_helper.from_array(np.array([10, 256], np.int64), "shape")
    baked = helper.make_graph([conv, helper.make_node("Reshape", ["y", "shape"], ["z"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [10, 3, 8, 8])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [10, 256])], [weight, shape])
    onnx.save(helper.make_model(baked, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "baked.onnx")
    with pytest.raises(SourceModelError, match="onnxruntime cannot"):
        load_source(tmp_path / "baked.onnx", {"x": (1, 3, 16, 16)})
