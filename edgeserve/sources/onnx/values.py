"""What the ONNX reader's operator translations (reader.py, movement.py, reductions.py) do
with a value: a torch tensor while tracing, or a numpy array known before the model runs
(constants and shape arithmetic, which stay numpy so that torch.export sees plain numbers)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch  # imported only on the ONNX routes, which need torch

Value = Any  # torch.Tensor or np.ndarray (a value known while tracing)


def is_np(*values: Value) -> bool:
    return all(isinstance(v, np.ndarray) or v is None for v in values)


def tensor(v: Value) -> Any:
    return torch.from_numpy(np.ascontiguousarray(v)) if isinstance(v, np.ndarray) else v


def ints(v: Value) -> list[int]:
    if not isinstance(v, np.ndarray):
        raise ValueError("needs a value known before the model runs (a constant or a static shape)")
    return [int(x) for x in np.asarray(v).reshape(-1)]


def axes(args: list[Value], attrs: dict[str, Any]) -> list[int] | None:
    """An operator's axes: its ``axes`` attribute, or (newer opsets) its second input."""
    if "axes" in attrs:
        return list(attrs["axes"])
    if len(args) > 1 and args[1] is not None:
        return ints(args[1])
    return None
