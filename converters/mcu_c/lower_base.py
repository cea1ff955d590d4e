"""What every part of the mcu-c lowering shares: the operators and their kernel files, the
refusal, and small shape and quantization helpers."""

from __future__ import annotations

import numpy as np

from edgeserve.errors import InputError
from edgeserve.tflite.model import Operator, Tensor

# Operator -> firmware source file holding its kernel.
KERNEL_SOURCES = {
    "CONV_2D": "es_conv.c",
    "DEPTHWISE_CONV_2D": "es_depthwise_conv.c",
    "TRANSPOSE_CONV": "es_transpose_conv.c",
    "FULLY_CONNECTED": "es_fully_connected.c",
    "AVERAGE_POOL_2D": "es_pool.c",
    "MAX_POOL_2D": "es_pool.c",
    "ADD": "es_elementwise.c",
    "MUL": "es_elementwise.c",
    "SOFTMAX": "es_softmax.c",
    "TRANSPOSE": "es_copy.c",
    "STRIDED_SLICE": "es_copy.c",
    "SLICE": "es_copy.c",
    "PAD": "es_copy.c",
    "PADV2": "es_copy.c",
    "CONCATENATION": "es_copy.c",
    "DEPTH_TO_SPACE": "es_copy.c",
    "SPACE_TO_DEPTH": "es_copy.c",
    "QUANTIZE": "es_quantize.c",
    "LOGISTIC": "es_lut.c",
    "MEAN": "es_mean.c",
    "TANH": "es_lut.c",
    "LEAKY_RELU": "es_lut.c",
    "RELU": "es_lut.c",
    "RESIZE_NEAREST_NEIGHBOR": "es_resize.c",
    "RESIZE_BILINEAR": "es_resize.c",
    "RELU6": "es_lut.c",
    "HARD_SWISH": "es_lut.c",
    "SUB": "es_elementwise.c",
    "MAXIMUM": "es_elementwise.c",
    "MINIMUM": "es_elementwise.c",
    "PRELU": "es_prelu.c",
    "L2_NORMALIZATION": "es_l2norm.c",
    "SPLIT_V": "es_copy.c",
    "SPLIT": "es_copy.c",
    "GATHER_ND": "es_copy.c",  # constant indices: a reflect pad of edgeserve's ONNX reader
    "SQRT": "es_lut.c",  # int8: a table of LiteRT's own results (mcu/int8_lookup.py)
    "DIV": "es_elementwise.c",
    # int8 comparisons (tflite-int8 compares a dequantized score with a constant in int8) and the
    # selects that read their bool
    **{op: "es_elementwise.c" for op in ("GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL", "EQUAL", "NOT_EQUAL",
                                         "SELECT", "SELECT_V2")},
    "RESHAPE": None,  # an alias of its input
    # Shape arithmetic read only as a RESHAPE's new shape (a squeeze-excite block's SHAPE ->
    # STRIDED_SLICE -> PACK): no code, the RESHAPE takes its output's static shape (lower.py).
    "SHAPE": None,
    "PACK": None,
    "SQUEEZE": None,
    "EXPAND_DIMS": None,
    # State (state.py): buffers outside the arena.
    "CALL_ONCE": None,
    "VAR_HANDLE": None,
    "READ_VARIABLE": None,  # an alias of the variable's buffer
    "ASSIGN_VARIABLE": None,  # a copy into it, emitted inline
}
SUPPORTED = tuple(sorted(KERNEL_SOURCES))


class UnsupportedOperatorError(InputError):
    """An operator, or a form of one, that has no interpreter-free kernel yet."""


def _refuse(op: Operator, why: str) -> UnsupportedOperatorError:
    return UnsupportedOperatorError(
        f"the mcu-c target has no kernel for {op.op_name} (operator {op.index}) {why}; "
        "-t mcu builds this model for TFLM's interpreter instead")


def _q(tensor: Tensor) -> tuple[float, int]:
    q = tensor.quantization
    if q is None or not q.scale:
        raise InputError(f"tensor {tensor.name!r} has no quantization parameters")
    return float(q.scale[0]), int(q.zero_point[0]) if q.zero_point else 0


def _pad4(shape: tuple[int, ...]) -> list[int]:
    return [1] * (4 - len(shape)) + [int(d) for d in shape]


def _row_major(dims: list[int]) -> list[int]:
    strides, step = [0] * len(dims), 1
    for axis in range(len(dims) - 1, -1, -1):
        strides[axis] = step
        step *= dims[axis]
    return strides


def _merged_axes(shape: tuple[int, ...], perm: list[int]) -> tuple[tuple[int, ...], list[int]]:
    """The same transpose over fewer axes: size-1 axes dropped, and input axes that are also
    neighbours, in order, in the output merged into one."""
    kept = [a for a in range(len(shape)) if shape[a] != 1]
    renumber = {a: i for i, a in enumerate(kept)}
    order = [renumber[a] for a in perm if shape[a] != 1]
    dims = [shape[a] for a in kept]
    runs: list[list[int]] = []
    for axis in order:
        if runs and runs[-1][-1] + 1 == axis:
            runs[-1].append(axis)
        else:
            runs.append([axis])
    by_input = sorted(range(len(runs)), key=lambda r: runs[r][0])
    merged = tuple(int(np.prod([dims[a] for a in runs[r]])) for r in by_input)
    return (merged or (1,)), ([by_input.index(r) for r in range(len(runs))] or [0])


def _nhwc(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    if len(shape) != 4:
        raise ValueError(f"expected a 4-D NHWC shape, got {list(shape)}")
    return shape[0], shape[1], shape[2], shape[3]
