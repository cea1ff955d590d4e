"""Isolated steps without a cold start each: a fork server that has the frameworks imported.

Every isolated step (:func:`edgeserve.isolation.run_isolated`) used to start a fresh Python
that imported TensorFlow, torch or coremltools from nothing: 3 to 7 s a step, paid again by
every step of a conversion. Here one server process per conversion imports the frameworks
once (the ones a step imported are imported in the server after it, while the converting
process goes on with its own work) and forks a child per step. The child is as isolated as
a fresh process: a signal, an abort or a hang kills it alone, and the server forks the next
one from the same clean state. Nothing runs in the server but imports, so its threads hold
no lock a child could need (forking a process whose TensorFlow had *run* deadlocked; one
that only imported it forks cleanly: measured in tests/test_isolation.py).

A request is a length-prefixed pickle on the server's stdin, numbered; the server answers
with the child's pid, then its wait status, each under the request's number, so several
steps (targets converted side by side) run at once from one server. The child's result is a file in a folder the converting
process made, and so is everything it printed (fd 1 and 2), which is what a cold child's
stderr was.

Each child runs in the converting process's environment as it is at that step (frameworks
set variables when imported, and a step may read any). What decides where Python looks for
modules (PYTHONPATH and the other PYTHON* variables) picks the server: a test that moves
PYTHONPATH gets a server started with it. EDGESERVE_ISOLATION=cold turns the whole thing
off: every step then starts a fresh Python as before.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib
import os
import itertools
import pickle
import queue
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

MODE_VARIABLE = "EDGESERVE_ISOLATION"
# The imports worth keeping warm: each takes seconds, and each was measured to leave the
# server forkable (its threads, if any, idle).
FRAMEWORKS = ("tensorflow", "keras", "torch", "coremltools", "executorch", "torchao", "onnx", "onnxruntime",
              "ai_edge_quantizer", "ai_edge_litert", "tflite_micro", "litert_torch", "onnx2tf", "onnxslim", "tf2onnx")
# A step asked for waits until the import under way ends (they are taken between modules):
# coremltools imports torch, torchao and ExecuTorch to record their versions, 7 s in one piece
# here, which held TFLM's step of the digits demo 5 s. Imported part by part, a step waits for
# one part at most.
PARTS = {"coremltools": ("torch", "torchao", "executorch.exir", "coremltools")}
_SERVER = "from edgeserve.isolation.warm import serve_forks; serve_forks()"
_HEADER = struct.Struct("<Q")
_PR_SET_PDEATHSIG = 1


class ServerGone(Exception):
    """The server died or could not start: the caller runs the step cold."""


def _send(fd: int, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _read_exactly(fd: int, size: int, deadline: float | None) -> bytes:
    chunks, left = [], size
    while left:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise TimeoutError
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _receive(fd: int, deadline: float | None = None) -> Any:
    (size,) = _HEADER.unpack(_read_exactly(fd, _HEADER.size, deadline))
    return pickle.loads(_read_exactly(fd, size, deadline))


def _die_with_parent() -> None:
    """Linux: this process gets SIGKILL when its parent (the server, which has one thread)
    dies, so a killed conversion leaves no step behind."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass


# ---- the converting process's side ---------------------------------------------------------


