"""Manifests edited as a careless or hostile tool would, for the CLI fuzz: each through
`verify OUT` and `run OUT` (whole, and for one named target).

The base is one conversion of TFLM's float hello_world to tflite-int8, mcu, mcu-c and onnx
(fixtures, reports and generated C: every kind of entry). Most mutants are re-stamped (a
valid `manifest_sha256` over bad content), so the checks behind the stamp are what stand in
the way; some are edited in the text after stamping (a key twice, huge numbers, deep
nesting, bytes that are not UTF-8); some replace a file the manifest lists and record the
new file's hash and size, so the file's own reader is reached, or put a FIFO in its place.
The rest are edits left unstamped, which both commands must refuse: that oracle can fail.
"""

from __future__ import annotations

import collections
import copy
import hashlib
import io
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
from cli_fuzz import Plan

STRATEGIES = ("value", "delete", "add", "text", "file", "unstamped")
HOSTILE = (None, True, False, -1, 0, 1, 2**63, -(2**63), 1e308, -0.0, float("nan"), float("inf"), "", "x" * 5000,
           "../../outside", "/etc/passwd", "/dev/zero", "mcu/\x00.h", "mcu\\hw.h", ".", "mcu", "[red]x[/]",
           "verify/onnx.npz", "manifest.json", [], {}, [[[]]], {"path": "x"}, ["mcu"], "tflite-int8", "ok",
           "\u202e\u0000", "0" * 64, "f" * 63)


def build_base(testdata: Path, out: Path) -> Path:
    """The conversion every mutant starts from (a few seconds: no TensorFlow for a .tflite source)."""
    from click.testing import CliRunner

    from edgeserve.cli import cli

    result = CliRunner().invoke(cli, ["convert", str(testdata / "tflm" / "hello_world_float.tflite"), "-t",
                                      "tflite-int8", "-t", "mcu", "-t", "mcu-c", "-t", "onnx", "--calib-random",
                                      "--name", "hw", "--no-fit-check", "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    return out


def _places(node: Any, path: tuple = ()) -> list[tuple]:
    """Every path to a value in the JSON tree (dict keys and list indices)."""
    found = [path]
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, child in items:
        found += _places(child, path + (key,))
    return found


def _get(node: Any, path: tuple) -> Any:
    for key in path:
        node = node[key]
    return node


def _file_records(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        own = [node] if isinstance(node.get("path"), str) and isinstance(node.get("sha256"), str) else []
        return own + [r for child in node.values() for r in _file_records(child)]
    if isinstance(node, list):
        return [r for child in node for r in _file_records(child)]
    return []


def _pickled_npz() -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, inputs=np.array([{"a": 1}], dtype=object), outputs=np.zeros(3, np.float32))
    return buffer.getvalue()


def _damaged(data: bytes, rng: np.random.Generator) -> bytes:
    """A listed file's new content: truncated, flipped, emptied, or a pickled-object .npz."""
    choice = int(rng.integers(4))
    if choice == 0:
        return data[: int(rng.integers(0, max(1, len(data))))]
    if choice == 1:
        out = bytearray(data)
        for _ in range(int(rng.integers(1, 8))):
            if out:
                out[int(rng.integers(len(out)))] = int(rng.integers(256))
        return bytes(out)
    return b"" if choice == 2 else _pickled_npz()


def mutate(manifest: dict[str, Any], folder: Path, seed: int) -> tuple[str, str, bool]:
    """One deterministic mutant written into ``folder`` (a copy of the base): its strategy,
    what it changed, and whether both commands must refuse it."""
    from edgeserve.manifest.record import manifest_digest, stamp

    rng = np.random.default_rng(seed)
    strategy = STRATEGIES[int(rng.integers(len(STRATEGIES)))]
    edited = copy.deepcopy(manifest)
    places = [p for p in _places(edited) if p and p[-1] != "manifest_sha256"]
    where = places[int(rng.integers(len(places)))]
    parent, key = _get(edited, where[:-1]), where[-1]
    what = "/".join(map(str, where))
    if strategy in ("value", "unstamped"):
        parent[key] = copy.deepcopy(HOSTILE[int(rng.integers(len(HOSTILE)))])
    elif strategy == "delete":
        del parent[key]
    elif strategy == "add":
        target = parent if isinstance(parent, dict) else edited
        target[str(rng.choice(["extra", "path", "sha256", "files", "status", "target"]))] = \
            copy.deepcopy(HOSTILE[int(rng.integers(len(HOSTILE)))])
        what = "a key beside " + what
    elif strategy == "file":
        # Only the artifacts' own files: the source record names the user's model by its
        # absolute path, and a fuzz must never write outside its copy.
        records = _file_records(edited["artifacts"])
        record = records[int(rng.integers(len(records)))]
        listed = folder / record["path"]
        assert listed.resolve().is_relative_to(folder.resolve()), listed
        what = record["path"]
        if rng.random() < 0.15:  # a FIFO in its place: reading it would block for ever
            listed.unlink()
            os.mkfifo(listed)
            (folder / "manifest.json").write_text(json.dumps(stamp(edited), allow_nan=True))
            return strategy, what + " (a FIFO)", False
        data = _damaged(listed.read_bytes(), rng)
        listed.write_bytes(data)
        record["sha256"], record["bytes"] = hashlib.sha256(data).hexdigest(), len(data)
    if strategy == "text":
        text = json.dumps(stamp(edited))
        tail = [', "schema": "edgeserve.manifest/0"', ', "extra": ' + "9" * 5000, ', "extra": 1e99999',
                ', "extra": ' + "[" * 50_000 + "]" * 50_000, ', "extra": "\\ud800"'][int(rng.integers(5))]
        raw = (text[:-1] + tail + "}").encode()
        if rng.random() < 0.3:
            raw = raw[: int(rng.integers(len(raw)))] if rng.random() < 0.5 else b"\xff\xfe" + raw
        (folder / "manifest.json").write_bytes(raw)
        return strategy, "the text after stamping", False
    if strategy == "unstamped":
        changed = manifest_digest(edited) != manifest_digest(manifest)
        edited["manifest_sha256"] = manifest["manifest_sha256"]
        (folder / "manifest.json").write_text(json.dumps(edited, allow_nan=True))
        return strategy, what, changed
    (folder / "manifest.json").write_text(json.dumps(stamp(edited), allow_nan=True))
    return strategy, what, False


def write_manifest_mutants(base: Path, folder: Path, count: int,
                           seed0: int = 0) -> tuple[Plan, collections.Counter[str]]:
    """``count`` mutated copies of the base conversion; the plan (with `must_refuse` per
    file) and strategy counts."""
    folder.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((base / "manifest.json").read_text())
    plan: Plan = []
    strategies: collections.Counter[str] = collections.Counter()
    x = folder / "x.npy"
    np.save(x, np.zeros((1, 1), np.float32))
    for seed in range(seed0, seed0 + count):
        out = folder / f"m_{seed:07d}"
        shutil.copytree(base, out)
        strategy, what, must_refuse = mutate(manifest, out, seed)
        strategies[strategy] += 1
        target = ["tflite-int8", "onnx"][seed % 2]
        plan.append({"file": out.name, "strategy": strategy, "changed": what, "must_refuse": must_refuse,
                     "commands": [["verify", ["verify", str(out)], None],
                                  ["run", ["run", str(out), "--input", str(x), "-q"], None],
                                  ["run --target", ["run", str(out), "--target", target, "--input", str(x), "-q"],
                                   None]]})
    return plan, strategies
