"""Fake accelerator backends that fail in each way a real one can, built on a real LiteRT CPU backend.

Each fake opens the real model with XNNPACK (so it computes real results) and then
misbehaves at one stage: at open, at the first invoke, by computing wrong numbers, or
by raising on a later invoke. Registered under names the tests put in a backend chain.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np

from edgeserve.runtime.backends.registry import Backend, BackendOptions, BackendUnavailable, register_backend, unregister_backend
from edgeserve.runtime.backends.litert import LiteRTBackend


class FakeAccelerator(Backend):
    def __init__(self, name: str, kind: str, data: bytes, options: BackendOptions, *, fail_open: bool = False,
                 fail_invoke_at: int | None = None, offset: float = 0.0) -> None:
        if fail_open:
            raise BackendUnavailable("fake: driver not loaded")
        self._inner = LiteRTBackend("litert:xnnpack", "cpu", data, options)
        self.name, self.kind = name, kind
        self.inputs, self.outputs, self.placement = self._inner.inputs, self._inner.outputs, self._inner.placement
        self._fail_invoke_at, self._offset, self.invokes = fail_invoke_at, offset, 0
        self.closed = False

    def input_buffer(self, i: int) -> np.ndarray:
        return self._inner.input_buffer(i)

    def invoke(self) -> None:
        self.invokes += 1
        if self._fail_invoke_at is not None and self.invokes >= self._fail_invoke_at:
            raise RuntimeError("fake: accelerator hung up\nsecond line")
        self._inner.invoke()
        if self._offset:
            out = self._inner.output_buffer(0)
            # Wrong results, as a buggy NPU kernel gives: shift every raw value.
            np.copyto(out, np.clip(out.astype(np.int32) + int(self._offset), -128, 127).astype(out.dtype))
            del out

    def output_buffer(self, i: int) -> np.ndarray:
        return self._inner.output_buffer(i)

    def close(self) -> None:
        self.closed = True
        self._inner.close()


FAKES = {
    "fake:npu-no-driver": ("npu", {"fail_open": True}),
    "fake:npu-crashes": ("npu", {"fail_invoke_at": 1}),
    "fake:npu-wrong": ("npu", {"offset": 40}),
    "fake:npu-good": ("npu", {}),
    "fake:gpu-good": ("gpu", {}),
    "fake:gpu-dies-later": ("gpu", {"fail_invoke_at": 5}),
}


@contextlib.contextmanager
def fake_backends() -> Iterator[dict[str, list[FakeAccelerator]]]:
    """Register every fake (engine litert) for the duration; yields the instances opened, by name."""
    opened: dict[str, list[FakeAccelerator]] = {name: [] for name in FAKES}

    def factory(name: str, kind: str, kwargs: dict) -> object:
        def open_fake(path: str, data: bytes, options: BackendOptions) -> Backend:
            backend = FakeAccelerator(name, kind, data, options, **kwargs)
            opened[name].append(backend)
            return backend

        return open_fake

    for name, (kind, kwargs) in FAKES.items():
        register_backend(name, engine="litert", kind=kind, factory=factory(name, kind, kwargs))
    try:
        yield opened
    finally:
        for name in FAKES:
            unregister_backend(name)
