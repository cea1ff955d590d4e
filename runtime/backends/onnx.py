"""ONNX Runtime backends, one per execution provider, bound to preallocated arrays.

ONNX Runtime silently runs on the CPU when a requested provider is missing (a Python
warning at most), so each backend checks ``get_available_providers()`` before opening and
``get_providers()`` after, and reports a dropped provider as a failed attempt.

Inputs and outputs are numpy arrays this backend allocates once and binds with IOBinding,
so ``run_with_iobinding`` reads the frame where the Session wrote it and writes results
where the Session reads them (a plugin provider, OpenVINO's, is fed the same arrays by value).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import numpy as np

from edgeserve.runtime.backends.base import Backend, BackendOptions, BackendUnavailable, Placement
from edgeserve.runtime.backends.litert_run import TensorDetail

log = logging.getLogger(__name__)

ENGINE = "onnxruntime"
# One input or output of a batch-1 model larger than this is a damaged or hand-made file (a
# 384 TiB shape), refused before its buffer is allocated; conversion uses the same bound.
MAX_TENSOR_BYTES = 1 << 30

_ORT_DTYPES = {
    "tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
    "tensor(int8)": np.int8, "tensor(uint8)": np.uint8, "tensor(int16)": np.int16,
    "tensor(int32)": np.int32, "tensor(int64)": np.int64, "tensor(bool)": np.bool_,
}

# "All nodes placed on [CPUExecutionProvider]. Number of nodes: 6"
# "Node(s) placed on [CUDAExecutionProvider]. Number of nodes: 40"
_PLACEMENT = re.compile(r"(?:All nodes|Node\(s\)) placed on \[(\w+)\]\. Number of nodes: (\d+)")


class OnnxRuntimeBackend(Backend):
    def __init__(self, name: str, kind: str, provider: str, data: bytes, options: BackendOptions,
                 ep_device: Any = None, ep_options: dict[str, str] | None = None) -> None:
        """``ep_device``: an OrtEpDevice of a plugin execution provider (the OpenVINO plugin)
        to run on, with ``ep_options``, instead of a provider built into this onnxruntime."""
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise BackendUnavailable("onnxruntime is not installed (pip install 'edgeserve[onnx]')") from exc
        from edgeserve.console import capture_native_stderr, quiet_warnings
        from edgeserve.onnx_check import SESSION_CONFIG

        available = ort.get_available_providers()
        if ep_device is None and provider not in available:
            raise BackendUnavailable(f"this onnxruntime build has no {provider} (available: {', '.join(available)})")
        self.name, self.kind = name, kind
        so = ort.SessionOptions()
        so.log_severity_level = 0  # verbose: the only place ORT says which provider took which node
        for key, value in SESSION_CONFIG.items():
            so.add_session_config_entry(key, value)
        if options.threads:
            so.intra_op_num_threads = int(options.threads)
        providers: list[Any] | None = provider_list(provider, data)
        if ep_device is not None:
            so.add_provider_for_devices([ep_device], dict(ep_options or {}))
            providers = None  # the devices added above, then ONNX Runtime's CPU provider
        # What a second session needs to profile the same model the same way (operator_times).
        self._opened = (data, providers, options.threads, ep_device, dict(ep_options or {}))
        failure: Exception | None = None
        # Its warnings are not shown: the provider check below says it better.
        with capture_native_stderr() as captured, quiet_warnings():
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
        if not self.outputs:
            raise BackendUnavailable("the model has no outputs: there is nothing to run it for")
        for d in self.inputs + self.outputs:
            if any(s < 0 for s in d.shape):
                raise BackendUnavailable(f"'{d.name}' has a dynamic shape {d.shape}; the batch-1 runtime needs static shapes")
            nbytes = int(np.prod(d.shape, dtype=object)) * np.dtype(d.dtype).itemsize
            if nbytes > MAX_TENSOR_BYTES:  # checked before the buffers below are allocated
                raise BackendUnavailable(f"'{d.name}' has shape {d.shape}: {nbytes / (1 << 30):,.1f} GiB for one "
                                         f"frame, more than the {MAX_TENSOR_BYTES >> 30} GiB a batch-1 tensor may hold")
        self._in = [np.zeros(d.shape, d.dtype) for d in self.inputs]
        self._out = [np.zeros(d.shape, d.dtype) for d in self.outputs]
        self._plugin = ep_device is not None
        self._binding = self._session.io_binding()
        for d, arr in zip(self.inputs, self._in):
            self._binding.bind_input(d.name, "cpu", 0, arr.dtype, list(arr.shape), arr.ctypes.data)
        for d, arr in zip(self.outputs, self._out):
            self._binding.bind_output(d.name, "cpu", 0, arr.dtype, list(arr.shape), arr.ctypes.data)

    def input_buffer(self, i: int) -> np.ndarray:
        return self._in[i]

    def invoke(self) -> None:
        if self._plugin:
            # The OpenVINO plugin (1.8.1) does not read a bound input buffer (measured on an Intel
            # CPU: one wrong output whatever the frame, while run() on the same session is right),
            # so a plugin provider is fed by value and its outputs copied into the buffers.
            outputs = self._session.run([d.name for d in self.outputs],
                                        {d.name: arr for d, arr in zip(self.inputs, self._in)})
            for buffer, value in zip(self._out, outputs):
                buffer[...] = value
            return
        self._session.run_with_iobinding(self._binding)

    def output_buffer(self, i: int) -> np.ndarray:
        return self._out[i]

    def operator_times(self, runs: int) -> list[dict[str, Any]]:
        """ONNX Runtime's own profiler, in a second session of the same model, providers and
        threads (profiling slows every node a little, so the timed session stays as it is): each
        node's kernel time and the provider that ran it, averaged over ``runs`` runs."""
        import tempfile

        import onnxruntime as ort

        from edgeserve.console import capture_native_stderr, quiet_warnings

        data, providers, threads, ep_device, ep_options = self._opened
        with tempfile.TemporaryDirectory(prefix="edgeserve-ort-profile-") as folder:
            so = ort.SessionOptions()
            so.enable_profiling = True
            so.profile_file_prefix = str(Path(folder) / "ort")
            if threads:
                so.intra_op_num_threads = int(threads)
            if ep_device is not None:
                so.add_provider_for_devices([ep_device], ep_options)
            with capture_native_stderr(), quiet_warnings():
                session = ort.InferenceSession(data, so, providers=providers)
                feed = {d.name: arr for d, arr in zip(self.inputs, self._in)}
                for _ in range(runs):
                    session.run(None, feed)
                events = json.loads(Path(session.end_profiling()).read_text())
        totals: dict[str, dict[str, Any]] = {}
        for event in events:
            if event.get("cat") != "Node" or not str(event.get("name", "")).endswith("_kernel_time"):
                continue
            args = event.get("args") or {}
            node = event["name"].removesuffix("_kernel_time")
            found = totals.setdefault(node, {"node": node, "op": args.get("op_name", "?"),
                                             "placed_on": args.get("provider", "?"), "us": 0.0})
            found["us"] += float(event.get("dur", 0))
        for found in totals.values():
            found["us"] = round(found["us"] / runs, 2)
        return list(totals.values())

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


