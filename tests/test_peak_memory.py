"""runtime/measure/memory.py: the resident memory a block adds (bench's peak memory), measured
from the kernel's high-water mark, reset before the block."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from edgeserve.runtime.measure import memory
from edgeserve.runtime.measure.memory import PeakMemory, unmeasurable

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")
# The measuring tests need a kernel that resets the mark (Linux 4.0+); the one that breaks the reset
# on purpose runs everywhere.
needs_reset = pytest.mark.skipif(unmeasurable() is not None, reason=f"{unmeasurable()}")

MIB = 2 ** 20


@needs_reset
def test_a_block_that_touches_64_mib_adds_at_least_that() -> None:
    with PeakMemory() as peak:
        block = np.ones(64 * MIB, np.uint8)  # written, so resident
        del block
    assert peak.reason is None
    # (the resident set before may shrink by a few pages while the block runs)
    assert 63 * MIB <= peak.bytes_added < 96 * MIB, peak.to_dict()


@needs_reset
def test_the_mark_is_reset_so_an_earlier_peak_does_not_count() -> None:
    """Without the reset, the second block would report the first one's 128 MiB."""
    block = np.ones(128 * MIB, np.uint8)
    del block
    with PeakMemory() as peak:
        small = np.ones(MIB, np.uint8)
        del small
    assert peak.bytes_added < 32 * MIB, peak.to_dict()


def test_without_a_reset_it_says_so_instead_of_a_figure(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setattr(memory, "_CLEAR_REFS", tmp_path / "no" / "clear_refs")
    with PeakMemory() as peak:
        pass
    assert peak.bytes_added is None and "could not reset" in peak.reason
    assert peak.to_dict() == {"bytes_added": None, "reason": peak.reason}
