"""Targets side by side (edgeserve/conversion/schedule.py): what is built from another waits for it, the rest
run at once, and every outcome is settled in the calling thread."""

from __future__ import annotations

import threading

import pytest

from edgeserve.conversion.schedule import default_jobs, in_dependency_order

NEEDS = {"tflite-int8": (), "mcu": ("tflite-int8",), "mcu-c": ("tflite-int8",), "coreml": (), "onnx": ()}


def _run(items, jobs, build, wanted=lambda item: True):
    settled: list[tuple[str, object]] = []
    caller = threading.get_ident()

    def settle(item, future):
        assert threading.get_ident() == caller
        try:
            settled.append((item, future.result()))
        except Exception as exc:  # noqa: BLE001 - recorded for the asserts
            settled.append((item, exc))

    in_dependency_order(items, lambda i: i, lambda i: NEEDS[i], build, settle, jobs=jobs, wanted=wanted)
    return settled


def test_one_job_builds_in_the_order_given_in_the_calling_thread():
    caller = threading.get_ident()
    built = _run(["tflite-int8", "mcu", "coreml"], 1, lambda item: threading.get_ident() == caller)
    assert built == [("tflite-int8", True), ("mcu", True), ("coreml", True)]


def test_independent_targets_run_at_once_and_a_dependent_one_after_its_source():
    # Both builds must be inside the barrier together, or it breaks: they ran side by side.
    meeting = threading.Barrier(2, timeout=20)
    done: list[str] = []

    def build(item):
        if item in ("tflite-int8", "coreml"):
            meeting.wait()
        if item == "mcu":
            assert "tflite-int8" in done  # its source was settled before it started
        done.append(item)
        return item

    settled = _run(["tflite-int8", "mcu", "coreml"], 2, build)
    assert sorted(item for item, _ in settled) == ["coreml", "mcu", "tflite-int8"]
    assert all(item == result for item, result in settled)


def test_one_job_cannot_meet_itself():
    """The barrier above is a real test: with one job the two builds never meet."""
    meeting = threading.Barrier(2, timeout=1)
    settled = _run(["tflite-int8", "coreml"], 1, lambda item: meeting.wait())
    assert all(isinstance(result, threading.BrokenBarrierError) for _, result in settled)


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_failure_is_settled_and_what_is_not_wanted_is_never_built(jobs):
    built: list[str] = []

    def build(item):
        built.append(item)
        if item == "tflite-int8":
            raise ValueError("refused")
        return item

    settled = dict(_run(["tflite-int8", "mcu", "mcu-c", "onnx"], jobs, build, wanted=lambda item: item != "mcu"))
    assert isinstance(settled["tflite-int8"], ValueError)
    assert "mcu" not in settled and "mcu" not in built
    assert settled["mcu-c"] == "mcu-c" and settled["onnx"] == "onnx"


def test_default_jobs_is_the_cores_this_process_may_use_not_the_machines() -> None:
    """Pinned to one core (taskset, a container's CPU set), a process builds one target at a time
    however many cores the machine has."""
    import os
    import subprocess
    import sys

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core here: the pinned and the unpinned answer are the same")
    pinned = subprocess.run([sys.executable, "-c", "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
                             "from edgeserve.conversion.schedule import default_jobs; print(default_jobs())"],
                            capture_output=True, text=True, check=True)
    assert pinned.stdout.strip() == "1" and default_jobs() == len(os.sched_getaffinity(0)) >= 2


def test_processes_sharing_the_cores_are_told_their_share_of_openmp_threads(monkeypatch) -> None:
    """torch's OpenMP threads spin: processes side by side each get cores // processes threads
    (at least one), a process alone is left as it is, and a user's own OMP_NUM_THREADS wins."""
    from edgeserve.conversion import schedule

    monkeypatch.setattr(schedule, "default_jobs", lambda: 8)
    assert schedule.shared_cores_env(2, environ={}) == {"OMP_NUM_THREADS": "4"}
    assert schedule.shared_cores_env(16, environ={}) == {"OMP_NUM_THREADS": "1"}
    assert schedule.shared_cores_env(1, environ={}) == {}
    assert schedule.shared_cores_env(2, environ={"OMP_NUM_THREADS": "3"}) == {}


def test_a_local_job_runs_each_cell_with_its_share_of_the_cores(tmp_path, monkeypatch) -> None:
    """The local pool's convert processes get the share (Ray's tasks get OMP_NUM_THREADS from Ray)."""
    import subprocess

    from edgeserve.conversion import schedule
    from edgeserve.jobs import cells

    seen = []

    def fake_run(command, **kwargs):
        seen.append(kwargs["env"].get("OMP_NUM_THREADS"))
        return subprocess.CompletedProcess(command, 1, "", "error: stopped by the test")

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(schedule, "default_jobs", lambda: 2)
    monkeypatch.setattr(cells.subprocess, "run", fake_run)
    model = tmp_path / "m.onnx"
    model.write_bytes(b"")
    cells.run_cell(str(model), "onnx", (), {str(model): model}, 60.0, str(tmp_path / "a"), beside=2)
    cells.run_cell(str(model), "onnx", (), {str(model): model}, 60.0, str(tmp_path / "b"))
    assert seen == ["1", None]
