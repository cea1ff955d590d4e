"""What a Session serves: the runnable artifacts of a manifest, or one model file.

A manifest names several artifacts (tflite-int8, onnx, coreml, mcu...). The runtime can
serve the ones whose format a backend engine runs; each backend in the chain takes the
first of those in its format. An artifact's bytes are checked against the manifest's
sha256 before any engine sees them, so a swapped or damaged file is refused, not run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from edgeserve.runtime.backends.registry import ENGINE_SUFFIXES

from edgeserve.atomic import NOT_REGULAR, read_regular, read_settings, special_file
from edgeserve.errors import InputError, ManifestError, ModelFileError
from edgeserve.manifest.record import MANIFEST_NAME, inside, load_manifest
from edgeserve.manifest.entry import ArtifactEntry
from edgeserve.preprocess import PreprocessSpec

log = logging.getLogger(__name__)

SERVED_SUFFIXES = ", ".join(sorted(s for group in ENGINE_SUFFIXES.values() for s in group))


def served(target: str) -> bool:
    """Whether this runtime serves a manifest target's artifact (not C for a microcontroller):
    each converter says so of its own target (``served_by_runtime``). A target this version does
    not know is tried, and its file's kind decides."""
    from edgeserve.converters import get_converter, target_names

    return target not in target_names() or get_converter(target).served_by_runtime


@dataclasses.dataclass
class Artifact:
    """One model file the runtime could open."""

    path: Path
    engine: str
    target: str | None  # manifest target, None for a bare model file
    sha256: str | None  # expected digest (manifest), None for a bare file
    bytes: int
    _data: bytes | None = None
    # For each output, the source output it is (the manifest's ``source_output``; empty for a
    # bare file or an artifact whose outputs the conversion could not map).
    source_outputs: tuple[str, ...] = ()

    def read(self) -> bytes:
        """The file's bytes, checked against the manifest's sha256 (once)."""
        if self._data is None:
            if self.path.is_dir():  # .mlpackage: the engine reads the directory itself
                data = b""
                if self.sha256 is not None:
                    from edgeserve.atomic import sha256_file

                    _check_digest(self, sha256_file(self.path))
            else:
                try:
                    data = read_regular(self.path)
                except OSError as exc:
                    raise ModelFileError(f"cannot read {self.path}: {exc}") from exc
                if self.sha256 is not None:
                    _check_digest(self, hashlib.sha256(data).hexdigest())
                elif self.engine == "onnxruntime":  # a bare file may keep weights beside it (torch's export does)
                    from edgeserve.onnx_check import with_external_data

                    data = with_external_data(self.path, data)
            self._data = data
        return self._data


def _check_digest(artifact: Artifact, digest: str) -> None:
    if digest != artifact.sha256:
        raise ManifestError(
            f"{artifact.path} does not match its manifest: sha256 {digest[:16]}… expected {artifact.sha256[:16]}…; "
            "refusing to run it (re-run `edgeserve convert`, or `edgeserve verify` to see what changed)"
        )


@dataclasses.dataclass
class ServedModel:
    """The artifacts, preprocessing and labels one Session works from."""

    artifacts: list[Artifact]
    preprocess: PreprocessSpec | None
    labels: list[str] | None
    manifest_path: Path | None
    overridden: tuple[str, ...] = ()  # PreprocessSpec fields the caller changed from the recorded spec
    output: dict[str, Any] | None = None  # the OutputSpec recorded at conversion (e.g. a detector's decoder)
    recorded_preprocess: bool = True  # False: the artifact carried no PreprocessSpec of its own
    # Whether the conversion judged output 0 as class scores (top-1): False when the manifest
    # judged it otherwise (landmarks, embeddings, a regression), None for a bare model file.
    classifier: bool | None = None


def engine_of(path: Path) -> str | None:
    suffix = path.suffix.lower()
    for engine, suffixes in ENGINE_SUFFIXES.items():
        if suffix in suffixes:
            return engine
    return None


def resolve(path: str | Path, *, target: str | None = None, preprocess: Any = None,
            labels: Sequence[str] | str | Path | None = None, public_key: str | Path | None = None) -> ServedModel:
    """Read a manifest (file or its directory) or a bare model file into a ServedModel."""
    path = Path(path)
    if path.is_dir() and (path / MANIFEST_NAME).exists():
        path = path / MANIFEST_NAME  # a FIFO or device there is refused by load_manifest, not skipped
    if not path.exists():
        raise InputError(f"no such artifact: {path}")
    if special_file(path):  # reading a FIFO with no writer would block for ever
        raise InputError(f"{path} {NOT_REGULAR}; give the model file or manifest")
    if public_key is not None:
        if path.suffix.lower() != ".json":
            raise ManifestError(f"{path} is a bare model file, and a public key was given: only a signed "
                                "manifest (convert --sign-key) can be checked")
        from edgeserve.manifest.signing import check_signature

        check_signature(path, public_key)
    if path.suffix.lower() == ".json":
        served = _from_manifest(path, target)
    else:
        engine = engine_of(path)
        if engine is None:
            raise InputError(f"{path}: expected a manifest.json or a model file ({SERVED_SUFFIXES}), got '{path.suffix}'")
        size = path.stat().st_size if path.is_file() else 0
        served = ServedModel([Artifact(path, engine, None, None, size)], _embedded_spec(path), None, None)
    served.recorded_preprocess = served.preprocess is not None
    if isinstance(preprocess, Mapping):
        # Fields to change, not a whole spec: the rest stays as recorded (a --mean on the
        # command line must not silently drop the recorded size, crop and interpolation).
        served.preprocess, served.overridden = _override(served.preprocess, preprocess)
    elif preprocess is not None:
        served.preprocess = _as_spec(preprocess)
        served.overridden = ("all (a whole PreprocessSpec was given)",)
    if labels is not None:
        served.labels = _as_labels(labels)
    return served


