"""Per-operator time and placement of one artifact (`edgeserve bench --operators`), as Qualcomm
AI Hub's profile jobs report each layer's time and compute unit: from the engine's own profiler
(Backend.operator_times), on the frame the bench timed, grouped by operator type."""

from __future__ import annotations

from typing import Any

import numpy as np

TOP_NODES = 10


def operator_profile(session: Any, frame: np.ndarray, runs: int) -> dict[str, Any]:
    """{"method", "runs", "by_op": [{"op", "placed_on", "nodes", "us", "share"}], "slowest_nodes"},
    or {"reason"} where the engine has no profiler edgeserve can read."""
    try:
        nodes = session.operator_times(frame, runs)
    except NotImplementedError as exc:
        return {"reason": str(exc)}
    measured = sum(n["us"] for n in nodes)
    total = measured or 1.0  # every node under the profiler's resolution: shares of 0, not a division by 0
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for n in nodes:
        group = groups.setdefault((n["op"], n["placed_on"]), {"op": n["op"], "placed_on": n["placed_on"],
                                                              "nodes": 0, "us": 0.0})
        group["nodes"] += 1
        group["us"] += n["us"]
    by_op = sorted(groups.values(), key=lambda g: -g["us"])
    for g in by_op:
        g["us"], g["share"] = round(g["us"], 2), round(g["us"] / total, 4)
    return {"method": f"{session.backend}'s own profiler, {runs} runs, mean per run", "runs": runs,
            "nodes": len(nodes), "us_per_run": round(measured, 2), "by_op": by_op,
            "slowest_nodes": sorted(nodes, key=lambda n: -n["us"])[:TOP_NODES]}
