"""The registry that names execution backends (types in ``edgeserve.runtime.backends.base``).

Backends register a factory under their name, so tests (and users with an in-house
engine) can add one without editing the Session: ``register_backend("acme:npu", kind="npu",
engine="litert", factory=...)``.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping

from edgeserve.runtime.backends.base import KINDS, Backend, BackendOptions, BackendUnavailable, Placement

__all__ = ["ENGINE_SUFFIXES", "KINDS", "Backend", "BackendInfo", "BackendOptions", "BackendUnavailable", "Placement",
           "backend_info", "known_backends", "register_backend", "unregister_backend"]

Factory = Callable[[str, bytes, BackendOptions], Backend]  # (artifact path, bytes, options)


@dataclasses.dataclass(frozen=True)
class BackendInfo:
    name: str
    engine: str  # "litert" | "onnxruntime" | "coreml" | "executorch": which artifact format it runs
    kind: str
    factory: Factory


_REGISTRY: dict[str, BackendInfo] = {}

#: Artifact file suffix each engine runs.
ENGINE_SUFFIXES: Mapping[str, tuple[str, ...]] = {
    "litert": (".tflite",),
    "onnxruntime": (".onnx",),
    "coreml": (".mlpackage", ".mlmodel"),
    "executorch": (".pte",),
}


def register_backend(name: str, *, engine: str, kind: str, factory: Factory) -> None:
    """Make ``name`` usable in a profile's backend chain or as ``Session(backend=name)``."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if engine not in ENGINE_SUFFIXES:
        raise ValueError(f"engine must be one of {tuple(ENGINE_SUFFIXES)}, got {engine!r}")
    _REGISTRY[name] = BackendInfo(name, engine, kind, factory)


def unregister_backend(name: str) -> None:
    _REGISTRY.pop(name, None)


def backend_info(name: str) -> BackendInfo | None:
    _register_builtins()
    return _REGISTRY.get(name)


def known_backends() -> list[str]:
    _register_builtins()
    return sorted(_REGISTRY)


_builtins_done = False


def _register_builtins() -> None:
    # Imported here, not at module level: each engine module imports its library lazily,
    # but the module itself is cheap, so registering is free.
    global _builtins_done
    if _builtins_done:
        return
    _builtins_done = True
    # By name: the engine modules import this package's types, and a static import back
    # into them would tie the registry and every engine into one knot.
    for module in (importlib.import_module(f"edgeserve.runtime.backends.{engine}")
                   for engine in ("litert", "onnx", "coreml", "executorch")):
        for name, kind, factory in module.BACKENDS:
            _REGISTRY.setdefault(name, BackendInfo(name, module.ENGINE, kind, factory))
