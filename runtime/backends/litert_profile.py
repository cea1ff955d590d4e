"""Each operator's time in a .tflite, from LiteRT's own profiler, read through its C API.

ai-edge-litert's Python API has no profiler (LiteRT's op profiler is in its `benchmark_model`
tool), but the wheel's libLiteRt.so exports one: a compiled model built with the runtime option
``enable_profiling`` records an event per operator it runs (the built-in kernels by TFLite
operator, the XNNPACK delegate by XNNPACK operator), read with ``LiteRtGetProfilerEvents``.
That is called here with ctypes, so a wrong declaration or a native abort must cost a child
process, not the bench: :func:`operator_times` runs :func:`_profile` in a fresh Python (this
module run as a script), the model and its inputs sent on stdin, the result on a pipe of its
own, what the library prints on stderr.

Facts this relies on (LiteRT's C headers, litert/c/litert_profiler*.h, litert_options.h,
litert_opaque_options.h; checked against the 2.3.0 wheel): profiling is turned on by an opaque
option with the identifier "runtime_options_string" whose payload is the TOML text
``enable_profiling = true``; the CPU's own options are the opaque "xnnpack" ones (num_threads,
kernel_mode = "builtin" for TFLite's kernels without the delegate); LiteRtResetProfiler also
stops recording, so each run starts it again; an event's time is in whole microseconds, so
figures are means over runs.
"""

from __future__ import annotations

import ctypes as C
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

TIMEOUT_S = 300.0
# LiteRtProfilerEventType values that are one operator's run (DEFAULT and the runtime's own
# instrumentation, "Invoke", "LiteRT::Run[...]", are not operators).
_OPERATOR_EVENTS = {2: "TFLite kernel", 4: "delegate", 8: "XNNPACK"}
_CPU = 1  # kLiteRtHwAcceleratorCpu
_LOCK_WRITE, _LOCK_READ = 1, 0


