"""What the tests of `-t mcu-c`'s C share: writing a generation's files, and random int8 inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeserve.converters.mcu_c.generate import Generated
from edgeserve.tflite.model import TfliteModel


def write_files(generated: Generated, directory: Path) -> Path:
    for rel, text in generated.files.items():
        (directory / rel).parent.mkdir(parents=True, exist_ok=True)
        (directory / rel).write_text(text)
    return directory


def random_inputs(model: TfliteModel, count: int, seed: int = 0) -> np.ndarray:
    """``count`` uniform int8 inputs of the model's first input's shape."""
    graph = model.subgraphs[0]
    shape = graph.tensors[graph.inputs[0]].shape
    return np.random.default_rng(seed).integers(-128, 128, size=(count, *shape), dtype=np.int8)
