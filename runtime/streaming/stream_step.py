"""StreamStep: one stride of a streaming model per call, with as little Python around the invoke as possible.

A wake-word model's invoke takes 2 to 4 µs with XNNPACK, so the few microseconds
:meth:`Session.run` spends around it (its lock, input checks, per-stage timing, the parity
and fallback machinery, copies for other threads) cost more than the model. A StreamStep
pays for that machinery once, then holds views of the engine's input and output memory:

    >>> step = session.stream_step()                  # doctest: +SKIP
    >>> probability = step.value(frames)               # doctest: +SKIP  one int8 [1, 3, 40] stride
    >>> outputs = step(frames)                         # doctest: +SKIP  every output, as Session.run
    >>> step.input[...] = quantized; step.value()      # doctest: +SKIP  no copy: write in place

Each call copies the frames into the input (or takes what :attr:`StreamStep.input` holds),
invokes, and reads the outputs, with the model's state carried exactly as
:meth:`Session.run` carries it (the two may be mixed).

* The first calls go through :meth:`Session.run`, so the first invoke and an accelerator's
  parity frames are checked, and a failing backend is dropped for the next, as always.
  Only then, on an engine that can lend stable views (LiteRT, for a model whose input and
  output shapes are all fixed and whose buffers did not move during an invoke), does the
  step switch to the views; :attr:`fast` says whether it did. Other engines, and frames of
  another dtype or shape (floats to quantize, no batch dimension), keep the checked path.
* :meth:`Session.reset`, a backend change and :meth:`Session.close` re-bind every open
  StreamStep, so views never outlive the interpreter they came from.
* One caller at a time. A stride on the lent views tries the Session's lock without waiting
  (about 0.1 µs, 3 to 5 % of alexa's invoke): a call while another thread is inside the step
  or the Session raises :class:`~edgeserve.errors.ConcurrentUseError` instead of running two
  invokes on one interpreter (that died with SIGSEGV, 4 of 4 tries). Two streams, or two
  threads, each open a Session of their own: a stream's state belongs to one caller.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from edgeserve.errors import BackendError, ConcurrentUseError
from edgeserve.runtime.backends.base import Backend
from edgeserve.runtime.io.inputs import refuse_non_finite
from edgeserve.runtime.io.outputs import Dequantizer, scalar_decoder


class StreamStep:
    """Per-stride inference on a :class:`~edgeserve.runtime.Session`; see the module docstring."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self.fast = False
        self._input: np.ndarray | None = None
        self._invoke: Callable[[], None] | None = None
        self._copy: Callable[[np.ndarray], None] | None = None
        self._outputs: list[np.ndarray] = []
        self._dequantizers: list[Dequantizer] = []
        self._closed = False
        self._retry = True
        detail = session.inputs[0]
        # Frames written through `input` before the views are lent go here, then through Session.run.
        self._staging = np.zeros(detail.shape, detail.dtype)
        self.bind()

    def bind(self) -> None:
        """Take views of the active backend's memory when it can lend them (else the checked path).

        The Session calls this whenever the memory may have moved: a reset, a new backend, close."""
        self.fast = False
        self._retry = True  # the checked path tries bind() again after its next call
        self._input = self._invoke = self._copy = None
        self.__dict__.pop("value", None)  # back to the checked value()
        self._outputs, self._dequantizers = [], []
        session = self._session
        active = session._active
        if active is None:
            self._closed = True
            return
        if type(active).lend_views is Backend.lend_views or len(active.inputs) != 1:
            # An engine that never lends views, or a model the step cannot feed: asking again
            # after every call would only cost time (the Session calls bind() on a new backend).
            self._retry = False
            return
        # Until the first invoke succeeded and the parity frames are done, every call needs
        # Session.run's checks and its fallback to the next backend.
        if not session._invoked or session._parity_left:
            return
        lent = active.lend_views()
        if lent is None:  # not yet (LiteRT lends only after the interpreter has run), or not this model
            return
        invoke, outputs = lent.invoke, lent.outputs
        if lent.inputs[0].dtype.kind == "f":
            # The engine's copy takes NaN as readily as a number, and `input` is written in place.
            invoke = _finite_first(invoke, lent.inputs[0], active.inputs[0].name)
        self._input, self._invoke, self._outputs = lent.inputs[0], invoke, outputs
        self._dequantizers = [Dequantizer(d) for d in active.outputs]
        self._copy = lent.copy_inputs[0]
        if len(outputs) == 1 and outputs[0].size == 1:
            # The checked path through a weak proxy: a bound method here would be a reference
            # cycle (instance -> closure -> instance), freed only by the cyclic collector.
            checked = functools.partial(StreamStep.value, weakref.proxy(self))
            self.value = _fast_value(self._copy, invoke, outputs[0].reshape(-1), scalar_decoder(active.outputs[0]), checked,
                                     session._lock)
        self.fast = True

    def __call__(self, frames: np.ndarray | None = None) -> list[np.ndarray]:
        """One stride: every output dequantized to float32, as :meth:`Session.run` gives them
        (arrays reused by the next call). Without ``frames``, on what :attr:`input` holds."""
        if self._input is not None:
            lock = self._session._lock
            if not lock.acquire(False):
                raise _busy()
            try:
                if frames is not None:
                    try:
                        self._copy(frames)  # type: ignore[misc]
                    except ValueError:  # another dtype or shape: the checked path
                        return self._checked(frames)
                self._invoke()  # type: ignore[misc]
                return [dq(o) for dq, o in zip(self._dequantizers, self._outputs)]
            finally:
                lock.release()
        return self._checked(self._staging if frames is None else frames)

    @property
    def input(self) -> np.ndarray:
        """Where the next stride's frames go, to skip the copy :meth:`value` (frames) makes: write
        into it (quantize with ``out=``, or ``step.input[...] = q``), then call ``value()`` or
        ``step()`` with no frames. On the fast path it is the engine's own input memory; it
        moves when the step binds (after the first call, a reset, a new backend), so read this
        property for every stride rather than keeping the array."""
        return self._input if self._input is not None else self._staging

    def value(self, frames: np.ndarray | None = None) -> float:
        """One stride of a model with a single one-value output (a wake word's probability):
        that value, dequantized exactly ((q - zero point) x scale, in double precision).
        ``frames`` are copied in; without them, the stride runs on what :attr:`input` holds.

        This is the checked path; :meth:`bind` shadows it on the instance with the fast one."""
        outputs = self._checked(self._staging if frames is None else frames)
        if len(outputs) != 1 or outputs[0].size != 1:
            shapes = ", ".join(str(list(o.shape)) for o in outputs)
            raise ValueError(f"value() needs one output of one value; this model gives {shapes}: call the step itself")
        return float(outputs[0].reshape(-1)[0])

    def _checked(self, frames: Any) -> list[np.ndarray]:
        if self._closed:
            raise BackendError("the Session is closed: open a new one", self._session.attempts)
        lock = self._session._lock  # reentrant: the fast path holds it already when it falls back here
        if not lock.acquire(False):
            raise _busy()
        try:
            outputs = self._session.run(frames)
            if not self.fast and self._retry:
                self.bind()  # after the first invoke (and any parity frames): the views, if the engine lends them
            return outputs
        finally:
            lock.release()


