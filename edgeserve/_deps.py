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
    "ray": ("ray", "ray"),
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


# Modules found installed: an installed package does not go away during a run, and a target
# thread then never has to look it up while another thread is importing (see installed()).
_FOUND: set[str] = set()
# The modules the targets ask installed() about, looked up in the calling thread before any
# target runs (remember_installed).
TARGET_MODULES = ("executorch", "coremltools", "torch", "onnx", "onnxruntime", "tf2onnx", "onnx2tf", "onnxslim",
                  "tflite_micro", "ai_edge_quantizer", "litert_torch", "onnxscript", "torchao")


def installed(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it. Twice, with targets side by side
    (--jobs), ExecuTorch (a namespace package: found by walking sys.path) was looked up as absent
    while another target's thread was importing coremltools or torch, and the target was refused
    as "not installed". So a module found once stays found, ``remember_installed`` looks the
    targets' modules up before any target thread starts, and a miss is looked up again, with
    importlib's path caches cleared, before it is believed."""
    import importlib.util
    import sys
    import threading
    import time

    if module in _FOUND or sys.modules.get(module) is not None:
        _FOUND.add(module)
        return True
    # Only a target's thread can race another's import; the calling thread looks once.
    tries = 1 if threading.current_thread() is threading.main_thread() else 3
    for attempt in range(tries):
        try:
            if importlib.util.find_spec(module) is not None:
                _FOUND.add(module)
                return True
        except (ImportError, ValueError):  # a parent package missing, or a module without a spec
            pass
        importlib.invalidate_caches()
        if attempt < tries - 1:
            time.sleep(0.05)
    return False


def remember_installed(modules: tuple[str, ...] = TARGET_MODULES) -> None:
    """Look ``modules`` up now, in the calling thread, so that target threads find them in _FOUND."""
    for module in modules:
        installed(module)


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
