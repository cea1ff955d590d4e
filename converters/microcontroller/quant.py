"""The integer parameters TFLite's kernels derive from float scales, computed as they do.

Bit-exactness with the reference kernels starts here: a multiplier one unit off changes
outputs. Each function names the TFLite function (kernels/internal/quantization_util.cc,
kernels/kernel_util.cc) whose float/double evaluation order it keeps.
"""

from __future__ import annotations

import math

import numpy as np

from edgeserve.converters.microcontroller.arena import same_padding  # noqa: F401 - one rule for both targets

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


def activation_range(activation: int, scale: float, zero_point: int, lo: int = -128,
                     hi: int = 127) -> tuple[int, int]:
    """CalculateActivationRangeQuantized (int8; int16 with ``lo``/``hi``): quantized in float32."""
    def quantize(value: float) -> int:
        return zero_point + round_half_away(float(np.float32(value) / np.float32(scale)))

    name = ACTIVATIONS.get(activation)
    if name is None:
        raise ValueError(f"fused activation {activation} has no integer kernel")
    if name == "RELU":
        return max(lo, quantize(0.0)), hi
    if name == "RELU6":
        return max(lo, quantize(0.0)), min(hi, quantize(6.0))
    if name == "RELU_N1_TO_1":
        return max(lo, quantize(-1.0)), min(hi, quantize(1.0))
    return lo, hi


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


def lookup_table(function: str, input_scale: float, input_zero_point: int, output_scale: float,
                 output_zero_point: int) -> np.ndarray:
    """LiteRT's int8 LOGISTIC, TANH and SQRT for every input, in float32 as it computes them.

    Entry ``(uint8)v`` is the output for input ``v``: dequantize, transform, then for LOGISTIC and
    TANH (PopulateLookupTable) multiply by the inverse output scale and round half away from
    zero; SQRT divides by the output scale and truncates (measured on silero-vad's INT8 SQRT: the
    truncated value for all 165 inputs it met, where rounding missed 94). Add the zero point, clamp.
    """
    values = np.arange(-128, 128, dtype=np.int32)
    x = np.float32(input_scale) * (values - input_zero_point).astype(np.float32)
    if function == "SQRT":
        scaled = np.sqrt(np.maximum(x, np.float32(0))).astype(np.float32) / np.float32(output_scale)
        rounded = np.trunc(scaled)
    else:
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


def mul_by_quantized_multiplier(x: np.ndarray, multiplier: int, shift: int) -> np.ndarray:
    """MultiplyByQuantizedMultiplier (double rounding) on int32 values, in exact integers."""
    left, right = max(shift, 0), max(-shift, 0)
    v = x.astype(np.int64) << left
    v = (v + (1 << 31)) % (1 << 32) - (1 << 31)  # the left shift wraps in 32 bits, as TFLite's does
    total = v * multiplier + np.where(v * multiplier >= 0, 1 << 30, 1 - (1 << 30))
    high = np.where(total >= 0, total >> 31, -((-total) >> 31))  # divided by 2^31 toward zero
    high = np.where((v == -(1 << 31)) & (multiplier == -(1 << 31)), (1 << 31) - 1, high)  # the one overflow
    mask = (1 << right) - 1
    return (high >> right) + ((high & mask) > (mask >> 1) + (high < 0))


def leaky_relu_table(alpha: float, input_scale: float, input_zero_point: int, output_scale: float,
                     output_zero_point: int) -> np.ndarray:
    """TFLM's int8 LEAKY_RELU for every input value, as a 256-entry table (index (uint8)v).

    Its multipliers are computed in float32 (input scale x alpha / output scale) before
    QuantizeMultiplier, and a negative alpha multiplies by the multiplier's magnitude and
    negates the result."""
    sx, sy, a = np.float32(input_scale), np.float32(output_scale), np.float32(alpha)
    m_id, s_id = quantize_multiplier(float(np.float32(sx / sy)))
    m_alpha, s_alpha = quantize_multiplier(float(np.float32(np.float32(sx * a) / sy)))
    values = np.arange(-128, 128, dtype=np.int64)
    x = values - input_zero_point
    positive = mul_by_quantized_multiplier(x, m_id, s_id)
    negative = mul_by_quantized_multiplier(x, abs(m_alpha), s_alpha) * (-1 if m_alpha < 0 else 1)
    return _table(values, np.clip(output_zero_point + np.where(x >= 0, positive, negative), -128, 127))


