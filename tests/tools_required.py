"""What the compile-and-run tests need from the machine: a compiler, or the emulated board.

Missing tools fail in CI (CI=true: `make toolchain` installs them) and skip elsewhere, with
the library's own message saying what to install."""

from __future__ import annotations

import os

import pytest


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def require_compiler(kind: str) -> None:
    """``kind`` as edgeserve.converters.microcontroller.toolchain names it: "host-c", "arm-c", ..."""
    from edgeserve.converters.microcontroller.toolchain import MissingToolError, find_compiler

    try:
        find_compiler(kind)
    except MissingToolError as exc:
        _missing(str(exc))


def require_qemu() -> None:
    """arm-none-eabi-gcc, its binutils and qemu-system-arm for the mps2-an386 runs."""
    from edgeserve.converters.mcu_c import check

    reason = check.qemu_available()
    if reason:
        _missing(reason)
