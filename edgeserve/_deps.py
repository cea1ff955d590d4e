"""Import optional dependencies on first use, with an error that says how to install them."""

from __future__ import annotations

import importlib
import logging
import os
import threading
from types import ModuleType

from edgeserve.errors import MissingDependencyError

# torch.export, its dynamo tracer, torch.onnx.export and ExportedProgram serialization keep
# process-wide mode stacks: two of them at once in one process (targets side by side, --jobs)
# corrupt each other (measured on PaddleOCR's DBNet with --jobs 2: "Trying to pop empty mode
# stack", "ProxyTorchDispatchMode slot already occupied"). Every in-process trace or save of a
# torch program takes this lock; the long work that follows (lowering, coremltools) runs in
# isolated children and does not hold it.
TORCH_TRACING = threading.RLock()

log = logging.getLogger(__name__)

# import name -> (pip package, edgeserve extra that brings it)
_EXTRAS: dict[str, tuple[str, str]] = {
    "tensorflow": ("tensorflow-cpu", "convert"),
    "keras": ("tensorflow-cpu", "convert"),
    "h5py": ("h5py", "convert"),
    "coremltools": ("coremltools", "convert"),
    "onnx": ("onnx", "convert"),
    "tf2onnx": ("tf2onnx", "convert"),
    "tflite_micro": ("tflite-micro", "convert"),
    "ai_edge_litert": ("ai-edge-litert", "tflite"),
    "onnxruntime": ("onnxruntime", "onnx"),
    "cv2": ("opencv-python-headless", "images"),
    "torch": ("torch", "torch"),
    "matplotlib": ("matplotlib", "report"),
    "cryptography": ("cryptography", "sign"),
    "ai_edge_quantizer": ("ai-edge-quantizer", "convert"),
    "litert_torch": ("litert-torch", "torch"),
    "onnxscript": ("onnxscript", "torch"),
    "executorch": ("executorch", "executorch"),
    "torchao": ("torchao", "executorch"),
}


def extra_of(module: str) -> str:
    """The edgeserve extra that installs the top-level package of ``module`` ("all" if none names it)."""
    return _EXTRAS.get(module.split(".")[0], (module, "all"))[1]


def require(module: str, feature: str = "") -> ModuleType:
    """Import ``module`` or raise :class:`MissingDependencyError` naming the fix.

    Args:
        module: the import name, e.g. ``"tensorflow"``.
        feature: what the caller was doing, for the message (e.g. "INT8 conversion").
    """
    top = module.split(".")[0]
    if top in ("tensorflow", "keras"):
        _quiet_tensorflow()
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        package, extra = _EXTRAS.get(top, (top, "all"))
        log.debug("import %s failed: %s", module, exc)
        raise MissingDependencyError(package, extra, feature) from exc


def installed(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it. Seen once with four targets side
    by side (--jobs): ExecuTorch, a namespace package another target's coremltools was importing
    at that moment, looked up as absent; not reproduced since. So a module already imported counts,
    and a miss is looked up again with importlib's path caches cleared before it is believed."""
    import importlib.util
    import sys

    if sys.modules.get(module) is not None:
        return True
    try:
        if importlib.util.find_spec(module) is not None:
            return True
        importlib.invalidate_caches()
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module without a spec
        return False


def _quiet_tensorflow() -> None:
    # TensorFlow prints C++ INFO lines and oneDNN notices on stderr at import; they drown
    # edgeserve's own output. Users can still raise the level themselves.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")


def package_version(package: str) -> str | None:
    """The installed version of a distribution (for provenance records), or None."""
    import importlib.metadata

    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None