class _Server:
    """One server, shared by the converting process's threads: each step's request carries a
    number, and one reader thread hands each answer to the thread that waits for it, so the
    targets of a conversion (pipeline --jobs) fork their steps from it side by side."""

    def __init__(self) -> None:
        self.send_lock = threading.Lock()  # a request is written whole, never interleaved
        self.process = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True)
        assert self.process.stdin is not None and self.process.stdout is not None
        self.to_server, self.from_server = self.process.stdin.fileno(), self.process.stdout.fileno()
        self._waiting: dict[int, queue.Queue[tuple[str, int]]] = {}
        self._waiting_lock = threading.Lock()
        self._numbers = itertools.count()
        self._gone = False
        threading.Thread(target=self._read_answers, name="edgeserve-fork-answers", daemon=True).start()

    def alive(self) -> bool:
        return self.process.poll() is None and not self._gone

    def warm(self, modules: list[str]) -> None:
        with self.send_lock:
            _send(self.to_server, ("warm", modules))

    def _read_answers(self) -> None:
        try:
            while True:
                kind, number, value = _receive(self.from_server)
                with self._waiting_lock:
                    waiter = self._waiting.get(number)
                if waiter is not None:
                    waiter.put((kind, value))
        except (OSError, EOFError, ValueError, pickle.UnpicklingError):
            with self._waiting_lock:
                self._gone = True
                for waiter in self._waiting.values():
                    waiter.put(("gone", 0))

    def _answer(self, answers: "queue.Queue[tuple[str, int]]", kind: str, timeout_s: float) -> int:
        try:
            said, value = answers.get(timeout=max(timeout_s, 0.0))
        except queue.Empty:
            raise TimeoutError from None
        if said != kind:
            raise ServerGone("the server went away during the step")
        return value

    def run(self, function: str, payload: bytes, folder: Path, timeout_s: float) -> tuple[int | None, bytes, str]:
        """(exit code as subprocess gives it, or None after a timeout; the child's result
        bytes; what it printed)."""
        number, answers = next(self._numbers), queue.Queue()  # type: ignore[var-annotated]
        with self._waiting_lock:
            if self._gone:
                raise ServerGone("the server is gone")
            self._waiting[number] = answers
        try:
            return self._run(number, answers, function, payload, folder, timeout_s)
        finally:
            with self._waiting_lock:
                self._waiting.pop(number, None)

    def _run(self, number: int, answers: "queue.Queue[tuple[str, int]]", function: str, payload: bytes,
             folder: Path, timeout_s: float) -> tuple[int | None, bytes, str]:
        try:
            with self.send_lock:
                _send(self.to_server, ("run", number, function, payload, os.getcwd(), str(folder),
                                       dict(os.environ)))
            # Before the fork the server imports the step's module (seconds for a framework).
            pid = self._answer(answers, "pid", timeout_s)
        except TimeoutError as exc:
            self.close()
            raise ServerGone("the server did not fork the step in time") from exc
        except OSError as exc:
            raise ServerGone(str(exc)) from exc
        returncode: int | None
        try:
            returncode = os.waitstatus_to_exitcode(self._answer(answers, "status", timeout_s))
        except TimeoutError:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                self._answer(answers, "status", 30)
            except (TimeoutError, ServerGone):
                self.close()  # a server that does not answer is not used again
            returncode = None
        result = folder / "result"
        printed = folder / "printed"
        return (returncode, result.read_bytes() if result.exists() else b"",
                printed.read_text("utf-8", "replace") if printed.exists() else "")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass


_servers: dict[str, _Server] = {}
_servers_lock = threading.Lock()
_KEEP = 2  # servers kept at once (one per environment; the oldest goes first)


def enabled() -> bool:
    return os.environ.get(MODE_VARIABLE, "warm") != "cold" and hasattr(os, "fork") and sys.platform == "linux"


def _environment_key() -> str:
    items = sorted((k, v) for k, v in os.environ.items() if k.startswith("PYTHON"))
    return hashlib.sha256(repr((items, sys.executable)).encode()).hexdigest()


def server() -> _Server | None:
    """This environment's server, started if need be; None where forking is off or failed."""
    if not enabled():
        return None
    key = _environment_key()
    with _servers_lock:
        found = _servers.get(key)
        if found is not None and found.alive():
            return found
        if found is not None:
            found.close()
        while len(_servers) >= _KEEP:
            _servers.pop(next(iter(_servers))).close()
        try:
            _servers[key] = _Server()
        except OSError:
            return None
        return _servers[key]


def warm(modules: list[str]) -> None:
    """Start importing these frameworks in the server now (a conversion says which it will
    need before it loads the model, so the imports run beside the load)."""
    found = server()
    if found is None:
        return
    try:
        found.warm([m for m in modules if m.split(".")[0] in FRAMEWORKS])
    except OSError:
        pass


def close_all() -> None:
    with _servers_lock:
        while _servers:
            _servers.pop(next(iter(_servers))).close()


atexit.register(close_all)


# ---- the server's side ----------------------------------------------------------------------


