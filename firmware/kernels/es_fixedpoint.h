/* Integer arithmetic of the TFLite reference kernels (double rounding), in C99.
 *
 * The functions follow the semantics of TFLite's kernels/internal/common.h and gemmlowp's
 * fixedpoint.h, which LiteRT's reference kernels (OpResolverType.BUILTIN_REF) and TFLM use:
 * every result here must equal theirs bit for bit, so the rounding of each step matters
 * more than its speed. Written for this project from those definitions. */
#ifndef ES_FIXEDPOINT_H
#define ES_FIXEDPOINT_H

#include <stdint.h>

/* round(a * b / 2^31), ties away from zero, saturating the one overflowing case. */
static inline int32_t es_srdhm(int32_t a, int32_t b) {
  int64_t ab;
  int32_t nudge;
  if (a == b && a == INT32_MIN) return INT32_MAX;
  ab = (int64_t)a * (int64_t)b;
  nudge = ab >= 0 ? (1 << 30) : (1 - (1 << 30));
  /* C99 division truncates toward zero, as gemmlowp's does. */
  return (int32_t)((ab + nudge) / ((int64_t)1 << 31));
}

/* x / 2^exponent rounded to nearest, ties away from zero. */
static inline int32_t es_rdivpot(int32_t x, int exponent) {
  const int32_t mask = (int32_t)((((int64_t)1) << exponent) - 1);
  const int32_t remainder = x & mask;
  const int32_t threshold = (mask >> 1) + (x < 0 ? 1 : 0);
  /* Arithmetic right shift of a negative value: implementation-defined in C99, arithmetic
   * on GCC, Clang and Arm's compilers, which are the ones this code targets. */
  return (x >> exponent) + (remainder > threshold ? 1 : 0);
}

/* x * multiplier * 2^shift, the requantization step of every integer kernel. */
static inline int32_t es_mul_by_qm(int32_t x, int32_t multiplier, int shift) {
  const int left = shift > 0 ? shift : 0;
  const int right = shift > 0 ? 0 : -shift;
  /* The left shift is done in unsigned arithmetic: TFLite's is a wrapping multiply. */
  return es_rdivpot(es_srdhm((int32_t)((uint32_t)x << left), multiplier), right);
}

/* x * multiplier * 2^shift for a 64-bit accumulator (the int16x8 kernels with int64 biases):
 * TFLite's single-rounding form, the multiplier rounded to 16 bits first. */
static inline int32_t es_mul_by_qm64(int64_t x, int32_t multiplier, int shift) {
  const int64_t reduced = multiplier < 0x7FFF0000 ? (multiplier + (1 << 15)) >> 16 : 0x7FFF;
  const int total_shift = 15 - shift;
  /* Arithmetic right shift of a negative value, as for es_rdivpot. */
  return (int32_t)((x * reduced + ((int64_t)1 << (total_shift - 1))) >> total_shift);
}

/* 2^exponent times x with saturation (exponent > 0) or rounding (exponent < 0). */
static inline int32_t es_sat_mul_pot(int32_t x, int exponent) {
  int32_t threshold;
  if (exponent == 0) return x;
  if (exponent < 0) return es_rdivpot(x, -exponent);
  threshold = (int32_t)((1u << (31 - exponent)) - 1u);
  if (x > threshold) return INT32_MAX;
  if (x < -threshold) return INT32_MIN;
  return (int32_t)((uint32_t)x << exponent);
}

static inline int es_clz(uint32_t x) {
  int n = 0;
  if (x == 0) return 32;
  while (!(x & 0x80000000u)) { x <<= 1; ++n; }
  return n;
}

/* CountLeadingSignBits: redundant sign bits of x (31 for 0). */
static inline int es_clrsb(int32_t x) {
  if (x >= 0) return es_clz((uint32_t)x) - 1;
  return x != INT32_MIN ? es_clz(2u * (uint32_t)(-x) - 1u) : 0;
}

/* 1/(1+x) for x in [0, 1), Q0.31 in and out: three Newton-Raphson steps in Q2.29
 * (gemmlowp's one_over_one_plus_x_for_x_in_0_1; SOFTMAX's sum and DIV's divisor). */
static inline int32_t es_one_over_one_plus(int32_t x) {
  const int64_t sum = (int64_t)x + INT32_MAX;
  const int32_t half_denominator = (int32_t)((sum + (sum >= 0 ? 1 : -1)) / 2);
  const int32_t c48_17 = 1515870810, cm32_17 = -1010580540;
  int32_t estimate = c48_17 + es_srdhm(half_denominator, cm32_17);
  int i;
  for (i = 0; i < 3; ++i) {
    const int32_t product = es_srdhm(half_denominator, estimate);     /* Q2.29 */
    const int32_t error = (1 << 29) - product;
    estimate = estimate + es_sat_mul_pot(es_srdhm(estimate, error), 2);  /* Q4.27 -> Q2.29 */
  }
  return es_sat_mul_pot(estimate, 1);  /* x/2 in Q1.30 read back as Q0.31 */
}

static inline int32_t es_clamp(int32_t x, int32_t lo, int32_t hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}

/* The end of every int16x8 accumulation (conv, depthwise, fully connected): TFLM's AccumScalar
 * is int64 unless the bias is int32. */
static inline int16_t es_requantize_s16(int32_t act_min, int32_t act_max, int32_t acc64, const int32_t *bias,
                                        const int64_t *bias64, int64_t acc, int32_t channel, int32_t multiplier, int32_t shift) {
  int32_t value;
  if (acc64) {
    if (bias64) acc += bias64[channel];
    value = es_mul_by_qm64(acc, multiplier, shift);
  } else {
    /* TFLM accumulates in int32 here: the same sum whenever TFLM's own does not overflow. */
    int32_t narrow = (int32_t)acc;
    if (bias) narrow += bias[channel];
    value = es_mul_by_qm(narrow, multiplier, shift);
  }
  return (int16_t)es_clamp(value, act_min, act_max);
}

#endif
