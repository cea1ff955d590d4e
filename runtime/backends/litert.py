"""LiteRT backends: Edge TPU and vendor NPU delegates, the GPU delegate, XNNPACK, plain CPU.

The interpreter module is ai-edge-litert's, else tflite_runtime's, else TensorFlow's
(``edgeserve.runtime.backends.litert_run.interpreter_module``). Input and output memory is the
interpreter's own: the Session gets it through the ``tensor(idx)`` functions, which are
held for the interpreter's lifetime (the arrays they return must not outlive an invoke).
"""

from __future__ import annotations

import functools
import gc
import logging
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from edgeserve.runtime.backends.base import Backend, BackendOptions, BackendUnavailable, LentViews, Placement
from edgeserve.errors import first_line

log = logging.getLogger(__name__)

ENGINE = "litert"

#: Delegate libraries by backend when neither the profile nor the caller names one.
DEFAULT_LIBRARIES: Mapping[str, str] = {
    "edgetpu": "libedgetpu.so.1",
    "gpu": "libtensorflowlite_gpu_delegate.so",
}


class LiteRTBackend(Backend):
    """A LiteRT interpreter, optionally with one delegate."""

    def __init__(self, name: str, kind: str, data: bytes, options: BackendOptions,
                 delegate_library: str | None = None, builtin_only: bool = False) -> None:
        from edgeserve.console import capture_native_stderr
        from edgeserve.runtime.backends.litert_run import _detail, interpreter_module

        try:
            mod = interpreter_module()
        except Exception as exc:  # MissingDependencyError: say it as this backend's reason
            raise BackendUnavailable(str(exc)) from exc
        self.name, self.kind = name, kind
        self._data = data  # the interpreter reads weights from this buffer: keep it alive
        kwargs: dict[str, Any] = {"model_content": data, "num_threads": options.threads}
        delegates = []
        if delegate_library is not None:
            delegates.append(_load_delegate(mod, delegate_library))
            kwargs["experimental_delegates"] = delegates
        if builtin_only:
            kwargs["experimental_op_resolver_type"] = mod.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
        failure: Exception | None = None
        with capture_native_stderr() as captured:  # "INFO: Created TensorFlow Lite XNNPACK delegate"
            try:
                self._interp = mod.Interpreter(**kwargs)
                self._interp.allocate_tensors()
            except (ValueError, RuntimeError) as exc:
                failure = exc
        if failure is not None:  # raised here: the native log is complete only after the block
            raise BackendUnavailable(f"{first_line(failure)}{_native(captured)}") from failure
        self._delegates = delegates
        self._kwargs, self._module = kwargs, mod
        self.inputs = tuple(_detail(d) for d in self._interp.get_input_details())
        self.outputs = tuple(_detail(d) for d in self._interp.get_output_details())
        self._bind_tensors()
        self.placement = litert_placement(self._interp._get_ops_details(), _TAKEN_BY.get(name.split(":")[1], "delegate"))
        if delegate_library is not None and not self.placement.accelerated:
            raise BackendUnavailable(
                f"the {delegate_library} delegate took none of the model's {self.placement.total} operators"
                + (" (an Edge TPU runs only models compiled by edgetpu_compiler)" if name.endswith("edgetpu") else "")
            )

    def input_buffer(self, i: int) -> np.ndarray:
        return self._input_fns[i]()

    def write_input(self, i: int, x: np.ndarray) -> None:
        # LiteRT's own copy: cheaper than making a view of the tensor and copying into it,
        # which matters for models whose invoke takes a few microseconds (wake words).
        self._interp.set_tensor(self.inputs[i].index, x)

    def invoke(self) -> None:
        raw = self._raw_invoke
        if raw is not None:
            raw()  # views are lent (see lend_views): LiteRT's own guard would refuse them
        else:
            self._interp.invoke()
            self._ran = True

    def lend_views(self) -> LentViews | None:
        # LiteRT's Interpreter.invoke() refuses to run while a view of its memory is alive,
        # because an invoke may reallocate a dynamic tensor under it. The views lent here are
        # of the inputs and outputs only, and only when every one of their shapes is fixed and
        # their buffers have not moved since allocation although the model has run since:
        # then the engine's own Invoke is called directly, by the Session as well.
        if self._signature_dynamic or not self._ran:
            return None
        ins = [f() for f in self._input_fns]
        outs = [f() for f in self._output_fns]
        if [a.ctypes.data for a in ins + outs] != self._addresses:
            return None
        engine = self._interp._interpreter
        self._raw_invoke = engine.Invoke
        # SetTensor checks dtype and shape in C++ and raises ValueError, and copies into the
        # same buffer the views see (it never reallocates a fixed-shape tensor).
        copies = [functools.partial(engine.SetTensor, d.index) for d in self.inputs]
        return LentViews(ins, outs, self._raw_invoke, copies)

    def output_buffer(self, i: int) -> np.ndarray:
        return self._output_fns[i]()

    def read_output(self, i: int) -> np.ndarray:
        # A copy made by LiteRT: for small outputs cheaper than a fresh view.
        return self._interp.get_tensor(self.outputs[i].index)

    def set_threads(self, n: int) -> None:
        self._interp._interpreter.SetNumThreads(int(n))
        self._kwargs["num_threads"] = int(n)

    def operator_times(self, runs: int) -> list[dict[str, Any]]:
        """LiteRT's own profiler (its C API: the Python API has none), in a child process on the
        same bytes, inputs and threads, on the CPU: XNNPACK's operators for litert:xnnpack, TFLite's
        built-in kernels for litert:cpu. A delegate (GPU, NPU, Edge TPU) is not profiled."""
        from edgeserve.runtime.backends.litert_profile import operator_times

        if self.name not in ("litert:xnnpack", "litert:cpu"):
            raise NotImplementedError(f"{self.name}: LiteRT's profiler is read on the CPU only, not through a "
                                      f"{self.kind} delegate")
        inputs = [(d.name, np.array(self.input_buffer(i))) for i, d in enumerate(self.inputs)]
        return operator_times(self._data, inputs, runs, self._kwargs.get("num_threads"),
                              builtin_kernels=self.name == "litert:cpu")

    def reset_state(self) -> None:
        # A new interpreter on the same bytes (and delegate): its CALL_ONCE initialisation runs
        # again at the next invoke. interpreter.reset_all_variables() does not give the initial
        # state back: on microWakeWord's alexa its first output after a reset is 0 where a fresh
        # interpreter gives 3/256 (measured).
        self._raw_invoke = None  # views of the old interpreter must not be taken for the new one's
        self._interp = self._module.Interpreter(**self._kwargs)
        self._interp.allocate_tensors()
        self._bind_tensors()

    def _bind_tensors(self) -> None:
        interp = self._interp
        self._raw_invoke: Any = None
        self._ran = False
        # Held for the interpreter's lifetime; calling one returns a fresh view of the tensor.
        self._input_fns = [interp.tensor(d.index) for d in self.inputs]
        self._output_fns = [interp.tensor(d.index) for d in self.outputs]
        # Where the input and output buffers sit before any invoke (see lend_views).
        self._addresses = [f().ctypes.data for f in self._input_fns + self._output_fns]
        self._signature_dynamic = any(-1 in d["shape_signature"] for d in
                                      interp.get_input_details() + interp.get_output_details())

    def close(self) -> None:
        self._raw_invoke = None
        self._input_fns = self._output_fns = []
        self._interp = None  # type: ignore[assignment]
        self._delegates = []


