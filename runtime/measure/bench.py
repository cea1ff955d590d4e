"""``edgeserve bench``: cold start, end-to-end latency percentiles, per-stage times, allocations.

Latency is end to end (frame in, dequantized outputs out) as an application sees it; the
stages come from the Session's own timestamps of the same runs. Allocation is measured
in a separate pass under tracemalloc, after the timed one, so tracing does not slow the
timed frames.
"""

from __future__ import annotations

import time
import tracemalloc
from typing import Any

import numpy as np

from edgeserve.runtime.session import Session

ALLOC_FRAMES = 200


def benchmark(session: Session, frame: np.ndarray, *, frames: int = 500, warmup: int = 20) -> dict[str, Any]:
    """Time ``frames`` runs of ``frame`` after ``warmup`` runs; figures in milliseconds."""
    for _ in range(warmup):
        session.run(frame)
    total = np.empty(frames, np.int64)
    stages = np.empty((frames, 3), np.int64)
    clock = time.perf_counter_ns
    started = clock()
    for i in range(frames):
        t0 = clock()
        session.run(frame)
        total[i] = clock() - t0
        stages[i] = session.stages_ns
    wall_s = (clock() - started) / 1e9
    alloc = allocation_per_frame(session, frame)
    ms = total / 1e6
    return {
        "frames": frames,
        "warmup": warmup,
        "latency_ms": {p: round(float(np.percentile(ms, q)), 4) for p, q in (("p50", 50), ("p95", 95), ("p99", 99))},
        "stages_ms": {name: round(float(np.median(stages[:, i])) / 1e6, 4)
                      for i, name in enumerate(("preprocess", "invoke", "postprocess"))},
        "throughput_fps": round(frames / wall_s, 2),
        **alloc,
    }


class StrideRunner:
    """A streaming model's Session as the wake-word detector drives it: ``run(frames)`` is one
    stride through :meth:`Session.stream_step` (frames copied in, state carried), for code that
    times or profiles ``run`` (``edgeserve profile``)."""

    def __init__(self, session: Session) -> None:
        self.backend, self.threads = session.backend, session.threads
        self._session = session
        step = session.stream_step()
        one_value = len(session.outputs) == 1 and int(np.prod(session.outputs[0].shape)) == 1
        self.run = step.value if one_value else step

    def example_input(self) -> np.ndarray:
        return stride_input(self._session, self._session.example_input())


def stride_input(session: Session, frames: np.ndarray) -> np.ndarray:
    """``frames`` as the step takes them: the batch dimension added, floats quantized (the
    detector quantizes features before the step, so that is not what a stride's time is)."""
    d = session.inputs[0]
    if frames.shape == tuple(d.shape[1:]):
        frames = frames[None]
    if frames.dtype != d.dtype and d.quantized:
        frames = d.quantize(frames)
    return frames


def stride_seconds(session: Session, frames: np.ndarray, strides: int = 500, block: int = 50) -> float:
    """Median seconds per stride of a streaming model through :class:`StrideRunner`. Timed in
    blocks: one clock read per ``block`` strides, so the clock's cost is not counted in a call
    of a few microseconds."""
    call = StrideRunner(session).run
    frames = stride_input(session, frames)
    for _ in range(block):
        call(frames)
    clock = time.perf_counter_ns
    times = []
    for _ in range(max(1, strides // block)):
        t0 = clock()
        for _ in range(block):
            call(frames)
        times.append((clock() - t0) / block)
    return float(np.median(times)) / 1e9


def allocation_per_frame(session: Session, frame: np.ndarray, frames: int = ALLOC_FRAMES) -> dict[str, Any]:
    """Net bytes that stay allocated per frame, and the largest transient allocation.

    tracemalloc sees numpy's data buffers as well as Python objects. In steady state a
    frame should leave nothing behind (``alloc_bytes_per_frame`` 0) and allocate only
    small short-lived objects (``transient_peak_bytes``).
    """
    session.run(frame)  # anything created lazily on first use is not steady state
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before, _ = tracemalloc.get_traced_memory()
        for _ in range(frames):
            session.run(frame)
        after, peak = tracemalloc.get_traced_memory()
    finally:
        if not was_tracing:
            tracemalloc.stop()
    return {
        "alloc_bytes_per_frame": round(max(0, after - before) / frames, 2),
        "transient_peak_bytes": max(0, peak - before),
    }


def synthetic_frame(width: int, height: int, seed: int = 0) -> np.ndarray:
    """A deterministic uint8 RGB frame with image-like structure (gradients plus noise)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 // max(1, width - 1), y * 255 // max(1, height - 1), (x + y) % 256], axis=-1)
    noise = rng.integers(-20, 21, base.shape)
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def pipeline_fps(session: Any, frame: np.ndarray, frames: int) -> dict[str, Any]:
    """Frames per second through Session.stream next to 1 / bare invoke(), measured in
    alternating rounds in one run (so both see the same machine load)."""
    import itertools

    active = session._current()
    session.run(frame)  # the engine holds a valid input for the bare invokes
    rounds, per_round = 3, max(1, frames // 3)
    invoke_s, stream_s = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(per_round):
            active.invoke()
        invoke_s.append((time.perf_counter() - start) / per_round)
        start = time.perf_counter()
        for _ in session.stream(itertools.repeat(frame, per_round)):
            pass
        stream_s.append((time.perf_counter() - start) / per_round)
    invoke, streamed = min(invoke_s), min(stream_s)
    return {"fps": round(1 / streamed, 2), "invoke_fps": round(1 / invoke, 2), "ratio": round(invoke / streamed, 4),
            "frames": rounds * per_round}
