"""The verification fixtures a conversion writes beside its artifacts (``verify/<target>.npz``).

`verify` reads them back long after they were written, from a folder anyone could have
edited; a damaged one (cut short, not a zip, holding pickled objects) is one clear error,
not numpy's or zipfile's exception. Calibration and evaluation .npz files are read by the
same reader (edgeserve.datasets), with their own error.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeserve.atomic import open_regular
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


def load_arrays(path: Path) -> dict[str, np.ndarray]:
    """A fixture's arrays; a damaged one is a ManifestError saying so."""
    try:
        return named_arrays(path)
    except ValueError as exc:
        raise ManifestError(f"fixture {path.name} cannot be read as named arrays ({exc}): it was "
                            "damaged or replaced after the conversion; convert again") from exc
