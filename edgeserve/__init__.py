"""edgeserve: one trained model to verified edge artifacts, and a runtime that serves them.

``import edgeserve`` stays light: TensorFlow, coremltools and torch are imported only
inside the code paths that need them (a test checks ``sys.modules``).
"""

from __future__ import annotations

from edgeserve.errors import EdgeServeError, MissingDependencyError
from edgeserve.preprocess import PreprocessSpec

__version__ = "0.2.2"

__all__ = ["EdgeServeError", "MissingDependencyError", "PreprocessSpec", "__version__"]
