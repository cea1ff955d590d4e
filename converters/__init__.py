"""edgeserve.converters: one module per target, each registering itself by name.

Installed from the top-level ``converters/`` folder as ``edgeserve.converters``. Target
modules import their framework (TensorFlow, coremltools, ...) inside their methods, so
discovering every target costs milliseconds, and adding a target never edits another
target's file: drop a module here that decorates its class with :func:`register`.
Modules whose names start with ``_`` are shared helpers, not targets.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING

from edgeserve.errors import UnknownTargetError

if TYPE_CHECKING:
    from edgeserve.converters._base import Converter

_REGISTRY: dict[str, type["Converter"]] = {}
_discovered = False


def register(cls: type["Converter"]) -> type["Converter"]:
    """Class decorator: make a converter available under ``cls.name``."""
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise RuntimeError(f"two converters claim the target name {cls.name!r}")
    _REGISTRY[cls.name] = cls
    return cls


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")
    _discovered = True


def target_names() -> list[str]:
    _discover()
    return sorted(_REGISTRY)


def get_converter(name: str) -> "Converter":
    _discover()
    if name not in _REGISTRY:
        raise UnknownTargetError(name, _REGISTRY)
    return _REGISTRY[name]()
