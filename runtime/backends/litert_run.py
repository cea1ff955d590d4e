"""Run a .tflite model with LiteRT, quantizing inputs and dequantizing outputs.

The interpreter comes from ai-edge-litert, or, on old device images, tflite_runtime, or
TensorFlow's bundled copy (in that order). The model bytes are parsed by edgeserve's own
bounds-checked reader first, so a corrupted file raises ModelFileError instead of
crashing the process inside the C++ interpreter.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from edgeserve.errors import InputError, MissingDependencyError

log = logging.getLogger(__name__)

_INTERPRETER_MODULES = (
    "ai_edge_litert.interpreter",
    "tflite_runtime.interpreter",
    "tensorflow.lite.python.interpreter",
)


def interpreter_module() -> Any:
    """The first importable LiteRT interpreter module, or MissingDependencyError."""
    reasons = []
    for name in _INTERPRETER_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            reasons.append(f"{name}: {exc}")
            continue
        return module
    log.debug("no LiteRT interpreter: %s", "; ".join(reasons))
    raise MissingDependencyError("ai-edge-litert", "tflite", "running .tflite models")


@dataclasses.dataclass(frozen=True)
class TensorDetail:
    """An input or output of a loaded .tflite model, with its affine quantization."""

    name: str
    index: int
    shape: tuple[int, ...]
    dtype: np.dtype
    scale: float
    zero_point: int

    @property
    def quantized(self) -> bool:
        return self.dtype.kind in "iu" and self.scale != 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": self.dtype.name,
            "scale": self.scale if self.quantized else None,
            "zero_point": self.zero_point if self.quantized else None,
        }

    def quantize(self, x: np.ndarray) -> np.ndarray:
        """Float values to this tensor's integer type (round half away from zero, like TFLite)."""
        if not self.quantized:
            return x.astype(self.dtype, copy=False)
        from edgeserve.runtime.io.preprocess_fast import quantize  # the same arithmetic the runtime's tables use

        return quantize(x, self.dtype, self.scale, self.zero_point)

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        if not self.quantized:
            return q.astype(np.float32, copy=False)
        return ((q.astype(np.float32) - self.zero_point) * self.scale).astype(np.float32)


class TfliteRunner:
    """Batch-1 LiteRT interpreter over a model held in memory.

    Args:
        model: the .tflite file's bytes.
        reference_kernels: use TFLite's reference kernels (``BUILTIN_REF``), which match
            TensorFlow Lite for Microcontrollers bit for bit; the default uses optimized
            kernels (XNNPACK), which can differ by an int8 step or two.
        num_threads: interpreter threads (None: the library default).
    """

    def __init__(self, model: bytes, *, reference_kernels: bool = False, num_threads: int | None = None) -> None:
        from edgeserve.tflite.model import TfliteModel

        TfliteModel.from_bytes(model)  # raises ModelFileError before the C++ side sees bad bytes
        mod = interpreter_module()
        kwargs: dict[str, Any] = {"model_content": model, "num_threads": num_threads}
        if reference_kernels:
            kwargs["experimental_op_resolver_type"] = mod.OpResolverType.BUILTIN_REF
        from edgeserve.console import capture_native_stderr

        self._model = model  # the interpreter reads weights from this buffer: keep it alive
        with capture_native_stderr():  # "INFO: Created TensorFlow Lite XNNPACK delegate" etc.
            self.interpreter = mod.Interpreter(**kwargs)
            self.interpreter.allocate_tensors()
        self.inputs = tuple(_detail(d) for d in self.interpreter.get_input_details())
        self.outputs = tuple(_detail(d) for d in self.interpreter.get_output_details())

    def run_raw(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """One invoke on batch-1 arrays already in the model's input dtypes; raw outputs."""
        for detail, x in zip(self.inputs, inputs):
            self.interpreter.set_tensor(detail.index, x)
        self.interpreter.invoke()
        return [self.interpreter.get_tensor(d.index).copy() for d in self.outputs]

    def predict(self, inputs: Sequence[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Run N float samples one at a time.

        Returns:
            (dequantized float outputs, raw integer outputs), each one array per output, N first.
        """
        if len(inputs) != len(self.inputs):
            raise InputError(f"the model has {len(self.inputs)} input(s); got {len(inputs)} array(s)")
        for detail, x in zip(self.inputs, inputs):
            if tuple(x.shape[1:]) != detail.shape[1:]:
                raise InputError(
                    f"input '{detail.name}' expects samples of shape {detail.shape[1:]}, got {tuple(x.shape[1:])}"
                )
        quantized = [d.quantize(x) for d, x in zip(self.inputs, inputs)]
        raw: list[list[np.ndarray]] = [[] for _ in self.outputs]
        for i in range(inputs[0].shape[0]):
            for slot, out in zip(raw, self.run_raw([q[i : i + 1] for q in quantized])):
                slot.append(out)
        raw_arrays = [np.concatenate(r) for r in raw]
        return [d.dequantize(r) for d, r in zip(self.outputs, raw_arrays)], raw_arrays

    def ops(self) -> list[str]:
        return [op["op_name"] for op in self.interpreter._get_ops_details()]


def predict_on_cores(model: bytes, inputs: Sequence[np.ndarray],
                     track: Callable[[Iterator[None], int], Iterable[None]] | None = None,
                     workers: int | None = None, first: TfliteRunner | None = None) -> list[np.ndarray]:
    """Dequantized outputs of N samples (N first, one array per output), one interpreter per
    core, each taking every ``workers``-th sample. LiteRT's invoke releases the GIL, and the
    int16 kernels the accuracy remedies reach are single-threaded: measured on PaddleOCR's
    DBNet (int16x8, 320x320) on this 2-core machine, 12 inferences in 6.6 s on one interpreter
    and 3.4 s on two. ``track(ticks, total)`` wraps the one-tick-per-sample iterator (a progress bar);
    ``first``: an interpreter of the same model the caller already holds, used as the first worker."""
    import os
    import queue
    import threading

    count = int(inputs[0].shape[0])
    workers = max(1, min(workers or os.cpu_count() or 1, 4, count))
    runners = [first or TfliteRunner(model)] + [TfliteRunner(model) for _ in range(workers - 1)]
    results: list[list[np.ndarray] | None] = [None] * count
    finished: queue.Queue[BaseException | None] = queue.Queue()

    def work(k: int) -> None:
        try:
            for i in range(k, count, workers):
                results[i] = runners[k].predict([x[i:i + 1] for x in inputs])[0]
                finished.put(None)
        except BaseException as exc:  # re-raised in the caller's thread
            finished.put(exc)

    threads = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(workers)]
    for thread in threads:
        thread.start()
    ticks = (finished.get() for _ in range(count))
    try:
        for problem in (track(ticks, count) if track else ticks):
            if problem is not None:
                raise problem
    finally:
        for thread in threads:
            thread.join()
    done = [r for r in results if r is not None]
    assert len(done) == count  # every worker finished or raised above
    return [np.concatenate([r[k] for r in done]) for k in range(len(runners[0].outputs))]


def _detail(d: dict[str, Any]) -> TensorDetail:
    scale, zero_point = d.get("quantization", (0.0, 0))
    return TensorDetail(
        name=d["name"],
        index=int(d["index"]),
        shape=tuple(int(v) for v in d["shape"]),
        dtype=np.dtype(d["dtype"]),
        scale=float(scale),
        zero_point=int(zero_point),
    )
