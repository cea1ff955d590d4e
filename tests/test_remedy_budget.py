"""No silent minute (issue 48): a remedy search with a budget, one regex for the layers kept in
float, and a line in a log while a long step runs.

A speaker encoder's unrolled LSTM sat for 22 minutes in ai-edge-quantizer's recipe lookup
with one regex per kept tensor (benchmarks/keep_float_recipe.py: 2,000 kept tensors, 214 s
against 0.34 s for one regex), printing nothing, until a time limit killed it and took the
other targets with it.
"""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgeserve.cli import cli
from edgeserve.converters.tflite_int8.quantizer_route import keep_float_pattern


def test_one_pattern_matches_exactly_the_operators_kept() -> None:
    pattern = keep_float_pattern(["lstm/gate.1", "dense/out", "lstm/gate.1"])
    kept = ["lstm/gate.1;", "other;lstm/gate.1;", "dense/out;", "a;dense/out;b;"]
    not_kept = ["lstm/gate01;", "xlstm/gate.1;", "lstm/gate.1x;", "dense/out2;", "dense/outer;", "dense;"]
    assert all(re.search(pattern, name) for name in kept)
    assert not any(re.search(pattern, name) for name in not_kept)


def test_the_kept_operators_stay_float_and_the_rest_is_int8(testdata: Path) -> None:
    """The float-layers remedy through the one pattern: the second FULLY_CONNECTED's output
    stays float, every other FULLY_CONNECTED is int8."""
    pytest.importorskip("ai_edge_quantizer")
    from edgeserve.converters.tflite_int8.quantizer_route import quantize_step
    from edgeserve.tflite.model import TfliteModel

    data = (testdata / "tflm" / "hello_world_float.tflite").read_bytes()
    float_model = TfliteModel.from_bytes(data)
    graph = float_model.subgraphs[0]
    fcs = [op for op in graph.operators if op.op_name == "FULLY_CONNECTED"]
    kept = graph.tensors[fcs[1].outputs[0]].name
    (signature,) = float_model.signature_defs.values()
    (name,) = signature.inputs
    rng = np.random.default_rng(0)
    samples = {signature.key: [{name: rng.uniform(0, 6.3, (1, 1)).astype(np.float32)} for _ in range(50)]}
    q = TfliteModel.from_bytes(quantize_step(data, "int8", False, [kept], samples)).subgraphs[0]
    made = {q.tensors[op.outputs[0]].name: q.tensors[op.outputs[0]].dtype_name
            for op in q.operators if op.op_name == "FULLY_CONNECTED"}
    assert made[kept] == "float32", made
    assert len(made) == 3 and all(dtype == "int8" for tensor, dtype in made.items() if tensor != kept), made


def test_a_remedy_past_the_budget_stops_the_search_and_the_other_targets_go_on(
        testdata: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every remedy after the plain int8 model stalls (a child that sleeps a minute, as the
    LSTM's lookup did): with --remedy-budget 6 the stalled child is killed, the search stops with
    the int8 attempt as its best, the record says why, and onnx in the same run is built."""
    pytest.importorskip("ai_edge_quantizer")
    from edgeserve.converters.tflite_int8.quantizer_route import QuantizerRoute
    from edgeserve.isolation import run_isolated

    plain = QuantizerRoute.emit_scheme

    def stalling(self: QuantizerRoute, scheme: str, keep_float: list[str] | None = None) -> bytes:
        if scheme == "int8" and not keep_float:
            return plain(self, scheme, keep_float)
        return run_isolated("time:sleep", 60, tool="a stalled quantizer", what="a remedy that never ends")

    monkeypatch.setattr(QuantizerRoute, "emit_scheme", stalling)
    out = tmp_path / "out"
    # --min-sqnr 99 fails the int8 model, so the remedies run (and stall).
    result = CliRunner().invoke(cli, ["convert", str(testdata / "tflm" / "hello_world_float.tflite"), "-t", "tflite-int8",
                                      "-t", "onnx", "--calib-random", "--min-sqnr", "99", "--remedy-budget", "6",
                                      "-o", str(out), "--json"])
    assert result.exit_code == 1, result.output  # the int8 model misses the gate: a failure, said
    assert "when the remedy budget ran out (--remedy-budget gives it more)" in result.output
    entries = {e["target"]: e for e in json.loads((out / "manifest.json").read_text())["artifacts"]}
    assert entries["onnx"]["status"] == "ok"
    report = json.loads((out / "reports" / "tflite-int8.json").read_text())
    attempts = [(a["remedy"], a["status"]) for a in report["attempts"]]
    assert attempts[0][0] == "int8" and attempts[-1][1] == "error", attempts
    assert "budget ran out" in report["attempts"][-1]["reason"]  # killed at the budget, not after its minute
    stopped = entries["tflite-int8"]["route"]["stopped"]
    assert stopped.startswith("the remedy search stopped when its 6 s budget ran out (--remedy-budget)"), stopped
    assert (out / "model_int8.tflite").is_file()  # the best attempt so far is written, marked failed


def test_a_long_step_in_a_log_says_it_is_still_running(monkeypatch: pytest.MonkeyPatch) -> None:
    from edgeserve import console

    stream = io.StringIO()
    monkeypatch.setattr(console, "_ui_stream", stream)
    monkeypatch.setenv("EDGESERVE_HEARTBEAT_S", "0.2")
    with console.Progress(enabled=True, plain=True) as progress:
        with progress.step("tflite-int8: int16 activations"):
            time.sleep(0.9)
        with progress.step("quick"):
            pass
    lines = stream.getvalue().splitlines()
    beats = [line for line in lines if line.endswith("tflite-int8: int16 activations: still running")]
    assert 3 <= len(beats) <= 5, lines
    assert lines[-1].endswith("] quick") and not any("quick: still running" in line for line in lines)


def test_a_target_past_its_budget_is_refused_and_the_others_are_built(
        testdata: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A target whose tool never returns (the LSTM's onnx-int8, executorch-int8 and coreml sat for
    14 minutes at 6 GB) ends at --target-budget with its step killed; the run goes on."""
    pytest.importorskip("onnxruntime")
    from edgeserve.converters import get_converter
    from edgeserve.isolation import run_isolated

    stuck = type(get_converter("onnx"))

    def never_ends(self: object, ctx: object) -> dict:
        return run_isolated("time:sleep", 60, tool="a stuck exporter", what="exporting to ONNX")

    monkeypatch.setattr(stuck, "convert", never_ends)
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["convert", str(testdata / "tflm" / "hello_world_float.tflite"), "-t", "onnx",
                                      "-t", "tflite-int8", "--calib-random", "--target-budget", "4", "-o", str(out)])
    assert result.exit_code == 1, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert [e["target"] for e in manifest["artifacts"]] == ["tflite-int8"]
    (refused,) = manifest["refused"]
    assert refused["target"] == "onnx" and refused["reason"] == "stopped while exporting to ONNX: the 4 s budget ran out"


def test_a_budget_inside_another_ends_with_it() -> None:
    from edgeserve.isolation import budget, budget_left

    with budget(2.0):
        with budget(100.0):
            assert budget_left() <= 2.0
        with budget(0.5):
            assert budget_left() <= 0.5
    assert budget_left() is None
