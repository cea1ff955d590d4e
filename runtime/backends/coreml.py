"""Core ML backends (macOS only): Neural Engine, GPU, CPU compute units.

Core ML's ``predict`` exists only on macOS; elsewhere each attempt fails with that reason,
so a profile that lists ``coreml:ane`` first still falls through honestly on Linux.
Core ML takes inputs as a dict and returns new arrays, so this backend copies once per
frame on each side: the zero-copy path is LiteRT's and ONNX Runtime's.
"""

from __future__ import annotations

import platform
from typing import Any

import numpy as np

from edgeserve.runtime.backends.base import Backend, BackendOptions, BackendUnavailable, Placement
from edgeserve.runtime.backends.litert_run import TensorDetail

ENGINE = "coreml"

_COMPUTE_UNITS = {"ane": "CPU_AND_NE", "gpu": "CPU_AND_GPU", "cpu": "CPU_ONLY"}


class CoreMLBackend(Backend):
    def __init__(self, name: str, kind: str, units: str, path: str) -> None:
        if platform.system() != "Darwin":
            raise BackendUnavailable(f"Core ML runs only on macOS; this is {platform.system()}")
        try:
            import coremltools as ct
        except ImportError as exc:
            raise BackendUnavailable("coremltools is not installed (pip install 'edgeserve[convert]')") from exc
        self.name, self.kind = name, kind
        try:
            self._model = ct.models.MLModel(path, compute_units=getattr(ct.ComputeUnit, units))
        except Exception as exc:  # coremltools raises plain Exception/RuntimeError on load failures
            raise BackendUnavailable(f"Core ML could not load {path}: {exc}") from exc
        spec = self._model.get_spec()
        self.inputs = tuple(_detail(f) for f in spec.description.input)
        self.outputs = tuple(_detail(f) for f in spec.description.output)
        self._in = [np.zeros(d.shape, d.dtype) for d in self.inputs]
        self._out = [np.zeros(d.shape, d.dtype) for d in self.outputs]
        self.placement = Placement(None, None, note=f"compute units {units}; Core ML does not report per-op placement")

    def input_buffer(self, i: int) -> np.ndarray:
        return self._in[i]

    def invoke(self) -> None:
        result = self._model.predict({d.name: x for d, x in zip(self.inputs, self._in)})
        for d, out in zip(self.outputs, self._out):
            np.copyto(out, np.asarray(result[d.name]).reshape(out.shape), casting="unsafe")

    def output_buffer(self, i: int) -> np.ndarray:
        return self._out[i]


def _detail(feature: Any) -> TensorDetail:
    which = feature.type.WhichOneof("Type")
    if which != "multiArrayType":
        raise BackendUnavailable(f"input/output '{feature.name}' is a Core ML {which}; the runtime feeds tensors only")
    array = feature.type.multiArrayType
    shape = tuple(int(s) for s in array.shape) or (1,)
    dtype = {65568: np.float32, 65552: np.float16, 131104: np.int32}.get(array.dataType, np.float32)
    return TensorDetail(name=feature.name, index=-1, shape=shape, dtype=np.dtype(dtype), scale=0.0, zero_point=0)


def _factory(backend: str, kind: str) -> Any:
    def open_backend(path: str, data: bytes, options: BackendOptions) -> Backend:
        return CoreMLBackend(f"coreml:{backend}", kind, _COMPUTE_UNITS[backend], path)

    return open_backend


BACKENDS = tuple((f"coreml:{b}", kind, _factory(b, kind)) for b, kind in (("ane", "npu"), ("gpu", "gpu"), ("cpu", "cpu")))
