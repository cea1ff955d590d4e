"""How `--kernels generated` layers are planned: which 1x1 -> stride-2 depthwise pairs run
streamed (es_stream.h), and which generated layers that resize the tensor write over their
input. Both are chosen by planning the arena each way and keeping what shrinks it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection

from edgeserve.converters.mcu_c import specialise
from edgeserve.converters.mcu_c.planner import Plan
from edgeserve.converters.mcu_c.steps import Step

Planner = Callable[[list[Step]], Plan]


@dataclasses.dataclass(frozen=True)
class Stream:
    """One 1x1 whose output only a stride-2 depthwise reads: streamed or not, and why."""
    conv: int  # operator index of the 1x1
    depthwise: int
    tensor_bytes: int  # the 1x1's output, which never exists whole when streamed
    ring_bytes: int  # what streaming holds of it instead (k_h rows, and the widened pixel pair)
    streamed: bool
    arena_bytes: int  # the arena with the pair streamed
    arena_bytes_whole: int  # and with the 1x1's output written whole

    def record(self) -> dict[str, object]:
        # Row by row, each 1x1 row is computed once: streaming recomputes nothing (MCUNetV2's
        # spatial patches recompute their overlapping halos).
        return {**dataclasses.asdict(self), "recomputed_macs": 0}


def plan_generated(build: Callable[[frozenset[int]], list[Step]], planner: Planner,
                   sizes: Callable[[int], int]) -> tuple[list[Step], Plan, list[Stream], frozenset[int]]:
    """The steps (``build(whole)``: generated with the 1x1s in ``whole`` not streamed), their
    plan, each candidate pair's record, and the 1x1s left whole.

    Every pair starts streamed; each in turn is planned whole and left whole unless streaming it
    lowers the arena (a pair away from the peak saves nothing, and the rows cost a call each).
    """
    whole: frozenset[int] = frozenset()
    steps, arena, cut = fewest_chain_bytes(build(whole), planner, sizes)
    streams = []
    for pair in [s for s in steps if "streamed_into" in s.params]:
        trial = _cut(build(whole | {pair.index}), cut, sizes)
        other = planner(trial)
        streamed = other.arena_bytes > arena.arena_bytes
        streams.append(Stream(pair.index, pair.params["streamed_into"], pair.params["out_h"] * pair.params["out_w"]
                              * pair.params["out_c"], pair.scratch_bytes, streamed, arena.arena_bytes,
                              other.arena_bytes))
        if not streamed:
            whole, steps, arena = whole | {pair.index}, trial, other
    if whole:
        steps, arena, cut = fewest_chain_bytes(build(whole), planner, sizes, cut)
    # The records against the final plan: a streamed pair's arena is the plan's, beside the plan
    # with that one pair whole; a pair left whole is in the plan (its streamed figure stays the
    # one measured when it was chosen).
    streams = [dataclasses.replace(s, arena_bytes=arena.arena_bytes, arena_bytes_whole=planner(
                   _cut(build(whole | {s.conv}), cut, sizes)).arena_bytes) if s.streamed
               else dataclasses.replace(s, arena_bytes_whole=arena.arena_bytes) for s in streams]
    return steps, arena, streams, whole


def _cut(steps: list[Step], cut: Collection[int], sizes: Callable[[int], int]) -> list[Step]:
    return [dataclasses.replace(s, inplace=None) if s.index in cut and specialise.resizes(s, sizes) else s
            for s in steps]


def fewest_chain_bytes(steps: list[Step], planner: Planner, sizes: Callable[[int], int],
                       cut: frozenset[int] = frozenset()) -> tuple[list[Step], Plan, frozenset[int]]:
    """Which generated layers that resize the tensor run in place, chosen for the smallest
    arena: the steps with the others writing to new bytes, their plan, and the operator
    indices of those cut.

    An in-place chain keeps fixed offsets inside it: an expanding 1x1 written over its input
    ends where the input ends, so every expansion pushes the chain's bytes lower, and a chain
    with several expansions can span more than it ever holds at once. Writing one of these
    layers to new bytes cuts the chain there. Each round tries every such layer the other way
    and keeps the best change, until none shrinks the arena (steepest descent: taking the
    first change that helps, in order, can cut at the widest layer and stop there, as
    person_detect did at 29,984 B). Plans take milliseconds.
    """
    candidates = {s.index for s in steps if specialise.resizes(s, sizes)}
    cut = frozenset(cut & candidates)
    arena = planner(_cut(steps, cut, sizes))
    while True:
        trials = [(planner(_cut(steps, cut ^ {index}, sizes)), cut ^ {index}) for index in sorted(candidates)]
        if not trials:
            break
        best, other = min(trials, key=lambda t: (t[0].arena_bytes, len(t[1])))
        if best.arena_bytes >= arena.arena_bytes:
            break
        arena, cut = best, other
    return _cut(steps, cut, sizes), arena, cut
