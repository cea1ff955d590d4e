"""build/manifest.json: every artifact of one conversion, with hashes, metrics and provenance.

The manifest is plain JSON (schema ``edgeserve.manifest/1``) so that OTA systems, CI
jobs and other languages can read it. Each target adds or replaces its own entry; the
file is always rewritten atomically.

It is the contract a device acts on, so it is checked before it is trusted:
``manifest_sha256`` covers every field (preprocessing, labels, quantization, arena, fit,
metrics, integer_only), so an edited or damaged manifest is refused; every file path in an
artifact entry is relative and stays inside its folder, and every file has its sha256 (a
missing hash is an error, not a pass). ``verify`` and ``Session`` read it through
:func:`load_manifest`, and refuse the same manifest with the same words.

An entry built from another artifact records that artifact's sha256 (the mcu entry's
``model_sha256``); when the artifact beside it has another hash, the entry is stale and
``verify`` says so.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import platform
from importlib import metadata
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgeserve.atomic import sha256_file, write_json
from edgeserve.errors import ManifestError, first_line

log = logging.getLogger(__name__)

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


def merge_into_existing(path: Path, fresh: dict[str, Any], running: set[str],
                        built_from: Callable[[str], tuple[str, ...]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Keep the entries of targets not ``running`` from an existing manifest of the same source.

    An entry is kept only when it still describes what is beside it: same source sha256, same
    PreprocessSpec, a manifest that passes its own check, and not built from a target that runs
    again now (``built_from``: an mcu build of the old INT8 model must not sit beside a new one).
    Returns the merged manifest and the stale entries, whose files the caller removes.
    """
    if not path.exists():
        return fresh, []
    try:
        old = load_manifest(path)
    except ManifestError as exc:
        log.warning("not keeping entries of %s: %s", path, exc)
        return fresh, []
    if old.get("source", {}).get("sha256") != fresh["source"].get("sha256"):
        return fresh, []  # a different model: its old artifacts do not belong with this one
    kept, stale = [], []
    # Every artifact was calibrated with (and stamped with) the manifest's PreprocessSpec; a run
    # with another spec rewrites it, and the old artifacts would be fed what they were not made for.
    respec = old.get("preprocess") != fresh.get("preprocess")
    for entry in old["artifacts"]:
        target = entry.get("target")
        if target in running:
            continue
        if respec:
            log.info("dropping the %s entry: it was made with another PreprocessSpec than this run's", target)
            stale.append(entry)
            continue
        stale_by = set(built_from(target)) & running if isinstance(target, str) else set()
        if stale_by:
            log.info("dropping the %s entry: it was built from %s, which is converted again", target,
                     ", ".join(sorted(stale_by)))
            stale.append(entry)
            continue
        kept.append(entry)
    fresh["artifacts"] = kept
    return fresh, stale


def upsert_artifact(manifest: dict[str, Any], entry: dict[str, Any]) -> None:
    manifest["artifacts"] = [a for a in manifest["artifacts"] if a.get("target") != entry["target"]]
    manifest["artifacts"].append(entry)


def write_manifest(path: Path, manifest: dict[str, Any]) -> Path:
    return write_json(path, stamp(manifest))


HASH_FIELD = "manifest_sha256"


def manifest_digest(manifest: dict[str, Any]) -> str:
    """sha256 of the manifest's canonical JSON (sorted keys, no whitespace), its own hash left out."""
    body = {k: v for k, v in manifest.items() if k != HASH_FIELD}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def stamp(manifest: dict[str, Any]) -> dict[str, Any]:
    """Set ``manifest_sha256`` for the manifest as it is now (done by :func:`write_manifest`)."""
    manifest[HASH_FIELD] = manifest_digest(manifest)
    return manifest


# Paths a manifest may name: relative, POSIX separators, printable, not absurdly long.
MAX_PATH_CHARS = 1024


