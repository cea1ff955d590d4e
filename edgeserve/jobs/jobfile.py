"""A job file: models, the flags each needs, and the targets every model goes to.

    targets = ["tflite-int8", "onnx"]      # every model's targets, unless a model names its own
    timeout_s = 1800                       # per cell
    memory_mb = 4000                       # per cell: what a Ray task asks for (doubled on an OOM kill)
    boards = ["host"]                      # optional: time each served artifact on these boards (bench.py)
    bench_frames = 200                     # frames each bench times
    bench_operators = false                # also each operator's time, from the engine's profiler

    [[models]]
    path = "digits_cnn.keras"              # relative to the job file
    name = "digits"                        # default: the file name without its suffix
    calib = "calib.npz"                    # optional, as convert's --calib
    eval = "eval.npz"                      # optional, as convert's --eval
    flags = ["--calib-samples", "200"]     # any other convert flags
    targets = ["tflite-int8", "mcu-c"]     # optional: this model's own targets

Every (model, target) pair is a cell. Files a cell reads (the model, --calib, --eval and the
file-valued flags) are named relative to the job file, and cross to other machines by content.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path
from typing import Any

from edgeserve.errors import InputError

# convert's flags whose value is a file or folder: it travels with the cell.
FILE_FLAGS = ("--calib", "--eval", "--labels", "--preprocess", "--decoder-options", "--sign-key", "--cmsis-nn")
# Flags the job sets for each cell itself.
JOB_FLAGS = ("-t", "--target", "-o", "--out", "--json", "-j", "--jobs")
CELLS = "cells"  # OUT/cells/<model>/<target>/: each cell's own convert; OUT/<model>/: the model's folder
DEFAULT_TIMEOUT_S = 1800.0
DEFAULT_MEMORY_MB = 4000
DEFAULT_BENCH_FRAMES = 200


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    name: str
    path: Path
    flags: tuple[str, ...]  # convert's flags, file values as absolute paths
    targets: tuple[str, ...]

    def files(self) -> dict[str, Path]:
        """Every file the cell reads, by the name it has in the cell: "model", then each file flag."""
        found = {"model": self.path}
        for i, flag in enumerate(self.flags[:-1]):
            if flag in FILE_FLAGS:
                found[f"{flag.lstrip('-')}"] = Path(self.flags[i + 1])
        return found


@dataclasses.dataclass(frozen=True)
class Job:
    path: Path
    models: tuple[ModelSpec, ...]
    timeout_s: float
    memory_mb: int
    boards: tuple[str, ...] = ()
    bench_frames: int = DEFAULT_BENCH_FRAMES
    bench_operators: bool = False

    def cells(self) -> list[tuple[ModelSpec, str]]:
        return [(model, target) for model in self.models for target in model.targets]


def read_job(path: Path) -> Job:
    """The job at ``path``, or an InputError naming what was expected and what was given."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read the job file {path}: {exc.strerror or exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: expected a TOML job file: {exc}") from exc
    unknown = set(data) - {"targets", "timeout_s", "memory_mb", "boards", "bench_frames", "bench_operators", "models"}
    if unknown:
        raise InputError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}; expected targets, timeout_s, "
                         "memory_mb, boards, bench_frames, bench_operators and [[models]]")
    targets = _targets(data.get("targets", []), f"{path}: targets")
    models_data = data.get("models")
    if not isinstance(models_data, list) or not models_data:
        raise InputError(f"{path}: expected at least one [[models]] table with a path; got {models_data!r}")
    models = [_model(m, i, path.parent, targets, path) for i, m in enumerate(models_data)]
    names = [m.name for m in models]
    doubled = sorted({n for n in names if names.count(n) > 1})
    if doubled:
        raise InputError(f"{path}: two models are named {doubled[0]!r}; give each a name = \"...\"")
    timeout_s = _positive(data.get("timeout_s", DEFAULT_TIMEOUT_S), f"{path}: timeout_s")
    memory_mb = int(_positive(data.get("memory_mb", DEFAULT_MEMORY_MB), f"{path}: memory_mb"))
    boards = _boards(data.get("boards", []), f"{path}: boards")
    bench_frames = int(_positive(data.get("bench_frames", DEFAULT_BENCH_FRAMES), f"{path}: bench_frames"))
    bench_operators = data.get("bench_operators", False)
    if not isinstance(bench_operators, bool):
        raise InputError(f"{path}: bench_operators: expected true or false; got {bench_operators!r}")
    return Job(path=path, models=tuple(models), timeout_s=timeout_s, memory_mb=memory_mb, boards=boards,
               bench_frames=bench_frames, bench_operators=bench_operators)