OPENVINO_PLUGIN = "onnxruntime-ep-openvino"
_plugin_registered = False


def plugin_registered() -> bool:
    """Whether this process registered OpenVINO's plugin with ONNX Runtime (openvino_device)."""
    return _plugin_registered


def openvino_device(device: str) -> Any:
    """The OrtEpDevice the OpenVINO plugin offers for ``device`` ("NPU", "GPU" or "CPU"), or
    BackendUnavailable with the reason: the plugin missing, ONNX Runtime refusing it, or the
    plugin offering no such device on this machine (with what it and ONNX Runtime do see)."""
    import importlib.metadata

    import onnxruntime as ort

    global _plugin_registered
    try:
        import onnxruntime_ep_openvino as plugin
    except ImportError as exc:
        raise BackendUnavailable(f"the OpenVINO execution provider plugin is not installed (pip install "
                                 f"{OPENVINO_PLUGIN}, or 'edgeserve[onnx]')") from exc
    if not _plugin_registered:
        try:
            ort.register_execution_provider_library("openvino", plugin.get_library_path())
        except Exception as exc:  # noqa: BLE001 - onnxruntime's own error types
            if "already registered" not in str(exc):
                raise BackendUnavailable(f"onnxruntime could not load the OpenVINO plugin: "
                                         f"{str(exc).splitlines()[0]}") from exc
        _plugin_registered = True
    devices = ort.get_ep_devices()
    offered = [d for d in devices if d.ep_name == plugin.get_ep_name()]
    wanted = [d for d in offered if str(d.ep_metadata.get("ov_device", "")).upper().startswith(device)]
    if wanted:
        return wanted[0]
    version = importlib.metadata.version(OPENVINO_PLUGIN)
    if offered:
        names = sorted({str(d.ep_metadata.get("ov_device")) for d in offered})
        raise BackendUnavailable(f"OpenVINO ({OPENVINO_PLUGIN} {version}) has no {device} device here; it offers "
                                 f"{', '.join(names)}")
    seen = ", ".join(f"{d.device.type.name.split('.')[-1]} by {d.device.vendor} (vendor 0x{d.device.vendor_id:04x})"
                     for d in devices if d.ep_name == "CPUExecutionProvider") or "no hardware device"
    raise BackendUnavailable(f"OpenVINO ({OPENVINO_PLUGIN} {version}) offers no device on this machine: its plugin "
                             f"takes Intel hardware only (vendor 0x8086), and ONNX Runtime sees {seen}")


def _openvino_factory(backend: str, kind: str, device: str) -> Any:
    def open_backend(path: str, data: bytes, options: BackendOptions) -> Backend:
        try:
            import onnxruntime  # noqa: F401 - the backend's own message below says how to install it
        except ImportError as exc:
            raise BackendUnavailable("onnxruntime is not installed (pip install 'edgeserve[onnx]')") from exc
        # OpenVINO's CPU plugin may run float models in bf16 on CPUs that have it (its
        # default precision hint); an f32 hint keeps the model's own precision, so this backend
        # computes what ONNX Runtime's CPU provider does. GPU and NPU keep their FP16
        # default, and the Session's parity check compares them with the CPU.
        # (The plugin ignores a "precision" option and says so; it takes the hint in load_config.)
        f32 = {"load_config": json.dumps({"CPU": {"INFERENCE_PRECISION_HINT": "f32"}})}
        ep_options = f32 if device == "CPU" else {}
        return OnnxRuntimeBackend(f"onnxruntime:{backend}", kind, "OpenVINOExecutionProvider", data, options,
                                  ep_device=openvino_device(device), ep_options=ep_options)

    return open_backend


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
# The OpenVINO execution provider as ONNX Runtime's plugin (onnxruntime-ep-openvino), one
# backend per OpenVINO device; `auto` tries them after CUDA, fastest first.
OPENVINO_DEVICES = (("openvino-npu", "npu", "NPU"), ("openvino-gpu", "gpu", "GPU"), ("openvino-cpu", "cpu", "CPU"))
BACKENDS = tuple((f"onnxruntime:{b}", kind, _factory(b, kind, provider)) for b, kind, provider in PROVIDERS) + \
    tuple((f"onnxruntime:{b}", kind, _openvino_factory(b, kind, device)) for b, kind, device in OPENVINO_DEVICES)
