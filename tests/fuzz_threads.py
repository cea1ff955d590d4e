"""The Session API called from many threads at once, in random order, for the fuzz.

`CHILD` runs in a process of its own (a crash inside an engine must fail the test, not end
pytest): N threads share one Session and one StreamStep of it on MLPerf Tiny's int8 keyword
spotter and call, at random, run, classify, the step, reset, set_threads,
describe, and run with a frame of the wrong shape. Every answer is compared with what a
Session of its own, on one thread, gives for the same frame. Halfway through the calls, the
main thread closes the shared Session while the workers go on. It prints one JSON line: per call, how often each
outcome came ("ok", "wrong", "ConcurrentUseError", "closed", "InputError", or another
exception by name).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent("""
    import collections, json, sys, threading
    import numpy as np
    from edgeserve.errors import BackendError, ConcurrentUseError, InputError
    from edgeserve.runtime import Session

    model, workers, calls, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    rng = np.random.default_rng(seed)
    with Session(model, threads=1) as alone:
        d = alone.inputs[0]
        frames = [rng.integers(-128, 128, d.shape, dtype=np.int8) for _ in range(12)]
        expected = [alone.run(f)[0].copy() for f in frames]
    shared = Session(model, threads=1)
    step = shared.stream_step()
    tally = collections.defaultdict(collections.Counter)
    closed, half_done = threading.Event(), threading.Event()
    count, count_lock = [0], threading.Lock()
    # Not step.input written in place: that write takes no lock (it is the user's memory until
    # the call), so two threads writing it race by their own doing, as documented.
    OPS = ("run", "classify", "step", "reset", "set_threads", "describe", "bad-frame")

    def outcome(op, k, got):
        if op in ("run", "step"):
            return "ok" if np.array_equal(got[0], expected[k]) else "wrong"
        if op == "classify":
            return "ok" if got[0].index == int(np.argmax(expected[k])) else "wrong"
        return "ok"

    def work(worker):
        local = np.random.default_rng(seed * 100 + worker)
        for n in range(calls):
            op, k = OPS[int(local.integers(len(OPS)))], int(local.integers(len(frames)))
            try:
                if op == "run":
                    got = [shared.run(frames[k])[0].copy()]
                elif op == "classify":
                    got = shared.classify(frames[k], k=1)
                elif op == "step":
                    got = [step(frames[k])[0].copy()]
                elif op == "reset":
                    shared.reset(); got = None
                elif op == "set_threads":
                    shared.set_threads(int(local.integers(1, 3))); got = None
                elif op == "describe":
                    shared.describe(); got = None
                else:
                    shared.run(np.zeros((3, 3), np.int8)); got = None
                result = outcome(op, k, got)
            except ConcurrentUseError:
                result = "ConcurrentUseError"
            except BackendError as exc:
                result = "closed" if closed.is_set() and "closed" in str(exc) else "BackendError: " + str(exc)[:80]
            except InputError as exc:
                result = "InputError" if op == "bad-frame" else "InputError: " + str(exc)[:80]
            except Exception as exc:
                result = type(exc).__name__ + ": " + str(exc)[:80]
            tally[op][result] += 1
            with count_lock:
                count[0] += 1
                if count[0] == workers * calls // 2:
                    half_done.set()

    threads = [threading.Thread(target=work, args=(w,)) for w in range(workers)]
    for t in threads:
        t.start()
    half_done.wait(timeout=300)  # halfway through every thread's calls, on any machine's speed
    closed.set()  # from here a call may find the Session closed
    shared.close()
    for t in threads:
        t.join(timeout=300)
    alive = sum(t.is_alive() for t in threads)
    # How many of the frames' answers differ: a comparison can fail only between different answers.
    distinct = len({e.tobytes() for e in expected})
    print(json.dumps({"tally": {op: dict(c) for op, c in tally.items()}, "alive": alive, "distinct": distinct}))
""")


def run_threads(model: Path, workers: int, calls: int, seed: int = 0, timeout: float = 600) -> dict[str, Any]:
    """The child's tally, or {"failure": why} when it died, hung, or printed no result."""
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, str(model), str(workers), str(calls), str(seed)],
                              capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                              env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    except subprocess.TimeoutExpired:
        return {"failure": f"no answer within {timeout:.0f} s (a hang)"}
    if done.returncode != 0 or not done.stdout.strip():
        return {"failure": f"the child ended with status {done.returncode}: {done.stderr[-400:]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])
