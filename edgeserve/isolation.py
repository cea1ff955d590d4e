"""Native code that can die on a user's model runs where its death costs a child process.

TensorFlow's converter and quantization debugger, like TFLM, are C++ in this process; a
Keras LSTM makes TensorFlow 2.21's calibrator segfault, which used to end `edgeserve
convert` with exit 139 and not a word. :func:`run_isolated` runs such a step in a fresh
Python: the arguments go in pickled on stdin, the result comes back pickled on the child's
own stdout (whatever the native code prints goes to its stderr). A signal, an exit without
a result or a hang becomes a :class:`NativeCrashError` naming the tool and the step, so the
caller can say so in one line and go on with the other targets.

A forked child would be cheaper (no second import of TensorFlow), but forking a process
whose TensorFlow threads are running deadlocked in the test suite: only a fresh process
is safe.
"""

from __future__ import annotations

import importlib
import os
import pickle
import re
import signal
import subprocess
import sys
import traceback
from typing import Any

from edgeserve.errors import EdgeServeError

DEFAULT_TIMEOUT_S = 3600.0
# Tests set this to a signal number: the child kills itself with it before the step, so
# the parent's report of a real crash can be checked on any model. "11:text" kills only the
# steps whose "module:function" contains the text (one tool's steps among several).
CRASH_FOR_TESTS = "EDGESERVE_TEST_CRASH_SIGNAL"
_CHILD = "from edgeserve.isolation import serve; serve()"


class NativeCrashError(EdgeServeError):
    """A native library died (or hung) in an isolated step; ``stderr`` is what it printed."""

    def __init__(self, tool: str, what: str, how: str, stderr: str = "") -> None:
        self.tool, self.what, self.how, self.stderr = tool, what, how, stderr
        super().__init__(f"{tool} crashed ({how}) while {what}")


# Besides glog's info and warning lines, torchao's note at import about its optional kernels
# ("Failed to load .../torchao/_C_mxfp8...so: Could not load this library").
_INFO_OR_WARNING = re.compile(r"^[IW]\d{4} \d\d:\d\d:\d\d|^Failed to load \S+\.so: Could not load this library")


def run_isolated(function: str, *args: Any, tool: str, what: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> Any:
    """``module:function(*args)`` in a child process: its result, or the exception it raised
    (an EdgeServeError as itself, anything else as an EdgeServeError with its text)."""
    try:
        done = subprocess.run([sys.executable, "-c", _CHILD], input=pickle.dumps((function, args)),
                              capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise NativeCrashError(tool, what, f"no result within {timeout_s:.0f} s") from exc
    native = done.stderr.decode("utf-8", "replace")
    # The last line that can say why: not an info or warning line in the glog form torch and
    # absl print ("W1127 04:58:19.018000 11317 torch/utils/_pytree.py:630] ... is deprecated"),
    # nor a library's note about an optional part it did not load.
    last = [line.strip() for line in native.splitlines()
            if line.strip() and not _INFO_OR_WARNING.match(line.strip())][-1:]
    if done.returncode < 0:
        raise NativeCrashError(tool, what, signal.Signals(-done.returncode).name, native)
    try:
        kind, value = pickle.loads(done.stdout)
    except Exception as exc:  # an exit before the result was written
        how = f"exit {done.returncode} without a result" + (f": {last[0][:300]}" if last else "")
        raise NativeCrashError(tool, what, how, native) from exc
    if kind == "ok":
        return value
    if kind == "error":
        raise value
    # What the library printed last says why (TFLM reports a kernel's refusal there, and the
    # Python binding raises only "Interpreter invocation failed").
    said = f" ({last[0][:300]})" if last and last[0] not in value else ""
    raise EdgeServeError(f"{tool} failed while {what}: {value}{said}")


def serve() -> None:
    """The child's side: read (function, args), write ("ok", result), ("error", exception)
    or ("text", its text)."""
    function, args = pickle.loads(sys.stdin.buffer.read())
    result_fd = os.dup(1)
    os.dup2(2, 1)  # whatever the native code prints goes to stderr, not into the result
    crash, _, only = os.environ.get(CRASH_FOR_TESTS, "").partition(":")
    if crash and only in function:
        os.kill(os.getpid(), int(crash))
    module, _, name = function.partition(":")
    try:
        result: tuple[str, Any] = ("ok", getattr(importlib.import_module(module), name)(*args))
    except EdgeServeError as exc:
        result = ("error", exc)
    except Exception as exc:  # noqa: BLE001 - the parent gets its text
        result = ("text", "".join(traceback.format_exception_only(type(exc), exc)).strip())
    with os.fdopen(result_fd, "wb") as out:
        out.write(pickle.dumps(result))
