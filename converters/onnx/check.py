"""Running an ONNX artifact in ONNX Runtime (CPU) and scoring it, for both ONNX targets."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from edgeserve._deps import installed, require
from edgeserve.errors import ModelFileError, VerificationError
from edgeserve.onnx_check import SESSION_CONFIG, validate_onnx

# ONNX Runtime on another machine may pick other kernels; float results move in the last bits.
REVERIFY_RTOL = 1e-3


def session(model: bytes, exact: bool = False, made_by: str | None = None) -> Any:
    """An ONNX Runtime CPU session, after the runtime's own checks of the bytes.

    ``made_by``: the step that made ``model`` during a conversion (a checker failure is then
    that step's, not the user's file's). ``exact``: no graph optimizations, so a QDQ model runs as written (DequantizeLinear, the
    float operator, QuantizeLinear): the INT8 model's own arithmetic, the same on every
    machine. With them, ONNX Runtime fuses QDQ into its integer kernels, whose x86 path
    without VNNI (AVX2 only) multiplies u8 x s8 pairs into saturating 16-bit sums: measured
    on PaddleOCR's text-direction classifier, 16.5 dB against the float model as written,
    9.2 dB through those kernels on an AMD EPYC with AVX2 only.
    """
    try:
        validate_onnx(model)
    except ModelFileError as exc:
        if made_by is None:  # a file the user holds (verify): its own fault, said as such
            raise
        # A model edgeserve's own steps made: "model: onnx.checker rejected it" blamed the
        # user's file, which passes check_model(full_check=True).
        raise VerificationError(f"the ONNX model {made_by} made from your model fails onnx.checker "
                                f"({str(exc).removeprefix('model: ')[:300]}); your model is not at fault: "
                                "this is an intermediate of edgeserve's (please report it with the model)") from exc
    ort = require("onnxruntime", "running an ONNX artifact")
    options = ort.SessionOptions()
    options.log_severity_level = 3
    for key, value in SESSION_CONFIG.items():
        options.add_session_config_entry(key, value)
    if exact:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def run(model_or_session: Any, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """N samples, one at a time (the artifacts take batch 1), outputs in graph order, N first."""
    sess = session(model_or_session) if isinstance(model_or_session, bytes) else model_or_session
    names = [i.name for i in sess.get_inputs()]
    dtypes = [session_input_dtype(i.type) for i in sess.get_inputs()]
    try:
        chunks = [sess.run(None, {n: np.ascontiguousarray(x[i:i + 1], t) for n, t, x in zip(names, dtypes, inputs)})
                  for i in range(len(inputs[0]))]
    except Exception as exc:  # ORT's own error types: a kernel that fails on these values
        from edgeserve.errors import VerificationError, first_line

        raise VerificationError(f"ONNX Runtime cannot run the model on the check samples: {first_line(exc)[:400]}") \
            from exc
    return [np.concatenate([c[k] for c in chunks]) for k in range(len(chunks[0]))]


def session_input_dtype(ort_type: str) -> np.dtype:
    """The numpy type of an ONNX Runtime input ('tensor(int64)' -> int64; float32 for any other)."""
    name = ort_type.removeprefix("tensor(").removesuffix(")")
    return np.dtype({"float": "float32", "double": "float64", "float16": "float16", "int64": "int64", "int32": "int32",
                     "int16": "int16", "int8": "int8", "uint8": "uint8", "uint16": "uint16", "bool": "bool"}
                    .get(name, "float32"))


def placement(model: bytes) -> dict[str, Any]:
    """Which execution provider takes how many nodes, for every provider this onnxruntime has.

    The same verbose-log reading the runtime's ONNX Runtime backend does when it opens the
    model on a device; providers this build lacks are listed as such, so the record says
    what was and was not tried here.
    """
    ort = require("onnxruntime", "running an ONNX artifact")
    from edgeserve.runtime.backends import onnx as backend_onnx
    from edgeserve.runtime.backends.base import BackendOptions, BackendUnavailable
    from edgeserve.runtime.backends.onnx import PROVIDERS, OnnxRuntimeBackend

    available = set(ort.get_available_providers())
    plugin = installed("onnxruntime_ep_openvino")
    report: dict[str, Any] = {}
    for backend_name, kind, provider in PROVIDERS:
        name = f"onnxruntime:{backend_name}"
        built_in = provider in available and not backend_onnx.plugin_registered()
        if provider == "OpenVINOExecutionProvider" and plugin and not built_in:
            # ONNX Runtime lists OpenVINO's plugin only after something in this process registered
            # it (the runtime does, trying an OpenVINO device): the same record either way. The
            # runtime opens the plugin per device (openvino-npu, -gpu, -cpu) on the device.
            report[name] = {"available": False, "reason": "OpenVINO is ONNX Runtime's plugin here "
                            "(onnxruntime-ep-openvino): the runtime tries its devices as onnxruntime:openvino-npu, "
                            "-gpu and -cpu"}
            continue
        if provider not in available:
            report[name] = {"available": False}
            continue
        try:
            backend = OnnxRuntimeBackend(name, kind, provider, model,
                                         BackendOptions(threads=None, profile=None, libraries={}))
        except BackendUnavailable as exc:
            report[name] = {"available": True, "opened": False, "reason": str(exc)}
            continue
        report[name] = {"available": True, "opened": True} | backend.placement.to_dict()
        backend.close()
    return report
