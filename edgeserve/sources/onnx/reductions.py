"""ONNX reductions and LayerNormalization for the reader (``reader.OPS``), as ONNX defines them.

Found missing on real models from PyPI wheels: ReduceMax in openwakeword's melspectrogram
(the whole tensor) and DNSMOS's Keras global max pooling (axes [1, 2]), ReduceSum and
ReduceMax in magika's classifier, LayerNormalization in a dynamo-exported transformer;
ReduceProd in a tf2onnx-exported BERT's shape arithmetic (g2p-id) and LpNormalization at the
end of a Keras hotword embedder (efficientword-net), both found by benchmarks/trial.py.

Axes come as an attribute, or (ReduceSum from opset 13, the others from 18) as an input; none
given reduces every axis, unless ``noop_with_empty_axes`` is set, which returns the input.
Values known before the model runs (shape arithmetic) stay numpy arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from edgeserve.sources.onnx.values import Value, axes, tensor

def reduce(np_fn: Callable[..., Any], torch_fn: Callable[[Any, list[int], bool], Any]) -> Callable[..., Value]:
    def run(args: list[Value], attrs: dict[str, Any]) -> Value:
        x, along = args[0], axes(args, attrs)
        keep = bool(attrs.get("keepdims", 1))
        if not along:
            if attrs.get("noop_with_empty_axes", 0):
                return x
            along = list(range(x.ndim))
        if isinstance(x, np.ndarray):
            return np.asarray(np_fn(x, axis=tuple(along), keepdims=keep))
        return torch_fn(x, [a % x.dim() for a in along], keep)
    return run


def layer_normalization(args: list[Value], attrs: dict[str, Any]) -> Value:
    """(x - mean) / sqrt(var + epsilon) * scale + bias over the axes from ``axis`` to the last,
    written out (not torch's layer_norm) so that scale and bias may broadcast as ONNX lets them."""
    x, scale = tensor(args[0]), tensor(args[1])
    bias = tensor(args[2]) if len(args) > 2 and args[2] is not None else None
    axis = int(attrs.get("axis", -1)) % x.dim()
    dims = list(range(axis, x.dim()))
    mean = x.mean(dim=dims, keepdim=True)
    centred = x - mean
    variance = (centred * centred).mean(dim=dims, keepdim=True)
    y = centred / torch.sqrt(variance + float(attrs.get("epsilon", 1e-5))) * scale
    return y + bias if bias is not None else y


def _product(x: Any, dims: list[int], keep: bool) -> Any:
    for dim in sorted(dims, reverse=True):  # torch.prod takes one axis; the last first keeps the others' numbers
        x = x.prod(dim=dim, keepdim=keep)
    return x


def lp_normalization(args: list[Value], attrs: dict[str, Any]) -> Value:
    """x divided by its L1 or L2 norm along ``axis`` (ONNX adds no epsilon, and neither does this)."""
    x = tensor(args[0])
    axis, p = int(attrs.get("axis", -1)) % x.dim(), int(attrs.get("p", 2))
    norm = x.abs().sum(dim=axis, keepdim=True) if p == 1 else torch.sqrt((x * x).sum(dim=axis, keepdim=True))
    return x / norm


OPS: dict[str, Callable[[list[Value], dict[str, Any]], Value]] = {
    "ReduceMax": reduce(np.max, lambda x, dims, keep: x.amax(dim=dims, keepdim=keep)),
    "ReduceMin": reduce(np.min, lambda x, dims, keep: x.amin(dim=dims, keepdim=keep)),
    "ReduceSum": reduce(np.sum, lambda x, dims, keep: x.sum(dim=dims, keepdim=keep)),
    "ReduceProd": reduce(np.prod, _product),
    "LayerNormalization": layer_normalization,
    "LpNormalization": lp_normalization,
}
