"""Session: serve one model at batch 1 on the best backend that works, and say which and why.

    >>> s = Session("build/manifest.json", profile="raspberry-pi-5")   # doctest: +SKIP
    >>> s.backend, s.attempts, s.placement                                # doctest: +SKIP
    >>> s.classify(frame, k=5)                                            # doctest: +SKIP

The backend chain comes from the profile (``[runtime] backends``), else from defaults per
format (accelerators first, CPU last). A backend is dropped, with the reason recorded in
:attr:`Session.attempts`, when

* it cannot open (library missing, provider absent, the delegate took no operator),
* its first invoke raises,
* its first ``parity_frames`` results differ from the CPU backend's beyond tolerance.

``strict=True`` raises instead of falling back; ``require="npu"|"gpu"|"cpu"`` accepts
only backends of that kind.

Frames go from the camera's uint8 H x W x C straight into the engine's input memory
(resize into a buffer allocated once, then one lookup-table pass that normalises and
quantises), and outputs are dequantized into arrays allocated once, so steady-state
inference allocates nothing.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgeserve.errors import BackendError, EdgeServeError, InferenceError, InputError, PreprocessSpecError, did_you_mean, first_line
from edgeserve.runtime.artifacts import Artifact, ServedModel, resolve
from edgeserve.runtime.backends.registry import (
    KINDS,
    Backend,
    BackendOptions,
    BackendUnavailable,
    Placement,
    backend_info,
    known_backends,
)
from edgeserve.runtime.io.inputs import is_image, refuse_non_finite, write_tensor
from edgeserve.runtime.io.outputs import Dequantizer, Prediction, top_k

log = logging.getLogger(__name__)

#: Chains used without a profile: every accelerator the engine can use, then the CPU.
DEFAULT_CHAINS = {
    "litert": ("litert:edgetpu", "litert:gpu", "litert:xnnpack"),
    # OpenVINO's NPU and GPU devices (the ONNX Runtime plugin) are accelerators, checked against
    # the CPU provider like any other; its CPU device is not tried by default, since ONNX
    # Runtime's own CPU provider is that reference (name it, or list it in a profile).
    "onnxruntime": ("onnxruntime:tensorrt", "onnxruntime:cuda", "onnxruntime:openvino-npu", "onnxruntime:openvino-gpu",
                    "onnxruntime:cpu"),
    "coreml": ("coreml:ane", "coreml:cpu"),
    "executorch": ("executorch:xnnpack",),
}

#: The CPU backend each engine's accelerators are checked against.
REFERENCE_BACKEND = {"litert": "litert:xnnpack", "onnxruntime": "onnxruntime:cpu", "coreml": "coreml:cpu",
                     "executorch": "executorch:xnnpack"}


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One backend tried, at one stage, and what happened."""

    backend: str
    stage: str  # "select" (not tried: no artifact/unknown), "open", "invoke", "parity"
    ok: bool
    reason: str
    artifact: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        return f"{self.backend} [{self.stage}] {'ok' if self.ok else 'failed'}: {self.reason}"


