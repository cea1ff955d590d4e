"""A target built by the previous run into the same output folder, from the same inputs, is kept.

Converting again with one more target used to rebuild every target. Each manifest entry now
carries ``reuse_key``: the sha256 of everything its artifact is a function of (the source file
and the signature it was read with, the calibration and evaluation data, the PreprocessSpec,
the profile, every option of the run, the artifacts it was built from, the versions of the
tools that can change its bytes, edgeserve's own code, and the EDGESERVE_* variables that pick
routes). A target whose previous entry has the same key, passed its checks, and whose files
still hash to what the entry records is kept as it is, marked ``reused``; any change of any of
those misses, and the target is built again. ``--no-reuse`` builds every target.

This is the output folder's own record; :mod:`edgeserve.conversion.cache` keeps the same entries under
the same keys for every folder.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edgeserve.manifest.record import check_file, file_records, package_versions

# The distributions whose versions can change what a target writes or how it is checked.
TOOLS = ("numpy", "tensorflow-cpu", "tensorflow", "keras", "ai-edge-litert", "ai-edge-quantizer", "litert-torch",
         "tflite-micro", "coremltools", "torch", "executorch", "torchao", "onnx", "onnxruntime", "onnxslim", "tf2onnx",
         "onnx2tf")
# The compilers and emulator the microcontroller targets build and check with.
PROGRAMS = ("gcc", "g++", "arm-none-eabi-gcc", "qemu-system-arm")
_NOT_KEYS = ("EDGESERVE_ISOLATION", "EDGESERVE_CACHE", "EDGESERVE_CACHE_DIR", "EDGESERVE_TARGET_CACHE",
             "EDGESERVE_TARGET_CACHE_MAX_BYTES", "EDGESERVE_TESTDATA", "EDGESERVE_HEARTBEAT_S")


def run_key(source: Mapping[str, Any], signature: Any, calibration: Any, evaluation: Any, preprocess: Any,
            profile: Any, options: Mapping[str, Any], loading: Mapping[str, Any]) -> dict[str, Any]:
    """What every target of this run shares; :func:`target_key` adds the target's own part."""
    # The source by its bytes and its file name (an mcu build's C names come from it), not by the
    # folder it sits in: the same model copied to another machine (a job's cell on a Ray node) or
    # folder is the same source.
    described = {k: v for k, v in source.items() if k != "path"} | {"file_name": Path(str(source.get("path"))).name}
    return {
        "source": described,
        "signature": repr(signature),
        "loading": {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in loading.items()},
        "calibration": _data(calibration),
        "evaluation": _data(evaluation),
        "preprocess": preprocess.to_dict() if preprocess is not None else None,
        "profile": _profile(profile),
        # Every option given, as given (an unset one is None from the CLI and absent from the API):
        # a default spelled out by one caller and left out by another is a miss, never a wrong hit.
        "options": {k: _plain(v) for k, v in sorted(options.items()) if v is not None},
        "tools": tool_versions(),
        "edgeserve": code_digest(),
        "environment": {k: v for k, v in sorted(os.environ.items())
                        if k.startswith("EDGESERVE_") and k not in _NOT_KEYS},
    }


def target_key(run: Mapping[str, Any], target: str, built_from: Mapping[str, str | None]) -> str:
    """The key of one target: the run's, the target's name and the sha256 of each artifact it
    is built from (a new tflite-int8 model makes a new mcu build)."""
    body = {"run": run, "target": target, "built_from": dict(sorted(built_from.items()))}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def reusable(previous: Mapping[str, Any] | None, key: str, root: Path) -> str | None:
    """None when ``previous`` (the entry of the run before, in ``root``) can stand for this run's
    build; else why not (for --debug: a miss is never an error)."""
    if previous is None:
        return "no entry of the previous run"
    if previous.get("reuse_key") != key:
        return "its inputs, options or tools differ"
    if previous.get("status") != "ok":
        return "it did not pass its checks"
    for record in file_records(previous):
        if not record.get("sha256"):
            continue  # a folder's own record (mcu): its files are records of their own
        problem = check_file(root, record)
        if problem is not None:
            return problem
    return None


def _data(samples: Any) -> Any:
    if samples is None:
        return None
    return {"sha256": samples.sha256, "origin": samples.origin, "samples": len(samples)}


def _profile(profile: Any) -> Any:
    if profile is None:
        return None
    import dataclasses

    return dataclasses.asdict(profile) if dataclasses.is_dataclass(profile) else repr(profile)


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        path = value
    elif isinstance(value, str) and value and os.path.isfile(value):
        path = Path(value)
    else:
        return value if isinstance(value, (int, float, bool, type(None), str, list, dict)) else repr(value)
    # A file named by an option (labels, decoder settings): its content, not its name.
    return {"file": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


@functools.lru_cache(maxsize=1)
def tool_versions() -> dict[str, Any]:
    versions: dict[str, Any] = dict(package_versions(*TOOLS))
    for program in PROGRAMS:
        versions[program] = _program_version(program)
    return versions


def _program_version(program: str) -> str | None:
    found = shutil.which(program)
    if found is None:
        return None
    try:
        done = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return found
    return f"{found}: {(done.stdout.strip().splitlines() or [''])[0]}"


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """sha256 of edgeserve's own files (its code, kernels, templates, profiles): the version
    string alone stays the same across the commits between two releases."""
    import edgeserve

    roots = [Path(edgeserve.__file__).parent]
    for name in ("converters", "runtime", "_firmware", "_profiles"):
        try:
            module = __import__(f"edgeserve.{name}", fromlist=["__file__"])
        except ImportError:
            continue
        if getattr(module, "__file__", None):
            roots.append(Path(module.__file__).parent)
    digest = hashlib.sha256()
    for root in dict.fromkeys(roots):
        for path in sorted(root.rglob("*")):
            if path.is_file() and path.suffix in (".py", ".c", ".h", ".toml", ".cc", ".txt", ".in"):
                digest.update(str(path.relative_to(root)).encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()


def previous_entries(manifest_path: Path, source_sha256: str | None) -> dict[str, dict[str, Any]]:
    """The previous run's entries by target, when it converted the same source file."""
    from edgeserve.errors import ManifestError
    from edgeserve.manifest.record import load_manifest

    if not manifest_path.is_file():
        return {}
    try:
        old = load_manifest(manifest_path)
    except ManifestError:
        return {}
    if old.get("source", {}).get("sha256") != source_sha256:
        return {}
    return {e["target"]: e for e in old.get("artifacts", []) if isinstance(e.get("target"), str)}
