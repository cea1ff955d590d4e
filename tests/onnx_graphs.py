"""Small ONNX graphs for the reader's tests, and the reader's module against ONNX Runtime on them."""

from __future__ import annotations

import numpy as np


def one_node(op: str, inputs: list, shape: list[int], out_shape: list[int], opset: int = 13,
              initializers: list | None = None, outputs: int = 1, **attrs: object) -> bytes:
    from onnx import TensorProto, helper

    names = [f"y{i}" for i in range(outputs)]
    graph = helper.make_graph(
        [helper.make_node(op, ["x", *inputs], names, name="n0", **attrs)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, out_shape or None) for n in names], initializers or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def reader_vs_ort(model: bytes, shape: list[int]) -> float:
    """Largest |difference| between the reader's module and ONNX Runtime on random input."""
    import onnx
    import onnxruntime as ort
    import torch

    from edgeserve.sources.onnx.reader import build_module

    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    expected = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    with torch.no_grad():
        got = build_module(onnx, onnx.load_model_from_string(model))(torch.from_numpy(x))
    got = got if isinstance(got, tuple) else (got,)
    assert [tuple(g.shape) for g in got] == [e.shape for e in expected]
    return max(float(np.abs(g.numpy() - e).max()) for g, e in zip(got, expected))
