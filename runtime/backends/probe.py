"""Run a model once in a child process, for what static checks cannot reach.

A kernel's own Prepare bug can abort or crash the process that loads the model. The
probe loads and invokes the model in a child, once per model, and remembers the verdict by
sha256 (and runtime version) in a cache directory, so a crash costs a child, never the caller.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from edgeserve import atomic
from edgeserve.errors import ModelFileError

__all__ = ["ProbeResult", "cache_dir", "probe_in_subprocess"]

log = logging.getLogger(__name__)


_PROBE_SCRIPT = r"""
import os, sys
import numpy as np
kind, options, data = sys.argv[1], sys.argv[2], sys.stdin.buffer.read()
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # runtimes print banners; keep the pipe clean
if kind == "tflite":
    from edgeserve.runtime.backends.litert_run import interpreter_module
    module = interpreter_module()
    kwargs = {"model_content": data}
    if options == "reference_kernels":
        kwargs["experimental_op_resolver_type"] = module.OpResolverType.BUILTIN_REF
    interpreter = module.Interpreter(**kwargs)
    interpreter.allocate_tensors()
    for d in interpreter.get_input_details():
        if np.dtype(d["dtype"]).kind in "biufc":
            interpreter.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]))
    interpreter.invoke()
else:
    import onnxruntime as ort
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    types = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(int64)": np.int64,
             "tensor(int32)": np.int32, "tensor(int8)": np.int8, "tensor(uint8)": np.uint8,
             "tensor(bool)": np.bool_, "tensor(float16)": np.float16, "tensor(int16)": np.int16}
    feeds = {i.name: np.zeros([d if isinstance(d, int) and d >= 0 else 1 for d in i.shape],
                              types.get(i.type, np.float32)) for i in session.get_inputs()}
    session.run(None, feeds)
"""


@dataclasses.dataclass(frozen=True)
class ProbeResult:
    """What the probe child did with a model.

    ``verdict`` is ``"ok"``, ``"refused"`` (the runtime raised a clean error, which loading
    in-process raises again), ``"crashed"`` (killed by a signal) or ``"timed out"``.
    """

    verdict: str
    detail: str
    runtime: str
    seconds: float
    cached: bool = False


def cache_dir() -> Path:
    """Where probe verdicts live: ``$EDGESERVE_CACHE_DIR``, else ``$XDG_CACHE_HOME/edgeserve``
    (``~/.cache/edgeserve``)."""
    if os.environ.get("EDGESERVE_CACHE_DIR"):
        return Path(os.environ["EDGESERVE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "edgeserve"


def _runtime_version(kind: str) -> str:
    """The runtime a verdict is about (in the order the probe imports them)."""
    from importlib import metadata

    for dist in (("ai-edge-litert", "tflite-runtime", "tensorflow-cpu", "tensorflow")
                 if kind == "tflite" else ("onnxruntime",)):
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def probe_in_subprocess(data: bytes, timeout_s: float = 60.0, *, kind: str | None = None,
                        reference_kernels: bool = False, use_cache: bool = True) -> ProbeResult:
    """Load, allocate and run a model once in a child process, so a native crash kills the child.

    Static validation cannot see every kernel's own Prepare bug; this finds them at the cost
    of one process start per model, runtime version and kernel choice. Call it after
    :func:`validate_tflite` / :func:`validate_onnx` and before loading in-process. Verdicts
    other than a timeout (which may just mean a busy device) are cached under
    :func:`cache_dir`, keyed by the model's sha256, the runtime's version and the options.

    Args:
        data: The model file.
        timeout_s: How long the child may take to load, allocate and run once.
        kind: ``"tflite"`` or ``"onnx"``; detected from the file identifier when None.
        reference_kernels: Probe LiteRT's reference kernels (``BUILTIN_REF``), as
            ``TfliteRunner(reference_kernels=True)`` will run them; their crashes differ.
        use_cache: Read and write the verdict cache.

    Returns:
        The probe result, verdict ``"ok"`` or ``"refused"``.

    Raises:
        ModelFileError: The child was killed by a signal or did not finish in time.
    """
    kind = kind or ("tflite" if data[4:8] == b"TFL3" else "onnx")
    options = "reference_kernels" if reference_kernels and kind == "tflite" else "default"
    runtime = _runtime_version(kind)
    key = hashlib.sha256(data).hexdigest()
    entry = cache_dir() / "probe" / f"{key}-{_slug(runtime)}-{options}.json"
    result = _read_cached(entry) if use_cache else None
    if result is None:
        result = _run_probe(data, kind, options, runtime, timeout_s)
        if use_cache and result.verdict != "timed out":
            try:
                atomic.write_json(entry, dataclasses.asdict(result) | {"sha256": key})
            except OSError as exc:  # a read-only home must not stop the model from loading
                log.warning("cannot cache the probe verdict in %s: %s", entry, exc)
    if result.verdict in ("crashed", "timed out"):
        raise ModelFileError(f"model (sha256 {key[:12]}) {result.verdict} in {runtime}: "
                             f"{result.detail}" + (" (cached verdict)" if result.cached else ""))
    return result


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in ".-" else "_" for c in text)


def _read_cached(entry: Path) -> ProbeResult | None:
    try:
        raw = json.loads(entry.read_text())
        return ProbeResult(str(raw["verdict"]), str(raw["detail"]), str(raw["runtime"]),
                           float(raw["seconds"]), True)
    except (OSError, ValueError, KeyError, TypeError):
        return None  # missing or damaged: probe again


def _run_probe(data: bytes, kind: str, options: str, runtime: str,
               timeout_s: float) -> ProbeResult:
    start = time.perf_counter()
    try:
        child = subprocess.run([sys.executable, "-c", _PROBE_SCRIPT, kind, options], input=data,
                               capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:  # run() has killed the child
        return ProbeResult("timed out", f"loading and one invoke took over {timeout_s:g} s",
                           runtime, time.perf_counter() - start)
    seconds = time.perf_counter() - start
    if child.returncode < 0:
        try:
            name = signal.Signals(-child.returncode).name
        except ValueError:
            name = f"signal {-child.returncode}"
        return ProbeResult("crashed", f"the probe process died of {name}", runtime, seconds)
    if child.returncode:
        stderr = child.stderr.decode("utf-8", "replace").strip()
        last = stderr.splitlines()[-1] if stderr else f"exit status {child.returncode}"
        return ProbeResult("refused", last[:500], runtime, seconds)
    return ProbeResult("ok", "", runtime, seconds)
