"""The corpus matrix: every real model of tests/corpus.py through every target, as a user runs it.

    python benchmarks/corpus.py [--model NAME ...] [--target T ...] [--json] [--markdown]
    python benchmarks/corpus.py --from-rows rows.jsonl     # the matrix of a test run's rows

One `edgeserve convert` process per model with all its targets (every requested target is
accounted for: built and checked against the source, or REFUSED with its reason), run with
the CLI a user has, `--no-fit-check` so a model too big for a board is still measured. Per
cell: ok / refused / failed, the figure the check measured against the source in its own
framework (SQNR in dB and top-1 agreement for the quantized targets, bit-exactness with the
TFLM interpreter for the microcontroller ones, SQNR for the float ones), and the reason of a
refusal. A cell that ends in a traceback is marked as such: that is a defect, not a refusal.
The matrix in docs/sources.md is this script's --markdown output.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from corpus import CORPUS, TARGETS, figure, run_model  # noqa: E402


def markdown(rows: list[dict], targets: tuple[str, ...]) -> str:
    lines = ["| model | " + " | ".join(targets) + " | convert s |", "|---" * (len(targets) + 2) + "|"]
    for row in rows:
        cells = []
        for target in targets:
            cell = row["cells"].get(target, {})
            status = cell.get("status", "-")
            measured = figure(cell)
            cells.append(f"{status}: {measured}" if status in ("ok", "failed") and measured else status)
        lines.append(f"| {row['model']} ({row['family']}) | " + " | ".join(cells) + f" | {row['seconds']:.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", help="only these corpus entries (repeatable)")
    parser.add_argument("--target", action="append", help="only these targets (repeatable)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--keep", type=Path, help="convert into this folder and keep it (default: a temporary one)")
    parser.add_argument("--from-rows", type=Path, help="print the matrix of rows a run wrote (tests/test_corpus.py "
                        "with EDGESERVE_CORPUS_JSON=FILE: one JSON row per line) instead of converting")
    args = parser.parse_args()
    if args.from_rows:
        rows = [json.loads(line) for line in args.from_rows.read_text().splitlines() if line.strip()]
        order = {m.name: i for i, m in enumerate(CORPUS)}
        print(markdown(sorted(rows, key=lambda r: order.get(r["model"], len(order))), TARGETS))
        return
    models = [m for m in CORPUS if not args.model or m.name in args.model]
    rows = []
    with tempfile.TemporaryDirectory(prefix="edgeserve-corpus-") as temporary:
        work = args.keep or temporary
        for model in models:
            targets = tuple(t for t in model.targets if not args.target or t in args.target)
            row = run_model(model, targets, Path(work))
            rows.append(row)
            if not args.json:
                summary = ", ".join(f"{t}={c['status']}" for t, c in row["cells"].items())
                print(f"{row['model']}: {row['seconds']:.0f} s, exit {row['exit_code']}: {summary}", flush=True)
                for target, cell in row["cells"].items():
                    if cell["status"] != "ok":
                        print(f"    {target}: {cell.get('reason', '')[:300]}", flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))
    elif args.markdown:
        print(markdown(rows, TARGETS))


if __name__ == "__main__":
    main()
