"""build/manifest.json: every artifact of one conversion, with hashes, metrics and provenance.

The manifest is plain JSON (schema ``edgeserve.manifest/1``) so that OTA systems, CI
jobs and other languages can read it. Each target adds or replaces its own entry; the
file is always rewritten atomically.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

from edgeserve.atomic import sha256_file, write_json
from edgeserve.errors import ManifestError

SCHEMA = "edgeserve.manifest/1"
MANIFEST_NAME = "manifest.json"


def edgeserve_version() -> str:
    from edgeserve import __version__

    return __version__


def package_versions(*names: str) -> dict[str, str | None]:
    """Installed versions of the given distributions (None when absent)."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def new_manifest(
    source: dict[str, Any],
    preprocess: dict[str, Any] | None,
    profile: str | None,
    calibration: dict[str, Any] | None,
) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "edgeserve_version": edgeserve_version(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "source": source,
        "preprocess": preprocess,
        "profile": profile,
        "calibration": calibration,
        "provenance": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "packages": package_versions("numpy", "tensorflow-cpu", "tensorflow", "keras", "ai-edge-litert",
                                         "coremltools", "torch"),
        },
        "artifacts": [],
    }


def merge_into_existing(path: Path, fresh: dict[str, Any]) -> dict[str, Any]:
    """Keep the other targets' entries of an existing manifest for the same source."""
    if not path.exists():
        return fresh
    old = load_manifest(path)
    if old.get("source", {}).get("sha256") != fresh["source"].get("sha256"):
        return fresh  # a different model: its old artifacts do not belong with this one
    fresh["artifacts"] = [a for a in old["artifacts"] if a.get("target") not in _targets(fresh)]
    return fresh


def upsert_artifact(manifest: dict[str, Any], entry: dict[str, Any]) -> None:
    manifest["artifacts"] = [a for a in manifest["artifacts"] if a.get("target") != entry["target"]]
    manifest["artifacts"].append(entry)


def write_manifest(path: Path, manifest: dict[str, Any]) -> Path:
    return write_json(path, manifest)


def load_manifest(path: str | Path) -> dict[str, Any]:
    """Read and minimally validate a manifest, or raise :class:`ManifestError`."""
    path = Path(path)
    if path.is_dir():
        path = path / MANIFEST_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ManifestError(f"manifest not found: {path}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise ManifestError(f"{path}: expected schema {SCHEMA!r}, got {got!r}")
    if not isinstance(data.get("artifacts"), list):
        raise ManifestError(f"{path}: 'artifacts' must be a list")
    return data


def file_record(root: Path, path: Path) -> dict[str, Any]:
    """path (relative to the manifest), sha256 and bytes of one written file."""
    return {"path": path.relative_to(root).as_posix(), "sha256": sha256_file(path), "bytes": path.stat().st_size}


def check_file(root: Path, record: dict[str, Any]) -> str | None:
    """None when the file matches its recorded sha256 and size, else what is wrong."""
    path = root / record["path"]
    if not path.exists():
        return f"{record['path']} is missing"
    digest = sha256_file(path)
    if digest != record["sha256"]:
        return f"{record['path']} sha256 {digest[:12]}… does not match the manifest's {record['sha256'][:12]}…"
    return None


def _targets(manifest: dict[str, Any]) -> set[str]:
    return {a["target"] for a in manifest.get("artifacts", [])}
