"""Damaged and hostile files through the CLI, as a user runs it, with a time limit per command.

A plan is a list of files, each with the commands to run on it. One child process walks the
plan and calls the CLI in-process for each command (TFLM already runs in grandchildren, see
converters/microcontroller/child.py). Before each command it says which one it starts; the parent gives
every command `per_command` seconds, so a hang is named (file and command) and is a failure,
as is a dead child: nothing a file contains may kill edgeserve or stop it answering. The
child also records, per command, how far the command raised its peak resident memory.

The file kinds are in fuzz_models.py (.tflite), fuzz_wav.py, fuzz_manifests.py and
fuzz_onnx.py. Used by tests/test_cli_fuzz.py (a few hundred files per kind) and
benchmarks/fuzz_cli.py (any count).
"""

from __future__ import annotations

import collections
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# One entry of a plan: {"file": label, "commands": [[name, argv, only_if_this_path_exists or None
# (, the folder to run it in)], ...]}
Plan = list[dict[str, Any]]

CHILD = textwrap.dedent("""
    import json, os, resource, sys, time, traceback, warnings
    warnings.filterwarnings("ignore")
    report = os.fdopen(os.dup(1), "w", buffering=1)
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1); os.dup2(quiet, 2)  # what the commands print is not the protocol
    import click
    from edgeserve.cli import cli
    with open(sys.argv[1]) as f:
        plan = json.load(f)

    def call(args):
        try:
            code = cli.main(args, prog_name="edgeserve", standalone_mode=False)
            return "exit 0" if code in (None, 0) else f"exit {code}"
        except click.exceptions.Exit as exc:
            return f"exit {exc.exit_code}"
        except click.ClickException as exc:
            return f"exit {exc.exit_code}"
        except SystemExit as exc:
            return f"exit {exc.code}"
        except BaseException as exc:
            return "traceback " + type(exc).__name__ + ": " + traceback.format_exc().splitlines()[-1][:200]

    def peak_mib():
        # VmHWM: this process's own peak. ru_maxrss is carried over from the parent through
        # fork and exec on Linux, so under a big parent (pytest) it would never rise.
        try:
            with open("/proc/self/status") as status:
                return next(int(l.split()[1]) for l in status if l.startswith("VmHWM:")) / 1024
        except (OSError, StopIteration):
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    for entry in plan:
        row = {"file": entry["file"], "outcomes": {}, "seconds": {}, "grew_mib": {}}
        for name, argv, needs, *cwd in entry["commands"]:
            if needs is not None and not os.path.exists(needs):
                continue
            report.write("begin " + json.dumps([entry["file"], name]) + "\\n")
            before, start = peak_mib(), time.monotonic()
            home = os.getcwd()
            if cwd:
                os.chdir(cwd[0])
            try:
                row["outcomes"][name] = call(argv)
            finally:
                os.chdir(home)
            row["seconds"][name] = round(time.monotonic() - start, 3)
            row["grew_mib"][name] = round(peak_mib() - before, 1)
        report.write(json.dumps(row) + "\\n")
    report.write("done\\n")
""")


def run_plan(plan: Plan, work: Path, per_command: float = 60.0) -> tuple[list[dict[str, Any]], str | None]:
    """Rows per file, and the failure (a dead child, or a command silent for `per_command`
    seconds, naming the file and the command) or None."""
    work.mkdir(parents=True, exist_ok=True)
    plan_file = work / "plan.json"
    plan_file.write_text(json.dumps(plan))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryFile() as stderr:
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(plan_file)], stdout=subprocess.PIPE,
                                 stderr=stderr, env=env, cwd=work, start_new_session=True)
        assert child.stdout is not None
        lines, pending, started, hung = [], b"", None, None
        while True:
            ready, _, _ = select.select([child.stdout], [], [], per_command)
            if not ready:
                hung = started
                os.killpg(child.pid, signal.SIGKILL)  # the grandchildren too
                break
            chunk = os.read(child.stdout.fileno(), 1 << 16)
            if not chunk:
                break
            pending += chunk
            *complete, pending = pending.split(b"\n")
            for line in complete:
                text = line.decode()
                lines.append(text)
                if text.startswith("begin "):
                    started = json.loads(text[len("begin "):])
        code = child.wait()
    rows = [json.loads(line) for line in lines if line.startswith("{")]
    if hung is None and lines and lines[-1] == "done" and code == 0:
        return rows, None
    if hung is not None:
        return rows, f"`{hung[1]}` on {hung[0]} gave no answer within {per_command:.0f} s (a hang)"
    where = f"`{started[1]}` on {started[0]}" if started else "start-up"
    return rows, f"the child died with status {code} during {where}"


def tally(rows: list[dict[str, Any]]) -> dict[str, collections.Counter[str]]:
    """Outcome counts per command ("exit 0", "exit 1", "traceback ...")."""
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for row in rows:
        for command, outcome in row["outcomes"].items():
            counts[command][outcome.split(":")[0]] += 1
    return dict(counts)


def tracebacks(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [row for row in rows if any(v.startswith("traceback") for v in row["outcomes"].values())]


def slowest(rows: list[dict[str, Any]]) -> tuple[float, str]:
    """The longest single command, and which: the figure the per-command limit is judged by."""
    return max(((s, f"{c} on {row['file']}") for row in rows for c, s in row["seconds"].items()), default=(0.0, "-"))


def most_memory(rows: list[dict[str, Any]]) -> tuple[float, str]:
    """The largest rise of the child's peak resident memory during one command, and which."""
    return max(((m, f"{c} on {row['file']}") for row in rows for c, m in row["grew_mib"].items()), default=(0.0, "-"))


def summary(rows: list[dict[str, Any]], strategies: collections.Counter[str], seconds: float,
            failure: str | None) -> dict[str, Any]:
    """What benchmarks/fuzz_cli.py prints for one kind."""
    slow, mem = slowest(rows), most_memory(rows)
    return {"files": len(rows), "strategies": dict(sorted(strategies.items())), "seconds": round(seconds),
            "child_failure": failure,
            "outcomes": {command: dict(counts) for command, counts in tally(rows).items()},
            "slowest_command_s": [round(slow[0], 2), slow[1]], "largest_memory_rise_mib": [mem[0], mem[1]],
            "tracebacks": tracebacks(rows)[:20]}
