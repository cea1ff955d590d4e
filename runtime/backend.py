"""What every execution backend offers the Session, and the registry that names them.

A backend is one engine + one accelerator choice (``litert:edgetpu``, ``onnxruntime:cuda``,
``coreml:ane``...). It owns the model's input and output memory: the Session writes the
preprocessed frame straight into :meth:`Backend.input_buffer` and reads raw outputs from
:meth:`Backend.output_buffer`, so no frame is copied between the two.

Backends register a factory under their name, so tests (and users with an in-house
engine) can add one without editing the Session: ``register_backend("acme:npu", kind="npu",
engine="litert", factory=...)``.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from edgeserve.errors import EdgeServeError
from edgeserve.runtime.litert import TensorDetail

#: Accelerator class of each backend name, used by ``require=`` and the parity gate.
KINDS = ("npu", "gpu", "cpu")


class BackendUnavailable(EdgeServeError):
    """This backend cannot run here (library missing, model not delegable, ...); try the next."""


@dataclasses.dataclass(frozen=True)
class Placement:
    """How many of the model's operators the backend's accelerator took.

    ``accelerated`` counts operators inside delegate partitions (LiteRT) or assigned to the
    execution provider (ONNX Runtime); ``None`` when the engine does not say.
    """

    total: int | None
    accelerated: int | None
    partitions: int | None = None
    on_cpu: tuple[str, ...] = ()  # operator names left to the CPU kernels, in order
    note: str = ""
    taken_by: str = "the accelerator"  # who runs the ``accelerated`` ops: "XNNPACK", a provider, ...

    def to_dict(self) -> dict[str, Any]:
        return {"total_ops": self.total, "accelerated_ops": self.accelerated, "taken_by": self.taken_by,
                "partitions": self.partitions, "cpu_kernel_ops": list(self.on_cpu), "note": self.note}

    def __str__(self) -> str:
        if self.total is None or self.accelerated is None:
            return self.note or "placement unknown"
        text = f"{self.accelerated}/{self.total} ops on {self.taken_by}"
        if self.partitions is not None:
            text += f" in {self.partitions} partition(s)"
        return text


class Backend(abc.ABC):
    """One opened model on one engine/accelerator, at batch 1."""

    name: str
    kind: str
    inputs: tuple[TensorDetail, ...]
    outputs: tuple[TensorDetail, ...]
    placement: Placement

    @abc.abstractmethod
    def input_buffer(self, i: int) -> np.ndarray:
        """A writable array that IS input ``i``'s memory in the engine (valid until invoke)."""

    @abc.abstractmethod
    def invoke(self) -> None:
        """Run the model on what the input buffers hold."""

    @abc.abstractmethod
    def output_buffer(self, i: int) -> np.ndarray:
        """Output ``i``'s raw values after :meth:`invoke` (a view; valid until the next invoke)."""

    def close(self) -> None:
        """Release the engine's resources (the Session calls it when it drops a backend)."""


@dataclasses.dataclass(frozen=True)
class BackendOptions:
    """What a factory may use to open a model."""

    threads: int | None
    profile: Any  # edgeserve.profiles.Profile | None
    libraries: Mapping[str, str]  # delegate library overrides by backend name ("npu" -> path)


Factory = Callable[[str, bytes, BackendOptions], Backend]  # (artifact path, bytes, options)


@dataclasses.dataclass(frozen=True)
class BackendInfo:
    name: str
    engine: str  # "litert" | "onnxruntime" | "coreml": which artifact format it runs
    kind: str
    factory: Factory


_REGISTRY: dict[str, BackendInfo] = {}

#: Artifact file suffix each engine runs.
ENGINE_SUFFIXES: Mapping[str, tuple[str, ...]] = {
    "litert": (".tflite",),
    "onnxruntime": (".onnx",),
    "coreml": (".mlpackage", ".mlmodel"),
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
    from edgeserve.runtime import backend_coreml, backend_litert, backend_onnx

    for module in (backend_litert, backend_onnx, backend_coreml):
        for name, kind, factory in module.BACKENDS:
            _REGISTRY.setdefault(name, BackendInfo(name, module.ENGINE, kind, factory))
