"""Native code that can die on a user's model runs where its death costs a child process.

TensorFlow's converter and quantization debugger, like TFLM, are C++ in this process; a
Keras LSTM makes TensorFlow 2.21's calibrator segfault, which used to end `edgeserve
convert` with exit 139 and not a word. :func:`run_isolated` runs such a step in a child
process: the arguments go in pickled, the result comes back pickled (whatever the native code
prints is kept apart from it). A signal, an exit without a result or a hang becomes a
:class:`NativeCrashError` naming the tool and the step, so the caller can say so in one line
and go on with the other targets.

The child is forked from a server that has the frameworks imported already
(:mod:`edgeserve.isolation.warm`), so a step does not pay TensorFlow's or coremltools' import
again; where that is off (EDGESERVE_ISOLATION=cold) or the server is gone, the step runs in a
fresh Python, as isolated and only slower. Forking the converting process itself is never
done: forking a process whose TensorFlow threads are running deadlocked in the test suite.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import pickle
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from edgeserve.errors import EdgeServeError, clip_words
from edgeserve.isolation.step import CRASH_FOR_TESTS, run_step  # noqa: F401 - CRASH_FOR_TESTS: the tests import it from here

DEFAULT_TIMEOUT_S = 3600.0
_CHILD = "from edgeserve.isolation import serve; serve()"


class NativeCrashError(EdgeServeError):
    """A native library died (or hung) in an isolated step; ``stderr`` is what it printed."""

    def __init__(self, tool: str, what: str, how: str, stderr: str = "") -> None:
        self.tool, self.what, self.how, self.stderr = tool, what, how, stderr
        super().__init__(f"{tool} crashed ({how}) while {what}")


# Besides glog's info and warning lines, torchao's note at import about its optional kernels
# ("Failed to load .../torchao/_C_mxfp8...so: Could not load this library").
_INFO_OR_WARNING = re.compile(r"^[IW]\d{4} \d\d:\d\d:\d\d|^Failed to load \S+\.so: Could not load this library")


class BudgetExceededError(EdgeServeError):
    """An isolated step stopped because the time given to the work around it (a :func:`budget`)
    ran out; the step's child was killed, and the caller keeps what it has so far."""

    def __init__(self, what: str, seconds: float) -> None:
        self.what, self.seconds = what, seconds
        super().__init__(f"stopped while {what}: the {seconds:.0f} s budget ran out")


# (deadline on the monotonic clock, the budget's length in seconds), set by budget().
_BUDGET: contextvars.ContextVar[tuple[float, float] | None] = contextvars.ContextVar("edgeserve_budget", default=None)


@contextlib.contextmanager
def budget(seconds: float | None) -> Iterator[None]:
    """Give every isolated step started inside the block at most what is left of ``seconds``
    (None: no budget). A step that runs past it is killed and raises BudgetExceededError."""
    if seconds is None:
        yield
        return
    deadline, outer = time.monotonic() + seconds, _BUDGET.get()
    if outer is not None and outer[0] < deadline:  # a budget inside another ends with it at the latest
        deadline, seconds = outer
    token = _BUDGET.set((deadline, seconds))
    try:
        yield
    finally:
        _BUDGET.reset(token)


def budget_left() -> float | None:
    """Seconds left of the innermost budget, or None outside one."""
    current = _BUDGET.get()
    return None if current is None else current[0] - time.monotonic()


def run_isolated(function: str, *args: Any, tool: str, what: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> Any:
    """``module:function(*args)`` in a child process: its result, or the exception it raised
    (an EdgeServeError as itself, anything else as an EdgeServeError with its text)."""
    limited = _BUDGET.get()
    by_budget = limited is not None and limited[0] - time.monotonic() < timeout_s
    if by_budget:
        assert limited is not None
        timeout_s = limited[0] - time.monotonic()
        if timeout_s <= 0:
            raise BudgetExceededError(what, limited[1])
    payload = pickle.dumps(args, protocol=pickle.HIGHEST_PROTOCOL)
    returncode, result, native = _run_warm(function, payload, timeout_s)
    if returncode is _COLD:
        returncode, result, native = _run_cold(function, payload, timeout_s)
    if returncode is None:
        if by_budget:
            assert limited is not None
            raise BudgetExceededError(what, limited[1])
        raise NativeCrashError(tool, what, f"no result within {timeout_s:.0f} s")
    # The last line that can say why: not an info or warning line in the glog form torch and
    # absl print ("W1127 04:58:19.018000 11317 torch/utils/_pytree.py:630] ... is deprecated"),
    # nor a library's note about an optional part it did not load.
    last = [line.strip() for line in native.splitlines()
            if line.strip() and not _INFO_OR_WARNING.match(line.strip())][-1:]
    if returncode < 0:
        raise NativeCrashError(tool, what, signal.Signals(-returncode).name, native)
    try:
        kind, value = pickle.loads(result)
    except Exception as exc:  # an exit before the result was written
        how = f"exit {returncode} without a result" + (f": {clip_words(last[0], 300)}" if last else "")
        raise NativeCrashError(tool, what, how, native) from exc
    if kind == "ok":
        return value
    if kind == "error":
        raise value
    # What the library printed last says why (TFLM reports a kernel's refusal there, and the
    # Python binding raises only "Interpreter invocation failed").
    said = f" ({clip_words(last[0], 300)})" if last and last[0] not in value else ""
    raise EdgeServeError(f"{tool} failed while {what}: {value}{said}")


_COLD = -(10**9)  # _run_warm's answer when the step must start a fresh Python instead


def _run_warm(function: str, payload: bytes, timeout_s: float) -> tuple[int | None, bytes, str]:
    from edgeserve.isolation import warm as warm_children

    server = warm_children.server()
    if server is None:
        return _COLD, b"", ""
    try:
        with tempfile.TemporaryDirectory(prefix="edgeserve-step-") as folder:
            return server.run(function, payload, Path(folder), timeout_s)
    except warm_children.ServerGone:
        return _COLD, b"", ""


def _run_cold(function: str, payload: bytes, timeout_s: float) -> tuple[int | None, bytes, str]:
    try:
        done = subprocess.run([sys.executable, "-c", _CHILD], input=pickle.dumps((function, payload)),
                              capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return None, b"", ""
    return done.returncode, done.stdout, done.stderr.decode("utf-8", "replace")


def serve() -> None:
    """A cold child's side: read (function, pickled args), write run_step's answer."""
    function, payload = pickle.loads(sys.stdin.buffer.read())
    result_fd = os.dup(1)
    os.dup2(2, 1)  # whatever the native code prints goes to stderr, not into the result
    result = run_step(function, pickle.loads(payload))
    with os.fdopen(result_fd, "wb") as out:
        out.write(pickle.dumps(result))
