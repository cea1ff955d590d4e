"""ONNX Runtime backends, one per execution provider, bound to preallocated arrays.

ONNX Runtime silently runs on the CPU when a requested provider is missing (a Python
warning at most), so each backend checks ``get_available_providers()`` before opening and
``get_providers()`` after, and reports a dropped provider as a failed attempt.

Inputs and outputs are numpy arrays this backend allocates once and binds with IOBinding,
so ``run_with_iobinding`` reads the frame where the Session wrote it and writes results
where the Session reads them.
"""

from __future__ import annotations

import logging
import re
import warnings
from typing import Any

import numpy as np

from edgeserve.runtime.backend_base import Backend, BackendOptions, BackendUnavailable, Placement
from edgeserve.runtime.litert import TensorDetail

log = logging.getLogger(__name__)

ENGINE = "onnxruntime"

_ORT_DTYPES = {
    "tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
    "tensor(int8)": np.int8, "tensor(uint8)": np.uint8, "tensor(int16)": np.int16,
    "tensor(int32)": np.int32, "tensor(int64)": np.int64, "tensor(bool)": np.bool_,
}

# "All nodes placed on [CPUExecutionProvider]. Number of nodes: 6"
# "Node(s) placed on [CUDAExecutionProvider]. Number of nodes: 40"
_PLACEMENT = re.compile(r"(?:All nodes|Node\(s\)) placed on \[(\w+)\]\. Number of nodes: (\d+)")


class OnnxRuntimeBackend(Backend):
    def __init__(self, name: str, kind: str, provider: str, data: bytes, options: BackendOptions) -> None:
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise BackendUnavailable("onnxruntime is not installed (pip install 'edgeserve[onnx]')") from exc
        from edgeserve.console import capture_native_stderr

        available = ort.get_available_providers()
        if provider not in available:
            raise BackendUnavailable(f"this onnxruntime build has no {provider} (available: {', '.join(available)})")
        self.name, self.kind = name, kind
        so = ort.SessionOptions()
        so.log_severity_level = 0  # verbose: the only place ORT says which provider took which node
        if options.threads:
            so.intra_op_num_threads = int(options.threads)
        providers = provider_list(provider, data)
        failure: Exception | None = None
        with capture_native_stderr() as captured, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the provider check below says it better
            try:
                self._session = ort.InferenceSession(data, so, providers=providers)
            except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph/... types
                failure = exc
        if failure is not None:
            raise BackendUnavailable(f"onnxruntime could not open the model: {str(failure).splitlines()[0]}") from failure
        active = self._session.get_providers()
        if provider not in active:
            raise BackendUnavailable(f"onnxruntime dropped {provider} when opening the model (active: {', '.join(active)})")
        self.placement = ort_placement(captured.text, provider)
        self.inputs = tuple(_tensor(i) for i in self._session.get_inputs())
        self.outputs = tuple(_tensor(o) for o in self._session.get_outputs())
        for d in self.inputs + self.outputs:
            if any(s < 0 for s in d.shape):
                raise BackendUnavailable(f"'{d.name}' has a dynamic shape {d.shape}; the batch-1 runtime needs static shapes")
        self._in = [np.zeros(d.shape, d.dtype) for d in self.inputs]
        self._out = [np.zeros(d.shape, d.dtype) for d in self.outputs]
        self._binding = self._session.io_binding()
        for d, arr in zip(self.inputs, self._in):
            self._binding.bind_input(d.name, "cpu", 0, arr.dtype, list(arr.shape), arr.ctypes.data)
        for d, arr in zip(self.outputs, self._out):
            self._binding.bind_output(d.name, "cpu", 0, arr.dtype, list(arr.shape), arr.ctypes.data)

    def input_buffer(self, i: int) -> np.ndarray:
        return self._in[i]

    def invoke(self) -> None:
        self._session.run_with_iobinding(self._binding)

    def output_buffer(self, i: int) -> np.ndarray:
        return self._out[i]

    def close(self) -> None:
        self._binding = None
        self._session = None


def provider_list(provider: str, data: bytes) -> list[Any]:
    """The providers a session is opened with: the wanted one (with its options), then the CPU.

    TensorRT builds an engine per model on first use, minutes on a Jetson: it is cached under
    ``~/.cache/edgeserve/trt-engines/<model sha256>`` so the next start reads it. FP16 is on
    for the layers TensorRT runs in float; INT8 for a QDQ model, whose Q/DQ nodes carry the
    scales (explicit quantization), so no TensorRT calibration table is needed.
    """
    if provider == "CPUExecutionProvider":
        return [provider]
    if provider != "TensorrtExecutionProvider":
        return [provider, "CPUExecutionProvider"]
    import hashlib
    import os

    cache = os.path.join(os.path.expanduser("~"), ".cache", "edgeserve", "trt-engines",
                         hashlib.sha256(data).hexdigest()[:16])
    options = {"trt_fp16_enable": True, "trt_int8_enable": b"QuantizeLinear" in data,
               "trt_engine_cache_enable": True, "trt_engine_cache_path": cache}
    return [(provider, options), "CUDAExecutionProvider", "CPUExecutionProvider"]


def ort_placement(log_text: str, provider: str) -> Placement:
    counts: dict[str, int] = {}
    for ep, n in _PLACEMENT.findall(log_text):
        counts[ep] = counts.get(ep, 0) + int(n)
    if not counts:
        return Placement(None, None, note="onnxruntime did not report node placement")
    total = sum(counts.values())
    return Placement(total=total, accelerated=counts.get(provider, 0), partitions=None, taken_by=provider,
                     note=", ".join(f"{ep}: {n}" for ep, n in counts.items()) + " (nodes after graph optimisation)")


def _tensor(arg: Any) -> TensorDetail:
    dtype = _ORT_DTYPES.get(arg.type)
    if dtype is None:
        raise BackendUnavailable(f"'{arg.name}' has type {arg.type}, which the runtime does not feed")
    shape = tuple(d if isinstance(d, int) else -1 for d in arg.shape)
    return TensorDetail(name=arg.name, index=-1, shape=shape, dtype=np.dtype(dtype), scale=0.0, zero_point=0)


def _factory(backend: str, kind: str, provider: str) -> Any:
    def open_backend(path: str, data: bytes, options: BackendOptions) -> Backend:
        return OnnxRuntimeBackend(f"onnxruntime:{backend}", kind, provider, data, options)

    return open_backend


# (backend name, kind, execution provider), in the order `auto` tries them.
PROVIDERS = (
    ("tensorrt", "gpu", "TensorrtExecutionProvider"),
    ("cuda", "gpu", "CUDAExecutionProvider"),
    ("openvino", "npu", "OpenVINOExecutionProvider"),
    ("qnn", "npu", "QNNExecutionProvider"),
    ("coreml", "npu", "CoreMLExecutionProvider"),
    ("nnapi", "npu", "NnapiExecutionProvider"),
    ("xnnpack", "cpu", "XnnpackExecutionProvider"),
    ("cpu", "cpu", "CPUExecutionProvider"),
)
BACKENDS = tuple((f"onnxruntime:{b}", kind, _factory(b, kind, provider)) for b, kind, provider in PROVIDERS)
