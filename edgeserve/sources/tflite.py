"""A .tflite file as a source: a starting point for targets that repackage it (mcu).

Read with edgeserve's own flatbuffer reader, so neither TensorFlow nor LiteRT is needed
and a corrupt file is a :class:`ModelFileError`, never a crash.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeserve.errors import SourceModelError
from edgeserve.sources.base import Signature, SourceKind, SourceModel, TensorInfo


class TfliteSource(SourceModel):
    def __init__(self, path: Path) -> None:
        from edgeserve.tflite_model import TfliteModel

        self.model = TfliteModel.from_file(path)
        if not self.model.subgraphs:
            raise SourceModelError(f"{path} has no subgraph")
        graph = self.model.subgraphs[0]

        def info(index: int) -> TensorInfo:
            tensor = graph.tensors[index]
            return TensorInfo(tensor.name, tuple(tensor.shape), tensor.dtype_name)

        sig = Signature(inputs=tuple(info(i) for i in graph.inputs), outputs=tuple(info(i) for i in graph.outputs))
        super().__init__(path, "tflite", sig, f"tflite schema {self.model.version}")
        self.framework = "tflite"

    def _predict_batch(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        raise SourceModelError(
            f"{self.path.name} is already a .tflite; this target needs the float source model "
            "(.keras, .h5 or SavedModel) to convert and compare against"
        )

    def export_batch1_saved_model(self, directory: Path) -> Path:
        return self._predict_batch([])  # type: ignore[return-value]


KINDS = (
    SourceKind("tflite", "a .tflite file (for targets that start from one)",
               lambda p: not p.is_dir() and p.suffix.lower() == ".tflite", TfliteSource),
)
