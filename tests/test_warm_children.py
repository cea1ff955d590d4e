"""Isolated steps forked from a server with the frameworks imported (edgeserve/isolation/warm.py):
as isolated as a fresh Python (a death, a hang, a changed variable), without its imports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from edgeserve.isolation import warm as warm_children
from edgeserve.isolation import NativeCrashError, run_isolated


def _server_pid() -> int:
    found = warm_children.server()
    assert found is not None
    return found.process.pid


def test_each_step_is_a_child_of_one_server_and_sees_the_environment_of_its_call(monkeypatch):
    first = run_isolated("os:getppid", tool="t", what="w")
    assert first == _server_pid() != os.getpid()  # forked by the server, not by this process
    assert run_isolated("os:getpid", tool="t", what="w") != run_isolated("os:getpid", tool="t", what="w")
    monkeypatch.setenv("EDGESERVE_TEST_WARM_VALUE", "set after the server started")
    assert run_isolated("os:getenv", "EDGESERVE_TEST_WARM_VALUE", tool="t", what="w") == "set after the server started"
    monkeypatch.delenv("EDGESERVE_TEST_WARM_VALUE")
    assert run_isolated("os:getenv", "EDGESERVE_TEST_WARM_VALUE", tool="t", what="w") is None
    assert run_isolated("os:getppid", tool="t", what="w") == first  # the same server all along


def test_a_death_or_a_hang_costs_the_step_and_the_next_step_forks_as_before():
    server = _server_pid()
    with pytest.raises(NativeCrashError, match=r"crashed \(SIGSEGV\)"):
        run_isolated("ctypes:string_at", 0, tool="t", what="w")
    with pytest.raises(NativeCrashError, match=r"crashed \(SIGABRT\)"):
        run_isolated("os:abort", tool="t", what="w")
    with pytest.raises(NativeCrashError, match="no result within 1 s"):  # the 60 s sleep was killed
        run_isolated("time:sleep", 60, tool="t", what="w", timeout_s=1)
    assert run_isolated("os:getppid", tool="t", what="w") == server
    assert run_isolated("math:factorial", 20, tool="t", what="w") == 2432902008176640000


def test_steps_of_several_threads_run_at_once_from_the_one_server(tmp_path, monkeypatch):
    """Targets converted side by side (--jobs) fork their steps from one server at the same time:
    a reader of a FIFO and its writer each block until the other opens it, so they can only end
    if both run at once; a crash beside them costs its own step alone."""
    import threading

    from edgeserve import isolation

    fifo = tmp_path / "meeting"
    os.mkfifo(fifo)
    server = _server_pid()
    cold: list[str] = []  # a step that found the server busy used to start a fresh Python instead
    monkeypatch.setattr(isolation, "_run_cold", lambda function, *_: cold.append(function) or (1, b"", ""))
    results: dict[str, object] = {}

    def step(name: str, flags: int) -> None:
        try:
            results[name] = run_isolated("os:open", str(fifo), flags, tool="t", what="w", timeout_s=60)
        except Exception as exc:  # noqa: BLE001 - asserted below
            results[name] = exc

    threads = [threading.Thread(target=step, args=("reader", os.O_RDONLY)),
               threading.Thread(target=step, args=("writer", os.O_WRONLY))]
    for thread in threads:
        thread.start()
    with pytest.raises(NativeCrashError, match=r"crashed \(SIGSEGV\)"):
        run_isolated("ctypes:string_at", 0, tool="t", what="w")
    for thread in threads:
        thread.join()
    assert all(isinstance(results[name], int) for name in ("reader", "writer")), results
    assert cold == []
    assert run_isolated("os:getppid", tool="t", what="w") == server  # warm all along, never cold


def _becomes_imported_in_the_server(name: str) -> None:
    deadline = time.monotonic() + 60
    while not run_isolated("edgeserve.isolation.warm:_imported", name, tool="t", what="w"):
        assert time.monotonic() < deadline, f"the server never imported {name}"
        time.sleep(0.2)  # the server imports between steps: a step asked for goes first


def test_frameworks_named_or_imported_by_a_step_are_imported_in_the_server_for_the_next_steps(monkeypatch):
    """warm() starts an import in the server (a conversion names its targets' frameworks once its
    model and data have loaded); what a step imported itself is imported there after it. Steps
    forked later find them imported. A PYTHON* variable of its own gives this test a new server
    (the suite's may have imported both already)."""
    monkeypatch.setenv("PYTHONEDGESERVETESTSERVER", str(os.getpid()) + str(time.monotonic()))
    assert run_isolated("edgeserve.isolation.warm:_imported", "onnx", tool="t", what="w") is False
    warm_children.warm(["onnx"])
    _becomes_imported_in_the_server("onnx")
    assert run_isolated("edgeserve.isolation.warm:_imported", "tflite_micro", "tflite_micro", tool="t", what="w") is False
    _becomes_imported_in_the_server("tflite_micro")


def test_cold_mode_starts_a_fresh_python_for_each_step(monkeypatch):
    monkeypatch.setenv(warm_children.MODE_VARIABLE, "cold")
    assert warm_children.server() is None
    assert run_isolated("os:getppid", tool="t", what="w") == os.getpid()
    with pytest.raises(NativeCrashError, match=r"crashed \(SIGSEGV\)"):
        run_isolated("ctypes:string_at", 0, tool="t", what="w")


def test_the_server_and_its_step_die_with_a_killed_converting_process():
    """A conversion killed with SIGKILL (no atexit) leaves no server or step running."""
    script = ("import os, sys, threading\n"
              "from edgeserve.isolation import warm as warm_children\n"
              "from edgeserve.isolation import run_isolated\n"
              "server = warm_children.server().process.pid\n"
              "threading.Thread(target=run_isolated, args=('time:sleep', 600),\n"
              "                 kwargs={'tool': 't', 'what': 'w'}, daemon=True).start()\n"
              "print(server, flush=True)\n"
              "import time; time.sleep(3)\n"
              "os.kill(os.getpid(), 9)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    server = int(done.stdout.split()[0])
    deadline = time.monotonic() + 20
    while _alive(server) or _children_of(server):
        assert time.monotonic() < deadline, "the server outlived the process that started it"
        time.sleep(0.2)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    if int(stat.read().split(")")[-1].split()[1]) == pid:
                        found.append(int(entry))
            except (FileNotFoundError, ProcessLookupError):
                continue
    return found
