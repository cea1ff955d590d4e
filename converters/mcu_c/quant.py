"""The integer parameters TFLite's kernels derive from float scales, computed as they do.

Bit-exactness with the reference kernels starts here: a multiplier one unit off changes
outputs. Each function names the TFLite function (kernels/internal/quantization_util.cc,
kernels/kernel_util.cc) whose float/double evaluation order it keeps.
"""

from __future__ import annotations

import math

import numpy as np

# TFLite's ActivationFunctionType codes in Conv2DOptions and friends.
ACTIVATIONS = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6"}


def round_half_away(x: float) -> int:
    """std::round: ties away from zero (Python's round() goes to even)."""
    return int(math.floor(abs(x) + 0.5)) * (1 if x >= 0 else -1)


def quantize_multiplier(real: float) -> tuple[int, int]:
    """QuantizeMultiplier: a Q0.31 significand and a power-of-two exponent for ``real``."""
    if real == 0.0:
        return 0, 0
    fraction, shift = math.frexp(real)
    fixed = round_half_away(fraction * (1 << 31))
    if fixed == 1 << 31:
        fixed //= 2
        shift += 1
    if shift < -31:  # flushed to zero, as TFLite does
        return 0, 0
    return fixed, shift


def activation_range(activation: int, scale: float, zero_point: int) -> tuple[int, int]:
    """CalculateActivationRangeQuantized for int8: the quantization is done in float32."""
    def quantize(value: float) -> int:
        return zero_point + round_half_away(float(np.float32(value) / np.float32(scale)))

    name = ACTIVATIONS.get(activation)
    if name is None:
        raise ValueError(f"fused activation {activation} has no integer kernel")
    if name == "RELU":
        return max(-128, quantize(0.0)), 127
    if name == "RELU6":
        return max(-128, quantize(0.0)), min(127, quantize(6.0))
    if name == "RELU_N1_TO_1":
        return max(-128, quantize(-1.0)), min(127, quantize(1.0))
    return -128, 127


def per_channel_multipliers(input_scale: float, filter_scales: tuple[float, ...], output_scale: float,
                            channels: int) -> tuple[list[int], list[int]]:
    """PopulateConvolutionQuantizationParams: double(input) * double(filter) / double(output)."""
    scales = filter_scales if len(filter_scales) > 1 else filter_scales * channels
    pairs = [quantize_multiplier(float(np.float32(input_scale)) * float(np.float32(s)) / float(np.float32(output_scale)))
             for s in scales]
    return [m for m, _ in pairs], [s for _, s in pairs]


def add_multipliers(scale1: float, scale2: float, output_scale: float, left_shift: int = 20) -> dict[str, int]:
    """Add's Prepare for int8: both inputs rescaled to twice the larger scale, 20 bits up."""
    twice_max = 2.0 * float(max(np.float32(scale1), np.float32(scale2)))
    m1, s1 = quantize_multiplier(float(np.float32(scale1)) / twice_max)
    m2, s2 = quantize_multiplier(float(np.float32(scale2)) / twice_max)
    mo, so = quantize_multiplier(twice_max / float(np.float32(1 << left_shift) * np.float32(output_scale)))
    return {"left_shift": left_shift, "in1_multiplier": m1, "in1_shift": s1, "in2_multiplier": m2,
            "in2_shift": s2, "out_multiplier": mo, "out_shift": so}


def mul_multiplier(scale1: float, scale2: float, output_scale: float) -> tuple[int, int]:
    """Mul's Prepare for int8: input1 * input2 / output, in double."""
    return quantize_multiplier(float(np.float32(scale1)) * float(np.float32(scale2)) / float(np.float32(output_scale)))


def softmax_parameters(beta: float, input_scale: float, integer_bits: int = 5) -> dict[str, int]:
    """PreprocessSoftmaxScaling and CalculateInputRadius for the gemmlowp softmax."""
    real = min(float(np.float32(beta)) * float(np.float32(input_scale)) * (1 << (31 - integer_bits)),
               (1 << 31) - 1.0)
    multiplier, left_shift = quantize_multiplier(real)
    radius = math.floor(((1 << integer_bits) - 1) * (1 << (31 - integer_bits)) / (1 << left_shift))
    return {"input_multiplier": multiplier, "input_left_shift": left_shift, "diff_min": -radius}


def same_padding(in_size: int, filter_size: int, stride: int, dilation: int, out_size: int) -> int:
    """ComputePaddingWithOffset: the top/left padding (the odd pixel goes bottom/right)."""
    effective = (filter_size - 1) * dilation + 1
    total = max(0, (out_size - 1) * stride + effective - in_size)
    return total // 2


def lookup_table(function: str, input_scale: float, input_zero_point: int, output_scale: float,
                 output_zero_point: int) -> np.ndarray:
    """LiteRT's PopulateLookupTable for int8 LOGISTIC/TANH, in float32 as it computes it.

    Entry ``(uint8)v`` is the output for input ``v``: dequantize, transform, multiply by the
    inverse output scale, round half away from zero, add the zero point, clamp.
    """
    values = np.arange(-128, 128, dtype=np.int32)
    x = np.float32(input_scale) * (values - input_zero_point).astype(np.float32)
    with np.errstate(over="ignore"):
        if function == "LOGISTIC":
            y = np.float32(1.0) / (np.float32(1.0) + np.exp(-x, dtype=np.float32))
        else:
            y = np.tanh(x, dtype=np.float32)
    scaled = (y * (np.float32(1.0) / np.float32(output_scale))).astype(np.float32)
    rounded = np.sign(scaled) * np.floor(np.abs(scaled) + np.float32(0.5))
    quantized = np.clip(rounded.astype(np.int64) + output_zero_point, -128, 127).astype(np.int8)
    table = np.empty(256, np.int8)
    table[values.astype(np.uint8)] = quantized
    return table


def mean_multiplier(input_scale: float, output_scale: float, count: int) -> tuple[int, int]:
    """QuantizedMeanOrSum's multiplier: in/out scale, then 1/count folded in by a shift."""
    multiplier, shift = quantize_multiplier(float(np.float32(input_scale)) / float(np.float32(output_scale)))
    extra = min(count.bit_length() - 1, 32, 31 + shift)
    return int((multiplier << extra) // count), shift - extra
