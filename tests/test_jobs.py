"""Jobs (issue 50): a job file's (model, target) cells, each a convert in its own process, on a
local pool or as Ray tasks; a cell done with the same inputs is not done again.

The models are TFLM's hello-world sine models (a float and a full-INT8 .tflite): their cells
take seconds, and every kind of ending is among them (ok, and onnx refusing a full-integer
.tflite by name). Each cell's artifact is compared byte for byte with a plain `convert`.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from edgeserve.errors import InputError
from edgeserve.jobs import run as job_run
from edgeserve.jobs.cells import describe
from edgeserve.jobs.jobfile import read_job
from edgeserve.jobs.run import run_job


def write_job(folder: Path, testdata: Path, float_flags: str = '["--calib-random"]', boards: str = "[]") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    job = folder / "job.toml"
    job.write_text(f"""
targets = ["tflite-int8", "onnx"]
timeout_s = 600
boards = {boards}
bench_frames = 20

[[models]]
name = "sine_float"
path = "{testdata / 'tflm/hello_world_float.tflite'}"
flags = {float_flags}

[[models]]
name = "sine_int8"
path = "{testdata / 'tflm/hello_world_int8.tflite'}"
targets = ["mcu-c", "onnx"]
""")
    return job


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def statuses(table: dict) -> dict[tuple[str, str], str]:
    return {(c["model"], c["target"]): c["status"] for c in table["cells"]}


EXPECTED = {("sine_float", "tflite-int8"): "ok", ("sine_float", "onnx"): "ok",
            ("sine_int8", "mcu-c"): "ok", ("sine_int8", "onnx"): "refused"}


@pytest.fixture(scope="module")
def local_run(tmp_path_factory: pytest.TempPathFactory, testdata: Path) -> tuple[Path, Path, dict]:
    base = tmp_path_factory.mktemp("jobs")
    job = write_job(base / "job", testdata)
    out = base / "out"
    with pytest.MonkeyPatch.context() as patch:  # the suite keeps convert's target cache off; jobs use it
        patch.setenv("EDGESERVE_TARGET_CACHE", "on")
        patch.setenv("EDGESERVE_CACHE_DIR", str(base / "cache"))
        table = run_job(read_job(job), out, workers=2, say=lambda line: None)
    return job, out, table


def test_every_cell_is_what_convert_writes(local_run: tuple[Path, Path, dict], testdata: Path, tmp_path: Path) -> None:
    job, out, table = local_run
    assert statuses(table) == EXPECTED
    refused = next(c for c in table["cells"] if c["status"] == "refused")
    assert "full-integer .tflite" in refused["error"]  # the reason, by name, in one line
    ok = next(c for c in table["cells"] if (c["model"], c["target"]) == ("sine_float", "tflite-int8"))
    assert ok["sqnr_db"] > 20 and ok["bytes"] == (out / "cells/sine_float/tflite-int8" / ok["path"]).stat().st_size
    plain = tmp_path / "plain"
    subprocess.run([sys.executable, "-m", "edgeserve", "-q", "convert", str(testdata / "tflm/hello_world_float.tflite"),
                    "-t", "tflite-int8", "-o", str(plain), "--calib-random"], check=True, capture_output=True)
    assert sha(out / "cells/sine_float/tflite-int8" / ok["path"]) == sha(plain / ok["path"])
    # The table three ways, one row per cell.
    assert json.loads((out / "jobs.json").read_text())["cells"] == table["cells"]
    assert (out / "jobs.md").read_text().count("| sine_") == 4
    assert (out / "jobs.html").read_text().count("<tr class=") == 4


def test_each_model_folder_is_one_convert_of_the_targets_that_passed(local_run: tuple[Path, Path, dict]) -> None:
    """OUT/<model>/ holds one manifest of every target whose cell passed, taken from the cells
    (convert's target cache), not built again: the same bytes as the cells'."""
    _, out, table = local_run
    assert table["models"]["sine_float"]["targets"] == ["tflite-int8", "onnx"]
    assert table["models"]["sine_float"]["from_cache"] == 2 and table["models"]["sine_int8"]["targets"] == ["mcu-c"]
    manifest = json.loads((out / "sine_float/manifest.json").read_text())
    entries = {e["target"]: e for e in manifest["artifacts"]}
    assert sorted(entries) == ["onnx", "tflite-int8"] and all(e["cached"] for e in entries.values())
    for target, entry in entries.items():
        assert sha(out / "sine_float" / entry["path"]) == sha(out / "cells/sine_float" / target / entry["path"])


def test_a_second_run_redoes_only_the_cells_whose_inputs_changed(local_run: tuple[Path, Path, dict],
                                                                 testdata: Path) -> None:
    job, out, _ = local_run
    manifest = out / "cells/sine_float/onnx/manifest.json"
    before = manifest.stat().st_mtime_ns
    again = run_job(read_job(job), out, workers=2, say=lambda line: None)
    assert statuses(again) == EXPECTED and all(c["cached"] for c in again["cells"])
    assert manifest.stat().st_mtime_ns == before  # taken as it was, not converted again
    # One flag more for the float model: its two cells run again, the other model's do not.
    changed = write_job(job.parent, testdata, float_flags='["--calib-random", "--calib-samples", "50"]')
    third = run_job(read_job(changed), out, workers=2, say=lambda line: None)
    assert {(c["model"], c["target"]): c["cached"] for c in third["cells"]} == {
        ("sine_float", "tflite-int8"): False, ("sine_float", "onnx"): False,
        ("sine_int8", "mcu-c"): True, ("sine_int8", "onnx"): True}
    assert statuses(third) == EXPECTED


def test_an_out_of_memory_kill_is_retried_with_twice_the_memory(tmp_path: Path, testdata: Path, monkeypatch) -> None:
    """A cell killed by SIGKILL (the kernel's OOM killer) runs again with its memory doubled,
    at most twice; any other death is one row, and the other cells finish."""
    job = write_job(tmp_path / "job", testdata)
    tries: list[tuple[str, str]] = []

    def fake_cell(model, target, flags, files, timeout_s, out_dir, beside=1):  # noqa: ANN001 - run_cell's signature
        tries.append((Path(model).name, target))
        base = {"seconds": 0.1, "node": "here", "bytes": None, "sqnr_db": None, "top1_agreement": None}
        if target == "onnx" and "float" in model and tries.count(tries[-1]) == 1:
            return {"row": describe(target, -9, "", None, timeout_s) | base, "archive": None}
        if target == "mcu-c":
            return {"row": describe(target, -11, "", None, timeout_s) | base, "archive": None}
        return {"row": {"status": "ok", "error": None} | base, "archive": None}

    monkeypatch.setattr(job_run, "run_cell", fake_cell)
    table = run_job(read_job(job), tmp_path / "out", workers=2, say=lambda line: None)
    assert tries.count(("hello_world_float.tflite", "onnx")) == 2
    assert statuses(table) == {("sine_float", "tflite-int8"): "ok", ("sine_float", "onnx"): "ok",
                               ("sine_int8", "mcu-c"): "crashed", ("sine_int8", "onnx"): "ok"}
    crashed = next(c for c in table["cells"] if c["status"] == "crashed")
    assert crashed["error"] == "convert died (SIGSEGV)" and not (tmp_path / "out/cells/sine_int8/mcu-c").exists()


def test_what_crosses_between_machines_unpacks_inside_its_folder_only(tmp_path: Path) -> None:
    import io
    import tarfile

    from edgeserve.jobs.cells import pack, unpack

    (tmp_path / "cell/reports").mkdir(parents=True)
    (tmp_path / "cell/reports/a.json").write_text("{}")
    back = unpack(pack(tmp_path / "cell"), tmp_path / "here")
    assert back == tmp_path / "here/cell" and (back / "reports/a.json").read_text() == "{}"
    for name, kind in (("../escape.txt", tarfile.REGTYPE), ("/etc/escape", tarfile.REGTYPE), ("cell/link", tarfile.SYMTYPE)):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            member = tarfile.TarInfo(name)
            member.type, member.linkname = kind, "/etc/passwd"
            tar.addfile(member, io.BytesIO(b""))
        with pytest.raises(ValueError, match="refusing the archive member"):
            unpack(buffer.getvalue(), tmp_path / "there")
    assert not (tmp_path / "escape.txt").exists()


def test_how_a_cell_ended_is_read_from_convert() -> None:
    assert describe("onnx", None, "", None, 30)["status"] == "timeout"
    assert describe("onnx", -9, "", None, 30)["error"] == "convert died (SIGKILL: out of memory?)"
    assert describe("onnx", 1, "error: not a model\n", None, 30) == {
        "status": "refused", "bytes": None, "sqnr_db": None, "top1_agreement": None, "error": "not a model"}
    failed = {"artifacts": [{"target": "onnx", "status": "failed", "bytes": 10, "path": "model.onnx",
                             "verification": {}, "quality": {"outputs": [{"sqnr_db": 3.5}]}}]}
    assert describe("onnx", 1, "", failed, 30) == {"status": "failed", "bytes": 10, "path": "model.onnx",
                                                   "sqnr_db": 3.5, "top1_agreement": None, "error": None}
    # A manifest this edgeserve cannot read (no path) is the cell's error, in one line, not the job's.
    broken = {"artifacts": [{"target": "onnx", "status": "ok", "verification": {}, "bytes": 10}]}
    assert describe("onnx", 0, "", broken, 30)["error"] == "onnx artifact: expected the field 'path' (a string), found none"
    not_built = describe("mcu", 1, "", {"artifacts": [], "not_built": [{"target": "mcu", "reason": "built from x"}]}, 30)
    assert (not_built["status"], not_built["error"]) == ("not built", "built from x")


@pytest.mark.parametrize("text, expected", [
    ("targets = ['tflite-int8']\n", "expected at least one [[models]]"),
    ("targets = ['tflite-int9']\n[[models]]\npath = 'job.toml'\n", "unknown target 'tflite-int9'"),
    ("targets = ['onnx']\n[[models]]\npath = 'missing.onnx'\n", "missing.onnx does not exist"),
    ("targets = ['onnx']\n[[models]]\npath = 'job.toml'\nflags = ['-o', 'x']\n", "-o is set by the job"),
    ("targets = ['onnx']\n[[models]]\npath = 'job.toml'\nname = '../up'\n", "it names a folder"),
    ("targets = ['onnx']\ntimeout = 3\n[[models]]\npath = 'job.toml'\n", "unknown key(s) timeout"),
])
def test_a_bad_job_file_is_one_error_naming_what_was_expected(tmp_path: Path, text: str, expected: str) -> None:
    (tmp_path / "job.toml").write_text(text)
    with pytest.raises(InputError, match=None) as caught:
        read_job(tmp_path / "job.toml")
    assert expected in str(caught.value)


def test_a_job_cut_short_goes_on_in_the_same_folder(tmp_path: Path, testdata: Path) -> None:
    """Ctrl-C (in the main thread, as a terminal sends it) once the first cell is in place: OUT
    is already the job's (its table is written first), so the same command goes on there,
    taking the finished cell as it is."""
    job = read_job(write_job(tmp_path / "job", testdata))

    def interrupt_after_the_first_cell(line: str) -> None:
        if line.startswith("  [1/"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_job(job, tmp_path / "out", workers=1, say=interrupt_after_the_first_cell)
    again = run_job(job, tmp_path / "out", workers=2, say=lambda line: None)
    assert statuses(again) == EXPECTED
    assert sum(c["cached"] for c in again["cells"]) == 1


def test_out_is_never_a_folder_of_the_users_own_files(tmp_path: Path, testdata: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="holds files no job wrote"):
        run_job(read_job(write_job(tmp_path / "job", testdata)), home, say=lambda line: None)
    assert sorted(p.name for p in home.iterdir()) == ["notes.txt"]


def test_the_same_job_on_a_ray_cluster_of_two_nodes(local_run: tuple[Path, Path, dict], tmp_path: Path,
                                                    testdata: Path, monkeypatch) -> None:
    """A head and a worker node on this machine, the worker a board as the docs start one (the host
    profile as a custom resource, no CPU for other work): the cells end as they did locally, with
    the same bytes, every one converted on the head and every bench on "host" run on the board;
    a board no node offers is one error per cell."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    _, out, local = local_run
    job = write_job(tmp_path / "job", testdata, boards='["host", "raspberry-pi-5"]')
    # The nodes fill a cache of their own, as other machines would: this one's starts empty.
    monkeypatch.setenv("EDGESERVE_TARGET_CACHE", "on")
    monkeypatch.setenv("EDGESERVE_CACHE_DIR", str(tmp_path / "node_cache"))
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        board = cluster.add_node(num_cpus=0, resources={"edgeserve/host": 1})
        ray.init(address=cluster.address, log_to_driver=False)
        monkeypatch.setenv("EDGESERVE_CACHE_DIR", str(tmp_path / "driver_cache"))
        on_ray = run_job(read_job(job), tmp_path / "out", ray_address=cluster.address, say=lambda line: None)
        nodes = {n["NodeID"][:8] for n in ray.nodes() if n["Alive"]}
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert statuses(on_ray) == statuses(local)
    # The model folders were made here from what the cells sent back, none built again.
    assert on_ray["models"]["sine_float"]["from_cache"] == 2 and any((tmp_path / "driver_cache").rglob("entry.json"))
    benched = [c for c in on_ray["cells"] if c.get("bench")]
    assert {(c["model"], c["target"]) for c in benched} == {("sine_float", "tflite-int8"), ("sine_float", "onnx")}
    for cell in benched:  # mcu-c is C for a board, and onnx refused the INT8 model: no bench
        host, pi = cell["bench"]["host"], cell["bench"]["raspberry-pi-5"]
        assert host["error"] is None and host["p50_ms"] > 0 and host["node"].endswith(board.node_id[:8])
        assert "p50_ms" not in pi and "no node of the cluster is a raspberry-pi-5" in pi["error"]
    assert {c["node"].rsplit("/", 1)[1] for c in on_ray["cells"]} <= nodes and len(nodes) == 2
    assert not any(c["node"].endswith(board.node_id[:8]) for c in on_ray["cells"])  # no cell on the board
    for cell in on_ray["cells"]:
        if cell["status"] == "ok" and cell["target"] != "mcu-c":
            folder = f"cells/{cell['model']}/{cell['target']}"
            assert sha(tmp_path / "out" / folder / cell["path"]) == sha(out / folder / cell["path"]), folder


def test_the_readmes_example_job_names_files_where_the_repository_keeps_them(tmp_path: Path) -> None:
    """examples/jobs/small_zoo.toml, read where it sits relative to what `make demo` writes
    (build/example) and ../shared/testdata: every path it names is found there, every target exists."""
    root = Path(__file__).resolve().parents[1]
    repo = tmp_path / "repo"
    (repo / "examples/jobs").mkdir(parents=True)
    example = repo / "examples/jobs/small_zoo.toml"
    example.write_text((root / "examples/jobs/small_zoo.toml").read_text())
    for name in ("build/example/digits_cnn.keras", "build/example/calib.npz", "build/example/eval.npz"):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(b"")
    makefile = (root / "Makefile").read_text()
    assert "EXAMPLE := build/example" in makefile  # where make demo trains the digits model
    for name in ("hello_world_int8.tflite", "hello_world_float.tflite"):
        assert (root.parent / "shared/testdata/tflm" / name).is_file() or pytest.skip("../shared/testdata is absent")
        (tmp_path / "shared/testdata/tflm").mkdir(parents=True, exist_ok=True)
        (tmp_path / "shared/testdata/tflm" / name).write_bytes(b"")
    job = read_job(example)
    assert [m.name for m in job.models] == ["digits", "hello_world", "hello_world_float"]
    assert len(job.cells()) == 8


def test_a_local_job_reaches_only_this_machine_as_a_board(local_run: tuple[Path, Path, dict]) -> None:
    """Without Ray, a bench on the board "host" runs here; any other board is one error naming
    how to reach it, and nothing is run for it."""
    job_path, out, _ = local_run
    job = read_job(job_path)
    model = next(m for m in job.models if m.name == "sine_float")
    cell = job_run.Cell(model, "tflite-int8", "key", out / "cells/sine_float/tflite-int8", job.memory_mb)
    runner = job_run._LocalRunner(job, 1)
    try:
        found = {board: result for _, board, result in runner.bench([(cell, "host"), (cell, "raspberry-pi-5")], job)}
    finally:
        runner.close()
    assert found["host"]["error"] is None and found["host"]["p50_ms"] > 0 and found["host"]["backend"]
    # AI Hub's profile figures, as bench measured them on the board: both loads and the peak memory.
    host = found["host"]
    from edgeserve.runtime.measure.memory import unmeasurable

    assert host["first_load_ms"] > 0 and host["warm_load_ms"] > 0
    assert host["peak_memory_bytes"] > 0 if unmeasurable() is None else host["peak_memory_bytes"] is None
    assert "run it with --ray" in found["raspberry-pi-5"]["error"] and "edgeserve/raspberry-pi-5" in \
        found["raspberry-pi-5"]["error"]


def test_a_node_stopped_mid_cell_costs_nothing_but_time(local_run: tuple[Path, Path, dict], tmp_path: Path,
                                                        monkeypatch) -> None:
    """The worker node is stopped while a cell runs on it (it marked the start): Ray runs that
    cell again on the head node, and the job ends as it did locally."""
    ray = pytest.importorskip("ray")
    import threading
    import time

    from ray.cluster_utils import Cluster

    from edgeserve.jobs.cells import STARTED_FOR_TESTS

    job, _, local = local_run
    started = tmp_path / "started"
    started.mkdir()
    monkeypatch.setenv(STARTED_FOR_TESTS, str(started))  # the nodes start with this environment
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    result: dict = {}
    try:
        worker = cluster.add_node(num_cpus=1)
        ray.init(address=cluster.address, log_to_driver=False)
        thread = threading.Thread(target=lambda: result.update(table=run_job(
            read_job(job), tmp_path / "out", ray_address=cluster.address, say=lambda line: None)))
        thread.start()
        deadline = time.monotonic() + 120
        while not any(p.name.startswith(worker.node_id) for p in started.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.05)
        ran_there = any(p.name.startswith(worker.node_id) for p in started.iterdir())
        cluster.remove_node(worker, allow_graceful=False)
        thread.join(timeout=300)
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert ran_there, "no cell started on the worker node: the check proved nothing"
    assert statuses(result["table"]) == statuses(local)
    assert all(not c["node"].endswith(worker.node_id[:8]) or c["status"] == "ok" for c in result["table"]["cells"])


def test_a_board_column_shows_latency_peak_memory_and_energy() -> None:
    """A board's column: the bench's p50, the peak memory the model added (MiB) and the energy per
    inference where the board has a power sensor, or its error."""
    from edgeserve.jobs.table import cell_text, columns, markdown

    table = {"job": "j", "boards": ["host"], "cells": [
        {"model": "m", "target": "onnx", "status": "ok",
         "bench": {"host": {"p50_ms": 1.23456, "peak_memory_bytes": 3 * 2 ** 20, "error": None}}},
        {"model": "m", "target": "tflite-int8", "status": "ok",
         "bench": {"host": {"p50_ms": 2.0, "peak_memory_bytes": None, "mj_per_inference": 8.25, "error": None}}},
        {"model": "m", "target": "coreml", "status": "ok", "bench": {"host": {"error": "no Core ML here"}}}]}
    assert ("bench:host", "p50 ms, peak MiB, mJ on host") in columns(table)
    assert cell_text(table["cells"][0], "bench:host") == "1.235, 3.0"
    assert cell_text(table["cells"][1], "bench:host") == "2.000, -, 8.250 mJ"
    assert cell_text(table["cells"][2], "bench:host") == "error: no Core ML here"
    assert "| 1.235, 3.0 |" in markdown(table)


def test_a_board_with_a_power_sensor_gets_energy_per_inference(local_run: tuple[Path, Path, dict], tmp_path: Path,
                                                                 monkeypatch) -> None:
    """The board's bench (a child `edgeserve bench`) reads the machine's power sensor: here a
    hwmon rail that reads a constant 4 W (a sysfs tree of its own), so each inference costs about
    4 W times its time; without the tree, this machine has no sensor and the figure is None."""
    job_path, out, _ = local_run
    rail = tmp_path / "sys-root" / "sys/class/hwmon/hwmon0"
    rail.mkdir(parents=True)
    (rail / "name").write_text("board\n")
    (rail / "power1_input").write_text(f"{4_000_000}\n")  # microwatts
    monkeypatch.setenv("EDGESERVE_SYSFS_ROOT", str(tmp_path / "sys-root"))
    job = read_job(job_path)
    model = next(m for m in job.models if m.name == "sine_float")
    cell = job_run.Cell(model, "tflite-int8", "key", out / "cells/sine_float/tflite-int8", job.memory_mb)
    runner = job_run._LocalRunner(job, 1)
    try:
        ((_, _, host),) = list(runner.bench([(cell, "host")], job))
    finally:
        runner.close()
    assert host["error"] is None and host["energy"].startswith("hwmon"), host
    # 4 W over runs of about p50 each (Python's loop adds a little): the same order as 4 W x p50.
    assert host["mj_per_inference"] is not None, host
    assert 0.5 * 4.0 * host["p50_ms"] <= host["mj_per_inference"] <= 20 * 4.0 * host["p95_ms"], host


def test_a_board_bench_can_time_each_operator(local_run: tuple[Path, Path, dict]) -> None:
    """bench_operators = true: the board's bench is `bench --operators`. The ONNX cell's row keeps
    ONNX Runtime's slowest operator kinds (the file's operators as it runs them, shares falling, on
    the CPU provider); LiteRT's cell keeps its profiler's (XNNPACK's operators, read through its C
    API); the column names the slowest."""
    import dataclasses

    import onnx

    from edgeserve.jobs.table import cell_text

    job_path, out, _ = local_run
    job = dataclasses.replace(read_job(job_path), bench_operators=True)
    model = next(m for m in job.models if m.name == "sine_float")
    cells = [job_run.Cell(model, target, "key", out / "cells/sine_float" / target, job.memory_mb)
             for target in ("onnx", "tflite-int8")]
    runner = job_run._LocalRunner(job, 1)
    try:
        benched = {cell.target: result for cell, _, result in runner.bench([(c, "host") for c in cells], job)}
    finally:
        runner.close()
    onnx_ops = benched["onnx"]["operators"]
    entry = json.loads((out / "cells/sine_float/onnx/manifest.json").read_text())["artifacts"][0]
    in_file = [node.op_type for node in onnx.load(out / "cells/sine_float/onnx" / entry["path"]).graph.node]
    kinds = onnx_ops["by_op"]
    # As ONNX Runtime runs it after its graph optimisation: each Gemm, the two a Relu follows fused with it.
    assert {k["op"]: k["nodes"] for k in kinds} == {"FusedGemm": 2, "Gemm": 1}, (kinds, in_file)
    assert in_file.count("Gemm") == 3 and in_file.count("Relu") == 2
    assert [k["share"] for k in kinds] == sorted((k["share"] for k in kinds), reverse=True)
    assert 0 < sum(k["share"] for k in kinds) <= 1.0001 and all("CPU" in k["placed_on"] for k in kinds)
    litert = benched["tflite-int8"]["operators"]["by_op"]
    assert litert and {k["placed_on"] for k in litert} <= {"XNNPACK", "TFLite kernel"}, litert
    row = {"bench": {"host": benched["onnx"]}}
    assert f"slowest {kinds[0]['op']} {100 * kinds[0]['share']:.0f} %" in cell_text(row, "bench:host")


def test_a_bench_kept_without_operators_is_done_again_when_the_job_asks_for_them(tmp_path: Path) -> None:
    """A row's kept bench is reused, unless the job now asks for operators and it has none."""
    import dataclasses

    from edgeserve.jobs.jobfile import Job, ModelSpec

    model = ModelSpec(name="m", path=tmp_path / "m.onnx", flags=(), targets=("onnx",))
    cell = job_run.Cell(model, "onnx", "key", tmp_path / "cell", 1000)
    cell.folder.mkdir()
    asked: list[list[str]] = []

    class Runner:
        def bench(self, todo, job):  # type: ignore[no-untyped-def]
            asked.append([board for _, board in todo])
            for c, board in todo:
                yield c, board, {"board": board, "p50_ms": 1.0, "error": None, "operators": {"by_op": []}}

    job = Job(path=tmp_path / "job.toml", models=(model,), timeout_s=60, memory_mb=1000, boards=("host",))
    rows = {cell.name: {"status": "ok", "bench": {"host": {"p50_ms": 1.0, "error": None}}}}
    job_run._bench(job, [cell], rows, Runner(), say=lambda line: None)
    assert asked == []  # kept: timed already
    job_run._bench(dataclasses.replace(job, bench_operators=True), [cell], rows, Runner(), say=lambda line: None)
    assert asked == [["host"]] and "operators" in rows[cell.name]["bench"]["host"]
    job_run._bench(dataclasses.replace(job, bench_operators=True), [cell], rows, Runner(), say=lambda line: None)
    assert asked == [["host"]]  # now kept with its operators


def test_bench_operators_must_be_true_or_false(tmp_path: Path, testdata: Path) -> None:
    job = write_job(tmp_path, testdata)
    job.write_text(job.read_text().replace("bench_frames = 20", "bench_frames = 20\nbench_operators = \"yes\""))
    with pytest.raises(InputError, match=r"bench_operators: expected true or false; got 'yes'"):
        read_job(job)
