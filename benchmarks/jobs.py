"""A job on one local worker against two, and the same job run again (issue 50's figures).

    python benchmarks/jobs.py [JOB.toml] [--json]

Default job: examples/jobs/small_zoo.toml (after `make demo`). In one run, side by side: the
job into a fresh folder with -j 1, then with -j 2, then again into the second folder (every cell
taken from its folder). Convert's own target cache is off for all of them
(EDGESERVE_TARGET_CACHE=off), so the second fresh run takes nothing from the first. Prints the
wall times, the speed-up of two workers and the re-run as a share of the first.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(job: Path, out: Path, workers: int) -> tuple[float, dict]:
    from edgeserve.jobs.jobfile import read_job
    from edgeserve.jobs.run import run_job

    started = time.perf_counter()
    table = run_job(read_job(job), out, workers=workers, say=lambda line: None)
    return time.perf_counter() - started, table


def side_by_side(job: Path) -> dict:
    """The job into a fresh folder on one worker, into another on two, then again into the
    second; convert's target cache off, so no run takes a target from another."""
    os.environ["EDGESERVE_TARGET_CACHE"] = "off"
    work = Path(tempfile.mkdtemp(prefix="edgeserve-jobs-bench-"))
    try:
        one, table = timed(job, work / "one", 1)
        two, second = timed(job, work / "two", 2)
        again, cached = timed(job, work / "two", 2)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    statuses = [c["status"] for c in table["cells"]]
    return {"job": str(job), "cells": len(table["cells"]), "ok": statuses.count("ok"),
            "same_statuses": statuses == [c["status"] for c in second["cells"]], "cpus": os.cpu_count(),
            "one_worker_s": round(one, 1), "two_workers_s": round(two, 1), "speedup": round(one / two, 2),
            "rerun_s": round(again, 4), "rerun_share": round(again / two, 5),
            "rerun_all_cached": all(c["cached"] for c in cached["cells"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("job", nargs="?", type=Path, default=ROOT / "examples/jobs/small_zoo.toml")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = side_by_side(args.job)
    one, two, again = figures["one_worker_s"], figures["two_workers_s"], figures["rerun_s"]
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(f"{figures['cells']} cells on {figures['cpus']} CPUs: one worker {one:.1f} s, two {two:.1f} s "
              f"({figures['speedup']:.2f}x); again {1000 * again:.0f} ms ({100 * figures['rerun_share']:.1f} % of the "
              f"first, every cell cached: {figures['rerun_all_cached']})")


if __name__ == "__main__":
    main()
