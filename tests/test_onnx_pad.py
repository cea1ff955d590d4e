"""ONNX Pad in reflect and edge modes (edgeserve/sources/onnx/reader.py `_gather_pad`): one
index_select per padded axis with indices computed while reading, equal to ONNX Runtime, and
lowered by litert-torch to one GATHER_ND with constant indices, where torch's own reflection
pad lowers to int32 index arithmetic (ABS, SUB, LESS, SELECT) that TFLM cannot run (ABS
version 5) and mcu-c has no kernels for (silero-vad's STFT padding)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx_graphs import one_node as _one_node  # noqa: E402
from onnx_graphs import reader_vs_ort as _reader_vs_ort  # noqa: E402


def _pad_model(mode: str, pads: list[int], shape: list[int]) -> bytes:
    from onnx import TensorProto, helper

    out = [d + pads[i] + pads[i + len(shape)] for i, d in enumerate(shape)]
    return _one_node("Pad", ["pads"], shape, out, initializers=[
        helper.make_tensor("pads", TensorProto.INT64, [len(pads)], pads)], mode=mode)


@pytest.mark.parametrize("mode", ["reflect", "edge"])
@pytest.mark.parametrize("pads", [
    [0, 0, 0, 32, 0, 0, 0, 32],  # silero-vad: 32 samples mirrored at each end of its 576
    [0, 0, 2, 1, 0, 0, 3, 4],  # two axes, uneven
    [0, 1, 0, -1, 0, 0, 0, 2],  # a crop on one side (a negative pad)
])
def test_reflect_and_edge_pads_equal_onnx_runtime(mode: str, pads: list[int]) -> None:
    shape = [1, 2, 5, 6] if pads[3] != 32 else [1, 1, 1, 576]
    assert _reader_vs_ort(_pad_model(mode, pads, shape), shape) == 0.0


def test_a_reflect_pad_longer_than_its_axis_is_refused_as_onnx_runtime_refuses_it() -> None:
    import torch

    from edgeserve.sources.onnx.reader import OnnxOpError, build_module

    shape, pads = [1, 2, 5, 6], [0, 0, 0, 6, 0, 0, 0, 0]
    module = build_module(onnx, onnx.load_model_from_string(_pad_model("reflect", pads, shape)))
    with pytest.raises(OnnxOpError, match="a reflect pad of 6 on an axis of 6 .at most 5."):
        module(torch.zeros(shape))
    assert _reader_vs_ort(_pad_model("edge", pads, shape), shape) == 0.0  # repeating the edge has no limit


def test_a_reflect_pad_lowers_to_one_gather_with_constant_indices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("litert_torch")
    from edgeserve.sources.onnx.source import ROUTE_ENV, load_onnx

    monkeypatch.setenv(ROUTE_ENV, "reader")  # the reader's lowering, not onnx2tf's
    from edgeserve.tflite.model import TfliteModel

    path = tmp_path / "pad.onnx"
    path.write_bytes(_pad_model("reflect", [0, 0, 0, 32, 0, 0, 0, 32], [1, 1, 1, 576]))
    lowered = TfliteModel.from_bytes(load_onnx(path).float_tflite(tmp_path).model)
    counts = lowered.op_counts_all()
    assert not {"ABS", "SELECT", "SELECT_V2", "LESS"} & set(counts), counts
    graph = lowered.subgraphs[0]
    (gather,) = [op for op in graph.operators if op.op_name in ("GATHER", "GATHER_ND")]
    assert graph.tensors[gather.inputs[1]].is_constant
    from edgeserve.runtime.backends.litert_run import TfliteRunner

    x = np.random.default_rng(0).standard_normal((1, 1, 1, 576)).astype(np.float32)
    (y,) = TfliteRunner(lowered.file_bytes).run_raw([x])
    expected = np.pad(x, [(0, 0), (0, 0), (0, 0), (32, 32)], mode="reflect")
    assert np.array_equal(np.asarray(y).reshape(expected.shape), expected)
