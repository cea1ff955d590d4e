"""Profile jobs: each served artifact of a job timed on each board it names, on that board.

A board is a device profile (`edgeserve profiles`). On Ray, a machine is that board when it
joined with the profile as a custom resource and no CPU for other work (``ray start
--address=HEAD --num-cpus=0 --resources='{"edgeserve/raspberry-pi-5": 1}'``: no conversion cell,
which asks for a CPU, is sent to a board that has only the runtime), and each bench asks for one
unit of it, so it runs there and never beside another bench on the same board. Without Ray, only the board
"host" (this machine) can be reached. A bench is ``edgeserve bench MANIFEST --target T -p BOARD
--json`` in a child process: cold start, first and warm load, peak memory, latency p50/p95/p99,
energy per inference where the board has a power sensor, the backend that ran it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from edgeserve.jobs.cells import unpack

LOCAL_BOARD = "host"


def resource_of(board: str) -> str:
    """The Ray custom resource a machine advertises to take this board's benches."""
    return f"edgeserve/{board}"


def bench_cell(folder: Any, target: str, board: str, frames: int, timeout_s: float,
               operators: bool = False) -> dict[str, Any]:
    """Time the artifact of one cell on this machine as ``board``. ``folder``: the cell's folder
    here, or pack()'s bytes of it (another machine). ``operators``: also each operator's time
    and where it ran (``bench --operators``), the slowest kinds kept."""
    with tempfile.TemporaryDirectory(prefix="edgeserve-bench-") as tmp:
        here = unpack(folder, Path(tmp)) if isinstance(folder, (bytes, bytearray)) else Path(folder)
        command = [sys.executable, "-m", "edgeserve", "-q", "bench", str(here / "manifest.json"), "--target", target,
                   "-p", board, "--frames", str(frames), "--warmup", str(min(20, frames)), "--json",
                   *(["--operators"] if operators else [])]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                                  env={**os.environ, "PYTHONWARNINGS": "ignore"})
        except subprocess.TimeoutExpired:
            return {"board": board, "error": f"stopped after {timeout_s:.0f} s", "node": socket.gethostname()}
        node = socket.gethostname()
        try:
            found = json.loads(done.stdout)
        except ValueError:
            found = {}
        if done.returncode != 0 or "latency_ms" not in found:
            errors = [line.removeprefix("error: ") for line in done.stderr.splitlines() if line.startswith("error: ")]
            return {"board": board, "node": node,
                    "error": found.get("error") or (errors[-1] if errors else f"bench exited {done.returncode}")}
        latency, load = found["latency_ms"], found.get("load_ms") or {}
        return {"board": board, "node": node, "backend": found.get("backend"), "cold_start_ms": found.get("cold_start_ms"),
                "first_load_ms": load.get("first"), "warm_load_ms": load.get("warm"),
                "peak_memory_bytes": (found.get("peak_memory") or {}).get("bytes_added"),
                "p50_ms": latency.get("p50"), "p95_ms": latency.get("p95"), "p99_ms": latency.get("p99"),
                "mj_per_inference": found.get("mj_per_inference"), "energy": found.get("energy"),
                "frames": found.get("frames"), "error": None,
                **({"operators": slowest_kinds(found.get("operators") or {})} if operators else {})}


SLOWEST_KINDS = 5


def slowest_kinds(profile: dict[str, Any]) -> dict[str, Any]:
    """What a job's table keeps of ``bench --operators``: the kernel time per run and the
    slowest operator kinds (op, where it ran, nodes, share), or the reason there is none."""
    if "by_op" not in profile:
        return {"reason": profile.get("reason") or "the bench reported no operators"}
    return {"us_per_run": profile.get("us_per_run"), "nodes": profile.get("nodes"), "method": profile.get("method"),
            "by_op": [{k: g.get(k) for k in ("op", "placed_on", "nodes", "us", "share")}
                      for g in profile["by_op"][:SLOWEST_KINDS]]}


def bench_remote(target: str, board: str, frames: int, timeout_s: float, packed: bytes,
                 operators: bool = False) -> dict[str, Any]:
    """bench_cell as a Ray task (the folder a top-level argument, so Ray fetches it to the node)."""
    import ray

    result = bench_cell(packed, target, board, frames, timeout_s, operators)
    result["node"] += "/" + ray.get_runtime_context().get_node_id()[:8]
    return result