def prelu_multipliers(input_scale: float, alpha_scale: float, output_scale: float) -> dict[str, int]:
    """CalculatePreluParams: both multipliers from double(float) scales."""
    sx, sa, sy = (float(np.float32(v)) for v in (input_scale, alpha_scale, output_scale))
    m1, s1 = quantize_multiplier(sx / sy)
    m2, s2 = quantize_multiplier(sx * sa / sy)
    return {"multiplier_pos": m1, "shift_pos": s1, "multiplier_neg": m2, "shift_neg": s2}


def relu_table(input_scale: float, input_zero_point: int, output_scale: float, output_zero_point: int) -> np.ndarray:
    """TFLM's int8 RELU (CalculateReluOpData, ReluQuantized) for every input value: requantized
    by float32(input scale / output scale), then clamped below at the output zero point."""
    multiplier, shift = quantize_multiplier(float(np.float32(np.float32(input_scale) / np.float32(output_scale))))
    values = np.arange(-128, 128, dtype=np.int64)
    y = output_zero_point + mul_by_quantized_multiplier(values - input_zero_point, multiplier, shift)
    return _table(values, np.clip(y, max(-128, output_zero_point), 127))


def relu6_table(input_scale: float, input_zero_point: int) -> np.ndarray:
    """TFLM's int8 RELU6: the input clamped to [its zero point, round(6 / scale) + zero point],
    in the input's own quantization (the output's is not read)."""
    six = int(np.clip(round_half_away(float(np.float32(6.0) / np.float32(input_scale))) + input_zero_point,
                      -128, 127))
    values = np.arange(-128, 128, dtype=np.int64)
    return _table(values, np.clip(values, input_zero_point, six))


def _table(values: np.ndarray, outputs: np.ndarray) -> np.ndarray:
    table = np.empty(256, np.int8)
    table[values.astype(np.uint8)] = outputs.astype(np.int8)
    return table


def sub_multipliers(scale1: float, scale2: float, output_scale: float, left_shift: int = 20) -> dict[str, int]:
    """TFLM's Sub Prepare for int8: like Add's, but every ratio is taken in float32 before it
    becomes a double (sub_common.cc), which can move a multiplier by one unit."""
    s1, s2, so = np.float32(scale1), np.float32(scale2), np.float32(output_scale)
    twice_max = np.float32(2) * max(s1, s2)
    m1, sh1 = quantize_multiplier(float(np.float32(s1 / twice_max)))
    m2, sh2 = quantize_multiplier(float(np.float32(s2 / twice_max)))
    mo, sho = quantize_multiplier(float(np.float32(twice_max / (np.float32(1 << left_shift) * so))))
    return {"left_shift": left_shift, "in1_multiplier": m1, "in1_shift": sh1, "in2_multiplier": m2,
            "in2_shift": sh2, "out_multiplier": mo, "out_shift": sho}


