"""A grouped, depthwise or 1x1 convolution for the numpy ML-program evaluator (ops.py's conv)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def conv_by_offsets(x: np.ndarray, weight: np.ndarray, strides: Sequence[int], dilations: Sequence[int],
                     groups: int, pads: Sequence[tuple[int, int]]) -> np.ndarray:
    """A grouped, depthwise or 1x1 convolution as one sum over the kernel's offsets: each adds
    the input, shifted by that offset, times that weight column. The windows-by-kernel einsum
    this replaced could not use BLAS for groups and ran in numpy's inner loops (a depthwise
    3x3 at 64x80x80: 14.5 ms -> 4.8 ms; a 1x1 16->32 at 160x160: 6.9 -> 0.5 ms)."""
    n, c = x.shape[:2]
    rank = x.ndim - 2
    kernel = weight.shape[2:]
    if any(a or b for a, b in pads):
        x = np.pad(x, [(0, 0), (0, 0), *pads])
    spatial = x.shape[2:]
    out_spatial = [(size - ((k - 1) * d + 1)) // s + 1 for size, k, d, s in zip(spatial, kernel, dilations, strides)]
    cout = weight.shape[0]
    cg, og = c // groups, cout // groups
    out = np.zeros((n, groups, og, *out_spatial), np.float32)
    xg = x.reshape(n, groups, cg, *spatial)
    wg = weight.reshape(groups, og, cg, *kernel)
    for offset in np.ndindex(*kernel):
        where = tuple(slice(k * d, k * d + (o - 1) * s + 1, s)
                      for k, d, o, s in zip(offset, dilations, out_spatial, strides))
        part = xg[(slice(None), slice(None), slice(None), *where)]  # (N, G, C/G, *out)
        w = wg[(slice(None), slice(None), slice(None), *offset)]  # (G, O/G, C/G)
        if cg == 1 and og == 1:  # depthwise: one multiply-add per offset
            out += part * w.reshape(1, groups, 1, *[1] * rank)
        elif groups == 1:
            out[:, 0] += np.moveaxis(np.tensordot(w[0], part[:, 0], axes=([1], [1])), 0, 1)
        else:
            out += np.einsum("ngc...,goc->ngo...", part, w, optimize=True)
    return out.reshape(n, cout, *out_spatial)
