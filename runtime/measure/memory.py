"""Peak resident memory a block adds to the process: what opening and running one model costs.

Qualcomm AI Hub's profile jobs report a model's peak memory on the device; `edgeserve bench`
reports the same from the process it runs in. On Linux the kernel keeps the resident set's
high-water mark (VmHWM in /proc/self/status) and resets it to the current size when "5" is
written to /proc/self/clear_refs (Linux 4.0 and later), so the peak of a block is measured
exactly: reset, run the block, read the mark, subtract the size before. Where that cannot be
done, the figure is None and the reason says why, never a guess: getrusage's maxrss is the
whole process's lifetime peak, which an earlier, larger model would hide.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Any

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_kb(field: str) -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _return_freed_memory() -> None:
    """glibc keeps freed heap pages resident and hands them out again, so a model opened after
    another one is freed would add little to the resident set (measured: an ONNX model after
    another in one process, 28 KB against its 33 KB file); malloc_trim gives them back first."""
    import ctypes
    import ctypes.util
    import gc

    gc.collect()
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        if libc is not None and hasattr(libc, "malloc_trim"):
            libc.malloc_trim(0)
    except OSError:  # not glibc (musl, macOS): nothing to trim, the figure may be low as said above
        pass


class PeakMemory:
    """``with PeakMemory() as memory: ...`` (or ``start()`` ... ``stop()``); then ``memory.bytes_added`` (the block's peak resident
    set over the one before it) or None with ``memory.reason``."""

    def __init__(self) -> None:
        self.before_kb: int | None = None
        self.peak_kb: int | None = None
        self.reason: str | None = None

    def __enter__(self) -> "PeakMemory":
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    def start(self) -> "PeakMemory":
        _return_freed_memory()
        self.before_kb = _status_kb("VmRSS")
        if self.before_kb is None:
            self.reason = "no /proc/self/status on this system (not Linux): peak memory not measured"
            return self
        try:
            _CLEAR_REFS.write_text("5")  # the high-water mark back to the current resident set
        except OSError as exc:
            self.reason = f"could not reset the resident high-water mark ({exc.strerror or exc}): peak memory not measured"
        return self

    def stop(self) -> None:
        if self.reason is None and self.peak_kb is None:
            self.peak_kb = _status_kb("VmHWM")
            if self.peak_kb is None:
                self.reason = "no VmHWM in /proc/self/status: peak memory not measured"

    @property
    def bytes_added(self) -> int | None:
        if self.reason is not None or self.peak_kb is None or self.before_kb is None:
            return None
        return max(0, self.peak_kb - self.before_kb) * 1024

    def to_dict(self) -> dict[str, Any]:
        if self.bytes_added is None:
            return {"bytes_added": None, "reason": self.reason}
        return {"bytes_added": self.bytes_added, "peak_resident_bytes": self.peak_kb * 1024,  # type: ignore[operator]
                "method": "the process's resident high-water mark (VmHWM), reset when the block started"}


def unmeasurable() -> str | None:
    """Why this system cannot measure a block's peak (no /proc, or the mark cannot be reset), or None."""
    with PeakMemory() as probe:
        pass
    return probe.reason
