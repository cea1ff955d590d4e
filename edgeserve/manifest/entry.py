"""One artifact entry of a manifest, as code outside its target's folder reads it: a typed record.

A converter writes its entry as JSON (``converters/<target>/``); everything else (the runtime
choosing what to serve, ``bench OUT``, the job table, ``verify``, the shared report lines) reads
the fields every target writes through :class:`ArtifactEntry`, whose fields are the artifact
properties of the published schema (manifest.schema.json; a test holds the two equal). What
only one target writes stays in :attr:`ArtifactEntry.fields` and is read by that target's own
folder, so a field's name is spelled in one place per reader kind, not at each use.

Reading never changes the manifest: the JSON written stays byte for byte what the converters
made; the record is a view of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields as dataclass_fields
from typing import Any

from edgeserve.errors import ManifestError


@dataclass(frozen=True)
class ArtifactEntry:
    target: str
    status: str
    path: str
    verification: Mapping[str, Any]
    sha256: str | None = None
    bytes: int | None = None
    files: tuple[Mapping[str, Any], ...] = ()
    reuse_key: str | None = None
    reused: bool = False
    cached: bool = False
    quality: Mapping[str, Any] | None = None
    metrics: Mapping[str, Any] | None = None
    agreement: Mapping[str, Any] | None = None
    outputs: tuple[Mapping[str, Any], ...] = ()
    reason: str | None = None
    # the entry as written, for what a target writes beyond the fields above (read in its folder)
    fields: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def read(cls, entry: Any, where: str = "manifest artifact") -> ArtifactEntry:
        """The record of one entry; an entry without the fields every target writes, or with one
        of another type, is refused in one line naming the field, what was expected and what was
        found."""
        if not isinstance(entry, Mapping):
            raise ManifestError(f"{where}: expected an object, found {type(entry).__name__}")
        values: dict[str, Any] = {}
        for name, expected, required in _CONTRACT:
            value = entry.get(name)
            if value is None:
                if required:
                    raise ManifestError(f"{where}: expected the field {name!r} ({_KIND[expected]}), found none")
                continue
            if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
                raise ManifestError(f"{where}: expected {name!r} to be {_KIND[expected]}, found "
                                    f"{type(value).__name__} {str(value)[:60]!r}")
            values[name] = tuple(value) if expected is list else value
        return cls(**values, fields=entry)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def size(self) -> int | None:
        """The artifact's bytes: its one file's, or the sum of its files' (a folder target)."""
        return self.bytes or sum(int(f.get("bytes") or 0) for f in self.files) or None

    def output_sqnr_db(self) -> list[float]:
        """Each judged output's SQNR against the source (the gate's figure), where it has one."""
        outputs = (self.quality or {}).get("outputs") or []
        return [o["sqnr_db"] for o in outputs if isinstance(o, Mapping) and isinstance(o.get("sqnr_db"), (int, float))]

    def source_output_labels(self) -> tuple[str, ...]:
        """Which source output each of the artifact's outputs is ("" where unknown)."""
        return tuple(str(o.get("source_output") or "") for o in self.outputs if isinstance(o, Mapping))


_KIND = {str: "a string", int: "an integer", bool: "true or false", dict: "an object", list: "a list"}
# (field, JSON type, required): the schema's artifact properties, in the record's order.
_CONTRACT: tuple[tuple[str, type, bool], ...] = (
    ("target", str, True), ("status", str, True), ("path", str, True), ("verification", dict, True),
    ("sha256", str, False), ("bytes", int, False), ("files", list, False), ("reuse_key", str, False),
    ("reused", bool, False), ("cached", bool, False), ("quality", dict, False), ("metrics", dict, False),
    ("agreement", dict, False), ("outputs", list, False), ("reason", str, False),
)


def contract_fields() -> list[str]:
    """The record's field names (what the schema's artifact properties must list)."""
    return [f.name for f in dataclass_fields(ArtifactEntry) if f.name != "fields"]
