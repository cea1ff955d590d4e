"""Targets already built and checked, shared between output folders.

An output folder keeps what its previous run built (:mod:`edgeserve.conversion.reuse`). This cache keeps
the same thing for every folder: after a target passes, its files and manifest entry are copied
under ``~/.cache/edgeserve/targets/<reuse key>/`` (``$EDGESERVE_CACHE_DIR/targets``, or
``$XDG_CACHE_HOME/edgeserve/targets``). A later conversion of the same source with the same
data, options, tools and edgeserve code, into any folder, copies them instead of building again
(its entry says ``cached``); the key is the output folder's reuse key, so one changed byte,
option or tool version misses. Before a cached target is used its files are hashed again; a
damaged one is removed and the target built.

Entries are written into a temporary folder and renamed into place, so a killed run leaves no
half entry (its temporary folder is removed by the next store). The cache is bounded
(``$EDGESERVE_TARGET_CACHE_MAX_BYTES``, 2 GiB by default): the least recently used entries go
first. ``convert --no-cache`` neither reads nor writes it (``EDGESERVE_TARGET_CACHE=off`` for
every run);
``edgeserve cache`` shows it and ``edgeserve cache --clear`` empties it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edgeserve.manifest.record import file_records
from edgeserve.manifest.staging import pid_alive

DEFAULT_MAX_BYTES = 2 << 30
_ENTRY = "entry.json"
_TMP = ".tmp-"


def root() -> Path:
    """Where the cache lives: ``targets`` under edgeserve's cache folder (the runtime's probe
    verdicts are its neighbour)."""
    if os.environ.get("EDGESERVE_CACHE_DIR"):
        return Path(os.environ["EDGESERVE_CACHE_DIR"]) / "targets"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "edgeserve" / "targets"


def enabled() -> bool:
    return os.environ.get("EDGESERVE_TARGET_CACHE", "on").lower() not in ("0", "off", "no", "false")


def max_bytes() -> int:
    try:
        return int(os.environ.get("EDGESERVE_TARGET_CACHE_MAX_BYTES", DEFAULT_MAX_BYTES))
    except ValueError:
        return DEFAULT_MAX_BYTES


def _paths(entry: Mapping[str, Any]) -> list[str]:
    """The files and folders an entry names (relative to its output folder), each once."""
    return list(dict.fromkeys(str(r["path"]) for r in file_records(dict(entry)) if isinstance(r.get("path"), str)))


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    elif target.exists() or target.is_symlink():
        target.unlink()
    if source.is_dir():
        shutil.copytree(source, target, symlinks=True)
    else:
        shutil.copy2(source, target)


def lookup(key: str, out: Path) -> dict[str, Any] | None:
    """The cached entry for ``key`` with its files copied into ``out``, or None (not cached, or
    damaged: a damaged entry is removed)."""
    folder = root() / key
    try:
        entry = json.loads((folder / _ENTRY).read_text())
    except (OSError, ValueError):
        return None
    from edgeserve.conversion.reuse import reusable

    try:  # the same test an output folder's own entry passes: key, status, every file re-hashed
        problem = reusable(entry, key, folder) if isinstance(entry, dict) else "not an entry"
    except Exception as exc:  # noqa: BLE001 - a record naming no file of the entry's folder
        problem = str(exc)
    if problem is not None:
        shutil.rmtree(folder, ignore_errors=True)
        return None
    try:
        for rel in _paths(entry):
            _copy(folder / rel, out / rel)
        os.utime(folder)  # recently used: evicted last
    except OSError:  # removed by another run meanwhile, or no room in OUT: build it instead
        return None
    return entry | {"cached": True}


def store(key: str, out: Path, entry: Mapping[str, Any]) -> None:
    """Keep a passing target's files and entry under ``key`` (nothing if it is there already)."""
    base = root()
    final = base / key
    if final.exists():
        os.utime(final)
        return
    base.mkdir(parents=True, exist_ok=True)
    _remove_dead_temporaries(base)
    temporary = base / f"{_TMP}{os.getpid()}-{secrets.token_hex(4)}"
    try:
        temporary.mkdir()
        for rel in _paths(entry):
            _copy(out / rel, temporary / rel)
        kept = {k: v for k, v in entry.items() if k not in ("reused", "cached")}
        (temporary / _ENTRY).write_text(json.dumps(kept, sort_keys=True))
        os.rename(temporary, final)  # all at once: a killed run leaves only a temporary folder
    except OSError:
        pass  # another run stored it first, or the disk is full: the cache is only a cache
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    evict(base)


def _remove_dead_temporaries(base: Path) -> None:
    for path in base.glob(f"{_TMP}*"):
        pid = path.name[len(_TMP):].split("-")[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _size(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def entries(base: Path | None = None) -> list[tuple[Path, int, float]]:
    """(folder, bytes, last used) of every entry, least recently used first."""
    base = base or root()
    if not base.is_dir():
        return []
    found = [(p, _size(p), p.stat().st_mtime) for p in base.iterdir() if p.is_dir() and not p.name.startswith(_TMP)]
    return sorted(found, key=lambda e: e[2])


def evict(base: Path | None = None, limit: int | None = None) -> list[Path]:
    """Remove the least recently used entries until the cache holds at most ``limit`` bytes."""
    limit = max_bytes() if limit is None else limit
    held = entries(base)
    total, removed = sum(size for _, size, _ in held), []
    for folder, size, _ in held:
        if total <= limit:
            break
        shutil.rmtree(folder, ignore_errors=True)
        total -= size
        removed.append(folder)
    return removed


def describe() -> dict[str, Any]:
    held = entries()
    return {"path": str(root()), "entries": len(held), "bytes": sum(size for _, size, _ in held),
            "max_bytes": max_bytes(), "enabled": enabled()}


def clear() -> int:
    """Remove every entry (and leftovers); how many entries there were."""
    held = entries()
    shutil.rmtree(root(), ignore_errors=True)
    return len(held)
