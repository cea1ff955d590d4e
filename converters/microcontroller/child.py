"""Run TFLM in a child process: a native abort or crash there costs a child, not the caller.

The tflite-micro Python interpreter is C++ in this process's address space; on a model
that static checks did not stop, its kernels can abort (TFLITE_CHECK) or crash, which
would kill the user's `edgeserve convert` with no message and no cleanup. Every call into
it from the converter goes through :func:`call_in_child`: one fresh Python per call,
arguments and result pickled between two edgeserve processes (never from a file), by the
runner every isolated native step uses (:mod:`edgeserve.isolation`).
"""

from __future__ import annotations

from typing import Any

from edgeserve.converters.microcontroller.tflm import TflmError
from edgeserve.isolation import NativeCrashError, run_isolated


def call_in_child(function: str, *args: Any, what: str, timeout_s: float = 900.0) -> Any:
    """``module:function(*args)`` in a child process (edgeserve.isolation); its result, or the
    EdgeServeError it raised. A crash (signal), a timeout or any other failure is a
    :class:`TflmError` naming ``what`` was being done and how the child ended."""
    try:
        return run_isolated(function, *args, tool="TFLM", what=what, timeout_s=timeout_s)
    except NativeCrashError as exc:
        last = [line.strip() for line in exc.stderr.splitlines() if line.strip()][-1:]
        detail = f": {last[0]}" if last and exc.how.startswith("SIG") else ""
        raise TflmError(0, f"{exc}{detail}") from exc