def _c_div(a: int, b: int) -> int:
    """C's integer division: toward zero."""
    return -((-a) // b) if a < 0 else a // b


def resize_nearest_axis(in_size: int, out_size: int, align_corners: bool, half_pixel: bool) -> list[int]:
    """GetNearestNeighbor for every output index: float32 scale and offset, floor (or
    round half away from zero with align_corners), clamped to the input."""
    if align_corners and out_size > 1:
        scale = np.float32(in_size - 1) / np.float32(out_size - 1)
    else:
        scale = np.float32(in_size) / np.float32(out_size)
    offset = np.float32(0.5 if half_pixel else 0.0)
    indices = []
    for v in range(out_size):
        position = np.float32(np.float32(v) + offset) * scale
        chosen = round_half_away(float(position)) if align_corners else int(np.floor(position))
        chosen = min(chosen, in_size - 1)
        indices.append(max(0, chosen) if half_pixel else chosen)
    return indices


def resize_bilinear_axis(in_size: int, out_size: int, align_corners: bool,
                         half_pixel: bool) -> tuple[list[int], list[int], list[int]]:
    """ResizeBilinearInteger's interpolation values for every output index: the two input
    indices and the second one's weight in 1/1024 steps (integer arithmetic only)."""
    scale = ((1 << 10) * in_size + out_size // 2) // out_size
    if align_corners and out_size > 1:
        scale = ((1 << 10) * (in_size - 1) + (out_size - 1) // 2) // (out_size - 1)
    lower, upper, weight = [], [], []
    for v in range(out_size):
        scaled = v * scale + scale // 2 - (1 << 9) if half_pixel else v * scale
        low = max(_c_div(scaled, 1 << 10), 0)
        lower.append(low)
        upper.append(min(_c_div(scaled + (1 << 10) - 1, 1 << 10), in_size - 1))
        weight.append(scaled - (1 << 10) * low)
    return lower, upper, weight


# HARD_SWISH: TFLM's int8 kernel works in 16-bit fixed point (the reference hard_swish.h);
# its result for each of the 256 inputs is computed here with the same integer steps, and
# the C looks it up. The helpers below are those steps on int16 values.
def _i16(v: int) -> int:
    return max(-32768, min(32767, v))


def _wrap16(v: int) -> int:
    return (v + 32768) % 65536 - 32768  # a C++ static_cast<int16_t>


def _c_div_trunc(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _rounding_doubling_high_mul16(a: int, b: int) -> int:
    """gemmlowp::SaturatingRoundingDoublingHighMul on int16."""
    if a == b == -32768:
        return 32767
    ab = a * b
    nudge = (1 << 14) if ab >= 0 else 1 - (1 << 14)
    return _wrap16(_c_div_trunc(ab + nudge, 1 << 15))


def _doubling_high_mul16(a: int, b: int) -> int:
    """SaturatingDoublingHighMul: the same, rounding towards zero."""
    if a == b == -32768:
        return 32767
    return _wrap16(_c_div_trunc(a * b, 1 << 15))


def _rounding_divide_by_pot(x: int, exponent: int) -> int:
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if remainder > threshold else 0)


def _int16_multiplier(real: float) -> tuple[int, int]:
    """QuantizeMultiplier, then DownScaleInt32ToInt16Multiplier."""
    fixed, exponent = quantize_multiplier(real)
    if fixed >= 2**31 - 1 - (1 << 15):
        return 32767, exponent
    return (fixed + (1 << 15)) >> 16, exponent


def hard_swish_table(input_scale: float, input_zero_point: int, output_scale: float,
                     output_zero_point: int) -> np.ndarray:
    f32 = np.float32
    hires = f32(1.0 / 128.0) * f32(input_scale)
    output_fixed, output_exponent = _int16_multiplier(float(f32(hires / f32(output_scale))))
    reluish_fixed, reluish_exponent = _int16_multiplier(float(f32(hires / f32(3.0 / 32768.0))))
    if output_exponent > 0:
        raise ValueError("HARD_SWISH with an output scale TFLM refuses (output multiplier above 1)")
    values = np.arange(-128, 128)
    outputs = []
    for x in values.tolist():
        hires_value = _wrap16(_wrap16(x - input_zero_point) * (1 << 7))
        preshift = _rounding_doubling_high_mul16(hires_value, output_fixed)
        reluish = hires_value
        if reluish_exponent > 0:
            reluish = _i16(reluish * (1 << (reluish_exponent - 1)))
        reluish = _rounding_doubling_high_mul16(reluish, reluish_fixed)
        if reluish_exponent > 0:
            reluish = _i16(reluish * 2)
        if reluish_exponent < 0:
            reluish = _rounding_divide_by_pot(reluish, -reluish_exponent)
        reluish = _wrap16((reluish + (1 << 15)) >> 1)
        value = _wrap16(_rounding_divide_by_pot(_doubling_high_mul16(reluish, preshift), -output_exponent)
                        + output_zero_point)
        outputs.append(min(127, max(-128, value)))
    return _table(values, np.array(outputs))


def transpose_conv_padding(out_size: int, k: int, stride: int, same: bool) -> int:
    """TFLM's TRANSPOSE_CONV padding: ComputePaddingHeightWidth over the *output* size, as if
    it were the input of the forward convolution (dilation 1)."""
    forward = (out_size + stride - 1) // stride if same else (out_size + stride - k) // stride
    return max(0, (forward - 1) * stride + k - out_size) // 2
