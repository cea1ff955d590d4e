"""int16 activations with int8 weights (the 16x8 scheme): what changes from the int8 lowering.

The INT8 retry writes such a model when int8 activations miss the quality bound (the int16x8
remedy), so a model that needed it reaches a microcontroller with it. TFLM has int16 reference
kernels for these operators, and the ones here follow them: CONV_2D, DEPTHWISE_CONV_2D,
TRANSPOSE_CONV and FULLY_CONNECTED accumulate in 64 bits and requantize with TFLite's 64-bit
multiplier unless the bias is int32; ADD and SUB take TFLM's general int16 path (the int8
arithmetic with a left shift of 15); MUL, the pools, MEAN, MAXIMUM/MINIMUM and QUANTIZE the int8
arithmetic with int16 limits; RELU and RELU6 a requantization clamped to their range; LOGISTIC
TFLite's interpolation in a table of sigmoid(i / 24); RESIZE_BILINEAR LiteRT's reference kernel
in 64 bits (TFLM has none for int16). Zero points are 0 in this scheme (TFLM refuses others for
MUL and RELU and requires them for the rest). Where TFLM and LiteRT compute an operator
differently, the lowering follows TFLM when TFLM can run the model (:func:`tflm_runs`) and
LiteRT, which then judges it, when it cannot.

Data movement (TRANSPOSE, slices, PAD, CONCATENATION, SPLIT, DEPTH_TO_SPACE, nearest-neighbour
resizing) is written in bytes: an int16 value is two bytes, along a longer innermost axis or one
more axis (:func:`copy_in_bytes`), so the byte kernels move them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgeserve.converters.microcontroller import quant
from edgeserve.converters.mcu_c.steps import ConstArray

# Operator -> its int16 kernel; None: the int8 kernel's byte copies (params converted here).
KERNELS: dict[str, str | None] = {
    "CONV_2D": "es_conv2d_s16",
    "DEPTHWISE_CONV_2D": "es_depthwise_conv2d_s16",
    "FULLY_CONNECTED": "es_fully_connected_s16",
    "AVERAGE_POOL_2D": "es_average_pool_s16",
    "MAX_POOL_2D": "es_max_pool_s16",
    "ADD": "es_add_s16",
    "SUB": "es_sub_s16",
    "MUL": "es_mul_s16",
    "MAXIMUM": "es_maximum_s16",
    "MINIMUM": "es_minimum_s16",
    "QUANTIZE": "es_requantize16",
    "RELU": "es_requantize16",  # a requantization clamped below at 0, as TFLM's int16 RELU
    "RELU6": "es_requantize16",  # the identity clamped to [0, 6]
    "MEAN": "es_mean_s16",
    "LOGISTIC": "es_logistic_s16",
    "TRANSPOSE_CONV": "es_transpose_conv2d_s16",
    # TFLM has no int16 bilinear resize: LiteRT's reference kernels are the reference then.
    "RESIZE_BILINEAR": "es_resize_bilinear_s16",
    "RESIZE_NEAREST_NEIGHBOR": None,
    "TRANSPOSE": None, "STRIDED_SLICE": None, "SLICE": None, "PAD": None, "PADV2": None,
    "CONCATENATION": None, "SPLIT": None, "SPLIT_V": None, "DEPTH_TO_SPACE": None, "SPACE_TO_DEPTH": None,
    "RESHAPE": None, "SQUEEZE": None, "EXPAND_DIMS": None,
}
INT16_MIN, INT16_MAX = -32768, 32767
ADD_LEFT_SHIFT = 15  # TFLM's add_common.cc / sub_common.cc for int16 outputs (20 for int8)


def limits(dtype: str) -> tuple[int, int]:
    return (INT16_MIN, INT16_MAX) if dtype == "int16" else (-128, 127)


def bias_array(name: str, values: np.ndarray) -> tuple[ConstArray, int]:
    """The bias as the kernel reads it, and ``acc64``: TFLM accumulates in 64 bits (and
    requantizes with its 64-bit multiplier) unless the bias is int32."""
    if values.dtype == np.int64:
        return ConstArray(f"l{name}", "int64_t", values), 1
    return ConstArray(f"b{name}", "int32_t", values.astype(np.int32)), 0


def copy_in_bytes(params: dict[str, Any], itemsize: int) -> dict[str, Any] | None:
    """es_copy_params over elements as the same copy over bytes: when the innermost axis is
    contiguous on both sides it just holds ``itemsize`` times more bytes; otherwise the first
    axis (size 1 at batch 1) makes room for an innermost byte axis. None when neither fits."""
    if itemsize == 1:
        return params
    dims = list(params["dims"])
    if params["in_strides"][3] == 1 and params["out_strides"][3] == 1:
        wider = lambda values: [v * itemsize for v in values[:3]] + [1]  # noqa: E731
        return {"dims": dims[:3] + [dims[3] * itemsize], "in_offset": params["in_offset"] * itemsize,
                "in_strides": wider(params["in_strides"]), "out_offset": params["out_offset"] * itemsize,
                "out_strides": wider(params["out_strides"])}
    if dims[0] != 1:
        return None
    scale = lambda values: [v * itemsize for v in values[1:]] + [1]  # noqa: E731
    return {"dims": dims[1:] + [itemsize], "in_offset": params["in_offset"] * itemsize,
            "in_strides": scale(params["in_strides"]), "out_offset": params["out_offset"] * itemsize,
            "out_strides": scale(params["out_strides"])}


def activation_range(activation: int, scale: float, zero_point: int, dtype: str) -> tuple[int, int]:
    lo, hi = limits(dtype)
    return quant.activation_range(activation, scale, zero_point, lo, hi)


def tflm_runs(model: Any) -> bool:
    """Whether TFLM has an int16 kernel for every int16 layer of ``model`` (the mcu target's own
    check by data type). Where the two reference kernels disagree (RELU6 between scales), the C
    follows TFLM when it runs the model and LiteRT, the reference then, when it cannot."""
    from edgeserve.converters.microcontroller.ops import NO_INT16

    graph = model.subgraphs[0]
    return not any(op.op_name in NO_INT16 and any(graph.tensors[t].dtype_name == "int16" for t in op.outputs)
                   for op in graph.operators)


# TFLite's table (kernels/internal/common.h, sigmoid_table_uint16) is sigmoid(i / 24) in 0.16,
# rounded to nearest except at these entries, which are one more (measured against it:
# tests/test_mcu_c_int16.py compares the whole table with ../shared/tflm's).
_SIGMOID_ONE_MORE = (4, 8, 12, 14, 15, 16, 17, 19, 20, 21, 22, 25, 27, 28, 29, 30, 31, 33, 34, 35, 37, 39, 40, 41,
                     43, 44, 45, 46, 49, 50, 54, 62, 63, 64, 66, 82, 86, 93, 100, 103, 112, 116, 135, 255)


def sigmoid_table() -> np.ndarray:
    """sigmoid(i / 24) for i in 0..255 in unsigned 0.16 fixed point, as TFLite's int16 LOGISTIC
    and TANH kernels hold it for their interpolation."""
    i = np.arange(256, dtype=np.float64)
    table = np.floor(65536.0 / (1.0 + np.exp(-i / 24.0)) + 0.5).astype(np.int64)
    table[list(_SIGMOID_ONE_MORE)] += 1
    return np.minimum(table, 65535).astype(np.uint16)


def _checked_log2(x: float) -> tuple[bool, int]:
    """TFLite's CheckedLog2, in float32 as it computes: (x is a power of two, its rounded log2)."""
    x_log2 = np.float32(np.log(np.float32(x))) * (np.float32(1.0) / np.float32(np.log(np.float32(2.0))))
    rounded = quant.round_half_away(float(x_log2))
    return bool(abs(float(x_log2) - rounded) < 1e-3), rounded


def logistic_parameters(input_scale: float, output_scale: float) -> tuple[int, int]:
    """(multiplier, left_shift) of TFLM's int16 LOGISTIC Prepare, with Eval's power-of-two case
    folded in. Raises ValueError for an output scale other than 2^-15, which TFLM refuses."""
    pot, log2 = _checked_log2(input_scale)
    left_shift = (15 - 3) + log2  # three integer bits of input
    if pot and left_shift == 0:
        return 3, 0  # Eval: multiplier 3 << left_shift, no shift
    multiplier, left_shift = float(np.float32(input_scale)) * 4096.0 * 3.0, 0
    while multiplier <= 32767.0 / 2.0 and left_shift <= 30:
        left_shift += 1
        multiplier *= 2.0
    out_pot, out_log2 = _checked_log2(output_scale)
    if not out_pot or out_log2 != -15:
        raise ValueError(f"int16 LOGISTIC needs an output scale of 2^-15, got {output_scale:g}")
    return int(multiplier), left_shift
