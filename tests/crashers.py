"""Functions that kill their process the way a native kernel bug does, for child-process tests.

Imported only in the child processes that edgeserve.converters.microcontroller.child starts (the tests
put this folder on their PYTHONPATH).
"""

from __future__ import annotations

import ctypes
import os
from typing import Any


def segfault(*_: Any) -> None:
    ctypes.string_at(0)  # reads address 0: SIGSEGV, as a kernel dereferencing a null tensor


def abort(*_: Any) -> None:
    os.abort()  # SIGABRT, as a failed TFLITE_CHECK
