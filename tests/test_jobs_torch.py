"""Targets side by side that each trace or save a torch program in the converting process
(tflite-int8 through litert-torch, coreml, executorch, onnx from an ONNX source): torch keeps
process-wide mode stacks, and two traces at once broke each other on a real detector ("Trying to
pop empty mode stack"). Every such call takes edgeserve._deps.TORCH_TRACING; here each is widened
so that two unlocked ones would overlap, and none may."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("litert_torch")
pytest.importorskip("coremltools")
pytest.importorskip("executorch")


def test_no_two_torch_traces_run_at_once_and_every_target_is_built(tmp_path: Path, monkeypatch) -> None:
    import torch

    from torch_digits import build

    (tmp_path / "digits").mkdir()
    example = build(tmp_path / "digits", epochs=1)
    source = tmp_path / "digits.onnx"
    torch.onnx.export(example.module, (torch.zeros(1, 3, 8, 8),), str(source), opset_version=17, dynamo=False,
                      input_names=["x"], output_names=["scores"])
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=np.load(example.root / "calib.npz")["x"][:64])

    lock = threading.Lock()
    inside = {"now": 0, "most": 0, "calls": 0}

    def widened(original):
        def call(*args, **kwargs):
            with lock:
                inside["now"] += 1
                inside["calls"] += 1
                inside["most"] = max(inside["most"], inside["now"])
            try:
                time.sleep(0.3)  # long enough for another target's trace to arrive if it could
                return original(*args, **kwargs)
            finally:
                with lock:
                    inside["now"] -= 1
        return call

    monkeypatch.setattr(torch.export, "export", widened(torch.export.export))
    monkeypatch.setattr(torch.export, "save", widened(torch.export.save))
    from edgeserve.conversion.convert import convert

    result = convert(source, ["tflite-int8", "coreml", "executorch", "onnx"], tmp_path / "out", calib=calib,
                     jobs=2, options={"max_drop": 100.0})
    assert {a["target"]: a["status"] for a in result.manifest["artifacts"]} == \
        {"tflite-int8": "ok", "coreml": "ok", "executorch": "ok", "onnx": "ok"}
    assert inside["calls"] >= 3  # the reader's export, and the saves for litert-torch, coremltools, ExecuTorch
    assert inside["most"] == 1
