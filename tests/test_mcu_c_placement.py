"""mcu-c's placement of arena blocks whose bytes change with time (converters/mcu_c/placement.py),
checked byte by byte at every step, independent of the placement's own arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

from edgeserve.converters.mcu_c import placement
from edgeserve.converters.mcu_c.placement import Shape


def _shape(first: int, ranges: list[tuple[int, int]]) -> Shape:
    return Shape(first, np.array([r[0] for r in ranges], np.int64), np.array([r[1] for r in ranges], np.int64))


def _collisions(shapes: list[Shape], offsets: list[int]) -> list[tuple[int, int, int]]:
    """(step, block, block) for every two blocks holding a common byte at one step."""
    found = []
    for step in range(min(s.first for s in shapes), max(s.last for s in shapes) + 1):
        owner: dict[int, int] = {}
        for i, (s, offset) in enumerate(zip(shapes, offsets)):
            if not s.first <= step <= s.last:
                continue
            k = step - s.first
            for byte in range(offset + int(s.lows[k]), offset + int(s.highs[k])):
                if byte in owner:
                    found.append((step, owner[byte], i))
                owner[byte] = i
    return found


def test_bytes_a_block_no_longer_holds_go_to_another():
    """A chain 100 bytes wide for two steps, then 20 (its input written over by a narrower
    output), beside an 80-byte tensor born after it narrows: 100 bytes, not 180."""
    chain = _shape(0, [(0, 100), (0, 100), (0, 20), (0, 20), (0, 20)])
    later = _shape(2, [(0, 80)] * 3)
    method, peak, offsets, _, optimal, bound = placement.place([chain, later])
    assert (peak, bound, optimal) == (100, 100, True) and not _collisions([chain, later], offsets)
    assert "whole blocks" not in method
    # As whole rectangles the two cannot share a byte.
    assert placement.place([chain.rectangle(), later.rectangle()])[1] == 180


def test_the_collision_check_can_fail():
    chain = _shape(0, [(0, 100), (0, 20)])
    later = _shape(1, [(0, 80)])
    assert not _collisions([chain, later], [0, 20])
    assert _collisions([chain, later], [0, 16]) == [(1, 0, 1)] * 4


@pytest.mark.parametrize("seed", range(12))
def test_random_shapes_are_placed_without_collisions_and_never_worse_than_rectangles(seed):
    rng = np.random.default_rng(seed)
    shapes = []
    for _ in range(int(rng.integers(3, 18))):  # up to 14 blocks get the exact search
        first, steps = int(rng.integers(-1, 8)), int(rng.integers(1, 6))
        ranges = []
        for _ in range(steps):
            low = 4 * int(rng.integers(0, 6))
            ranges.append((low, low + 4 * int(rng.integers(1, 10))))
        shapes.append(_shape(first, ranges))
    method, peak, offsets, _, optimal, bound = placement.place(shapes)
    assert not _collisions(shapes, offsets), method
    assert all(o % 4 == 0 and o >= 0 for o in offsets)
    assert peak == max(o + s.top for o, s in zip(offsets, shapes))
    assert bound <= peak <= placement.place([s.rectangle() for s in shapes])[1]
    assert optimal == (peak == bound) or "exact search" in method
