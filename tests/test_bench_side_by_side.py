"""`edgeserve bench OUT`: every artifact of a conversion folder on the same input, one table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgeserve.cli import cli


@pytest.fixture(scope="module")
def four_formats(digits_example: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The digits CNN as tflite-int8, onnx, onnx-int8 and mcu-c, with a recorded PreprocessSpec."""
    from edgeserve.conversion.convert import convert
    from edgeserve.preprocess import PreprocessSpec

    out = tmp_path_factory.mktemp("four_formats")
    spec = PreprocessSpec.from_dict({"size": [8, 8], "color": "gray", "mean": [0.0], "std": [16.0]})
    result = convert(digits_example / "digits_cnn.keras", ["tflite-int8", "onnx", "onnx-int8", "mcu-c"], out,
                     calib=digits_example / "calib.npz", eval_data=digits_example / "eval.npz", preprocess=spec)
    assert all(a["status"] == "ok" for a in result.manifest["artifacts"])
    return out


def test_every_artifact_runs_on_the_same_frame_with_its_size_and_quality(four_formats):
    result = CliRunner().invoke(cli, ["bench", str(four_formats), "--frames", "30", "--warmup", "5", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["target"]: r for r in json.loads(result.output)["artifacts"]}
    assert set(rows) == {"tflite-int8", "onnx", "onnx-int8", "mcu-c"}
    timed = [rows[t] for t in ("tflite-int8", "onnx", "onnx-int8")]
    assert [r["backend"].split(":")[0] for r in timed] == ["litert", "onnxruntime", "onnxruntime"]
    assert all(r["input"] == "640x480 frame" and 0 < r["p50_ms"] <= r["p95_ms"] for r in timed)
    assert min(r["ratio"] for r in timed) == 1.0 and all(r["ratio"] >= 1.0 for r in timed)
    # Each artifact's own open time and peak resident memory (the mark reset for each): at least
    # the bytes of its model, which the engine reads from disk.
    from edgeserve.runtime.measure.memory import unmeasurable

    measurable = unmeasurable() is None  # else each peak is None: the kernel cannot reset the mark
    assert all(r["load_ms"] > 0 and (r["peak_memory_bytes"] >= r["bytes"] if measurable
                                     else r["peak_memory_bytes"] is None) for r in timed), [
        (r["target"], r["bytes"], r["load_ms"], r["peak_memory_bytes"]) for r in timed]
    manifest = json.loads((four_formats / "manifest.json").read_text())
    for entry in manifest["artifacts"]:
        row = rows[entry["target"]]
        path = four_formats / entry["path"]
        expected = path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        assert row["bytes"] == expected
        if "metrics" in entry:
            assert row["quality"] == (f"top1 {entry['metrics']['quantized']:.3f} "
                                      f"(drop {entry['metrics']['drop_points']:.2f} pts)")
    # The microcontroller build is accounted for, with its figure from the emulated board.
    assert "p50_ms" not in rows["mcu-c"] and "runs on the board" in rows["mcu-c"]["skipped"]
    assert rows["mcu-c"]["quality"].startswith("bit-exact")


def test_the_table_and_the_flags_that_need_one_artifact(four_formats):
    table = CliRunner().invoke(cli, ["bench", str(four_formats), "--frames", "10", "--warmup", "2"])
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert lines[0].split()[:3] == ["artifact", "backend", "size"]
    assert sum(line.startswith(("tflite-int8 ", "onnx ", "onnx-int8 ", "mcu-c ")) for line in lines) == 4
    refused = CliRunner().invoke(cli, ["bench", str(four_formats), "--synthetic", "64x64"])
    assert refused.exit_code == 2 and "--target" in refused.output
    one = CliRunner().invoke(cli, ["bench", str(four_formats), "--target", "onnx", "--frames", "5", "--json"])
    assert one.exit_code == 0, one.output
    assert json.loads(one.output)["backend"].startswith("onnxruntime")


def test_plot_draws_latency_against_size(four_formats, tmp_path):
    plot = tmp_path / "side_by_side.png"
    result = CliRunner().invoke(cli, ["bench", str(four_formats), "--frames", "5", "--warmup", "1", "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    data = plot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    single = CliRunner().invoke(cli, ["bench", str(four_formats / "manifest.json"), "--plot", str(tmp_path / "x.png")])
    assert single.exit_code == 2 and "conversion folder" in single.output and not (tmp_path / "x.png").exists()


class _ConstantPower:
    """A sensor on a rail drawing ``watts`` all the time: a cumulative counter or a watt meter."""

    name, estimated, live, detail = "fake", False, True, "a constant 4 W rail"

    def __init__(self, watts: float, cumulative: bool) -> None:
        import time

        self.watts, self.cumulative, self.t0 = watts, cumulative, time.perf_counter()

    def read(self, now: float):
        from edgeserve.profiling.power import PowerReading

        if self.cumulative:
            return PowerReading(joules=self.watts * (now - self.t0))
        return PowerReading(watts=self.watts)


@pytest.mark.parametrize("cumulative", [True, False], ids=["energy-counter", "watt-meter"])
def test_energy_per_inference_is_the_rail_over_the_loop(cumulative):
    """Both kinds of sensor give the rail's energy over the loop: 4 W for a loop of known length
    is 4 W x its seconds, whichever way it is read (counter difference or integrated samples)."""
    import time

    from edgeserve.runtime.measure.loop_energy import LoopEnergy

    energy = LoopEnergy(_ConstantPower(4.0, cumulative), interval_s=0.005)
    started = time.perf_counter()
    result, joules, problem = energy.measure(lambda: time.sleep(0.2) or "done")
    elapsed = time.perf_counter() - started
    assert result == "done" and problem is None
    assert joules == pytest.approx(4.0 * elapsed, rel=0.1), (joules, elapsed)


def test_a_failing_sensor_keeps_the_loop_and_says_why():
    from edgeserve.profiling.sysfs import SensorError
    from edgeserve.runtime.measure.loop_energy import LoopEnergy

    class Broken(_ConstantPower):
        def read(self, now):
            raise SensorError("energy_uj: Permission denied")

    for cumulative in (True, False):
        result, joules, problem = LoopEnergy(Broken(1.0, cumulative)).measure(lambda: 42)
        assert (result, joules) == (42, None) and "Permission denied" in problem


def test_the_energy_column_says_when_the_machine_has_no_sensor(four_formats, monkeypatch):
    """This machine has no power sensor (no RAPL, no hwmon): every timed row has no figure and
    one line says why; with a sensor the column is its millijoules per inference."""
    from edgeserve.runtime.measure import compare as side_by_side
    from edgeserve.runtime.measure.loop_energy import LoopEnergy

    table = CliRunner().invoke(cli, ["bench", str(four_formats), "--frames", "5", "--warmup", "1"])
    assert table.exit_code == 0, table.output
    assert "mJ/inf" in table.output.splitlines()[0]
    rows = side_by_side.compare(four_formats / "manifest.json", frames=5, warmup=1)
    timed = [r for r in rows if "p50_ms" in r]
    if LoopEnergy.open().source is None:
        assert all(r["mj_per_inference"] is None and r["energy"].startswith("no power sensor") for r in timed)
        assert "energy not measured: no power sensor" in table.output
    monkeypatch.setattr(LoopEnergy, "open", classmethod(lambda cls, profile=None: cls(_ConstantPower(4.0, True))))
    rows = side_by_side.compare(four_formats / "manifest.json", frames=20, warmup=1)
    for r in (r for r in rows if "p50_ms" in r):
        # 4 W over 20 runs of about p50 each: the same order as 4 W x p50 (Python's loop adds a little).
        assert 0.5 * 4.0 * r["p50_ms"] <= r["mj_per_inference"] <= 20 * 4.0 * r["p95_ms"], r
        assert r["energy"].startswith("fake: a constant 4 W rail")


def test_a_folder_where_nothing_ran_is_a_failure(testdata: Path, tmp_path: Path) -> None:
    """bench exited 0 when its only artifact could not run here: it timed nothing. The table
    still says why for each artifact; then one error line, exit 1 (and with --json as well)."""
    out = tmp_path / "out"
    built = CliRunner().invoke(cli, ["convert", str(testdata / "tflm" / "hello_world_int8.tflite"), "-t", "mcu",
                                     "--no-fit-check", "-o", str(out)])
    assert built.exit_code == 0, built.output
    for extra in ([], ["--json"]):
        result = CliRunner().invoke(cli, ["bench", str(out), "--frames", "5", *extra])
        assert result.exit_code == 1, result.output
        assert "a microcontroller build: it runs on the board" in result.stdout
        assert "error: no artifact of" in result.stderr and "nothing was timed" in result.stderr


def test_operators_are_timed_by_the_engine_profiler_node_for_node(four_formats, tmp_path):
    """`bench --operators` on the ONNX model: one row per node ONNX Runtime runs after its graph
    optimizations (checked against the optimized model ONNX Runtime itself writes: the same
    operator types, as many nodes), each on the CPU provider, the shares summing to one."""
    import onnx
    import onnxruntime as ort
    from collections import Counter

    entry = next(a for a in json.loads((four_formats / "manifest.json").read_text())["artifacts"]
                 if a["target"] == "onnx")
    result = CliRunner().invoke(cli, ["bench", str(four_formats / "manifest.json"), "--target", "onnx", "--frames",
                                      "20", "--warmup", "2", "--threads", "1", "--operators", "--json"])
    assert result.exit_code == 0, result.output
    ops = json.loads(result.output)["operators"]
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    so.intra_op_num_threads = 1
    ort.InferenceSession(str(four_formats / entry["path"]), so, providers=["CPUExecutionProvider"])
    executed = Counter(node.op_type for node in onnx.load(str(tmp_path / "optimized.onnx")).graph.node)
    assert Counter({g["op"]: g["nodes"] for g in ops["by_op"]}) == executed and ops["nodes"] == sum(executed.values())
    assert {g["placed_on"] for g in ops["by_op"]} == {"CPUExecutionProvider"}
    assert abs(sum(g["share"] for g in ops["by_op"]) - 1.0) < 0.01 and ops["us_per_run"] > 0


def test_litert_operators_come_from_its_own_profiler(testdata, monkeypatch):
    """`bench --operators` on a .tflite (MLPerf Tiny's KWS model: the digits CNN's operators take
    under a microsecond, below LiteRT's whole-microsecond events), read from LiteRT's profiler
    through its C API in a child: with TFLite's built-in kernels (litert:cpu), one node per
    operator of the model in the interpreter's own list, by name; with XNNPACK, its operators and
    the TFLite kernels it did not take, the shares summing to one. A profiler that cannot be read
    is a reason, not a failed bench."""
    from collections import Counter

    from ai_edge_litert.interpreter import Interpreter

    model = testdata / "mlperf-tiny/kws_ref_model.tflite"
    in_model = Counter(op["op_name"] for op in Interpreter(model_path=str(model))._get_ops_details())

    def bench(*flags: str) -> dict:
        result = CliRunner().invoke(cli, ["bench", str(model), "--frames", "20", "--threads", "1", "--operators",
                                          "--json", *flags])
        assert result.exit_code == 0, result.output
        return json.loads(result.output)["operators"]

    builtin = bench("--backend", "litert:cpu")
    assert Counter({g["op"]: g["nodes"] for g in builtin["by_op"]}) == in_model, (builtin["by_op"], in_model)
    assert {g["placed_on"] for g in builtin["by_op"]} == {"TFLite kernel"} and builtin["us_per_run"] > 0
    xnnpack = bench("--backend", "litert:xnnpack")
    assert "XNNPACK" in {g["placed_on"] for g in xnnpack["by_op"]} and xnnpack["us_per_run"] > 0
    assert {g["op"] for g in xnnpack["by_op"] if g["placed_on"] == "TFLite kernel"} <= set(in_model)
    assert abs(sum(g["share"] for g in xnnpack["by_op"]) - 1.0) < 0.01
    monkeypatch.setenv("EDGESERVE_LITERT_LIBRARY", "/nonexistent/libLiteRt.so")
    missing = bench("--backend", "litert:cpu")
    assert "by_op" not in missing and "/nonexistent/libLiteRt.so" in missing["reason"], missing
