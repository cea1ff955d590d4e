"""Each model's folder, OUT/<model>/, as one ``convert`` of every target whose cell passed.

The cells already built and checked those targets; convert's target cache (edgeserve.conversion.cache)
is how they are taken instead of built again: each passing cell's entries are stored under their
reuse keys (a cell that ran on another machine filled that machine's cache, not this one's),
then one convert of the model with those targets copies each from the cache, re-hashed, and
writes the manifest that lists them all. A target the cache no longer holds is built again, and
the table says how many came from the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from edgeserve.jobs.cells import place


def assemble_models(job: Any, cells: list[Any], rows: dict[str, dict[str, Any]], out: Path, staging: Path,
                    say: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    """{model name: what its folder holds} for every model with a passing cell."""
    from edgeserve.conversion import cache

    previous = _previous(out)
    if not cache.enabled():
        say("jobs: the model folders are not assembled: the target cache is off (EDGESERVE_TARGET_CACHE)")
        return {}
    work = []
    for model in job.models:
        passed = [c for c in cells if c.model is model and rows.get(c.name, {}).get("status") == "ok"]
        if not passed:
            continue
        key = hashlib.sha256(json.dumps(sorted((c.target, c.key) for c in passed)).encode()).hexdigest()
        if previous.get(model.name, {}).get("key") == key and (out / model.name / "manifest.json").is_file():
            continue  # the same cells as the last time: the folder is as they made it
        work.append((model, passed, key))
    found = {name: info for name, info in previous.items() if (out / name / "manifest.json").is_file()}
    if not work:
        return found
    say(f"jobs: {len(work)} model folder(s) from their cells")
    staging.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for name, info in pool.map(lambda item: _assemble(*item, out, staging, job.timeout_s), work):
            found[name] = info
            if info.get("error"):
                say(f"  {name}: its folder was not written: {info['error']}")
            else:
                say(f"  {name}: {', '.join(info['targets'])} ({info['from_cache']} of {len(info['targets'])} "
                    f"from the cells, {info['seconds']:.0f} s)")
    return found


def _assemble(model: Any, passed: list[Any], key: str, out: Path, staging: Path,
              timeout_s: float) -> tuple[str, dict[str, Any]]:
    import time

    from edgeserve.conversion import cache

    for cell in passed:
        try:
            manifest = json.loads((cell.folder / "manifest.json").read_text())
        except (OSError, ValueError):
            continue
        for entry in manifest.get("artifacts", []):
            if entry.get("status") == "ok" and entry.get("reuse_key"):
                cache.store(entry["reuse_key"], cell.folder, entry)
    targets = [c.target for c in passed]
    staged = staging / uuid.uuid4().hex
    command = [sys.executable, "-m", "edgeserve", "-q", "convert", str(model.path), "-o", str(staged),
               *(arg for t in targets for arg in ("-t", t)), "--json", *model.flags]
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, "PYTHONWARNINGS": "ignore"})
    except subprocess.TimeoutExpired:
        return model.name, {"key": key, "error": f"stopped after {timeout_s:.0f} s"}
    seconds = time.perf_counter() - started
    manifest_path = staged / "manifest.json"
    if not manifest_path.is_file():
        errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
        return model.name, {"key": key, "error": (errors[-1] if errors else f"convert exited {done.returncode}")}
    manifest = json.loads(manifest_path.read_text())
    entries = {e["target"]: e for e in manifest.get("artifacts", [])}
    place(staged, out / model.name)
    return model.name, {"key": key, "targets": targets, "seconds": round(seconds, 1),
                        "from_cache": sum(1 for t in targets if (entries.get(t) or {}).get("cached")),
                        "ok": all((entries.get(t) or {}).get("status") == "ok" for t in targets)}


def _previous(out: Path) -> dict[str, dict[str, Any]]:
    from edgeserve.jobs.table import TABLE_NAME

    try:
        return dict(json.loads((out / TABLE_NAME).read_text()).get("models") or {})
    except (OSError, ValueError, AttributeError):
        return {}
