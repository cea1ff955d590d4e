"""A .tflite file as a source.

A full-integer file is a starting point for targets that repackage it (mcu): kind "tflite".
A float one (float32, fp16 weights, or dynamic-range int8 weights) is kind "tflite-float":
its float outputs, computed with LiteRT, are the reference every target is scored
against, and the TFLite targets quantize it with ai-edge-quantizer.

Read with edgeserve's own flatbuffer reader first, so a corrupt file is a
:class:`ModelFileError` before LiteRT sees it, never a crash.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from edgeserve.errors import SourceModelError
from edgeserve.sources.base import FloatTflite, Signature, SourceKind, SourceModel, TensorInfo


class TfliteSource(SourceModel):
    def __init__(self, path: Path) -> None:
        from edgeserve.tflite.model import TfliteModel
        from edgeserve.tflite.verify import validate_tflite

        data = path.read_bytes()
        self.model = TfliteModel.from_bytes(data)
        if not self.model.subgraphs:
            raise SourceModelError(f"{path} has no subgraph")
        graph = self.model.subgraphs[0]

        def info(index: int) -> TensorInfo:
            tensor = graph.tensors[index]
            return TensorInfo(tensor.name, tuple(tensor.shape), tensor.dtype_name)

        sig = Signature(inputs=tuple(info(i) for i in graph.inputs), outputs=tuple(info(i) for i in graph.outputs))
        integer, _ = self.model.is_full_integer()
        super().__init__(path, "tflite" if integer else "tflite-float", sig, f"tflite schema {self.model.version}")
        self.framework = "tflite"
        self.tflite_route = "float-tflite"
        self._data = self.readable = data
        self._runner: Any = None
        self.rewrites: tuple[str, ...] = ()
        if not integer:  # LiteRT runs this file in-process: check what it trusts first
            validate_tflite(data)
            from edgeserve.sources.tflite_custom_ops import check_runnable

            # Custom operators LiteRT cannot resolve: one refusal now, not a traceback at the
            # float reference outputs (the runner it builds is the reference's, not made twice).
            self._runner = check_runnable(path.name, self.model, data)
            from edgeserve.converters.tflite_int8.float_prep import runnable

            # What the routes read: MediaPipe's custom ops as builtins, sparse weights dense
            # (float_prep.runnable). The reference stays the file as given: LiteRT's XNNPACK
            # delegate runs MediaPipe's Convolution2DTransposeBias and DENSIFY itself.
            self.readable, self.rewrites = runnable(data)

    def operator_counts(self) -> dict[str, int]:
        return self.model.op_counts()

    def _predict_batch(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        if self.kind == "tflite":
            raise SourceModelError(
                f"{self.path.name} is already a full-integer .tflite; this target needs a float source model "
                "to convert and compare against"
            )
        from edgeserve.runtime.backends.litert_run import TfliteRunner

        if self._runner is None:
            self._runner = TfliteRunner(self._data)
        outputs, _ = self._runner.predict([np.asarray(x, np.float32) for x in inputs])
        return outputs

    def float_tflite(self, workdir: Path) -> FloatTflite:
        if self.kind == "tflite":
            self._predict_batch([])
        described = "float .tflite" + (f" ({'; '.join(self.rewrites)})" if self.rewrites else " as given")
        return FloatTflite(self.readable, described, {})


KINDS = (
    SourceKind("tflite", "a .tflite file (full-integer for -t mcu, float for every TFLite target)",
               lambda p: not p.is_dir() and p.suffix.lower() == ".tflite", TfliteSource),
)
