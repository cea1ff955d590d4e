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
2. Placement (placement.py). A block's bytes change with time: the hull of its members
   alive at each step. Blocks alive at the same step never overlap at that step, so the
   bytes a chain no longer uses (a wide tensor written over by a narrower one) are free for
   other blocks. The method that produced the plan, the lower bound it is measured against,
   and whether it is proven optimal are recorded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from edgeserve.converters.mcu_c import placement
from edgeserve.converters.mcu_c.steps import Step

ALIGN = 4  # bytes; every block starts on a word (the scratch buffers are read as bytes, but
# word-aligned tensors keep the door open for word loads in kernels)


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
    born: dict[int, int] = {}  # tensor -> step that writes it
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
        born[step.output] = position
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

    shapes = [_shape(block, born, last_read, sizes) for block in blocks]
    method, peak, offsets, nodes, optimal, lower_bound = placement.place(shapes)
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


def _shape(block: Block, born: dict[int, int], last_read: dict[int, int],
           sizes: Callable[[int], int]) -> placement.Shape:
    """The bytes ``block`` holds at each step of its life: the hull of its members alive then
    (a member lives from the step that writes it to its last read)."""
    if block.temp_of is not None:
        return placement.rectangle(block.first, block.last, block.size)
    steps = block.last - block.first + 1
    lows = np.full(steps, block.size, np.int64)
    highs = np.zeros(steps, np.int64)
    for t, offset in block.members.items():
        first = born.get(t, block.first) - block.first
        last = max(last_read.get(t, first + block.first), first + block.first) - block.first
        lows[first:last + 1] = np.minimum(lows[first:last + 1], offset)
        highs[first:last + 1] = np.maximum(highs[first:last + 1], offset + sizes(t))
    # Whole words, so that every offset placement derives from these stays word-aligned.
    lows, highs = lows // ALIGN * ALIGN, (highs + ALIGN - 1) // ALIGN * ALIGN
    empty = highs <= lows
    lows[empty] = highs[empty] = 0
    return placement.Shape(block.first, lows, highs)


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
