"""The record a conversion leaves: the manifest (record.py: read, merge, stamp, write), its
Ed25519 signature (signing.py), the staging that replaces an output folder only when a run is
done (staging.py), and `edgeserve verify` reading it all back (verify.py). manifest.schema.json
is the published JSON Schema of the manifest (draft 2020-12): ``schema_path()``."""

from __future__ import annotations

from pathlib import Path


def schema_path() -> Path:
    """The JSON Schema of ``edgeserve.manifest/1``, as installed."""
    from importlib import resources

    return Path(str(resources.files(__name__).joinpath("manifest.schema.json")))
