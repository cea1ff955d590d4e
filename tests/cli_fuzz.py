"""Mutated models through `inspect`, `convert -t mcu`, `verify` and `run`, as a user runs them.

One child process walks the mutants and calls the CLI in-process for each command (TFLM
already runs in grandchildren, see converters/mcu/child.py); if that child dies, the
mutant it was on is named, and that is a failure: nothing a file contains may kill edgeserve.
Used by tests/test_cli_fuzz.py (a few hundred mutants) and benchmarks/fuzz_cli.py (thousands).
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("tflm/hello_world_int8", "mlperf-tiny/kws_ref_model", "tflm/micro_speech_quantized")

CHILD = textwrap.dedent("""
    import json, os, sys, traceback, warnings
    warnings.filterwarnings("ignore")
    report = os.fdopen(os.dup(1), "w", buffering=1)
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1); os.dup2(quiet, 2)  # what the commands print is not the protocol
    import click
    from edgeserve.cli import cli
    folder, work = sys.argv[1], sys.argv[2]

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

    for name in sorted(os.listdir(folder)):
        if not name.endswith(".tflite"):
            continue
        model = os.path.join(folder, name)
        out = os.path.join(work, name + ".out")
        report.write("begin " + name + "\\n")
        results = {"inspect": call(["inspect", model, "--json"]),
                   "convert": call(["convert", model, "-t", "mcu", "--no-fit-check", "-o", out, "-q"])}
        if os.path.isdir(out):
            results["verify"] = call(["verify", out])
        results["run"] = call(["run", model, "--input", model[: -len(".tflite")] + ".npy", "-q"])
        report.write(json.dumps({"file": name, **results}) + "\\n")
    report.write("done\\n")
""")


def write_mutants(testdata: Path, folder: Path, per_model: int, seed0: int = 0) -> collections.Counter[str]:
    """``per_model`` mutants of each model in MODELS, with an input .npy each; strategy counts."""
    from test_model_validation import _Layout, mutant

    from edgeserve.tflite_model import TfliteModel

    folder.mkdir(parents=True, exist_ok=True)
    strategies: collections.Counter[str] = collections.Counter()
    for k, name in enumerate(MODELS):
        data = (testdata / f"{name}.tflite").read_bytes()
        model = TfliteModel.from_bytes(data)
        layout = _Layout(data)
        layout.root()
        weights = np.zeros(len(data), bool)
        for buffer in model.buffers:
            weights[buffer.offset : buffer.offset + buffer.size] = True
        tensor = model.subgraphs[0].tensors[model.subgraphs[0].inputs[0]]
        example = np.zeros(tensor.shape, tensor.numpy_dtype)
        for seed in range(seed0 + k * 100_000, seed0 + k * 100_000 + per_model):
            strategy, mutated = mutant(data, layout, weights, seed)
            strategies[strategy] += 1
            (folder / f"{k}_{seed:07d}.tflite").write_bytes(mutated)
            np.save(folder / f"{k}_{seed:07d}.npy", example)
    return strategies


def run_child(folder: Path, work: Path, timeout: float) -> tuple[list[dict[str, Any]], str | None]:
    """Results per file, and the failure (a dead or hung child, naming the file) or None."""
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    try:
        child = subprocess.run([sys.executable, "-c", CHILD, str(folder), str(work)], capture_output=True,
                               text=True, timeout=timeout, env=env, check=False)
        stdout, code = child.stdout, child.returncode
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        code = None
    lines = stdout.splitlines()
    results = [json.loads(line) for line in lines if line.startswith("{")]
    begins = [line.split()[1] for line in lines if line.startswith("begin ")]
    if lines and lines[-1] == "done" and code == 0:
        return results, None
    last = begins[-1] if begins else "?"
    how = "hung (timeout)" if code is None else f"died with status {code}"
    return results, f"the child {how} on {folder / last}"


def tally(results: list[dict[str, Any]]) -> dict[str, collections.Counter[str]]:
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for row in results:
        for command, outcome in row.items():
            if command != "file":
                counts[command][outcome.split(":")[0]] += 1
    return dict(counts)
