"""Where every tensor lives in the one static arena, fixed at generation time.

Two decisions, in this order:

1. Sharing. RESHAPE outputs are the same bytes as their inputs. A step that can write
   over its input (depthwise with depth multiplier 1, 1x1 convolution, same-shape ADD/MUL,
   softmax, global pooling) does so when nothing reads that input afterwards; tensors that
   share bytes form one *block* with fixed offsets inside it, and the in-place kernel's
   scratch buffer (one channel plane, or one pixel) is a block of its own that lives for
   that step only, as is a library kernel's scratch (CMSIS-NN's im2col columns). The model
   input stays in the caller's buffer (kernels read it there, so it is never written) and
   is not part of the arena.
2. Placement. Blocks are intervals in time with sizes; offsets are chosen so that blocks
   alive at the same step never overlap. The smallest possible arena is at least the
   largest sum of sizes alive at one step (the lower bound). Several orderings are tried
   with best-fit placement; if none reaches the lower bound and the graph is small, an
   exact branch-and-bound search runs under a node budget. The method that produced the
   plan, and whether it is proven optimal, are recorded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from edgeserve.converters.mcu_c.steps import Step

ALIGN = 4  # bytes; every block starts on a word (the scratch buffers are read as bytes, but
# word-aligned tensors keep the door open for word loads in kernels)
EXACT_MAX_BLOCKS = 14
EXACT_NODE_BUDGET = 200_000


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclasses.dataclass
class Block:
    id: int
    size: int
    first: int  # step index where it is first written (-1: before the first step)
    last: int  # step index of its last read (len(steps): read by the caller)
    members: dict[int, int]  # tensor -> offset inside the block; temps: {}
    temp_of: int | None = None  # the step whose scratch buffer this is
    offset: int = 0

    def overlaps_in_time(self, other: "Block") -> bool:
        return self.first <= other.last and other.first <= self.last


@dataclasses.dataclass
class Plan:
    arena_bytes: int
    lower_bound: int
    method: str
    optimal: bool
    blocks: list[Block]
    location: dict[int, tuple[str, int]]  # tensor -> ("arena" | "input" | "state<k>", byte offset)
    inplace_steps: dict[int, int]  # step position -> scratch block id (-1: no scratch)
    inplace_sources: dict[int, int]  # step position -> the input its output overwrites
    search_nodes: int = 0
    # step position -> the block of the scratch a library kernel asks for (Step.scratch_bytes)
    scratch_steps: dict[int, int] = dataclasses.field(default_factory=dict)

    def temp_offset(self, position: int) -> int | None:
        block_id = self.inplace_steps.get(position, -1)
        return None if block_id < 0 else self.blocks[block_id].offset

    def scratch_offset(self, position: int) -> int | None:
        block_id = self.scratch_steps.get(position, -1)
        return None if block_id < 0 else self.blocks[block_id].offset


def plan(steps: Sequence[Step], sizes: Callable[[int], int], inputs: Sequence[int],
         outputs: Sequence[int]) -> Plan:
    """Blocks and offsets for ``steps``; ``sizes(tensor)`` gives a tensor's bytes."""
    last_read: dict[int, int] = {}
    for position, step in enumerate(steps):
        for t in step.inputs:
            last_read[t] = position
    for t in outputs:
        last_read[t] = len(steps)

    group: dict[int, int] = {t: -1 for t in inputs}  # tensor -> block id; < 0: outside the arena
    # Tensors outside the arena: the caller's input, and variables' buffers (READ_VARIABLE).
    # Several inputs lie back to back in the caller's buffer, in the model's order.
    starts = np.cumsum([0] + [sizes(t) for t in inputs]).tolist()
    external: dict[int, tuple[str, int]] = {t: ("input", int(start)) for t, start in zip(inputs, starts)}
    blocks: list[Block] = []
    inplace_steps: dict[int, int] = {}
    inplace_sources: dict[int, int] = {}
    scratch_steps: dict[int, int] = {}

    def new_block(size: int, first: int, members: dict[int, int], temp_of: int | None = None) -> Block:
        block = Block(len(blocks), size, first, first, members, temp_of)
        blocks.append(block)
        return block

    def members_last(block: Block) -> int:
        return max(last_read.get(t, position) for t in block.members)

    for position, step in enumerate(steps):
        if step.state is not None and step.kernel is None:  # READ_VARIABLE: the variable's buffer
            group[step.output] = -1
            external[step.output] = (f"state{step.state}", 0)
            continue
        if step.output < 0:  # ASSIGN_VARIABLE writes a variable's buffer, not a tensor
            continue
        source = step.inputs[0]
        out_size = sizes(step.output)
        if step.kernel is None:  # alias: same bytes
            block_id = group[source]
            if block_id < 0:
                group[step.output] = -1
                external[step.output] = external[source]
            else:
                group[step.output] = block_id
                blocks[block_id].members[step.output] = blocks[block_id].members[source]
            continue
        rule = step.inplace
        # ADD and MUL may write over either operand: the one nothing reads afterwards.
        candidates = step.inputs if rule is not None and len(step.inputs) == 2 else step.inputs[:1]
        source = next((t for t in candidates if rule is not None and _can_overwrite(
            t, step, position, group, blocks, outputs, members_last)), source)
        block_id = group.get(source, -1)
        if rule is not None and _can_overwrite(source, step, position, group, blocks, outputs, members_last):
            block = blocks[block_id]
            inplace_sources[position] = source
            block.members[step.output] = _inplace_offset(block, rule.align, source, sizes(source), out_size, sizes)
            group[step.output] = block_id
            inplace_steps[position] = (new_block(_aligned(rule.temp_bytes), position, {}, position).id
                                       if rule.temp_bytes else -1)
        else:
            group[step.output] = new_block(0, position, {step.output: 0}).id
        if step.scratch_bytes:  # a library or generated kernel's scratch, in place or not: this step only
            scratch_steps[position] = new_block(_aligned(step.scratch_bytes), position, {}, position).id

    # Normalise each block so its lowest member starts at 0; size = extent; lifetimes.
    for block in blocks:
        if block.temp_of is not None:
            continue
        low = min(block.members.values())
        block.members = {t: off - low for t, off in block.members.items()}
        block.size = _aligned(max(off + sizes(t) for t, off in block.members.items()))
        block.last = max(last_read.get(t, block.first) for t in block.members)

    lower_bound = max((sum(b.size for b in blocks if b.first <= s <= b.last)
                       for s in range(-1, len(steps) + 1)), default=0)
    method, peak, offsets, nodes, optimal = _place(blocks, lower_bound)
    for block, offset in zip(blocks, offsets):
        block.offset = offset
    location: dict[int, tuple[str, int]] = {}
    for t, block_id in group.items():
        if block_id < 0:
            location[t] = external[t]
        else:
            location[t] = ("arena", blocks[block_id].offset + blocks[block_id].members[t])
    return Plan(peak, lower_bound, method, optimal, blocks, location, inplace_steps, inplace_sources,
                nodes, scratch_steps)


