"""Targets side by side: each built once the targets it is built from are settled, ``jobs`` at once.

After the shared steps (load, calibration data, the float reference) the targets of a
conversion are independent but for what one is built from (mcu and mcu-c from tflite-int8's
model). Their heavy work is in isolated children (forked side by side from one server:
:mod:`edgeserve.isolation.warm`) and in native libraries that let go of the GIL (LiteRT, ONNX
Runtime, numpy), so threads are enough to keep the machine's cores busy. What a build leaves
for the run (the manifest, the artifacts the next targets read) is settled in the calling
thread, one target at a time, in the order the builds end.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def default_jobs() -> int:
    """The cores this process may run on (a container's or taskset's limit, not the machine's)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def shared_cores_env(processes: int, environ: Any = None) -> dict[str, str]:
    """What to add to the environment of one of ``processes`` processes that share this machine's
    cores: OpenMP (torch's intra-op threads) told to use its share, unless the user said otherwise.
    torch's OpenMP threads spin while they wait for work, so two processes each with a thread per
    core fight over the cores: on this 2-core machine two converts of PP-PicoDet's executorch-int8
    side by side took 157 s with the default and 79 s with one thread each, and one alone 70-74 s
    either way. Ray sets OMP_NUM_THREADS to a task's CPUs for the same reason."""
    environ = os.environ if environ is None else environ
    if processes <= 1 or "OMP_NUM_THREADS" in environ:
        return {}
    return {"OMP_NUM_THREADS": str(max(1, default_jobs() // processes))}


def in_dependency_order(items: Sequence[T], name: Callable[[T], str], needs: Callable[[T], Sequence[str]],
                        build: Callable[[T], Any], settle: Callable[[T, "concurrent.futures.Future[Any]"], None],
                        *, jobs: int, wanted: Callable[[T], bool] = lambda item: True) -> None:
    """``build(item)`` for each item, at most ``jobs`` at once, an item only after every item it
    ``needs`` (by name; a name not among ``items`` needs no waiting) has been settled;
    ``settle(item, future)`` in the calling thread as each build ends. ``wanted(item)``, asked in the calling thread once the
    item's needs are settled, may say False: the item is then not built (its caller recorded why).
    With ``jobs`` 1 every build runs in the calling thread; either way items start in the order
    given. (Starting the longest target first was measured slower on PaddleOCR's DBNet, 210.9 s
    against 186.6 s: ExecuTorch's INT8 lowering uses both cores itself, and side by side with
    every other target from the start it took 208 s instead of 118 s.)"""
    waiting = list(items)
    running: dict[concurrent.futures.Future[Any], T] = {}
    unsettled = {name(item) for item in items}

    def startable(item: T) -> bool:
        return not any(n in unsettled for n in needs(item))

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="edgeserve-target") \
        if jobs > 1 else None
    try:
        while waiting or running:
            started = False
            # Each looked at as things stand now (a build settled in this thread frees its dependents).
            for item in list(waiting):
                if len(running) >= jobs:
                    break
                if not startable(item):
                    continue
                waiting.remove(item)
                started = True
                if not wanted(item):
                    unsettled.discard(name(item))
                    continue
                if pool is None:
                    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
                    try:
                        future.set_result(build(item))
                    except Exception as exc:  # noqa: BLE001 - settle() reads it from the future
                        future.set_exception(exc)
                    settle(item, future)
                    unsettled.discard(name(item))
                    continue
                # Each build sees the caller's context variables (the budget of a step, the steps
                # a Progress collects), as it would in the calling thread.
                running[pool.submit(contextvars.copy_context().run, build, item)] = item
            if not running:
                if waiting and not started:
                    raise ValueError(f"targets that need each other: {', '.join(name(i) for i in waiting)}")
                continue
            ended, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in ended:
                item = running.pop(future)
                settle(item, future)
                unsettled.discard(name(item))
    finally:
        if pool is not None:
            # An error (or Ctrl-C) in the calling thread: builds not started never start; the
            # running ones end with their steps (isolated children die with the process group).
            pool.shutdown(wait=True, cancel_futures=True)
