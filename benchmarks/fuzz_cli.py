"""Mutated models through `inspect`, `convert -t mcu`, `verify` and `run`; prints the counts.

    python benchmarks/fuzz_cli.py [--per-model 400] [--seed 0]

Needs ../shared/testdata (or EDGESERVE_TESTDATA). The CI-sized slice of this is
tests/test_cli_fuzz.py; the figures in the README come from this script.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from cli_fuzz import MODELS, run_child, tally, write_mutants  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-model", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    testdata = Path(os.environ.get("EDGESERVE_TESTDATA", ROOT.parent / "shared" / "testdata"))
    with tempfile.TemporaryDirectory() as tmp:
        start = time.monotonic()
        strategies = write_mutants(testdata, Path(tmp) / "mutants", args.per_model, args.seed)
        results, failure = run_child(Path(tmp) / "mutants", Path(tmp) / "work", timeout=4 * 3600)
        seconds = time.monotonic() - start
    tracebacks = [r for r in results if any(str(v).startswith("traceback") for v in r.values())]
    print(json.dumps({
        "files": len(results), "models": list(MODELS), "strategies": dict(strategies),
        "seconds": round(seconds), "child_failure": failure,
        "outcomes": {command: dict(counts) for command, counts in tally(results).items()},
        "tracebacks": tracebacks[:20],
    }, indent=2))
    sys.exit(1 if failure or tracebacks else 0)


if __name__ == "__main__":
    main()
