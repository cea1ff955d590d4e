"""Offsets for the arena's blocks, each placed with the bytes it holds at every step.

A block (planner.py) is a chain of tensors written over one another in place. Its bytes
change with time: an expanding 1x1 convolution widens it, a stride-2 depthwise narrows it,
and once the wide tensor is dead its bytes are free for any other block. So a block's
*shape* is, for each step it lives, the range of its bytes alive at that step (the hull of
its live members). Two blocks conflict only where they are alive at the same step and their
ranges at that step overlap.

Placement tries several orders with best fit (the tightest free range that holds the block at
every step it lives), once with these shapes and once with each block as the rectangle of its
widest point (the classic plan, kept as a floor so shapes never make a plan worse); then, for
small graphs that missed the lower bound, an exact branch-and-bound search over the shapes.
The lower bound is the largest sum, at one step, of the bytes alive at that step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

EXACT_MAX_BLOCKS = 14
EXACT_NODE_BUDGET = 200_000


@dataclasses.dataclass(frozen=True)
class Shape:
    first: int  # step where the block is first written (-1: before the first step)
    lows: np.ndarray  # per step from ``first``: the first byte alive, relative to the block's origin
    highs: np.ndarray  # one past the last byte alive (lows == highs: nothing alive at that step)

    @property
    def last(self) -> int:
        return self.first + len(self.lows) - 1

    @property
    def top(self) -> int:
        return int(self.highs.max())

    def rectangle(self) -> "Shape":
        return rectangle(self.first, self.last, self.top)


def rectangle(first: int, last: int, size: int) -> Shape:
    steps = last - first + 1
    return Shape(first, np.zeros(steps, np.int64), np.full(steps, size, np.int64))


def lower_bound(shapes: Sequence[Shape]) -> int:
    """The largest sum of bytes alive at one step: no placement can use fewer."""
    if not shapes:
        return 0
    start = min(s.first for s in shapes)
    totals = np.zeros(max(s.last for s in shapes) - start + 1, np.int64)
    for s in shapes:
        totals[s.first - start:s.last - start + 1] += s.highs - s.lows
    return int(totals.max())


class _Grid:
    """Every block's shape on one time axis, so one block's conflicts with all the blocks
    already placed are a few array operations (plans run many times per conversion)."""

    def __init__(self, shapes: Sequence[Shape]):
        self.start = min(s.first for s in shapes)
        steps = max(s.last for s in shapes) - self.start + 1
        self.lows = np.zeros((len(shapes), steps), np.int64)
        self.highs = np.zeros((len(shapes), steps), np.int64)
        self.spans: list[slice] = []
        for i, s in enumerate(shapes):
            span = slice(s.first - self.start, s.last - self.start + 1)
            self.lows[i, span], self.highs[i, span] = s.lows, s.highs
            self.spans.append(span)

    def free(self, i: int, placed: Sequence[int], offsets: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """The ranges of offsets where block ``i`` fits beside ``placed``: closed [start, end]
        pairs in increasing order, the last one unbounded (end = inf)."""
        if not placed:
            return np.zeros(1), np.full(1, np.inf)
        span = self.spans[i]
        rows = np.asarray(placed)
        at = np.asarray([offsets[j] for j in placed], np.int64)[:, None]
        lows, highs = self.lows[rows, span], self.highs[rows, span]
        own_lows, own_highs = self.lows[i, span], self.highs[i, span]
        clash = (highs > lows) & (own_highs > own_lows)[None, :]
        # At one step, offset x collides with a placed block's live range [lo, hi) exactly
        # when x lies in the open range (lo - own_high, hi - own_low).
        a = (at + lows - own_highs[None, :])[clash]
        b = (at + highs - own_lows[None, :])[clash]
        if not a.size:
            return np.zeros(1), np.full(1, np.inf)
        order = np.argsort(a, kind="stable")
        a, b = a[order].astype(float), b[order].astype(float)
        reach = np.maximum.accumulate(b)
        starts = np.maximum(np.concatenate(([0.0], reach)), 0.0)
        ends = np.concatenate((a, [np.inf]))
        keep = ends >= starts
        return starts[keep], ends[keep]


def _best_fit(grid: _Grid, tops: Sequence[int], order: Sequence[int]) -> tuple[int, list[int]]:
    """Each block, in ``order``, at the start of the narrowest free range that holds it."""
    offsets = [-1] * len(tops)
    placed: list[int] = []
    peak = 0
    for i in order:
        starts, ends = grid.free(i, placed, offsets)
        widths = ends - starts
        k = int(np.argmin(widths))  # the unbounded range only when no bounded one is free
        offsets[i] = int(starts[k])
        placed.append(i)
        peak = max(peak, offsets[i] + tops[i])
    return peak, offsets


ORDERS: dict[str, Callable[[Shape], tuple[int, ...]]] = {
    "size": lambda s: (-s.top, s.first),
    "lifetime": lambda s: (-(s.last - s.first), -s.top),
    "area": lambda s: (-int((s.highs - s.lows).sum()), -s.top),
    "first-use": lambda s: (s.first, -s.top),
}


def place(shapes: Sequence[Shape]) -> tuple[str, int, list[int], int, bool, int]:
    """(method, arena bytes, offsets, exact-search nodes, proven optimal, lower bound)."""
    if not shapes:
        return "empty", 0, [], 0, True, 0
    bound = lower_bound(shapes)
    best: tuple[int, str, list[int]] | None = None
    for label, variant in (("", list(shapes)), (" (whole blocks)", [s.rectangle() for s in shapes])):
        grid = _Grid(variant)
        tops = [s.top for s in variant]
        for name, key in ORDERS.items():
            order = sorted(range(len(variant)), key=lambda i: key(variant[i]))
            peak, offsets = _best_fit(grid, tops, order)
            if best is None or peak < best[0]:
                best = (peak, f"best-fit by {name}{label}", offsets)
    assert best is not None
    if best[0] == bound or len(shapes) > EXACT_MAX_BLOCKS:
        return best[1], best[0], best[2], 0, best[0] == bound, bound
    exact = _exact(shapes, best[0], bound)
    if exact is None:
        return (f"{best[1]} (exact search stopped at {EXACT_NODE_BUDGET} nodes)", best[0], best[2],
                EXACT_NODE_BUDGET, False, bound)
    peak, offsets, nodes = exact
    if peak < best[0]:
        return "exact search", peak, offsets, nodes, True, bound
    return f"{best[1]} (proven optimal by exact search)", best[0], best[2], nodes, True, bound


def _exact(shapes: Sequence[Shape], upper: int, bound: int) -> tuple[int, list[int], int] | None:
    """Branch and bound: each block at the start of one of its free ranges (a block can
    always slide down to one, so nothing better is missed).

    Returns the best peak, its offsets and the nodes visited; None when the budget ran
    out before the search finished (the heuristic plan is then kept, and said to be).
    """
    grid = _Grid(shapes)
    order = sorted(range(len(shapes)), key=lambda i: (-shapes[i].top, shapes[i].first))
    offsets = [-1] * len(shapes)
    best_peak, best_offsets = upper, list(offsets)
    found = False
    nodes = 0

    def visit(k: int, peak: int) -> bool:
        nonlocal best_peak, best_offsets, found, nodes
        nodes += 1
        if nodes > EXACT_NODE_BUDGET:
            return False
        if k == len(order):
            if peak < best_peak:
                best_peak, best_offsets, found = peak, list(offsets), True
            return True
        i = order[k]
        starts, _ = grid.free(i, order[:k], offsets)
        for start in (int(x) for x in starts):
            top = start + shapes[i].top
            if max(peak, top) >= best_peak:
                break  # starts increase: every later one is as high
            offsets[i] = start
            if not visit(k + 1, max(peak, top)):
                return False
            offsets[i] = -1
            if best_peak == bound:
                return True
        return True

    if not visit(0, 0):
        return None
    return (best_peak, best_offsets, nodes) if found else (upper, [], nodes)