def serve_forks() -> None:
    """Read requests until the converting process closes the pipe; fork a child for each, and
    answer each child's end as it comes (several run at once when the converting process's
    targets run side by side)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the step and the parent, not this
    requests, answers = sys.stdin.fileno(), os.dup(sys.stdout.fileno())
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)  # a library that prints while importing must not write into the answers
    pending: list[str] = []  # frameworks to import, one at a time, while no step is asked for
    children: dict[int, tuple[int, Path, int | None]] = {}  # pid -> (request number, folder, pidfd)
    while True:
        _answer_ended(children, answers, pending)
        if pending and not select.select([requests], [], [], 0)[0]:
            _import_quietly([pending.pop(0)])
            continue
        # Wait for a request or a child's end. Without pidfds (old kernels), look twenty times a
        # second while children run.
        fds = [requests, *(fd for _, _, fd in children.values() if fd is not None)]
        polling = any(fd is None for _, _, fd in children.values())
        if requests not in select.select(fds, [], [], 0.05 if polling else None)[0]:
            continue
        try:
            request = _receive(requests)
        except (EOFError, OSError):
            # The converting process went away (its end of the pipe closed): its steps go with it.
            # PR_SET_PDEATHSIG cannot stand in for this here: it fires when the *thread* that
            # started the server ends, and any of the converting process's threads may start it.
            for pid in children:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            return
        if request[0] == "warm":
            pending.extend(part for name in request[1] for part in PARTS.get(name, (name,)))
            continue
        _, number, function, payload, cwd, folder, environment = request
        _import_quietly([function.partition(":")[0]])
        pid = os.fork()
        if pid == 0:
            _child(requests, answers, function, payload, cwd, Path(folder), environment)
        try:
            pidfd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):
            pidfd = None
        children[pid] = (number, Path(folder), pidfd)
        _send(answers, ("pid", number, pid))


def _answer_ended(children: dict[int, tuple[int, Path, int | None]], answers: int, pending: list[str]) -> None:
    """Each child that ended: what it imported is imported here next (read before the answer:
    its folder goes with it), then its wait status goes to the converting process."""
    for pid, (number, folder, pidfd) in list(children.items()):
        done, status = os.waitpid(pid, os.WNOHANG)
        if not done:
            continue
        del children[pid]
        if pidfd is not None:
            os.close(pidfd)
        learned = folder / "imported"
        if learned.exists():
            pending.extend(learned.read_text().split())
        _send(answers, ("status", number, status))


def _imported(name: str, then_import: str | None = None) -> bool:
    """Whether ``name`` was imported before this step ran; then ``then_import`` is (a step for
    the tests, which see the server's warmth through it)."""
    found = name in sys.modules
    if then_import:
        importlib.import_module(then_import)
    return found


def _import_quietly(modules: list[str]) -> None:
    for name in modules:
        if name in sys.modules:
            continue
        try:
            if name.split(".")[0] in ("tensorflow", "keras"):
                from edgeserve._deps import _quiet_tensorflow

                _quiet_tensorflow()  # as edgeserve's own import of TensorFlow sets it up
            importlib.import_module(name)
        except BaseException:  # noqa: BLE001 - the step that needs it will say why in its own child
            pass


def _child(requests: int, answers: int, function: str, payload: bytes, cwd: str, folder: Path,
           environment: dict[str, str]) -> None:
    status = 1
    try:
        _die_with_parent()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.close(requests)
        os.close(answers)
        printed = os.open(folder / "printed", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(printed, 1)
        os.dup2(printed, 2)
        sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
        sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(environment)
        before = {name.split(".")[0] for name in sys.modules}
        from edgeserve.isolation.step import run_step

        result = run_step(function, pickle.loads(payload))
        partial = folder / "result.partial"
        partial.write_bytes(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
        os.replace(partial, folder / "result")
        new = {name.split(".")[0] for name in sys.modules} - before
        (folder / "imported").write_text("\n".join(sorted(new & set(FRAMEWORKS))))
        status = 0
    except BaseException:  # noqa: BLE001 - said where the parent reads what the child printed
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001
                pass
        os._exit(status)
