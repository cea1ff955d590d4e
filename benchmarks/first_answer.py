"""How long a user waits for the first answer from `edgeserve convert`, in a fresh process.

    python benchmarks/first_answer.py [--json] [--repeat 3]

mistakes: each mistake that needs no framework (a missing source, a missing or absent
--calib, calibration of the wrong shape, a missing or wrong --eval, an unknown profile)
must be said in under 2 s (issue 27), before TensorFlow, torch or coremltools is imported.
Each is `python -m edgeserve convert ...` as a user types it; the figure is the wall time to
the process's exit, the best of --repeat runs (the first also pays the page cache).

first line: on a conversion that works (the digits example's Keras CNN, and MLPerf Tiny's
vww_96 Keras 2 .h5 when ../shared is beside the project), the time to the first progress
line on stderr, which is not a terminal here (one line per stage), and to the process's exit.

tests/test_fast_errors.py asserts each mistake's message and that no framework was imported;
the seconds live here, not in a test.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MLPERF = ROOT.parent / "shared" / "testdata" / "mlperf-tiny"
BOUND_S = 2.0


def _edgeserve(*args: object) -> list[str]:
    return [sys.executable, "-m", "edgeserve", *map(str, args)]


def mistakes(work: Path, keras: Path, calib: Path) -> list[tuple[str, list[str]]]:
    wrong = work / "wrong_shape.npz"
    np.savez(wrong, x=np.zeros((4, 32, 32, 3), np.float32))
    (work / "eval_folder").mkdir(exist_ok=True)
    out = work / "out"
    cases = [
        ("source file missing", _edgeserve("convert", work / "gone.keras", "-t", "tflite-int8", "--calib", calib,
                                           "-o", out)),
        ("--calib file missing", _edgeserve("convert", keras, "-t", "tflite-int8", "--calib", work / "gone.npz",
                                            "-o", out)),
        ("no --calib for INT8", _edgeserve("convert", keras, "-t", "tflite-int8", "-o", out)),
        ("calibration of the wrong shape (.keras)", _edgeserve("convert", keras, "-t", "tflite-int8", "--calib",
                                                               wrong, "-o", out)),
        ("--eval is a folder", _edgeserve("convert", keras, "-t", "tflite-int8", "--calib", calib, "--eval",
                                          work / "eval_folder", "-o", out)),
        ("unknown profile", _edgeserve("convert", keras, "-t", "mcu", "--calib", calib, "-p", "stm32h7477",
                                       "-o", out)),
    ]
    if MLPERF.is_dir():
        cases.insert(4, ("calibration of the wrong shape (Keras 2 .h5)",
                         _edgeserve("convert", MLPERF / "vww_96.h5", "-t", "tflite-int8", "--calib", wrong,
                                    "-o", out)))
    return cases


def time_mistake(command: list[str], repeat: int) -> dict:
    best, line = float("inf"), ""
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        best = min(best, time.perf_counter() - start)
        errors = [text for text in done.stderr.splitlines() if text.startswith("error:")]
        if done.returncode == 0 or not errors:
            raise SystemExit(f"error: expected a refusal from {' '.join(command[3:])}, got exit {done.returncode}: "
                             f"{done.stderr.strip()[-300:]}")
        line = errors[0]
    return {"seconds": round(best, 2), "error": line[:160], "within_bound": best <= BOUND_S}


def time_first_line(command: list[str]) -> dict:
    """Seconds to the first line on stderr and to the exit of one conversion that works."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    first = process.stderr.readline()
    first_s = time.perf_counter() - start
    _, rest = process.communicate()  # both pipes drained, so neither can fill and stall the child
    code = process.returncode
    if code != 0:
        raise SystemExit(f"error: {' '.join(command[3:])} failed with exit {code}: {(first + rest)[-300:]}")
    return {"first_line_seconds": round(first_s, 1), "first_line": first.strip()[:100],
            "total_seconds": round(time.perf_counter() - start, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        spec = importlib.util.spec_from_file_location("build_model", ROOT / "examples" / "digits" / "build_model.py")
        digits = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(digits)
        example = work / "digits_example"
        digits.build(example)
        keras, calib = example / "digits_cnn.keras", example / "calib.npz"
        rows = [{"case": name, **time_mistake(command, args.repeat)} for name, command in mistakes(work, keras, calib)]
        works = [("digits_cnn.keras -t tflite-int8", _edgeserve("convert", keras, "-t", "tflite-int8", "--calib",
                                                                 calib, "-o", work / "ok_digits"))]
        if MLPERF.is_dir():
            works.append(("vww_96.h5 -t tflite-int8 --calib-random", _edgeserve(
                "convert", MLPERF / "vww_96.h5", "-t", "tflite-int8", "--calib-random", "-o", work / "ok_vww")))
        first = [{"case": name, **time_first_line(command)} for name, command in works]
    if args.json:
        print(json.dumps({"bound_seconds": BOUND_S, "mistakes": rows, "first_line": first}, indent=2))
        return
    print(f"| mistake | seconds to the error (best of {args.repeat}) | within {BOUND_S:.0f} s | error line |")
    print("|---|---:|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['seconds']:.2f} | {'yes' if r['within_bound'] else '**no**'} | `{r['error']}` |")
    print()
    print("| conversion that works | first progress line (s) | whole convert (s) | first line |")
    print("|---|---:|---:|---|")
    for r in first:
        print(f"| {r['case']} | {r['first_line_seconds']} | {r['total_seconds']} | `{r['first_line']}` |")


if __name__ == "__main__":
    main()
