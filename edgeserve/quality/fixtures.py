"""The verification fixtures a conversion writes beside its artifacts (``verify/<target>.npz``).

`verify` reads them back long after they were written, from a folder anyone could have
edited; a damaged one (cut short, not a zip, holding pickled objects) is one clear error,
not numpy's or zipfile's exception. Calibration and evaluation .npz files are read by the
same reader (edgeserve.datasets), with their own error.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from edgeserve.atomic import open_regular, write_bytes
from edgeserve.errors import ManifestError, first_line


def named_arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array in the .npz at ``path``, read whole, never unpickled; any failure to read it
    (zipfile alone raises BadZipFile, EOFError, NotImplementedError for a "version" it lacks,
    RuntimeError for encryption, zlib.error) is a ValueError with the reason."""
    try:
        with open_regular(path) as fh:
            loaded = np.load(fh, allow_pickle=False)
            if not hasattr(loaded, "files"):  # a bare .npy
                raise ValueError("it holds one array, not named arrays")
            with loaded as npz:
                return {name: npz[name] for name in npz.files}
    except Exception as exc:
        raise ValueError(first_line(exc)) from exc


class ArraysOnDemand(Mapping[str, np.ndarray]):
    """The arrays of an .npz by name, each decompressed when first read: a calibration file
    holding an unused 1.5 GB array in 6.5 MB was decompressed whole (2.2 GB at its peak) to read
    the 30 kB it was given for. The names come from the zip's directory, read at once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._read: dict[str, np.ndarray] = {}
        self._names = list(self._open(lambda npz: list(npz.files)))

    def _open(self, use):  # type: ignore[no-untyped-def]
        try:
            with open_regular(self.path) as fh:
                loaded = np.load(fh, allow_pickle=False)
                if not hasattr(loaded, "files"):  # a bare .npy
                    raise ValueError("it holds one array, not named arrays")
                with loaded as npz:
                    return use(npz)
        except Exception as exc:
            raise ValueError(first_line(exc)) from exc

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._names:
            raise KeyError(name)
        if name not in self._read:
            self._read[name] = self._open(lambda npz: npz[name])
        return self._read[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def pop(self, name: str, default: np.ndarray | None = None) -> np.ndarray | None:
        if name not in self._names:
            return default
        value = self[name]
        self._names.remove(name)
        return value


def load_arrays(path: Path) -> dict[str, np.ndarray]:
    """A fixture's arrays; a damaged one is a ManifestError saying so."""
    try:
        return named_arrays(path)
    except ValueError as exc:
        raise ManifestError(f"fixture {path.name} cannot be read as named arrays ({exc}): it was "
                            "damaged or replaced after the conversion; convert again") from exc


def write_fixture(path: Path, inputs: Sequence[np.ndarray], reference: Sequence[np.ndarray],
                  outputs: Sequence[np.ndarray]) -> Path:
    """A target's fixture: the inputs, the source's outputs on them, and the artifact's (onnx,
    onnx-int8, executorch, executorch-int8; tflite-int8 and coreml add arrays of their own)."""
    arrays = {f"inputs_{i}": a for i, a in enumerate(inputs)}
    arrays |= {f"reference_{i}": a for i, a in enumerate(reference)}
    arrays |= {f"outputs_{i}": a for i, a in enumerate(outputs)}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return write_bytes(path, buffer.getvalue())


def read_fixture(path: Path) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """The inputs, reference and outputs :func:`write_fixture` wrote."""
    fx = load_arrays(path)
    try:
        groups = {g: [fx[k] for k in sorted((k for k in fx if k.startswith(g + "_")),
                                            key=lambda k: int(k.rsplit("_", 1)[1]))]
                  for g in ("inputs", "reference", "outputs")}
    except ValueError:  # a name like inputs_x: not a fixture this code wrote
        raise ManifestError(f"fixture {path.name} holds arrays this version did not write: {sorted(fx)[:6]}") from None
    return groups["inputs"], groups["reference"], groups["outputs"]
