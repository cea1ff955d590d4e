"""Core ML's own ``predict`` on a package (macOS only), fed exactly what the evaluator is fed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from edgeserve.converters.coreml.program import Feature, MilProgram

COMPUTE_UNITS = "CPU_ONLY"  # the reproducible path; the ANE and GPU may round differently


def numeric_outputs(program: MilProgram, outputs: Mapping[str, Any]) -> list[np.ndarray]:
    """The comparable outputs of one prediction, each with a leading batch axis of 1.

    A classifier gives its probabilities in class order (the label output is derived from
    them); any other model gives its outputs in program order.
    """
    if program.classifier is not None:
        probs = outputs[program.classifier["probabilities"]]
        classes = program.classes() or list(probs)
        return [np.asarray([[float(probs[c]) for c in classes]], np.float32)]
    return [np.asarray(outputs[name], np.float32).reshape(1, -1) if np.ndim(outputs[name]) < 2
            else np.asarray(outputs[name], np.float32) for name in program.outputs]


def run_core_ml(package: Path, program: MilProgram, feeds: Iterable[Mapping[str, np.ndarray]]) -> list[np.ndarray]:
    """Core ML's outputs (as :func:`numeric_outputs`, concatenated over the feeds)."""
    from edgeserve.converters.coreml.toolchain import captured, coremltools

    ct = coremltools()
    with captured():
        model = ct.models.MLModel(str(package), compute_units=getattr(ct.ComputeUnit, COMPUTE_UNITS))
    features = {f.name: f for f in program.input_features}
    rows: list[list[np.ndarray]] = []
    for feed in feeds:
        inputs = {name: _as_core_ml(value, features.get(name)) for name, value in feed.items()}
        rows.append(numeric_outputs(program, model.predict(inputs)))
    return [np.concatenate([r[i] for r in rows]) for i in range(len(rows[0]))]


def _as_core_ml(value: np.ndarray, feature: Feature | None) -> Any:
    """An image input becomes a PIL image (Core ML's image type); tensors pass as they are."""
    if feature is None or feature.kind != "image":
        return value
    from PIL import Image

    pixels = np.clip(np.rint(value[0]), 0, 255).astype(np.uint8)  # C x H x W, model channel order
    layout = feature.detail["color_layout"]
    if layout.startswith("GRAYSCALE"):
        return Image.fromarray(pixels[0], mode="L")
    hwc = np.transpose(pixels, (1, 2, 0))
    if layout == "BGR":
        hwc = hwc[:, :, ::-1]  # PIL images are RGB; Core ML reorders to the model's BGR itself
    return Image.fromarray(np.ascontiguousarray(hwc), mode="RGB")

