"""Damaged and hostile files through the CLI, any count per kind; prints the figures per kind.

    python benchmarks/fuzz_cli.py [--kind models|wav|manifests|onnx|paths|data|threads ...] [--count 400] [--seed 0]

`--count` is per model for `models` (three models) and per kind otherwise. Needs
../shared/testdata (or EDGESERVE_TESTDATA) for models and manifests, pymicro-wakeword for
wav and onnx for onnx. tests/test_cli_fuzz.py is the CI-sized slice; the README's figures
come from this script. `paths` (tests/fuzz_paths.py): output folders of every shape and special
files in every path argument, each case's disk snapshotted before and after; `data`
(tests/fuzz_data.py): lying calibration and evaluation data through convert, then verify;
`threads` (tests/fuzz_threads.py): the Session API from 8 threads, closed halfway. Exits 1 on any
traceback, hang or child death (and for paths, a wrong outcome or a byte touched outside OUT).
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

from cli_fuzz import run_plan, summary  # noqa: E402

KINDS = ("models", "wav", "manifests", "onnx", "paths", "data", "threads")


def plan_for(kind: str, testdata: Path, folder: Path, count: int, seed: int):
    if kind == "models":
        from fuzz_models import write_model_mutants

        return write_model_mutants(testdata, folder, count, seed)
    if kind == "wav":
        import pymicro_wakeword
        from fuzz_wav import write_wav_mutants

        model = Path(pymicro_wakeword.__file__).parent / "models" / "alexa.tflite"
        return write_wav_mutants(model, folder, count, seed)
    if kind == "data":
        from fuzz_data import write_data_cases

        plan, strategies, expect = write_data_cases(testdata, folder, count, seed)
        for entry in plan:
            must, out = expect[entry["file"]]
            entry["expect"] = [must, str(out)]
        return plan, strategies
    if kind == "manifests":
        from fuzz_manifests import build_base, write_manifest_mutants

        return write_manifest_mutants(build_base(testdata, folder / "base"), folder / "mutants", count, seed)
    from fuzz_onnx import write_onnx_mutants

    return write_onnx_mutants(folder, count, seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", action="append", choices=KINDS, help="repeatable; all kinds when not given")
    parser.add_argument("--count", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-command", type=float, default=60.0, help="seconds before a command counts as hung")
    args = parser.parse_args()
    testdata = Path(os.environ.get("EDGESERVE_TESTDATA", ROOT.parent / "shared" / "testdata"))
    results, bad = {}, False
    for kind in args.kind or KINDS:
        with tempfile.TemporaryDirectory() as tmp:
            start = time.monotonic()
            if kind == "threads":  # --count calls per thread, 8 threads
                from fuzz_threads import run_threads

                got = run_threads(testdata / "mlperf-tiny" / "kws_ref_model.tflite", 8, args.count, args.seed)
                got["seconds"] = round(time.monotonic() - start)
                allowed = {"ok", "ConcurrentUseError", "closed", "InputError"}
                bad |= "failure" in got or any(set(o) - allowed for o in got.get("tally", {}).values())
                print(json.dumps({kind: got}, indent=2), flush=True)
                continue
            if kind == "paths":
                from fuzz_paths import run_path_cases

                got = run_path_cases(testdata, Path(tmp), args.count, args.seed, args.per_command)
                results[kind] = summary(got["rows"], got["strategies"], time.monotonic() - start, got["failure"])
                results[kind] |= {k: got[k] for k in ("outcomes", "wrong_outcome", "trespass", "reads_checked")}
                bad |= bool(got["failure"] or got["wrong_outcome"] or got["trespass"] or results[kind]["tracebacks"])
                print(json.dumps({kind: results[kind]}, indent=2, default=str), flush=True)
                continue
            plan, strategies = plan_for(kind, testdata, Path(tmp) / "files", args.count, args.seed)
            rows, failure = run_plan(plan, Path(tmp) / "work", args.per_command)
            results[kind] = summary(rows, strategies, time.monotonic() - start, failure)
            if kind == "data":
                from fuzz_data import judge

                results[kind]["wrong_outcome"] = judge(rows, {e["file"]: (e["expect"][0], Path(e["expect"][1]))
                                                              for e in plan})
                bad |= bool(results[kind]["wrong_outcome"])
            if kind == "manifests":
                refused = {e["file"] for e in plan if e["must_refuse"]}
                results[kind]["unstamped_edits_let_through"] = [
                    row["file"] for row in rows
                    if row["file"] in refused and set(row["outcomes"].values()) != {"exit 1"}]
                bad |= bool(results[kind]["unstamped_edits_let_through"])
        bad |= bool(failure or results[kind]["tracebacks"])
        print(json.dumps({kind: results[kind]}, indent=2), flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
