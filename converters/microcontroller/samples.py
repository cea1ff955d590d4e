"""Inputs both microcontroller targets check their builds on."""

from __future__ import annotations

import numpy as np

from edgeserve.tflite.model import TfliteModel


def sample_inputs(model: TfliteModel, count: int, seed: int = 0) -> list[list[np.ndarray]]:
    """Deterministic batch-1 inputs over each input's whole integer range."""
    graph = model.subgraphs[0]
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(count):
        arrays = []
        for index in graph.inputs:
            tensor = graph.tensors[index]
            dtype = tensor.numpy_dtype
            if dtype is None:
                raise ValueError(f"input {tensor.name!r} has type {tensor.dtype_name}, which has no array form")
            if np.issubdtype(dtype, np.integer):
                info = np.iinfo(dtype)
                arrays.append(rng.integers(info.min, info.max, size=tensor.shape, endpoint=True).astype(dtype))
            else:
                arrays.append(rng.standard_normal(tensor.shape).astype(dtype))
        samples.append(arrays)
    return samples