def _inplace_offset(block: Block, align: str, source: int, in_size: int, out_size: int,
                    sizes: Callable[[int], int]) -> int:
    """Where the output starts inside ``block``, relative to the block's origin.

    "end" (1x1 convolution): the output ends where the input ends, or starts where it
    starts when it is smaller. "either" (depthwise, pooling to one pixel): both ends are
    valid; the one that keeps the block's extent smaller wins, and on a tie the end, since
    expanding 1x1 convolutions grow blocks downwards and the next one then fits inside.
    """
    start = block.members[source]
    end = start + in_size - out_size
    if align == "end":
        return min(start, end)
    if align == "start":
        return start
    low = min(block.members.values())
    high = max(off + sizes(t) for t, off in block.members.items())

    def extent(offset: int) -> int:
        return max(high, offset + out_size) - min(low, offset)

    return end if extent(end) <= extent(start) else start


def _can_overwrite(source: int, step: Step, position: int, group: dict[int, int], blocks: list[Block],
                   outputs: Sequence[int], members_last: Callable[[Block], int]) -> bool:
    """Whether ``step`` may write its output over ``source``'s bytes."""
    block_id = group.get(source, -1)
    if block_id < 0 or source in outputs:  # the caller's input is const; outputs are read later
        return False
    if members_last(blocks[block_id]) != position:  # someone reads these bytes later
        return False
    # The other operand must not live in the same bytes (ADD(x, reshape(x))).
    return not any(group.get(t) == block_id for t in step.inputs if t != source)


