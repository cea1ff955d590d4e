"""The child's side of an isolated step: the function named, called on its arguments, and what
it gave or raised, as something the converting process can read (edgeserve.isolation)."""

from __future__ import annotations

import importlib
import os
import traceback
from typing import Any

from edgeserve.errors import EdgeServeError

# Tests set this to a signal number: the child kills itself with it before the step, so
# the parent's report of a real crash can be checked on any model. "11:text" kills only the
# steps whose "module:function" contains the text (one tool's steps among several).
CRASH_FOR_TESTS = "EDGESERVE_TEST_CRASH_SIGNAL"


def run_step(function: str, args: tuple[Any, ...]) -> tuple[str, Any]:
    """In the child: ("ok", result), ("error", an EdgeServeError) or ("text", what else was raised)."""
    crash, _, only = os.environ.get(CRASH_FOR_TESTS, "").partition(":")
    if crash and only in function:
        os.kill(os.getpid(), int(crash))
    module, _, name = function.partition(":")
    try:
        return "ok", getattr(importlib.import_module(module), name)(*args)
    except EdgeServeError as exc:
        return "error", exc
    except Exception as exc:  # noqa: BLE001 - the parent gets its text
        return "text", "".join(traceback.format_exception_only(type(exc), exc)).strip()
