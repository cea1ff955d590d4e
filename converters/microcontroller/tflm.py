"""Drive the real TFLM interpreter (the tflite-micro wheel) to check edgeserve's plans.

The wheel reports arena use only by printing from C++ to file descriptor 2
(``print_allocations``), and a too-small arena fails with the reason printed there
too, so both are read through :func:`edgeserve.console.capture_native_stderr`.
The wheel builds its interpreter with the *recording* allocator on a 64-bit host; its
figures are what ``arena_bytes_host`` is checked against.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from edgeserve._deps import require
from edgeserve.console import capture_native_stderr
from edgeserve.errors import EdgeServeError, ModelFileError
from edgeserve.tflite.model import TfliteModel

_TOTALS = re.compile(r"Arena allocation (total|head|tail) (\d+) bytes")
_ITEM = re.compile(
    r"'(?P<name>[^']+)' used (?P<used>\d+) bytes with alignment overhead "
    r"\(requested (?P<requested>\d+) bytes for (?P<count>\d+) "
)


class TflmError(EdgeServeError):
    """TFLM refused the model; ``native_text`` is what it printed on file descriptor 2."""

    def __init__(self, arena_bytes: int, native_text: str) -> None:
        self.arena_bytes = arena_bytes
        self.native_text = native_text
        reasons = "; ".join(line.strip() for line in native_text.splitlines() if line.strip())
        super().__init__(
            f"TFLM could not prepare the model in a {arena_bytes}-byte arena: "
            f"{reasons or 'it printed no reason'}" if arena_bytes else reasons
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Raised in the child process of edgeserve.converters.microcontroller.child and re-raised here.
        return (type(self), (self.arena_bytes, self.native_text))


class ArenaTooSmallError(TflmError):
    """TFLM ran out of arena while allocating the model's tensors."""


# What TFLM prints when the arena, not the model, is the problem (the greedy planner's
# own bookkeeping lives in the arena too, hence "Too many buffers").
_OUT_OF_ARENA = ("Failed to allocate", "Unable to allocate", "Failed to resize", "Too many buffers")


def _is_out_of_arena(native_text: str) -> bool:
    return any(marker in native_text for marker in _OUT_OF_ARENA)


@dataclasses.dataclass(frozen=True)
class ArenaUse:
    """What TFLM's recording allocator printed after allocating the model."""

    total: int
    head: int  # non-persistent: the activation plan (and kernel scratch buffers)
    tail: int  # persistent: allocator objects, tensor structs, kernel op data
    items: dict[str, tuple[int, int, int]]  # name -> (used, requested, allocations)


def _runtime() -> Any:
    return require("tflite_micro.python.tflite_micro.runtime", "checking MCU builds with TFLM")


def _interpreter(model_bytes: bytes, arena_bytes: int) -> tuple[Any, str]:
    # Our own reader first: the wheel's C++ can crash the process on a corrupt file.
    TfliteModel.from_bytes(model_bytes)
    runtime = _runtime()
    try:
        with capture_native_stderr() as native:
            interpreter = runtime.Interpreter.from_bytes(bytes(model_bytes), arena_size=int(arena_bytes))
    except RuntimeError:
        error = ArenaTooSmallError if _is_out_of_arena(native.text) else TflmError
        raise error(arena_bytes, native.text) from None
    return interpreter, native.text


def parse_allocations(text: str) -> ArenaUse:
    totals = {kind: int(value) for kind, value in _TOTALS.findall(text)}
    if set(totals) != {"total", "head", "tail"}:
        raise ModelFileError(f"TFLM printed no arena totals; it printed: {text.strip()[:300]!r}")
    items = {
        m["name"]: (int(m["used"]), int(m["requested"]), int(m["count"])) for m in _ITEM.finditer(text)
    }
    return ArenaUse(totals["total"], totals["head"], totals["tail"], items)


def arena_use(model_bytes: bytes, arena_bytes: int) -> ArenaUse:
    """Allocate the model in an ``arena_bytes`` arena and return what TFLM used."""
    interpreter, _ = _interpreter(model_bytes, arena_bytes)
    with capture_native_stderr() as native:
        interpreter.print_allocations()
    return parse_allocations(native.text)


def fits(model_bytes: bytes, arena_bytes: int) -> bool:
    """Whether TFLM allocates the model in ``arena_bytes``; other refusals still raise."""
    return _allocates(model_bytes, arena_bytes, ArenaTooSmallError)


def _allocates(model_bytes: bytes, arena_bytes: int, refusal: type[TflmError]) -> bool:
    try:
        _interpreter(model_bytes, arena_bytes)
    except refusal:
        return False
    return True


def smallest_arena(model_bytes: bytes, upper: int | None = None) -> int:
    """The smallest arena, to the byte, in which TFLM allocates the model (binary search).

    Whether an arena works is monotonic in its size for TFLM's single-arena allocator:
    persistent data grows down from the end and everything else up from the start.
    """
    hi = upper or max(4096, 16 * len(model_bytes))
    while not fits(model_bytes, hi):
        hi *= 2
        if hi > 1 << 31:
            raise ArenaTooSmallError(hi, "no arena up to 2 GiB was enough")
    lo = 0
    while lo < hi:
        mid = (lo + hi) // 2
        # Below a size known to work, any refusal is the arena's size, whatever TFLM printed.
        if _allocates(model_bytes, mid, TflmError):
            hi = mid
        else:
            lo = mid + 1
    return lo


def run(
    model_bytes: bytes, arena_bytes: int, samples: Sequence[Sequence[np.ndarray]]
) -> list[list[np.ndarray]]:
    """Run batch-1 samples in order on one TFLM interpreter (reference kernels).

    One interpreter for all samples, like a device and like LiteRT's runner, so models
    with state (variable tensors) carry it from sample to sample on both sides.
    Returns each sample's outputs in model order.
    """
    interpreter, _ = _interpreter(model_bytes, arena_bytes)
    graph = TfliteModel.from_bytes(model_bytes).subgraphs[0]
    results = []
    for inputs in samples:
        if len(inputs) != len(graph.inputs):
            raise ValueError(f"the model takes {len(graph.inputs)} inputs, {len(inputs)} were given")
        for index, array in enumerate(inputs):
            interpreter.set_input(np.ascontiguousarray(array), index)
        with capture_native_stderr() as native:
            interpreter.invoke()
        if "failed" in native.text.lower():
            raise EdgeServeError(f"TFLM failed to invoke the model: {native.text.strip()}")
        results.append([np.array(interpreter.get_output(i)) for i in range(len(graph.outputs))])
    return results