class Session:
    """Batch-1 inference on one artifact, on the best backend that works.

    Thread safety: one Session may be shared by threads. :meth:`run`, :meth:`classify`,
    :meth:`set_threads` and :meth:`close` take one lock, so calls are serialised (one engine
    instance, one set of buffers: run one Session per thread for parallel inference); a call
    from a thread other than the opening one gets copies of the outputs. A failed first call
    never leaves the Session without a backend: the next backend of the chain takes over, or
    the failed one is kept and tried again on the next call.

    Args:
        artifact: a manifest.json (or its directory), or a .tflite / .onnx / .mlpackage file.
        profile: a profile name, path or :class:`~edgeserve.device_profiles.Profile`; gives the
            backend chain, the thread count and the delegate libraries.
        preprocess: a PreprocessSpec (or dict / .toml path) for camera frames; default: the
            manifest's, or the one edgeserve stamped into the .tflite.
        backend: "auto" (the chain) or one backend name ("litert:xnnpack").
        require: only backends of this kind ("npu", "gpu", "cpu").
        strict: raise instead of falling back from the first backend of the chain.
        threads: CPU threads (default: the profile's, else the engine's).
        parity_frames: how many first inferences an accelerator is checked against the CPU.
        parity_rtol: allowed difference, relative to the largest CPU output magnitude, on
            top of two quantisation steps for quantized outputs.
        labels: class names (list or a text file, one per line) for :meth:`classify`.
        libraries: delegate library paths by accelerator ("edgetpu", "npu", "gpu").
        target: serve this manifest target only (e.g. "tflite-int8").
        public_key: an Ed25519 public key (PEM): serve only a manifest signed by it
            (``convert --sign-key``); a bare model file has no signature and is refused.
    """

    def __init__(
        self,
        artifact: str | Path,
        profile: Any = None,
        *,
        preprocess: Any = None,
        backend: str = "auto",
        require: str | None = None,
        strict: bool = False,
        threads: int | None = None,
        parity_frames: int = 3,
        parity_rtol: float = 0.05,
        labels: Sequence[str] | str | Path | None = None,
        libraries: dict[str, str] | None = None,
        target: str | None = None,
        public_key: str | Path | None = None,
    ) -> None:
        t0 = time.perf_counter()
        if not isinstance(artifact, (str, Path)):
            raise InputError(f"Session takes the path of an artifact, a manifest or an output folder; got "
                             f"{type(artifact).__name__} {artifact!r}"[:300])
        if require is not None and require not in KINDS:
            raise InputError(f"require must be one of {', '.join(KINDS)}; got {require!r}")
        self.profile = _load_profile(profile)
        if self.profile is not None and self.profile.is_mcu:
            # Its backends (tflm:*) exist on the board, not in this process.
            raise InputError(
                f"profile {self.profile.name!r} is a microcontroller: the runtime serves host and board-computer "
                f"profiles. Build for it with `edgeserve convert SOURCE -t mcu -p {self.profile.name}` (or -t mcu-c) "
                "and run the build on the board, or pick a host profile (`edgeserve profiles`) or none")
        self._served: ServedModel = resolve(artifact, target=target, preprocess=preprocess, labels=labels,
                                            public_key=public_key)
        self.labels = self._served.labels
        self.threads: int | None = threads or (self.profile.runtime.threads if self.profile else None)
        self._libraries = dict(libraries or {})
        self._strict, self._require = strict, require
        self._parity_frames, self._parity_rtol = max(0, int(parity_frames)), float(parity_rtol)
        self.attempts: list[Attempt] = []
        self._chain = self._plan_chain(backend)
        self._next = 0
        self._validated: set[int] = set()
        self._active: Backend | None = None
        self._closed = False  # close() was called: a call says so, not "no backend is left"
        self._active_artifact: Artifact | None = None
        self._reference: Backend | None = None
        self._parity_left = 0
        self._parity_max: list[float] = []
        self._invoked = False
        self.stages_ns = np.zeros(3, np.int64)  # preprocess, invoke, postprocess of the last run
        # One engine instance and one set of buffers: calls from several threads take turns.
        self._lock = threading.RLock()
        self._owner = threading.get_ident()  # calls from another thread get copies of the outputs
        self._shared = False
        self._steps: weakref.WeakSet[Any] = weakref.WeakSet()  # open StreamSteps, re-bound when memory moves
        self._took_reference = False  # the active backend was the parity reference (see _run_locked)
        self._open_next()
        self.open_ms = (time.perf_counter() - t0) * 1e3

    # ----- public ---------------------------------------------------------------------
    @property
    def backend(self) -> str:
        return self._current().name

    @property
    def kind(self) -> str:
        return self._current().kind

    def operator_times(self, frame: np.ndarray, runs: int) -> list[dict[str, Any]]:
        """Each operator's mean time over ``runs`` runs of ``frame`` from the active engine's own
        profiler (Backend.operator_times; NotImplementedError where it has none)."""
        self.run(frame)  # the input buffers now hold the frame, preprocessed
        return self._current().operator_times(runs)

    @property
    def placement(self) -> Placement:
        return self._current().placement

    @property
    def artifact(self) -> Path:
        assert self._active_artifact is not None
        return self._active_artifact.path

    @property
    def artifact_bytes(self) -> int:
        assert self._active_artifact is not None
        return self._active_artifact.bytes

    @property
    def classifier(self) -> bool | None:
        """Whether the conversion judged output 0 as class scores (None: a bare file, unknown)."""
        return self._served.classifier

    @property
    def output_spec(self) -> dict[str, Any] | None:
        """What the outputs mean, recorded at conversion: ``{"kind": "detect", "decoder": ..., "options": ...}``,
        or None (a classifier's scores, read with :meth:`classify`)."""
        return self._served.output

    @property
    def preprocess(self) -> Any:
        return self._served.preprocess

    @property
    def preprocess_overrides(self) -> tuple[str, ...]:
        """PreprocessSpec fields changed from the recorded spec by ``preprocess=`` (a dict changes
        only its fields; a whole PreprocessSpec replaces the recorded one)."""
        return self._served.overridden

    @property
    def preprocess_recorded(self) -> bool:
        """Whether the artifact carried its own PreprocessSpec (manifest or .tflite metadata)."""
        return self._served.recorded_preprocess

    @property
    def inputs(self) -> tuple[Any, ...]:
        return self._current().inputs

    @property
    def outputs(self) -> tuple[Any, ...]:
        return self._current().outputs

    @property
    def source_outputs(self) -> tuple[str, ...]:
        """For each output :meth:`run` returns, the name of the source model's output it is (the
        same names whichever artifact serves); empty where the manifest does not map them (a bare
        model file)."""
        assert self._active_artifact is not None
        return self._active_artifact.source_outputs

    def run(self, frame: np.ndarray) -> list[np.ndarray]:
        """One inference; returns the dequantized float32 outputs.

        ``frame`` is a camera image (uint8 H x W x 3/1/4, any size) when the session has a
        PreprocessSpec, or an array shaped like the model input (with or without the batch
        dimension; float arrays are quantized for integer models).

        The returned arrays are reused by the next call: copy them to keep them. A Session may
        be shared by threads: calls are serialised (one engine, one set of buffers), and a call
        from a thread other than the one that opened the Session returns copies, as does every
        call after such a call, since a reused buffer would be overwritten by another thread's
        next call before its caller reads it. (A result the opening thread holds when another
        thread first calls is still the reused buffer: open the Session in a worker, or copy.)
        """
        with self._lock:
            outputs = self._run_locked(frame)
            if threading.get_ident() != self._owner:
                self._shared = True
            return [o.copy() for o in outputs] if self._shared else outputs

    def _current(self) -> Backend:
        """The active backend; a closed Session says so (an assert would be a bare AssertionError)."""
        active = self._active
        if active is None:
            raise _gone(self)
        return active

    def _run_locked(self, frame: np.ndarray) -> list[np.ndarray]:
        while True:
            active = self._active
            if active is None:  # closed, or every backend failed before: say which on each call
                raise _gone(self)
            t0 = time.perf_counter_ns()
            self._write_input(active, frame)
            t1 = time.perf_counter_ns()
            try:
                active.invoke()
            except Exception as exc:  # engines raise RuntimeError/ValueError/their own types
                if self._invoked:
                    raise InferenceError(f"{active.name} failed: {exc}") from exc
                self._drop(active, "invoke", f"first invoke raised {type(exc).__name__}: {first_line(exc)}")
                continue  # preprocess again into the next backend's buffer
            t2 = time.perf_counter_ns()
            if self._parity_left and not self._check_parity(active):
                if self._active is None or not self._took_reference:
                    continue  # preprocess again into the next backend's buffer
                # The backend taking over is the CPU reference, which has just run this very
                # input: its outputs are this call's. Running it again would feed a streaming
                # model's state the same frames twice.
                active = self._active
            try:
                read = getattr(active, "read_output", None) if self._small_outputs else None
                if read is not None:
                    outputs = [dq(read(i)) for i, dq in enumerate(self._dequantizers)]
                else:
                    outputs = [dq(active.output_buffer(i)) for i, dq in enumerate(self._dequantizers)]
            except Exception as exc:  # LiteRT: "Tensor data is null" for an output it never allocated
                if self._invoked:
                    raise InferenceError(f"{active.name} gave no outputs: {first_line(exc)}") from exc
                self._drop(active, "invoke", f"reading the outputs raised {type(exc).__name__}: {first_line(exc)}")
                continue
            self._invoked = True
            t3 = time.perf_counter_ns()
            self.stages_ns[0], self.stages_ns[1], self.stages_ns[2] = t1 - t0, t2 - t1, t3 - t2
            return outputs

    def preprocess_into(self, frame: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Preprocess a camera frame (or copy a model-shaped array) into ``out``, an array of
        the input's shape and dtype that is not the engine's memory. It uses the Session's
        preprocessor and not the engine, so :meth:`stream`'s producer thread runs it while the
        engine runs the previous frame; two threads must not preprocess at once."""
        active = self._current()
        if self._preprocessor is not None and is_image(frame):
            return self._preprocessor(frame, out)
        write_tensor(active.inputs[0], frame, out, has_spec=self._preprocessor is not None)
        return out

    def run_staged(self, staged: np.ndarray) -> list[np.ndarray]:
        """Run an input :meth:`preprocess_into` prepared: copied into the engine, invoked."""
        return self.run(staged)

    def stream(self, source: Any, *, live: bool = False, depth: int = 2,
               stats: Any = None) -> Any:
        """Pipelined inference over frames: ``(index, outputs)`` in input order while the next
        frame is captured and preprocessed in another thread (see runtime/streaming/video_pipeline.py).
        ``live=True`` (cameras): the newest frame wins when the model is slower than the
        source. Break out of the loop (or Ctrl-C) to stop; the producer thread is joined."""
        from edgeserve.runtime.streaming.video_pipeline import stream

        return stream(self, source, live=live, depth=depth, stats=stats)

    def stream_step(self) -> Any:
        """A :class:`~edgeserve.runtime.streaming.stream_step.StreamStep` for per-stride inference on a
        streaming model: ``step.value(frames)`` or ``step(frames)``, state carried as by
        :meth:`run`, with far less Python around each invoke. One caller at a time: a stride while
        another thread is inside the step or this Session raises ConcurrentUseError."""
        from edgeserve.runtime.streaming.stream_step import StreamStep

        step = StreamStep(self)
        self._steps.add(step)
        return step

    def _rebind_steps(self) -> None:
        for step in list(self._steps):
            step.bind()

    def classify(self, frame: np.ndarray, k: int = 5) -> list[Prediction]:
        """The k best classes of the first output, with labels when known."""
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise InputError(f"k is how many classes to return: a whole number of at least 1; got {k!r}")
        return top_k(self.run(frame)[0], int(k), self.labels)

    def example_input(self, height: int = 480, width: int = 640) -> np.ndarray:
        """A valid input for :meth:`run`: a synthetic camera frame, or a model-shaped tensor."""
        rng = np.random.default_rng(0)
        if self._preprocessor is not None:
            return rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        d = self.inputs[0]
        if d.quantized or d.dtype.kind == "f":
            return rng.random(d.shape, dtype=np.float32)
        return np.zeros(d.shape, d.dtype)

    def set_threads(self, n: int) -> None:
        """Reopen the active backend with ``n`` CPU threads (XNNPACK fixes them at creation)."""
        with self._lock:  # not while another thread's call is inside the engine
            self._set_threads(n)

    def _set_threads(self, n: int) -> None:
        self._current()  # a closed Session says so
        assert self._active is not None and self._active_artifact is not None  # for the type checker
        if n == self.threads:
            return
        info = backend_info(self._active.name)
        assert info is not None
        self.threads = int(n)
        fresh = info.factory(str(self._active_artifact.path), self._active_artifact.read(), self._options())
        self._active.close()
        self._activate(fresh, self._active_artifact)
        log.info("%s reopened with %d thread(s)", fresh.name, n)

    def alternatives(self) -> list[str]:
        """Other served artifacts of the manifest, lightest first (for switching under load)."""
        current = self._active_artifact.path if self._active_artifact else None
        others = [a for a in self._served.artifacts if a.path != current]
        return [str(a.path) for a in sorted(others, key=lambda a: a.bytes)]

    def describe(self) -> dict[str, Any]:
        """What runs and why, as JSON-ready data."""
        return {
            "artifact": str(self.artifact),
            "backend": self.backend,
            "kind": self.kind,
            "threads": self.threads,
            "placement": self.placement.to_dict(),
            "attempts": [a.to_dict() for a in self.attempts],
            "inputs": [d.to_dict() for d in self.inputs],
            "outputs": [d.to_dict() for d in self.outputs],
            "preprocess": self.preprocess.to_dict() if self.preprocess else None,
        }

    def reset(self) -> None:
        """Start a new stream: a streaming model (microWakeWord's, with resource variables) keeps
        its state from one ``run()`` to the next; this returns it to the initial state."""
        with self._lock:
            self._current()  # a closed Session says so, rather than resetting nothing
            for b in (self._active, self._reference):
                if b is not None:
                    b.reset_state()
            self._rebind_steps()  # a reset may give the engine new memory

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for b in (self._active, self._reference):
                if b is not None:
                    b.close()
            self._active = self._reference = None
            self._rebind_steps()  # they drop their views and say the Session is closed

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        name = self._active.name if self._active else "closed"
        return f"Session({str(self._active_artifact.path) if self._active_artifact else '?'!r}, backend={name!r})"

    # ----- backend chain -------------------------------------------------------------
    def _plan_chain(self, backend: str) -> list[str]:
        engines = []
        for a in self._served.artifacts:
            if a.engine not in engines:
                engines.append(a.engine)
        if backend != "auto":
            if backend_info(backend) is None:
                known = known_backends()
                raise InputError(f"unknown backend {backend!r}.{did_you_mean(backend, known)} Known backends: "
                                 f"auto, {', '.join(known)}")
            chain = [backend]
        elif self.profile is not None and self.profile.runtime.backends:
            chain = list(self.profile.runtime.backends)
        else:
            chain = [name for e in engines for name in DEFAULT_CHAINS[e]]
        if self._require is not None:
            kept = []
            for name in chain:
                info = backend_info(name)
                if info is not None and info.kind == self._require:
                    kept.append(name)
                else:
                    kind = info.kind if info else "unknown"
                    self.attempts.append(Attempt(name, "select", False, f"is {kind}, require={self._require}"))
            chain = kept
        return chain

    def _options(self) -> BackendOptions:
        return BackendOptions(threads=self.threads, profile=self.profile, libraries=self._libraries)

    def _open_next(self) -> None:
        """Open the next backend of the chain that works, recording every attempt."""
        while self._next < len(self._chain):
            name = self._chain[self._next]
            self._next += 1
            if self._strict and any(not a.ok and a.stage != "select" for a in self.attempts):
                break
            info = backend_info(name)
            if info is None:
                self.attempts.append(Attempt(name, "select", False, "unknown backend name"))
                continue
            artifact = next((a for a in self._served.artifacts if a.engine == info.engine), None)
            if artifact is None:
                have = ", ".join(sorted({a.path.suffix for a in self._served.artifacts}))
                self.attempts.append(Attempt(name, "select", False, f"no {info.engine} artifact to run (have {have})"))
                continue
            self._took_reference = self._reference is not None and self._reference.name == name
            if self._took_reference:
                backend, self._reference = self._reference, None  # the parity reference is already open
            else:
                data = self._validated_bytes(artifact)
                try:
                    backend = info.factory(str(artifact.path), data, self._options())
                except BackendUnavailable as exc:
                    self.attempts.append(Attempt(name, "open", False, str(exc), str(artifact.path)))
                    continue
                except EdgeServeError:
                    raise
                except Exception as exc:  # a backend bug must not hide the next backend
                    log.debug("opening %s failed", name, exc_info=True)
                    self.attempts.append(Attempt(name, "open", False, f"{type(exc).__name__}: {first_line(exc)}",
                                                 str(artifact.path)))
                    continue
            self.attempts.append(Attempt(name, "open", True, str(backend.placement), str(artifact.path)))
            self._activate(backend, artifact)
            return
        self._active = None
        if self._strict:
            raise BackendError("strict: the first backend of the chain did not work; not falling back", self.attempts)
        wanted = f" of kind {self._require}" if self._require else ""
        raise BackendError(f"no backend{wanted} could run the model", self.attempts)

    def _validated_bytes(self, artifact: Artifact) -> bytes:
        data = artifact.read()
        key = id(artifact)
        if key not in self._validated:
            if artifact.engine == "litert":
                from edgeserve.tflite.verify import validate_tflite

                validate_tflite(data)
            elif artifact.engine == "onnxruntime":
                from edgeserve.onnx_check import validate_onnx

                validate_onnx(data)
            self._validated.add(key)
        return data

    def _activate(self, backend: Backend, artifact: Artifact) -> None:
        self._active, self._active_artifact = backend, artifact
        self._invoked = False
        self._dequantizers = [Dequantizer(d) for d in backend.outputs]
        # Outputs of a few hundred bytes (scores, a wake-word probability) are cheaper to
        # copy out than to view; big ones (segmentation maps) are read in place.
        self._small_outputs = sum(int(np.prod(d.shape)) * d.dtype.itemsize for d in backend.outputs) <= 4096
        self._preprocessor = self._make_preprocessor(backend)
        self._parity_left = self._parity_frames if backend.kind != "cpu" else 0
        self._parity_max = []
        self._rebind_steps()  # their views were of the previous backend's memory

    def _make_preprocessor(self, backend: Backend) -> Any:
        spec = self._served.preprocess
        if spec is None or len(backend.inputs) != 1 or len(backend.inputs[0].shape) != 4:
            return None
        from edgeserve.runtime.io.preprocess_fast import FramePreprocessor

        d = backend.inputs[0]
        try:
            spec = spec.bind_to_input(d.shape)
        except PreprocessSpecError as exc:
            raise PreprocessSpecError(f"{self._served.manifest_path or 'preprocess'}: {exc}") from exc
        if d.dtype.kind in "iu" and not d.quantized:
            # An integer input without quantization parameters takes the spec's values as
            # they are (e.g. raw 0..255 pixels with scale 1): quantize with scale 1, zero point 0.
            return FramePreprocessor(spec, dtype=d.dtype, scale=1.0, zero_point=0)
        return FramePreprocessor(spec, dtype=d.dtype, scale=d.scale, zero_point=d.zero_point)

    def _drop(self, backend: Backend, stage: str, reason: str) -> None:
        """Record why ``backend`` is abandoned and move to the next one (or raise).

        A backend whose first invoke raised is kept when no other one opens (and under
        ``strict``): one failed call must not leave the Session with nothing to run, so the
        call raises with the reason and the next call tries that backend again. A backend
        that computed wrong numbers (parity) is never kept.
        """
        artifact = self._active_artifact
        attempt = Attempt(backend.name, stage, False, reason, str(self.artifact))
        if not self.attempts or self.attempts[-1] != attempt:  # a kept backend failing again: recorded once
            self.attempts.append(attempt)
        keep = stage == "invoke" and artifact is not None
        if self._strict:
            if not keep:
                backend.close()
                self._active = None
            raise BackendError(f"strict: {backend.name} failed at {stage}; not falling back", self.attempts)
        self._active = None
        try:
            self._open_next()
        except BackendError:
            if not keep:
                backend.close()
                raise
            assert artifact is not None
            self._activate(backend, artifact)
            raise InferenceError(f"{backend.name} failed at its first invoke ({reason}) and no other backend "
                                 "opened; it is kept, and the next call tries it again") from None
        backend.close()

    # ----- per frame ------------------------------------------------------------------
    def _write_input(self, backend: Backend, frame: Any) -> None:
        # Fast path: one input, already the model's exact dtype and shape (a streaming
        # model's feature frames), on an engine that copies it in itself.
        direct = getattr(backend, "write_input", None)
        if (direct is not None and type(frame) is np.ndarray and len(backend.inputs) == 1
                and frame.dtype == backend.inputs[0].dtype and frame.shape == backend.inputs[0].shape
                and (self._preprocessor is None or not is_image(frame))):
            if frame.dtype.kind == "f":  # the engine copies any float it is given, NaN included
                refuse_non_finite(backend.inputs[0].name, frame)
            direct(0, frame)
            return
        if self._preprocessor is not None and is_image(frame):
            buf = backend.input_buffer(0)
            self._preprocessor(frame, buf)
            del buf  # LiteRT refuses to invoke while a view of its memory is alive
            return
        if isinstance(frame, dict):  # by input name (an .npz of token ids and a mask)
            names = [d.name for d in backend.inputs]
            if set(frame) != set(names):
                raise InputError(f"the model's inputs are {', '.join(names)}; got arrays named {', '.join(frame)}")
            frame = [frame[name] for name in names]
        arrays = frame if isinstance(frame, (list, tuple)) else [frame]
        if len(arrays) != len(backend.inputs):
            raise InputError(f"the model has {len(backend.inputs)} input(s); got {len(arrays)}")
        for i, (d, x) in enumerate(zip(backend.inputs, arrays)):
            buf = backend.input_buffer(i)
            write_tensor(d, x, buf, has_spec=self._preprocessor is not None)
            del buf

    def _check_parity(self, active: Backend) -> bool:
        """Compare this frame's accelerator result with the CPU reference; False if dropped."""
        ref = self._reference
        if ref is None:
            name = REFERENCE_BACKEND.get(backend_info(active.name).engine)  # type: ignore[union-attr]
            info = backend_info(name) if name else None
            try:
                assert info is not None and self._active_artifact is not None
                ref = info.factory(str(self._active_artifact.path), self._active_artifact.read(), self._options())
            except (AssertionError, BackendUnavailable) as exc:
                self.attempts.append(Attempt(active.name, "parity", True, f"not checked: no CPU reference ({exc})"))
                self._parity_left = 0
                return True
            self._reference = ref
        for i in range(len(active.inputs)):
            src, dst = active.input_buffer(i), ref.input_buffer(i)
            np.copyto(dst, src)
            del src, dst
        ref.invoke()
        frame = self._parity_frames - self._parity_left + 1
        worst = 0.0
        for i, d in enumerate(active.outputs):
            got = Dequantizer(d)(active.output_buffer(i))
            want = Dequantizer(ref.outputs[i])(ref.output_buffer(i))
            diff = float(np.max(np.abs(got - want))) if got.size else 0.0
            tol = self._parity_rtol * max(1.0, float(np.max(np.abs(want)))) + (2 * d.scale if d.quantized else 1e-4)
            if not np.isfinite(diff) or diff > tol:
                self._drop(active, "parity",
                           f"output '{d.name}' differs from {ref.name} by {diff:.4g} (tolerance {tol:.4g}) "
                           f"on parity frame {frame}")
                return False
            worst = max(worst, diff / tol)
        self._parity_max.append(worst)
        self._parity_left -= 1
        if self._parity_left == 0:
            self.attempts.append(Attempt(active.name, "parity", True,
                                         f"matched {ref.name} on {self._parity_frames} frame(s); worst diff "
                                         f"{max(self._parity_max):.0%} of tolerance", str(self.artifact)))
            ref.close()
            self._reference = None
        return True


def _gone(session: Session) -> BackendError:
    """Why a Session without an active backend cannot run: closed by its user, or every backend
    failed (with each one's reason)."""
    if session._closed:
        return BackendError("the Session is closed: open a new one", session.attempts)
    return BackendError("no backend is left to run the model", session.attempts)


def _load_profile(profile: Any) -> Any:
    if profile is None or not isinstance(profile, (str, Path)):
        return profile
    from edgeserve.device_profiles import load_profile

    return load_profile(str(profile))

