"""The types every execution backend shares: the Backend interface, its options, placement.

A backend is one engine + one accelerator choice (``litert:edgetpu``, ``onnxruntime:cuda``,
``coreml:ane``...). It owns the model's input and output memory: the Session writes the
preprocessed frame straight into :meth:`Backend.input_buffer` and reads raw outputs from
:meth:`Backend.output_buffer`, so no frame is copied between the two. Engine modules
(litert.py, onnx.py, coreml.py, executorch.py) import these; the registry that names them
is ``edgeserve.runtime.backends.registry``.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from edgeserve.errors import EdgeServeError
from edgeserve.runtime.backends.litert_run import TensorDetail

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

    def lend_views(self) -> LentViews | None:
        """Views of every input and output that stay valid across invokes, and the calls to use
        while they are held (for :class:`~edgeserve.runtime.streaming.stream_step.StreamStep`); None when
        the engine cannot promise that. Valid until :meth:`reset_state` or :meth:`close`."""
        return None

    def operator_times(self, runs: int) -> list[dict[str, Any]]:
        """Each operator's time over ``runs`` invokes on what the input buffers hold: [{"node",
        "op", "placed_on", "us"}] (mean microseconds per run), from the engine's own profiler.
        Raises NotImplementedError with the reason where the engine's Python API has none."""
        raise NotImplementedError(f"{self.name} has no per-operator profiler edgeserve can read")

    def reset_state(self) -> None:
        """Return state kept between invocations (resource variables of a streaming model) to
        its initial value. Engines that keep no state have nothing to do."""

    def close(self) -> None:
        """Release the engine's resources (the Session calls it when it drops a backend)."""


@dataclasses.dataclass(frozen=True)
class LentViews:
    """What :meth:`Backend.lend_views` lends."""

    inputs: list[np.ndarray]  # the engine's input memory
    outputs: list[np.ndarray]  # the engine's output memory, current after each invoke
    invoke: Callable[[], None]  # the invoke to call while the views are alive
    # Per input, the engine's own copy of an array into it, which must raise ValueError for an
    # array of another dtype or shape (numpy's assignment would broadcast and cast instead).
    copy_inputs: list[Callable[[np.ndarray], None]]


@dataclasses.dataclass(frozen=True)
class BackendOptions:
    """What a factory may use to open a model."""

    threads: int | None
    profile: Any  # edgeserve.device_profiles.Profile | None
    libraries: Mapping[str, str]  # delegate library overrides by backend name ("npu" -> path)
