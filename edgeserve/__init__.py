"""edgeserve: one trained model to verified edge artifacts, and a runtime that serves them.

``import edgeserve`` stays light: TensorFlow, coremltools and torch are imported only
inside the code paths that need them (a test checks ``sys.modules``).
"""

from __future__ import annotations

from edgeserve.errors import EdgeServeError, MissingDependencyError
from edgeserve.preprocess import PreprocessSpec

__version__ = "0.3.6"

__all__ = ["EdgeServeError", "MissingDependencyError", "PreprocessSpec", "Session", "__version__", "convert"]

# The two entry points, imported when first asked for (PEP 562), so that ``import edgeserve``
# loads neither the conversion pipeline nor the runtime: ``from edgeserve import convert, Session``.
_LAZY = {"convert": ("edgeserve.conversion.convert", "convert"), "Session": ("edgeserve.runtime.session", "Session")}


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module 'edgeserve' has no attribute {name!r}")
    import importlib

    module, attribute = _LAZY[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # once found, an ordinary attribute
    return value
