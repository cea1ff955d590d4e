"""The verification fixtures a conversion writes beside its artifacts (``verify/<target>.npz``).

`verify` reads them back long after they were written, from a folder anyone could have
edited; a damaged one (cut short, not a zip, holding pickled objects) is one clear error,
not numpy's or zipfile's exception.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeserve.atomic import open_regular
from edgeserve.errors import ManifestError, first_line


def load_arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array in the .npz at ``path``, read whole; never unpickles."""
    try:
        with open_regular(path) as fh:
            loaded = np.load(fh, allow_pickle=False)
            if not hasattr(loaded, "files"):  # a bare .npy
                raise ValueError("it holds one array, not named arrays")
            with loaded as npz:
                return {name: npz[name] for name in npz.files}
    # zipfile alone raises BadZipFile, EOFError, NotImplementedError (a "version" or method it
    # lacks), RuntimeError (encryption) and zlib.error on damage: any failure to parse is damage.
    except Exception as exc:
        raise ManifestError(f"fixture {path.name} cannot be read as named arrays ({first_line(exc)}): it was "
                            "damaged or replaced after the conversion; convert again") from exc
