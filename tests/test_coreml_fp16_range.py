"""A constant beyond fp16's range in a model going to Core ML (converters/coreml/fp16_range.py):
a transformer's attention bias, (1 - mask) * float32's lowest, made every output of MiniLM's
package NaN (issue 48's trial). Saturated to -65504 it gives the source's outputs again."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("coremltools")
onnx = pytest.importorskip("onnx")

LOWEST = float(np.finfo(np.float32).min)


def masked_softmax(path: Path) -> Path:
    """softmax(x @ W + (1 - mask) * LOWEST): a masked attention's weights, as exporters write them."""
    from onnx import TensorProto, helper, numpy_helper

    weights = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["scores"]),
        helper.make_node("Constant", [], ["one"], value=numpy_helper.from_array(np.array(1.0, np.float32))),
        helper.make_node("Constant", [], ["lowest"], value=numpy_helper.from_array(np.array(LOWEST, np.float32))),
        helper.make_node("Sub", ["one", "mask"], ["dropped"]),
        helper.make_node("Mul", ["dropped", "lowest"], ["bias"]),
        helper.make_node("Add", ["scores", "bias"], ["biased"]),
        helper.make_node("Softmax", ["biased"], ["attention"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "masked", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8]),
                          helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("attention", TensorProto.FLOAT, [1, 8])],
        [numpy_helper.from_array(weights, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_a_mask_bias_beyond_fp16_is_saturated_and_the_package_agrees(tmp_path: Path) -> None:
    from edgeserve.conversion.convert import convert

    rng = np.random.default_rng(1)
    count = 40
    mask = (rng.uniform(size=(count, 8)) > 0.3).astype(np.float32)
    mask[:, 0] = 1.0  # at least one token kept per sample, as a tokenizer's [CLS]
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=rng.standard_normal((count, 8)).astype(np.float32), mask=mask)
    result = convert(masked_softmax(tmp_path / "masked.onnx"), ["coreml"], tmp_path / "out", calib=calib)
    entry = result.manifest["artifacts"][0]
    assert entry["status"] == "ok", entry.get("reason")
    report = json.loads((tmp_path / "out" / "reports" / "coreml.json").read_text())
    assert any("saturated to ±65504" in m for m in report["coremltools_messages"])
    # Masked positions get zero weight, kept ones the source's: nothing NaN, and close.
    assert entry["agreement"]["sqnr_db"] > 40 and entry["agreement"]["max_abs_diff"] < 1e-2


def test_saturation_takes_stand_ins_for_infinity_and_leaves_data_alone() -> None:
    """-1e30 and float32's extremes are saturated; a batch-norm variance of 1e8 (DBNet's, which
    coremltools folds in float32) is data and stays, as do infinities, NaNs and integers."""
    import torch

    from edgeserve.converters.coreml.fp16_range import saturate_constants

    module = torch.nn.Module()
    module.register_buffer("b", torch.tensor([LOWEST, -float("inf"), 1e8, -7.0, float("nan"), -1e30, 7e4]))
    module.register_buffer("variance", torch.tensor([1.05e7, 9.79e7]))
    module.register_buffer("ids", torch.tensor([10**6]))  # integers are not fp16 values
    assert saturate_constants(module) == 1
    got = module.b.tolist()
    assert got[0] == -65504.0 and got[1] == -float("inf") and got[2] == np.float32(1e8) and got[3] == -7.0
    assert np.isnan(got[4]) and got[5] == -65504.0 and got[6] == 7e4
    assert module.variance.tolist() == [np.float32(1.05e7), np.float32(9.79e7)] and module.ids.item() == 10**6
