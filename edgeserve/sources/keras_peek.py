"""A Keras model's input shapes read from its saved config, without TensorFlow.

Loading a Keras model imports TensorFlow (about 10 s, far more on a busy board). The shape
of its input is written in plain JSON inside the file: `model_config` in a Keras 2 `.h5`
(HDF5, read with h5py), `config.json` in a Keras 3 `.keras` (a zip). Reading it lets a
calibration file of the wrong shape be refused in a second instead of after the import.
Only what the config states plainly is returned; anything else gives None and the full
check runs after loading, as before.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

Shape = tuple[int | None, ...]


def keras_input_shapes(path: Path) -> list[tuple[str, Shape]] | None:
    """(name, batch shape) of the model's inputs in order, or None when the config does not say."""
    try:
        config = _config(path)
        return _input_shapes(config) if isinstance(config, dict) else None
    except Exception:  # a damaged or unusual file: the loader gives the real error later
        return None


def _config(path: Path) -> Any:
    if path.suffix.lower() == ".keras":
        with zipfile.ZipFile(path) as archive:
            return json.loads(archive.read("config.json"))
    try:
        import h5py
    except ImportError:
        return None
    with h5py.File(path, "r") as f:
        text = f.attrs.get("model_config")
    return json.loads(text.decode() if isinstance(text, bytes) else text) if text is not None else None


def _input_shapes(config: dict[str, Any]) -> list[tuple[str, Shape]] | None:
    body = config.get("config") or {}
    layers = body.get("layers") or []
    by_name = {layer.get("config", {}).get("name"): layer for layer in layers if isinstance(layer, dict)}
    if config.get("class_name") == "Sequential":
        first = layers[0] if layers else {}
        shape = _batch_shape(first.get("config", {})) or (config.get("build_config") or {}).get("input_shape")
        return [(str(first.get("config", {}).get("name") or "input"), _shape(shape))] if shape else None
    wanted = body.get("input_layers")
    if not wanted:
        return None
    if isinstance(wanted[0], str):  # Keras 3 writes one input as a flat ["name", 0, 0]
        wanted = [wanted]
    shapes = []
    for name, *_ in wanted:
        layer = by_name.get(name)
        shape = _batch_shape(layer.get("config", {})) if layer and layer.get("class_name") == "InputLayer" else None
        if not shape:
            return None
        shapes.append((str(name), _shape(shape)))
    return shapes


def _batch_shape(layer_config: dict[str, Any]) -> list[Any] | None:
    return layer_config.get("batch_shape") or layer_config.get("batch_input_shape")


def _shape(values: list[Any]) -> Shape:
    if not all(v is None or (isinstance(v, int) and v >= 0) for v in values):
        raise ValueError(f"not a shape: {values}")
    return tuple(values)