def _finite_first(invoke: Callable[[], None], memory: np.ndarray, name: str) -> Callable[[], None]:
    """The invoke of a float-input model, refusing NaN or infinity in its input memory first."""
    def invoke_finite() -> None:
        refuse_non_finite(name, memory)
        invoke()
    return invoke_finite


def _busy() -> ConcurrentUseError:
    return ConcurrentUseError("this StreamStep (or its Session) is in use by another thread: a stream's state "
                              "belongs to one caller; give each thread a Session of its own")


def _fast_value(copy: Callable[[np.ndarray], None], invoke: Callable[[], None], flat: np.ndarray,
                decode: Callable[[Any], float], checked: Callable[[Any], float], lock: Any) -> Callable[..., float]:
    """StreamStep.value on lent views, as a closure set on the instance: its names are cells, not
    attribute lookups, and no bound method is made per call. The engine's own copy checks the
    frames' dtype and shape (in C++, for LiteRT); frames it refuses take the checked path. The
    Session's lock, tried without waiting, keeps a second thread out of the interpreter."""
    acquire, release = lock.acquire, lock.release

    def value(frames: Any = None) -> float:
        if not acquire(False):
            raise _busy()
        try:
            if frames is not None:
                try:
                    copy(frames)
                except ValueError:  # another dtype or shape: Session.run quantizes or reshapes it, or says why not
                    return checked(frames)
            invoke()
            return decode(flat.item(0))
        finally:
            release()

    value.__doc__ = StreamStep.value.__doc__
    return value