_TAKEN_BY = {"edgetpu": "Edge TPU", "npu": "NPU delegate", "gpu": "GPU delegate", "xnnpack": "XNNPACK",
             "cpu": "delegate"}


def litert_placement(ops: list[dict[str, Any]], taken_by: str = "delegate") -> Placement:
    """Which model operators sit inside DELEGATE nodes.

    LiteRT lists the model's own nodes first and appends one DELEGATE node per partition.
    A partition replaces the nodes between its inputs and its outputs, so walking back
    from each DELEGATE node's outputs through the model's producers, stopping at the
    partition's inputs, finds exactly the nodes it took.
    """
    model_ops = [o for o in ops if o["op_name"] != "DELEGATE"]
    partitions = [o for o in ops if o["op_name"] == "DELEGATE"]
    producer: dict[int, int] = {}
    for i, op in enumerate(model_ops):
        for t in op["outputs"]:
            producer[int(t)] = i
    taken: set[int] = set()
    for part in partitions:
        boundary = {int(t) for t in part["inputs"]}
        stack = [int(t) for t in part["outputs"]]
        while stack:
            node = producer.get(stack.pop())
            if node is None or node in taken:
                continue
            taken.add(node)
            stack.extend(int(t) for t in model_ops[node]["inputs"] if int(t) >= 0 and int(t) not in boundary)
    on_cpu = tuple(o["op_name"] for i, o in enumerate(model_ops) if i not in taken)
    return Placement(total=len(model_ops), accelerated=len(taken), partitions=len(partitions), on_cpu=on_cpu,
                     taken_by=taken_by)


