"""Damaged model files through the commands a user runs (issue 13's fuzz, a CI-sized slice).

The probe: 2,200 mutants through `convert -t mcu --no-fit-check` gave 9 crashes (SIGSEGV,
SIGFPE inside TFLM) and 6 tracebacks, and `verify` 5 tracebacks. benchmarks/fuzz_cli.py runs
the full count; this runs 150 per model in CI.
"""

from __future__ import annotations

from pathlib import Path

from cli_fuzz import MODELS, run_child, tally, write_mutants


def test_mutants_through_inspect_convert_verify_run(testdata: Path, tmp_path: Path) -> None:
    strategies = write_mutants(testdata, tmp_path / "mutants", per_model=150)
    results, failure = run_child(tmp_path / "mutants", tmp_path / "work", timeout=1500)
    assert failure is None, failure
    assert len(results) == 150 * len(MODELS) and len(strategies) >= 8
    counts = tally(results)
    tracebacks = [r for r in results if any(str(v).startswith("traceback") for v in r.values())]
    assert not tracebacks, tracebacks[:5]
    for command in ("inspect", "convert", "run"):
        assert set(counts[command]) <= {"exit 0", "exit 1", "exit 2"}, counts[command]
    # Both outcomes happen: the check is not passing on refusals alone, nor on clean files alone.
    assert counts["convert"]["exit 0"] > 10 and counts["convert"]["exit 1"] > 100, counts
    assert counts["verify"]["exit 0"] > 10, counts
