"""The float-refused remedy: an operator whose int8 kernel LiteRT refuses to run stays float.

A mean over the tokens a mask keeps divides by the mask's sum (sentence embedders pool so): the
divisor's int8 range starts at 0, so a short mask's count sits on its zero point, and LiteRT's
int8 DIV stops ("data[i] != zero_point was not true. Node number N (DIV) failed to invoke"). That
used to be the end of tflite-int8 (a MiniLM embedder from a wheel, issue 48): now LiteRT's own
message names the node, that DIV is kept float and the rest int8, judged as every attempt is.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("litert_torch")


class _MaskedMean(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        kept = self.proj(x) * mask.unsqueeze(-1)
        return kept.sum(1) / torch.clamp(mask.sum(1, keepdim=True), min=1e-3)


def _samples(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(count, 1, 24, 16)).astype(np.float32)
    lengths = rng.integers(0, 25, size=count)
    lengths[:4] = (0, 1, 24, 2)  # an empty mask, a one-token one, a full one
    mask = (np.arange(24)[None, :] < lengths[:, None]).astype(np.float32)[:, None]
    return x, mask


def test_a_division_litert_refuses_in_int8_is_kept_float(tmp_path: Path) -> None:
    from edgeserve.conversion.convert import convert
    from edgeserve.tflite.model import TfliteModel

    torch.manual_seed(0)
    module = _MaskedMean().eval()
    x, mask = _samples(64, 0)
    torch.export.save(torch.export.export(module, (torch.from_numpy(x[0]), torch.from_numpy(mask[0]))),
                      tmp_path / "pool.pt2")
    np.savez(tmp_path / "calib.npz", x=x[:, 0], mask=mask[:, 0])
    result = convert(tmp_path / "pool.pt2", ["tflite-int8"], tmp_path / "out", calib=tmp_path / "calib.npz")
    (entry,) = result.manifest["artifacts"]
    attempts = [(a["remedy"], a["status"], a.get("reason") or "") for a in entry["attempts"]]
    # The all-int8 model is one LiteRT will not run, and says which node: the case under test is real.
    assert attempts[0][:2] == ("int8", "error") and "(DIV) failed to invoke" in attempts[0][2], attempts
    assert attempts[1][:2] == ("float-refused", "ok"), attempts
    assert entry["status"] == "ok" and entry["quantization"]["scheme"] == "float-refused"
    # Independently of the gate: the DIV in the written model reads float, everything before it
    # that multiplies is int8, and LiteRT runs it close to torch on inputs it was not calibrated on.
    model = TfliteModel.from_file(tmp_path / "out" / entry["path"])
    graph = model.subgraphs[0]
    (div,) = [op for op in graph.operators if op.op_name == "DIV"]
    assert {graph.tensors[i].dtype_name for i in div.inputs} == {"float32"}
    # With it, what computes its divisor (the clamp at 1e-3 that int8 rounds to zero, the count):
    from edgeserve.converters.tflite_int8.refused import refused_operators

    at = graph.operators.index(div)
    kept = refused_operators(model.file_bytes, f"Node number {at} (DIV) failed to invoke.")
    assert [op for op, _ in kept] == ["DIV", "MAXIMUM", "SUM"], kept
    assert refused_operators(model.file_bytes, f"Node number {at} (ADD) failed to invoke.") == []
    assert refused_operators(model.file_bytes, "Node number 9999 (DIV) failed to invoke.") == []
    assert any(op.op_name == "FULLY_CONNECTED" and graph.tensors[op.inputs[0]].dtype_name == "int8"
               for op in graph.operators)
    from edgeserve.runtime.backends.litert_run import TfliteRunner

    ex, emask = _samples(16, 1)
    runner = TfliteRunner((tmp_path / "out" / entry["path"]).read_bytes())
    got, _ = runner.predict([ex[:, 0], emask[:, 0]])
    with torch.no_grad():
        expected = module(torch.from_numpy(ex[:, 0]), torch.from_numpy(emask[:, 0])).numpy()
    assert 10 * np.log10(np.sum(expected ** 2) / np.sum((expected - got[0]) ** 2)) > 20


def test_the_refused_node_is_read_from_litert_s_message() -> None:
    """The check above can fail: a message naming no node, or a node whose operator is not the one
    named, gives no remedy."""
    from edgeserve.converters.tflite_int8.refused import refused_operators

    assert refused_operators(None, "Node number 3 (DIV) failed to invoke") == []
    assert refused_operators(b"", "LiteRT could not run this model: out of memory") == []
