"""Check an mcu build against the real thing: TFLM in the planned arena, LiteRT's reference kernels.

TFLM's reference kernels and LiteRT's ``BUILTIN_REF`` kernels implement the same integer
arithmetic, so their raw outputs must be equal bit for bit. The TFLM interpreter is given
exactly the planned host arena, so the same run also proves the plan is big enough.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np



@dataclasses.dataclass(frozen=True)
class TflmCheck:
    arena_bytes: int  # the host arena TFLM allocated the model in (a shorter one raises)
    samples: int
    tflm_head: int | None  # what TFLM reported, for the comparison with the plan
    tflm_tail: int | None
    max_abs_diff: float | None  # raw outputs vs LiteRT reference kernels; None when LiteRT cannot run it
    litert_note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def check_with_tflm(model_bytes: bytes, host_arena_bytes: int, samples: Sequence[Sequence[np.ndarray]]) -> TflmCheck:
    """Allocate in ``host_arena_bytes`` with TFLM, run ``samples``, compare with LiteRT BUILTIN_REF."""
    from edgeserve.converters.microcontroller import tflm

    use = tflm.arena_use(model_bytes, host_arena_bytes)  # raises ArenaTooSmallError if the plan is short
    tflm_outputs = tflm.run(model_bytes, host_arena_bytes, samples)
    try:
        from edgeserve.console import capture_native_stderr
        from edgeserve.runtime.backends.litert_run import TfliteRunner

        with capture_native_stderr():
            runner = TfliteRunner(model_bytes, reference_kernels=True)
    except Exception as exc:  # LiteRT refuses some models TFLM runs (e.g. person_detect)
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return TflmCheck(host_arena_bytes, len(samples), use.head, use.tail, None,
                         f"LiteRT could not load the model for the comparison: {reason}")
    worst = 0.0
    for sample, ours in zip(samples, tflm_outputs):
        reference = runner.run_raw(list(sample))
        for a, b in zip(ours, reference):
            a = np.asarray(a).reshape(b.shape)
            if a.size:  # float64 holds every int8/int16/int32 value exactly
                worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))))
    return TflmCheck(host_arena_bytes, len(samples), use.head, use.tail, worst)


@dataclasses.dataclass(frozen=True)
class StreamCheck:
    """A stateful model streamed through TFLM in the planned arena, then reset and streamed again."""

    frames: int
    max_abs_diff: float  # both TFLM passes against one LiteRT pass, raw outputs
    reset_repeats: bool  # the pass after interpreter.reset() equals the first
    distinct_outputs: int  # how many different output values LiteRT gave: 1 means it could not fail
    differing_frames: int = 0  # frames on which TFLM's first pass differs from LiteRT

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def check_stream_with_tflm(model_bytes: bytes, host_arena_bytes: int,
                           frames: Sequence[Sequence[np.ndarray]]) -> StreamCheck:
    """State carried frame to frame in both interpreters; TFLM is reset between its two passes."""
    from edgeserve.converters.microcontroller import tflm
    from edgeserve.console import capture_native_stderr
    from edgeserve.runtime.backends.litert_run import TfliteRunner

    interpreter, _ = tflm._interpreter(model_bytes, host_arena_bytes)
    passes = []
    for _ in range(2):
        outputs = []
        for inputs in frames:
            for index, array in enumerate(inputs):
                interpreter.set_input(np.ascontiguousarray(array), index)
            interpreter.invoke()
            outputs.append(np.array(interpreter.get_output(0)))
        passes.append(np.stack(outputs))
        interpreter.reset()
    with capture_native_stderr():
        runner = TfliteRunner(model_bytes, reference_kernels=True)
    reference = np.stack([runner.run_raw(list(inputs))[0] for inputs in frames]).reshape(passes[0].shape)
    worst = max(float(np.max(np.abs(p.astype(np.float64) - reference.astype(np.float64)))) for p in passes)
    differing = int(np.count_nonzero((passes[0] != reference).reshape(len(frames), -1).any(axis=1)))
    return StreamCheck(len(frames), worst, bool(np.array_equal(passes[0], passes[1])),
                       int(len(np.unique(reference))), differing)