def _load_delegate(mod: Any, library: str) -> Any:
    # ai-edge-litert's Delegate.__del__ raises AttributeError after a failed load, which
    # Python prints as "Exception ignored in ..."; silence that one report.
    hook = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: None
    try:
        try:
            return mod.load_delegate(library)
        except (OSError, ValueError, RuntimeError) as exc:
            reason = first_line(exc).removeprefix(f"{library}: ")
        gc.collect()
    finally:
        sys.unraisablehook = hook
    raise BackendUnavailable(f"cannot load delegate {library}: {reason}")



def _native(captured: Any) -> str:
    text = captured.text.strip() if captured is not None else ""
    lines = [ln for ln in text.splitlines() if ln.startswith(("ERROR", "E ", "W "))]
    return f" ({'; '.join(lines[:3])})" if lines else ""


def _accelerator_library(options: BackendOptions, kind: str) -> str | None:
    """The delegate library the profile names for an accelerator of ``kind``."""
    profile = options.profile
    for acc in getattr(profile, "accelerators", ()) or ():
        lib = getattr(acc, "library", None)
        if getattr(acc, "kind", None) == kind and lib and "tensorrt" not in lib and "onnxruntime" not in lib:
            return lib
    return None


def _edgetpu(path: str, data: bytes, options: BackendOptions) -> Backend:
    lib = options.libraries.get("edgetpu") or DEFAULT_LIBRARIES["edgetpu"]
    return LiteRTBackend("litert:edgetpu", "npu", data, options, delegate_library=lib)


def _npu(path: str, data: bytes, options: BackendOptions) -> Backend:
    lib = options.libraries.get("npu") or _accelerator_library(options, "npu")
    if lib is None:
        raise BackendUnavailable("no NPU delegate library: the profile lists none; pass libraries={'npu': PATH}")
    return LiteRTBackend("litert:npu", "npu", data, options, delegate_library=lib)


def _gpu(path: str, data: bytes, options: BackendOptions) -> Backend:
    lib = options.libraries.get("gpu") or DEFAULT_LIBRARIES["gpu"]
    return LiteRTBackend("litert:gpu", "gpu", data, options, delegate_library=lib)


def _xnnpack(path: str, data: bytes, options: BackendOptions) -> Backend:
    return LiteRTBackend("litert:xnnpack", "cpu", data, options)


def _cpu(path: str, data: bytes, options: BackendOptions) -> Backend:
    return LiteRTBackend("litert:cpu", "cpu", data, options, builtin_only=True)


BACKENDS = (
    ("litert:edgetpu", "npu", _edgetpu),
    ("litert:npu", "npu", _npu),
    ("litert:gpu", "gpu", _gpu),
    ("litert:xnnpack", "cpu", _xnnpack),
    ("litert:cpu", "cpu", _cpu),
)