def _from_manifest(path: Path, target: str | None) -> ServedModel:
    manifest = load_manifest(path)
    root = path.parent
    artifacts = []
    for written in manifest["artifacts"]:
        where = f"{path} artifact {written.get('target')!r}"
        entry = ArtifactEntry.read(written, where)
        if not entry.ok or not served(entry.target):
            continue
        if target is not None and entry.target != target:
            continue
        file = inside(root, entry.path, where)
        engine = engine_of(file)
        if engine is None:  # refused, not skipped: skipping would serve another target without a word
            raise ManifestError(f"{where}: expected its path to name a model file ({SERVED_SUFFIXES}), "
                                f"got {entry.path[:80]!r}")
        if not entry.sha256:
            raise ManifestError(f"{where} has no sha256: nothing proves {entry.path} is the file that was verified")
        labels = entry.source_output_labels()
        artifacts.append(Artifact(file, engine, entry.target, entry.sha256, entry.bytes or 0,
                                  source_outputs=labels if labels and all(labels) else ()))
    if not artifacts:
        targets = [a.get("target") for a in manifest["artifacts"]]
        if target:
            raise ManifestError(f"{path} has no artifact of target {target!r} with status ok; it lists {targets}")
        raise ManifestError(
            f"{path} holds nothing the runtime serves (a .tflite, .onnx, .mlpackage or .pte with status ok): it lists "
            f"{targets}. A microcontroller build runs on the board, not in Session; convert with -t tflite-int8 "
            "(or -t coreml) to get an artifact to run here")
    spec = PreprocessSpec.from_dict(manifest["preprocess"], where=f"{path} preprocess") if manifest.get("preprocess") else None
    labels = manifest.get("labels")
    output = manifest.get("output")
    judged = {str((e.get("metrics") or {}).get("metric")) for e in manifest["artifacts"]
              if isinstance(e.get("metrics"), dict) and e.get("status") == "ok"}
    classifier = None if not judged else ("top1" in judged or bool(labels))
    return ServedModel(artifacts, spec, list(labels) if labels else None, path,
                       output=dict(output) if isinstance(output, dict) else None, classifier=classifier)


def _embedded_spec(path: Path) -> PreprocessSpec | None:
    """The PreprocessSpec edgeserve stamped into a .tflite's metadata, if any."""
    if path.suffix.lower() != ".tflite":
        return None
    from edgeserve.tflite.model import TfliteModel

    try:
        raw = TfliteModel.from_file(path).metadata.get("edgeserve")
        spec = json.loads(bytes(raw).decode()).get("preprocess") if raw else None
    except (ModelFileError, ValueError, AttributeError):
        return None  # a damaged file is reported when it is opened, with the reason
    return PreprocessSpec.from_dict(spec, where=f"{path} metadata") if spec else None


def _override(recorded: PreprocessSpec | None, fields: Mapping[str, Any]) -> tuple[PreprocessSpec, tuple[str, ...]]:
    """``recorded`` with ``fields`` replaced (validated like any spec), and the names that changed."""
    base = recorded.to_dict() if recorded is not None else {}
    fields = dict(fields)
    if fields.get("color") == "gray" and "mean" not in fields and len(base.get("mean") or ()) > 1:
        fields["mean"], fields["std"] = [0.0], [1.0]  # one channel left: per-channel values no longer fit
    merged = PreprocessSpec.from_dict({**base, **fields}, where="preprocess overrides")
    after = merged.to_dict()
    if recorded is None:
        return merged, tuple(sorted(fields))
    # value_range is derived from the others (to_dict writes it for readers): not a field one sets.
    return merged, tuple(sorted(k for k in after if k != "value_range" and after[k] != base.get(k)))


def _as_spec(value: Any) -> PreprocessSpec:
    if isinstance(value, PreprocessSpec):
        return value
    if isinstance(value, dict):
        return PreprocessSpec.from_dict(value)
    if isinstance(value, (str, Path)):
        return PreprocessSpec.from_toml(value)
    raise InputError(f"preprocess must be a PreprocessSpec, a dict or a .toml path, got {type(value).__name__}")


def _as_labels(value: Sequence[str] | str | Path) -> list[str]:
    if isinstance(value, (str, Path)):
        try:
            text = read_settings(value).decode("utf-8", "replace")
            return [line.strip() for line in text.splitlines() if line.strip()]
        except OSError as exc:
            raise InputError(f"cannot read labels file {value}: {exc}") from exc
    return [str(v) for v in value]