def inside(root: Path, relative: Any, what: str) -> Path:
    """``root / relative``, refused unless ``relative`` is a relative path that stays in ``root``."""
    if not isinstance(relative, str) or not relative:
        raise ManifestError(f"{what}: expected a relative path inside {root}, got {relative!r}")
    if len(relative) > MAX_PATH_CHARS or "\\" in relative or not relative.isprintable():
        raise ManifestError(f"{what}: expected a relative path of at most {MAX_PATH_CHARS} printable characters with "
                            f"'/' between folders, got {relative[:80]!r}{'...' if len(relative) > 80 else ''}")
    candidate = Path(relative)
    resolved = (root / candidate).resolve()
    if candidate.is_absolute() or not resolved.is_relative_to(root.resolve()):
        raise ManifestError(f"{what}: path {relative!r} leaves the manifest's folder {root}; every path in a "
                            "manifest is relative and stays inside it")
    return root / candidate


def load_manifest(path: str | Path, *, check: bool = True) -> dict[str, Any]:
    """Read and validate a manifest, or raise :class:`ManifestError`.

    With ``check`` (the default) the manifest must carry ``manifest_sha256`` and match it:
    an edited field is refused, not acted on.
    """
    path = Path(path)
    if path.is_dir():
        path = path / MANIFEST_NAME
    try:
        data = _read_json(path)
    except FileNotFoundError as exc:
        raise ManifestError(f"manifest not found: {path}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        from edgeserve.file_kinds import describe

        with open(path, "rb") as handle:
            kind = describe(handle.read(16))
        if kind is not None:  # `verify model.tflite`: a model, not a conversion's manifest
            raise ManifestError(f"{path} is {kind}, not a manifest: give the conversion's output folder "
                                f"(convert -o OUT) or its {MANIFEST_NAME}") from exc
        raise ManifestError(f"{path} is not valid JSON: {exc}") from exc
    except OSError as exc:  # links in a loop, a name too long, a folder where the file belongs
        raise ManifestError(f"cannot read the manifest {path}: {exc.strerror or exc}") from exc
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise ManifestError(f"{path}: expected schema {SCHEMA!r}, got {got!r}")
    if not isinstance(data.get("artifacts"), list):
        raise ManifestError(f"{path}: 'artifacts' must be a list")
    if check:
        recorded = data.get(HASH_FIELD)
        if recorded is None:
            raise ManifestError(f"{path} has no {HASH_FIELD}: it was not written by this edgeserve, or the field was "
                                "deleted; convert again to get a manifest that can be checked")
        if recorded != manifest_digest(data):
            raise ManifestError(f"{path} was changed after edgeserve wrote it: its content does not match its "
                                f"{HASH_FIELD} (every field is covered: preprocess, labels, quantization, arena, "
                                "metrics); convert again rather than editing it")
        _check_records(data, path)
    return data


MAX_MANIFEST_BYTES = 64 << 20


def _read_json(path: Path) -> Any:
    """The manifest's JSON, strictly: a regular file of bounded size (a FIFO or a device would
    block or never end), no key twice in one object (another JSON reader could keep the other
    value), no NaN or Infinity, numbers and nesting within what Python reads without error."""
    import os
    import stat

    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise ManifestError(f"{path}: expected a manifest file, got something that is not a regular file")
    if info.st_size > MAX_MANIFEST_BYTES:
        raise ManifestError(f"{path}: expected a manifest of at most {MAX_MANIFEST_BYTES >> 20} MB, "
                            f"got {info.st_size:,} bytes")
    with open(path, "rb") as handle:
        text = handle.read(MAX_MANIFEST_BYTES + 1).decode("utf-8")

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in pairs:
            if key in seen:
                raise ManifestError(f"{path}: key {key[:60]!r} appears twice in one object; a manifest has one value "
                                    "per key (another JSON reader could act on the other one)")
            seen[key] = value
        return seen

    def no_constant(name: str) -> None:
        raise ManifestError(f"{path}: {name} is not a JSON number; a manifest holds finite numbers only")

    try:
        return json.loads(text, object_pairs_hook=no_duplicates, parse_constant=no_constant)
    except RecursionError as exc:
        raise ManifestError(f"{path}: nested too deeply to be a manifest") from exc
    except ValueError as exc:
        if isinstance(exc, json.JSONDecodeError):
            raise
        # int() refuses numbers of more than 4,300 digits (CPython's limit)
        raise ManifestError(f"{path}: {first_line(exc)}; a manifest holds no such number") from exc


def _check_record_fields(record: dict[str, Any], where: str) -> None:
    """Types and ranges of a file record's fields, so no reader trips over them later."""
    digest = record.get("sha256")
    if digest is not None and not (isinstance(digest, str) and len(digest) == 64
                                   and all(c in "0123456789abcdef" for c in digest)):
        raise ManifestError(f"{where}: expected sha256 to be 64 lowercase hex digits, got {str(digest)[:80]!r}")
    size = record.get("bytes")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
        raise ManifestError(f"{where}: expected bytes to be a whole number of bytes, got {str(size)[:80]!r}")


def _check_records(manifest: dict[str, Any], path: Path) -> None:
    """Refuse an artifact entry whose files could be anything: a path that leaves the folder
    (``../``, absolute, a symlink out) or a file without its sha256.

    Done on load so that verify and Session refuse the same manifest with the same words,
    before either opens, hashes or shows anything of a file the manifest names.
    """
    seen: set[str] = set()
    for entry in manifest["artifacts"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("target"), str):
            raise ManifestError(f"{path}: expected each artifact to be an object with a 'target', "
                                f"got {str(entry)[:80]!r}")
        if entry["target"] in seen:  # a conversion writes one entry per target (2,000 kept verify busy minutes)
            raise ManifestError(f"{path} lists the {entry['target'][:40]!r} artifact twice; a conversion writes one "
                                "entry per target: convert again rather than editing the manifest")
        seen.add(entry["target"])
        where = f"{path} artifact {entry['target']!r}"
        _check_record_places(entry, where)
        for record in file_records(entry):
            inside(path.parent, record["path"], where)
            _check_record_fields(record, f"{where} file {str(record['path'])[:80]!r}")
            # A folder entry (mcu) lists its files, each hashed; every other record is one file.
            if not record.get("sha256") and not (record is entry and "files" in entry):
                raise ManifestError(f"{where}: {record['path']!r} has no sha256: nothing proves it is the file "
                                    "that was verified; convert again rather than editing the manifest")


def _check_record_places(entry: dict[str, Any], where: str) -> None:
    """The fields that hold file records hold records (an object with a text ``path``), so a
    report replaced by a list is refused here rather than tripping a converter's re-check."""
    def record(value: Any) -> bool:
        return isinstance(value, dict) and isinstance(value.get("path"), str)

    places = {"report": entry.get("report")}
    verification = entry.get("verification")
    if verification is not None and not isinstance(verification, dict):
        raise ManifestError(f"{where}: expected verification to be an object, got {str(verification)[:80]!r}")
    if verification is not None and "fixture" in verification:
        places["verification.fixture"] = verification["fixture"]
    for name, value in places.items():
        if value is not None and not record(value):
            raise ManifestError(f"{where}: expected {name} to be a file record (an object with a path), "
                                f"got {str(value)[:80]!r}")
    files = entry.get("files")
    if files is not None and not (isinstance(files, list) and all(record(f) for f in files)):
        raise ManifestError(f"{where}: expected files to be a list of file records, got {str(files)[:80]!r}")


def file_records(value: Any) -> list[dict[str, Any]]:
    """Every object with a ``path`` key in ``value`` (the entry itself, its report, fixture, files)."""
    if isinstance(value, list):
        return [r for item in value for r in file_records(item)]
    if not isinstance(value, dict):
        return []
    own = [value] if "path" in value else []
    return own + [r for v in value.values() for r in file_records(v)]


def file_record(root: Path, path: Path) -> dict[str, Any]:
    """path (relative to the manifest), sha256 and bytes of one written file."""
    return {"path": path.relative_to(root).as_posix(), "sha256": sha256_file(path), "bytes": path.stat().st_size}


def check_file(root: Path, record: dict[str, Any]) -> str | None:
    """None when the file matches its recorded sha256 and size, else what is wrong."""
    path = inside(root, record.get("path"), "file record")
    if not record.get("sha256"):
        return f"{record['path']} has no sha256 in the manifest: nothing to check it against"
    if not path.exists():
        return f"{record['path']} is missing"
    digest = sha256_file(path)
    if digest != record["sha256"]:
        return f"{record['path']} sha256 {digest[:12]}… does not match the manifest's {record['sha256'][:12]}…"
    size = path.stat().st_size if path.is_file() else None
    if size is not None and record.get("bytes") is not None and record["bytes"] != size:
        # The hash matches, so the file is the one built: the manifest's figure is what lies.
        return f"{record['path']} is {size:,} bytes; the manifest says {record['bytes']:,}"
    return None