def _boards(value: Any, where: str) -> tuple[str, ...]:
    from edgeserve.device_profiles import list_profiles

    return _names(value, where, "device profile", list_profiles())


def _model(entry: Any, index: int, base: Path, job_targets: tuple[str, ...], path: Path) -> ModelSpec:
    where = f"{path}: models[{index}]"
    if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
        raise InputError(f"{where}: expected a table with path = \"MODEL FILE\"; got {entry!r}")
    unknown = set(entry) - {"path", "name", "calib", "eval", "flags", "targets"}
    if unknown:
        raise InputError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; expected path, name, calib, eval, "
                         "flags, targets")
    model = _existing(base, entry["path"], f"{where}: path")
    flags = entry.get("flags", [])
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise InputError(f"{where}: flags: expected a list of strings; got {flags!r}")
    taken = [f for f in flags if f.split("=")[0] in JOB_FLAGS]
    if taken:
        raise InputError(f"{where}: flags: {taken[0]} is set by the job for each cell; give targets instead")
    resolved: list[str] = []
    for key in ("calib", "eval"):
        if key in entry:
            resolved += [f"--{key}", str(_existing(base, entry[key], f"{where}: {key}"))]
    for i, flag in enumerate(flags):
        if i and flags[i - 1] in FILE_FLAGS:
            resolved.append(str(_existing(base, flag, f"{where}: {flags[i - 1]}")))
        else:
            resolved.append(flag)
    if flags and flags[-1] in FILE_FLAGS:
        raise InputError(f"{where}: flags: {flags[-1]} needs a value")
    targets = _targets(entry["targets"], f"{where}: targets") if "targets" in entry else job_targets
    if not targets:
        raise InputError(f"{where}: no targets: give targets = [...] for the job or for this model")
    name = entry.get("name") or re.sub(r"[^A-Za-z0-9_.-]+", "_", model.name.split(".")[0]) or f"model{index}"
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name in (".", "..") \
            or name.startswith("."):
        raise InputError(f"{where}: name: expected letters, digits, '_', '.', '-' (it names a folder); got {name!r}")
    if name in (CELLS, "jobs.json", "jobs.md", "jobs.html"):
        raise InputError(f"{where}: name: {name!r} is a name the job's own results take; give another")
    return ModelSpec(name=name, path=model, flags=tuple(resolved), targets=targets)


def _targets(value: Any, where: str) -> tuple[str, ...]:
    from edgeserve.converters import target_names

    return _names(value, where, "target", target_names())


def _names(value: Any, where: str, kind: str, known: list[str]) -> tuple[str, ...]:
    """A list of names each of which is ``known``, in order, each once."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{where}: expected a list of {kind} names; got {value!r}")
    unknown = [v for v in value if v not in known]
    if unknown:
        raise InputError(f"{where}: unknown {kind} {unknown[0]!r}; expected one of {', '.join(known)}")
    return tuple(dict.fromkeys(value))


def _existing(base: Path, value: Any, where: str) -> Path:
    if not isinstance(value, str) or not value:
        raise InputError(f"{where}: expected a path; got {value!r}")
    found = (base / value).resolve()
    if not found.exists():
        raise InputError(f"{where}: {value} does not exist (looked for {found})")
    return found


def _positive(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise InputError(f"{where}: expected a positive number; got {value!r}")
    return float(value)
