"""Run TFLM in a child process: a native abort or crash there costs a child, not the caller.

The tflite-micro Python interpreter is C++ in this process's address space; on a model
that static checks did not stop, its kernels can abort (TFLITE_CHECK) or crash, which
would kill the user's `edgeserve convert` with no message and no cleanup. Every call into
it from the converter goes through :func:`call_in_child`: one fresh Python per call,
arguments and result pickled between two edgeserve processes (never from a file).
"""

from __future__ import annotations

import importlib
import os
import pickle
import signal
import subprocess
import sys
from typing import Any

from edgeserve.converters.mcu.tflm import TflmError
from edgeserve.errors import EdgeServeError

_CHILD = "from edgeserve.converters.mcu.child import serve; serve()"


def call_in_child(function: str, *args: Any, what: str, timeout_s: float = 900.0) -> Any:
    """``module:function(*args)`` in a child process; its result, or the EdgeServeError it
    raised. A crash (signal), a timeout or any other failure is a :class:`TflmError` naming
    ``what`` was being done and how the child ended."""
    try:
        done = subprocess.run([sys.executable, "-c", _CHILD], input=pickle.dumps((function, args)),
                              capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise TflmError(0, f"TFLM did not finish {what} within {timeout_s:.0f} s") from exc
    native = done.stderr.decode("utf-8", "replace")
    if done.returncode < 0:
        name = signal.Signals(-done.returncode).name
        last = [line.strip() for line in native.splitlines() if line.strip()][-1:]
        raise TflmError(0, f"TFLM crashed ({name}) while {what}" + (f": {last[0]}" if last else ""))
    try:
        kind, value = pickle.loads(done.stdout)
    except Exception as exc:  # an exit before the result was written
        last = [line.strip() for line in native.splitlines() if line.strip()][-1:]
        raise TflmError(0, f"TFLM's child process exited with {done.returncode} while {what}"
                        + (f": {last[0]}" if last else "")) from exc
    if kind == "error":
        raise value
    return value


def serve() -> None:
    """The child's side: read (function, args), write ("ok", result) or ("error", exc)."""
    function, args = pickle.loads(sys.stdin.buffer.read())
    result_fd = os.dup(1)
    os.dup2(2, 1)  # whatever the native code prints goes to stderr, not into the result
    module, _, name = function.partition(":")
    try:
        result: tuple[str, Any] = ("ok", getattr(importlib.import_module(module), name)(*args))
    except EdgeServeError as exc:
        result = ("error", exc)
    with os.fdopen(result_fd, "wb") as out:
        out.write(pickle.dumps(result))