def operator_times(data: bytes, inputs: list[tuple[str, np.ndarray]], runs: int, threads: int | None,
                   builtin_kernels: bool) -> list[dict[str, Any]]:
    """[{"node", "op", "placed_on", "us"}] for ``runs`` runs of the model on ``inputs`` (name,
    array, in the interpreter's order), mean microseconds per run; NotImplementedError with the
    reason where LiteRT's profiler cannot be read here (no libLiteRt.so, a child that died)."""
    request = pickle.dumps((data, [(n, np.ascontiguousarray(a)) for n, a in inputs], max(1, runs), threads,
                            builtin_kernels), protocol=pickle.HIGHEST_PROTOCOL)
    read_end, write_end = os.pipe()
    try:
        child = subprocess.Popen([sys.executable, "-m", "edgeserve.runtime.backends.litert_profile", str(write_end)],
                                 stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 pass_fds=(write_end,))
    finally:
        os.close(write_end)
    with os.fdopen(read_end, "rb") as answer:
        try:
            _, native = child.communicate(request, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            raise NotImplementedError(f"LiteRT's profiler gave no answer within {TIMEOUT_S:.0f} s") from None
        result = answer.read()
    if child.returncode != 0 or not result:
        said = [line for line in native.decode(errors="replace").splitlines() if line.strip()][-1:]
        how = f"signal {-child.returncode}" if child.returncode < 0 else f"exit {child.returncode}"
        raise NotImplementedError(f"LiteRT's profiler (its C API, in a child) ended with {how}"
                                  + (f": {said[0][:300]}" if said else ""))
    kind, value = pickle.loads(result)
    if kind == "error":
        raise NotImplementedError(value)
    return value


def library_path() -> Path:
    """libLiteRt.so of the installed ai-edge-litert (EDGESERVE_LITERT_LIBRARY names another)."""
    named = os.environ.get("EDGESERVE_LITERT_LIBRARY")
    if named:
        return Path(named)
    import importlib.util

    spec = importlib.util.find_spec("ai_edge_litert")
    if spec is None or not spec.submodule_search_locations:
        raise LookupError("ai-edge-litert is not installed (its libLiteRt.so holds the profiler)")
    return Path(list(spec.submodule_search_locations)[0]) / "libLiteRt.so"


class _Layout(C.Structure):
    _fields_ = [("rank", C.c_uint, 7), ("has_strides", C.c_uint, 1),
                ("dimensions", C.c_int32 * 8), ("strides", C.c_uint32 * 8)]


class _RankedTensorType(C.Structure):
    _fields_ = [("element_type", C.c_int), ("layout", _Layout)]


class _MemoryUsage(C.Structure):
    _fields_ = [("total", C.c_size_t), ("in_use", C.c_size_t), ("private_footprint", C.c_size_t)]


class _Event(C.Structure):  # ProfiledEventData
    _fields_ = [("tag", C.c_char_p), ("event_type", C.c_int), ("start_us", C.c_uint64), ("elapsed_us", C.c_uint64),
                ("begin_memory", _MemoryUsage), ("end_memory", _MemoryUsage),
                ("metadata1", C.c_uint64), ("metadata2", C.c_uint64), ("source", C.c_int)]


_H, _P, _SIZE = C.c_void_p, C.POINTER, C.c_size_t
_DECLARATIONS: dict[str, tuple[Any, list[Any]]] = {
    "LiteRtCreateEnvironment": (C.c_int, [C.c_int, C.c_void_p, _P(_H)]),
    "LiteRtDestroyEnvironment": (None, [_H]),
    "LiteRtCreateModelFromFile": (C.c_int, [_H, C.c_char_p, _P(_H)]),
    "LiteRtDestroyModel": (None, [_H]),
    "LiteRtGetModelSignature": (C.c_int, [_H, _SIZE, _P(_H)]),
    "LiteRtGetNumSignatureInputs": (C.c_int, [_H, _P(_SIZE)]),
    "LiteRtGetNumSignatureOutputs": (C.c_int, [_H, _P(_SIZE)]),
    "LiteRtGetSignatureInputTensorByIndex": (C.c_int, [_H, _SIZE, _P(_H)]),
    "LiteRtGetSignatureOutputTensorByIndex": (C.c_int, [_H, _SIZE, _P(_H)]),
    "LiteRtGetTensorName": (C.c_int, [_H, _P(C.c_char_p)]),
    "LiteRtGetRankedTensorType": (C.c_int, [_H, _P(_RankedTensorType)]),
    "LiteRtCreateOptions": (C.c_int, [_P(_H)]),
    "LiteRtDestroyOptions": (None, [_H]),
    "LiteRtSetOptionsHardwareAccelerators": (C.c_int, [_H, C.c_int]),
    "LiteRtCreateOpaqueOptions": (C.c_int, [C.c_char_p, C.c_void_p, C.c_void_p, _P(_H)]),
    "LiteRtAddOpaqueOptions": (C.c_int, [_H, _H]),
    "LiteRtCreateCompiledModel": (C.c_int, [_H, _H, _H, _P(_H)]),
    "LiteRtDestroyCompiledModel": (None, [_H]),
    "LiteRtCompiledModelResizeInputTensor": (C.c_int, [_H, _SIZE, _SIZE, _P(C.c_int), _SIZE]),
    "LiteRtGetCompiledModelOutputTensorLayouts": (C.c_int, [_H, _SIZE, _SIZE, _P(_Layout), C.c_bool]),
    "LiteRtGetCompiledModelInputBufferRequirements": (C.c_int, [_H, _SIZE, _SIZE, _P(_H)]),
    "LiteRtGetCompiledModelOutputBufferRequirements": (C.c_int, [_H, _SIZE, _SIZE, _P(_H)]),
    "LiteRtCreateManagedTensorBufferFromRequirements": (C.c_int, [_H, _P(_RankedTensorType), _H, _P(_H)]),
    "LiteRtGetTensorBufferSize": (C.c_int, [_H, _P(_SIZE)]),
    "LiteRtLockTensorBuffer": (C.c_int, [_H, _P(C.c_void_p), C.c_int]),
    "LiteRtUnlockTensorBuffer": (C.c_int, [_H]),
    "LiteRtDestroyTensorBuffer": (None, [_H]),
    "LiteRtRunCompiledModel": (C.c_int, [_H, _SIZE, _SIZE, _P(_H), _SIZE, _P(_H)]),
    "LiteRtCompiledModelGetProfiler": (C.c_int, [_H, _P(_H)]),
    "LiteRtStartProfiler": (C.c_int, [_H]),
    "LiteRtStopProfiler": (C.c_int, [_H]),
    "LiteRtResetProfiler": (C.c_int, [_H]),
    "LiteRtGetNumProfilerEvents": (C.c_int, [_H, _P(C.c_int)]),
    "LiteRtGetProfilerEvents": (C.c_int, [_H, C.c_int, _P(_Event)]),
}


class _Api:
    """libLiteRt.so with the declarations above; ``call`` raises on a status other than ok."""

    def __init__(self, path: Path) -> None:
        self.lib = C.CDLL(str(path))
        for name, (returns, arguments) in _DECLARATIONS.items():
            function = getattr(self.lib, name)
            function.restype, function.argtypes = returns, arguments
        self.libc = C.CDLL(None)
        self.libc.malloc.restype, self.libc.malloc.argtypes = C.c_void_p, [C.c_size_t]
        self.libc.free.argtypes = [C.c_void_p]

    def call(self, name: str, *args: Any) -> None:
        status = getattr(self.lib, name)(*args)
        if status != 0:
            raise RuntimeError(f"LiteRT's {name} returned status {status}")

    def opaque_option(self, options: Any, identifier: str, toml: str) -> None:
        # The payload is the option's to free (with libc's free), so it is malloc'd here.
        text = toml.encode() + b"\0"
        payload = self.libc.malloc(len(text))
        C.memmove(payload, text, len(text))
        handle = _H()
        self.call("LiteRtCreateOpaqueOptions", identifier.encode(), payload, C.cast(self.libc.free, C.c_void_p),
                  C.byref(handle))
        self.call("LiteRtAddOpaqueOptions", options, handle)


def _tensors(api: _Api, signature: Any, inputs: bool) -> list[tuple[str, _RankedTensorType]]:
    """The signature's inputs or outputs: (tensor name, its type as the model declares it)."""
    count, side = _SIZE(), "Input" if inputs else "Output"
    api.call(f"LiteRtGetNumSignature{side}s", signature, C.byref(count))
    found = []
    for i in range(count.value):
        tensor, ranked, name = _H(), _RankedTensorType(), C.c_char_p()
        api.call(f"LiteRtGetSignature{side}TensorByIndex", signature, i, C.byref(tensor))
        api.call("LiteRtGetRankedTensorType", tensor, C.byref(ranked))
        api.call("LiteRtGetTensorName", tensor, C.byref(name))
        found.append(((name.value or b"").decode(errors="replace"), ranked))
    return found


def _fix_shapes(api: _Api, compiled: Any, ins: list[tuple[str, _RankedTensorType]],
                outs: list[tuple[str, _RankedTensorType]], arrays: list[np.ndarray]) -> None:
    """A dimension the model leaves open (-1, a batch) takes the timed input's: the compiled
    model is resized to it and the outputs' layouts read back as it now computes them."""
    resized = False
    for i, ((_, ranked), array) in enumerate(zip(ins, arrays)):
        declared = list(ranked.layout.dimensions[:ranked.layout.rank])
        if all(d >= 0 for d in declared):
            continue
        dims = (C.c_int * array.ndim)(*array.shape)
        api.call("LiteRtCompiledModelResizeInputTensor", compiled, 0, i, dims, array.ndim)
        for axis, size in enumerate(array.shape):
            ranked.layout.dimensions[axis] = size
        resized = True
    if resized and outs:
        layouts = (_Layout * len(outs))()
        api.call("LiteRtGetCompiledModelOutputTensorLayouts", compiled, 0, len(outs), layouts, True)
        for (_, ranked), layout in zip(outs, layouts):
            ranked.layout = layout


def _buffers(api: _Api, env: Any, compiled: Any, tensors: list[tuple[str, _RankedTensorType]],
             inputs: bool) -> list[tuple[str, Any]]:
    side, found = "Input" if inputs else "Output", []
    for i, (name, ranked) in enumerate(tensors):
        requirements, buffer = _H(), _H()
        api.call(f"LiteRtGetCompiledModel{side}BufferRequirements", compiled, 0, i, C.byref(requirements))
        api.call("LiteRtCreateManagedTensorBufferFromRequirements", env, C.byref(ranked), requirements, C.byref(buffer))
        found.append((name, buffer))
    return found


def _fill(api: _Api, buffer: Any, array: np.ndarray, name: str) -> None:
    size, address = _SIZE(), C.c_void_p()
    api.call("LiteRtGetTensorBufferSize", buffer, C.byref(size))
    if size.value < array.nbytes:
        raise RuntimeError(f"input {name}: LiteRT's buffer holds {size.value} bytes, the input {array.nbytes}")
    api.call("LiteRtLockTensorBuffer", buffer, C.byref(address), _LOCK_WRITE)
    try:
        C.memmove(address, array.ctypes.data, array.nbytes)
    finally:
        api.call("LiteRtUnlockTensorBuffer", buffer)


def _events(api: _Api, profiler: Any) -> list[tuple[str, int, int, int]]:
    """This run's operator events: (tag, event type, metadata1, microseconds), in order."""
    count = C.c_int()
    api.call("LiteRtGetNumProfilerEvents", profiler, C.byref(count))
    if count.value <= 0:
        return []
    events = (_Event * count.value)()
    api.call("LiteRtGetProfilerEvents", profiler, count.value, events)
    return [((e.tag or b"").decode(errors="replace"), e.event_type, int(e.metadata1), int(e.elapsed_us))
            for e in events if e.event_type in _OPERATOR_EVENTS]


def _profile(data: bytes, inputs: list[tuple[str, np.ndarray]], runs: int, threads: int | None,
             builtin_kernels: bool) -> list[dict[str, Any]]:
    api = _Api(library_path())
    env, model, options, compiled, profiler = _H(), _H(), _H(), _H(), _H()
    with tempfile.TemporaryDirectory(prefix="edgeserve-litert-profile-") as folder:
        path = Path(folder) / "model.tflite"
        path.write_bytes(data)
        api.call("LiteRtCreateEnvironment", 0, None, C.byref(env))
        api.call("LiteRtCreateModelFromFile", env, str(path).encode(), C.byref(model))
    api.call("LiteRtCreateOptions", C.byref(options))
    api.call("LiteRtSetOptionsHardwareAccelerators", options, _CPU)
    cpu = (f"num_threads = {int(threads)}\n" if threads else "") + ('kernel_mode = "builtin"\n' if builtin_kernels else "")
    if cpu:
        api.opaque_option(options, "xnnpack", cpu)
    api.opaque_option(options, "runtime_options_string", "enable_profiling = true\n")
    api.call("LiteRtCreateCompiledModel", env, model, options, C.byref(compiled))
    signature = _H()
    api.call("LiteRtGetModelSignature", model, 0, C.byref(signature))
    in_tensors, out_tensors = _tensors(api, signature, True), _tensors(api, signature, False)
    if len(in_tensors) != len(inputs):
        raise RuntimeError(f"LiteRT's signature has {len(in_tensors)} input(s), the interpreter {len(inputs)}")
    given = dict(inputs)  # by name; by position where the signature renames them
    arrays = [given.get(name, inputs[i][1]) for i, (name, _) in enumerate(in_tensors)]
    _fix_shapes(api, compiled, in_tensors, out_tensors, arrays)
    ins, outs = _buffers(api, env, compiled, in_tensors, True), _buffers(api, env, compiled, out_tensors, False)
    for (name, buffer), array in zip(ins, arrays):
        _fill(api, buffer, array, name)
    in_handles = (_H * len(ins))(*(b for _, b in ins))
    out_handles = (_H * len(outs))(*(b for _, b in outs))

    def run() -> None:
        api.call("LiteRtRunCompiledModel", compiled, 0, len(ins), in_handles, len(outs), out_handles)

    run()  # the first run prepares kernels and packs weights: not an operator's steady time
    api.call("LiteRtCompiledModelGetProfiler", compiled, C.byref(profiler))
    if not profiler.value:
        raise RuntimeError("LiteRT made no profiler for the compiled model (enable_profiling was not taken)")
    per_run = []
    for _ in range(runs):
        api.call("LiteRtStartProfiler", profiler)  # clears what the last run recorded
        run()
        api.call("LiteRtStopProfiler", profiler)
        per_run.append(_events(api, profiler))
        api.call("LiteRtResetProfiler", profiler)
    first = per_run[0]
    if not first or any([(t, k, m) for t, k, m, _ in events] != [(t, k, m) for t, k, m, _ in first]
                        for events in per_run):
        raise RuntimeError(f"LiteRT's profiler recorded {len(first)} operator events, not the same in every run")
    nodes = []
    for position, (tag, kind, index, _) in enumerate(first):
        mean = sum(events[position][3] for events in per_run) / len(per_run)
        placed = _OPERATOR_EVENTS[kind]
        nodes.append({"node": f"{tag} #{index}" if kind == 2 else f"{placed} op {position}", "op": tag,
                      "placed_on": placed, "us": round(mean, 3)})
    for _, buffer in ins + outs:
        api.lib.LiteRtDestroyTensorBuffer(buffer)
    api.lib.LiteRtDestroyCompiledModel(compiled)  # and its profiler
    api.lib.LiteRtDestroyOptions(options)
    api.lib.LiteRtDestroyModel(model)
    api.lib.LiteRtDestroyEnvironment(env)
    return nodes


def _child(answer_fd: int) -> None:
    request = pickle.loads(sys.stdin.buffer.read())
    os.dup2(2, 1)  # a library's banner on stdout goes with its log, not into the answer
    try:
        result: tuple[str, Any] = ("ok", _profile(*request))
    except (OSError, LookupError, RuntimeError, AttributeError) as exc:  # AttributeError: a symbol this wheel lacks
        result = ("error", f"LiteRT's profiler could not be read: {exc}")
    with os.fdopen(answer_fd, "wb") as answer:
        answer.write(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))


if __name__ == "__main__":
    _child(int(sys.argv[1]))