def _best_fit(blocks: Sequence[Block], order: Sequence[int]) -> tuple[int, list[int]]:
    """Each block, in ``order``, goes into the smallest gap between blocks it lives with."""
    offsets = [-1] * len(blocks)
    peak = 0
    placed: list[int] = []
    for i in order:
        block = blocks[i]
        busy = sorted((offsets[j], offsets[j] + blocks[j].size) for j in placed
                      if blocks[j].overlaps_in_time(block))
        best, best_gap, cursor = None, None, 0
        for start, end in busy:
            gap = start - cursor
            if gap >= block.size and (best_gap is None or gap < best_gap):
                best, best_gap = cursor, gap
            cursor = max(cursor, end)
        if best is None:
            best = cursor
        offsets[i] = best
        placed.append(i)
        peak = max(peak, best + block.size)
    return peak, offsets


ORDERS: dict[str, Callable[[Block], tuple[int, ...]]] = {
    "size": lambda b: (-b.size, b.first),
    "lifetime": lambda b: (-(b.last - b.first), -b.size),
    "area": lambda b: (-b.size * (b.last - b.first + 1), -b.size),
    "first-use": lambda b: (b.first, -b.size),
}


def _place(blocks: Sequence[Block], lower_bound: int) -> tuple[str, int, list[int], int, bool]:
    """(method, arena bytes, offsets, exact-search nodes, proven optimal)."""
    best: tuple[int, str, list[int]] | None = None
    for name, key in ORDERS.items():
        order = sorted(range(len(blocks)), key=lambda i: key(blocks[i]))
        peak, offsets = _best_fit(blocks, order)
        if best is None or peak < best[0]:
            best = (peak, f"best-fit by {name}", offsets)
    assert best is not None or not blocks
    if best is None:
        return "empty", 0, [], 0, True
    if best[0] == lower_bound or len(blocks) > EXACT_MAX_BLOCKS:
        return best[1], best[0], best[2], 0, best[0] == lower_bound
    exact = _exact(blocks, best[0], lower_bound)
    if exact is None:
        return f"{best[1]} (exact search stopped at {EXACT_NODE_BUDGET} nodes)", best[0], best[2], EXACT_NODE_BUDGET, False
    peak, offsets, nodes = exact
    if peak < best[0]:
        return "exact search", peak, offsets, nodes, True
    return f"{best[1]} (proven optimal by exact search)", best[0], best[2], nodes, True


def _exact(blocks: Sequence[Block], upper: int, lower_bound: int) -> tuple[int, list[int], int] | None:
    """Branch and bound over candidate offsets (0 or the end of a block it lives with).

    Returns the best peak, its offsets and the nodes visited; None when the budget ran
    out before the search finished (the heuristic plan is then kept, and said to be).
    """
    order = sorted(range(len(blocks)), key=lambda i: (-blocks[i].size, blocks[i].first))
    offsets = [-1] * len(blocks)
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
        block = blocks[i]
        live = [j for j in order[:k] if blocks[j].overlaps_in_time(block)]
        candidates = sorted({0, *(offsets[j] + blocks[j].size for j in live)})
        for start in candidates:
            end = start + block.size
            if max(peak, end) >= best_peak:
                continue
            if any(offsets[j] < end and start < offsets[j] + blocks[j].size for j in live):
                continue
            offsets[i] = start
            if not visit(k + 1, max(peak, end)):
                return False
            offsets[i] = -1
            if best_peak == lower_bound:
                return True
        return True

    if not visit(0, 0):
        return None
    return (best_peak, best_offsets, nodes) if found else (upper, [], nodes)
