"""``edgeserve verify``: re-check a manifest's artifacts without the source or its framework.

The manifest is read through :func:`~edgeserve.manifest.record.load_manifest`, as ``Session`` reads
it: an edited field, a missing hash or a path that leaves the folder refuses the whole
manifest (exit 1) with the words Session uses, before any file it names is read.
"""

from __future__ import annotations

from pathlib import Path

from edgeserve.converters import get_converter
from edgeserve.converters._base import Check, VerifyResult
from edgeserve.errors import EdgeServeError, ManifestError
from edgeserve.manifest.record import MANIFEST_NAME, load_manifest


def verify_manifest(path: str | Path, public_key: str | Path | None = None) -> list[VerifyResult]:
    """One result per artifact; an artifact whose check raised gets a failed result with the reason.

    With ``public_key`` the manifest must carry a valid Ed25519 signature by it first
    (:mod:`edgeserve.manifest.signing`); an unsigned or altered one raises :class:`ManifestError`.
    """
    path = Path(path)
    if public_key is not None:
        from edgeserve.manifest.signing import check_signature

        check_signature(path / MANIFEST_NAME if path.is_dir() else path, public_key)
    manifest = load_manifest(path)
    root = path if path.is_dir() else path.parent
    if not manifest["artifacts"]:
        raise ManifestError(f"{path if path.is_dir() else root / MANIFEST_NAME} lists no artifacts")
    results = []
    for entry in manifest["artifacts"]:
        target = entry.get("target", "?")
        try:
            result = get_converter(target).reverify(entry, root)
        except (EdgeServeError, KeyError, TypeError, AttributeError, OSError, ValueError) as exc:
            # A field of the wrong type (a number where a list of files belongs) is a failed
            # check with its reason, like a missing one, not a traceback.
            what = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            result = VerifyResult(target, str(entry.get("path", "?")), (Check("re-verification", False, what),))
        if entry.get("status") != "ok":
            result = VerifyResult(result.target, result.path, result.checks + (
                Check("conversion status", False, f"the manifest marks this artifact {entry.get('status')!r}"),))
        results.append(result)
    return results
