/* ADD, SUB, MUL, MAXIMUM and MINIMUM on int8 and int16, DIV and the six comparisons on int8 (TFLM's
 * reference kernels), with broadcasting. Each *_one computes one clamped output value (a comparison:
 * 0 or 1, stored as the bool byte); the loops store it as the tensors' type. */
#include "es_fixedpoint.h"
#include "es_kernels.h"

#include <string.h>

static int32_t add_one(const es_binary_params *p, int32_t a, int32_t b) {
  const int32_t shifted1 = (a + p->in1_offset) * (1 << p->left_shift);
  const int32_t shifted2 = (b + p->in2_offset) * (1 << p->left_shift);
  const int32_t scaled1 = es_mul_by_qm(shifted1, p->in1_multiplier, p->in1_shift);
  const int32_t scaled2 = es_mul_by_qm(shifted2, p->in2_multiplier, p->in2_shift);
  const int32_t raw = es_mul_by_qm(scaled1 + scaled2, p->out_multiplier, p->out_shift) + p->out_offset;
  return es_clamp(raw, p->act_min, p->act_max);
}

/* SUB: ADD's rescaling (with SUB's own multipliers), the second input subtracted. */
static int32_t sub_one(const es_binary_params *p, int32_t a, int32_t b) {
  const int32_t shifted1 = (a + p->in1_offset) * (1 << p->left_shift);
  const int32_t shifted2 = (b + p->in2_offset) * (1 << p->left_shift);
  const int32_t scaled1 = es_mul_by_qm(shifted1, p->in1_multiplier, p->in1_shift);
  const int32_t scaled2 = es_mul_by_qm(shifted2, p->in2_multiplier, p->in2_shift);
  const int32_t raw = es_mul_by_qm(scaled1 - scaled2, p->out_multiplier, p->out_shift) + p->out_offset;
  return es_clamp(raw, p->act_min, p->act_max);
}

/* MAXIMUM and MINIMUM compare the stored values: inputs and output share one quantization. */
static int32_t max_one(const es_binary_params *p, int32_t a, int32_t b) {
  (void)p;
  return a > b ? a : b;
}

static int32_t min_one(const es_binary_params *p, int32_t a, int32_t b) {
  (void)p;
  return a < b ? a : b;
}

static int32_t mul_one(const es_binary_params *p, int32_t a, int32_t b) {
  const int32_t product = (a + p->in1_offset) * (b + p->in2_offset);
  const int32_t raw = es_mul_by_qm(product, p->out_multiplier, p->out_shift) + p->out_offset;
  return es_clamp(raw, p->act_min, p->act_max);
}

/* RoundingDivideByPOT as TFLM's host build computes it for any exponent below 64. DIV's last
 * step can ask for 32 or more (a numerator of 0 or -1 has 31 bits of headroom), which in C++ is
 * undefined: x86 takes a 32-bit shift count mod 32, and the 64-bit mask stays all ones, so a zero
 * numerator can come out one step above the zero point. Written out here so the generated code
 * gives TFLM's host results on every compiler and board. */
static int32_t rdivpot_any(int32_t x, int exponent) {
  const int32_t mask = (int32_t)((((int64_t)1) << (exponent & 63)) - 1);
  const int32_t remainder = x & mask;
  const int32_t threshold = (mask >> 1) + (x < 0 ? 1 : 0);
  return (x >> (exponent & 31)) + (remainder > threshold ? 1 : 0);
}

/* DIV: the quotient of the offset values through a fixed-point reciprocal of the divisor
 * (TFLite's DivElementwise). A divisor at its zero point has no quotient; TFLM leaves it unchecked
 * in release builds, and so does this. */
static int32_t div_one(const es_binary_params *p, int32_t a, int32_t b) {
  int32_t numerator = a + p->in1_offset, divisor = b + p->in2_offset;
  int headroom_plus_one, recip_shift, headroom;
  int32_t inverse, quotient;
  if (divisor < 0) {
    numerator = -numerator;
    divisor = -divisor;
  }
  headroom_plus_one = es_clz((uint32_t)divisor);
  recip_shift = 31 - headroom_plus_one;
  inverse = es_one_over_one_plus((int32_t)(((uint32_t)divisor << headroom_plus_one) - (1u << 31)));
  headroom = es_clrsb(numerator);
  quotient = es_mul_by_qm(numerator, inverse, headroom);
  /* MultiplyByQuantizedMultiplierSmallerThanOneExp: the shift is never positive here (headroom
   * and the reciprocal's shift outweigh the ratio's), often past 31. */
  return es_clamp(rdivpot_any(es_srdhm(quotient, p->out_multiplier), recip_shift + headroom - p->out_shift)
                  + p->out_offset, p->act_min, p->act_max);
}

/* The comparisons rescale both sides to one fixed point (left_shift 8, then each input's own
 * scale as a multiplier) and compare those (TFLite's ComparisonWithScaling). */
static int32_t rescaled1(const es_binary_params *p, int32_t a) {
  return es_mul_by_qm((a + p->in1_offset) * (1 << p->left_shift), p->in1_multiplier, p->in1_shift);
}

static int32_t rescaled2(const es_binary_params *p, int32_t b) {
  return es_mul_by_qm((b + p->in2_offset) * (1 << p->left_shift), p->in2_multiplier, p->in2_shift);
}

static int32_t greater_one(const es_binary_params *p, int32_t a, int32_t b) { return rescaled1(p, a) > rescaled2(p, b); }
static int32_t greater_equal_one(const es_binary_params *p, int32_t a, int32_t b) {
  return rescaled1(p, a) >= rescaled2(p, b);
}
static int32_t less_one(const es_binary_params *p, int32_t a, int32_t b) { return rescaled1(p, a) < rescaled2(p, b); }
static int32_t less_equal_one(const es_binary_params *p, int32_t a, int32_t b) { return rescaled1(p, a) <= rescaled2(p, b); }
static int32_t equal_one(const es_binary_params *p, int32_t a, int32_t b) { return rescaled1(p, a) == rescaled2(p, b); }
static int32_t not_equal_one(const es_binary_params *p, int32_t a, int32_t b) { return rescaled1(p, a) != rescaled2(p, b); }

typedef int32_t (*es_one_fn)(const es_binary_params *, int32_t, int32_t);

/* The same loop for both element types (C99 has no templates). */
#define ES_BINARY_LOOP(T)                                                                                              \
  do {                                                                                                                 \
    int32_t i0, i1, i2, i3;                                                                                            \
    if (p->same_shape) {                                                                                               \
      const int32_t n = p->dims[0] * p->dims[1] * p->dims[2] * p->dims[3];                                             \
      int32_t i;                                                                                                       \
      for (i = 0; i < n; ++i) out[i] = (T)one(p, in1[i], in2[i]);                                                      \
      return;                                                                                                          \
    }                                                                                                                  \
    for (i0 = 0; i0 < p->dims[0]; ++i0)                                                                                \
      for (i1 = 0; i1 < p->dims[1]; ++i1)                                                                              \
        for (i2 = 0; i2 < p->dims[2]; ++i2)                                                                            \
          for (i3 = 0; i3 < p->dims[3]; ++i3) {                                                                        \
            const int32_t a = in1[i0 * p->stride1[0] + i1 * p->stride1[1] + i2 * p->stride1[2] + i3 * p->stride1[3]];  \
            const int32_t b = in2[i0 * p->stride2[0] + i1 * p->stride2[1] + i2 * p->stride2[2] + i3 * p->stride2[3]];  \
            *out++ = (T)one(p, a, b);                                                                                  \
          }                                                                                                            \
  } while (0)

static void binary(const es_binary_params *p, const int8_t *in1, const int8_t *in2, int8_t *out, es_one_fn one) {
  ES_BINARY_LOOP(int8_t);
}

static void binary16(const es_binary_params *p, const int16_t *in1, const int16_t *in2, int16_t *out,
                     es_one_fn one) {
  ES_BINARY_LOOP(int16_t);
}

void es_add(const es_binary_params *p, const int8_t *in1, const int8_t *in2, int8_t *out) {
  binary(p, in1, in2, out, add_one);
}

void es_mul(const es_binary_params *p, const int8_t *in1, const int8_t *in2, int8_t *out) {
  binary(p, in1, in2, out, mul_one);
}

void es_sub(const es_binary_params *p, const int8_t *in1, const int8_t *in2, int8_t *out) {
  binary(p, in1, in2, out, sub_one);
}

void es_maximum(const es_binary_params *p, const int8_t *in1, const int8_t *in2, int8_t *out) {
  binary(p, in1, in2, out, max_one);
}

void es_minimum(const es_binary_params *p, const int8_t *in1, const int8_t *in2, int8_t *out) {
  binary(p, in1, in2, out, min_one);
}

void es_add_s16(const es_binary_params *p, const int16_t *in1, const int16_t *in2, int16_t *out) {
  binary16(p, in1, in2, out, add_one);
}

void es_mul_s16(const es_binary_params *p, const int16_t *in1, const int16_t *in2, int16_t *out) {
  binary16(p, in1, in2, out, mul_one);
}

void es_sub_s16(const es_binary_params *p, const int16_t *in1, const int16_t *in2, int16_t *out) {
  binary16(p, in1, in2, out, sub_one);
}

void es_maximum_s16(const es_binary_params *p, const int16_t *in1, const int16_t *in2, int16_t *out) {
  binary16(p, in1, in2, out, max_one);
}

void es_minimum_s16(const es_binary_params *p, const int16_t *in1, const int16_t *in2, int16_t *out) {
  binary16(p, in1, in2, out, min_one);
}

void es_div(const es_binary_params *p, const int8_t *in1, const int8_t *in2, int8_t *out) {
  binary(p, in1, in2, out, div_one);
}

void es_greater(const es_binary_params *p, const int8_t *in1, const int8_t *in2, int8_t *out) {
  binary(p, in1, in2, out, greater_one);
}

void es_greater_equal(const es_binary_params *p, const int8_t *in1, const int8_t *in2, int8_t *out) {
  binary(p, in1, in2, out, greater_equal_one);
}

void es_less(const es_binary_params *p, const int8_t *in1, const int8_t *in2, int8_t *out) {
  binary(p, in1, in2, out, less_one);
}

void es_less_equal(const es_binary_params *p, const int8_t *in1, const int8_t *in2, int8_t *out) {
  binary(p, in1, in2, out, less_equal_one);
}

void es_equal(const es_binary_params *p, const int8_t *in1, const int8_t *in2, int8_t *out) {
  binary(p, in1, in2, out, equal_one);
}

void es_not_equal(const es_binary_params *p, const int8_t *in1, const int8_t *in2, int8_t *out) {
  binary(p, in1, in2, out, not_equal_one);
}

/* SELECT and SELECT_V2: x where the condition holds, y elsewhere, raw values (neither runtime
 * requantizes), with broadcasting; element_bytes says their width (lower.py gives int8). */
void es_select(const es_select_params *p, const int8_t *condition, const void *x, const void *y, void *out) {
  int32_t i0, i1, i2, i3;
  const int32_t size = p->element_bytes;
  int8_t *to = (int8_t *)out;
  for (i0 = 0; i0 < p->dims[0]; ++i0)
    for (i1 = 0; i1 < p->dims[1]; ++i1)
      for (i2 = 0; i2 < p->dims[2]; ++i2)
        for (i3 = 0; i3 < p->dims[3]; ++i3) {
          const int32_t c = i0 * p->stride_c[0] + i1 * p->stride_c[1] + i2 * p->stride_c[2] + i3 * p->stride_c[3];
          const int32_t k = condition[c]
              ? i0 * p->stride_x[0] + i1 * p->stride_x[1] + i2 * p->stride_x[2] + i3 * p->stride_x[3]
              : i0 * p->stride_y[0] + i1 * p->stride_y[1] + i2 * p->stride_y[2] + i3 * p->stride_y[3];
          const int8_t *from = (const int8_t *)(condition[c] ? x : y) + k * size;
          if (size == 1) *to = *from;
          else memcpy(to, from, (size_t)size);
          to += size;
        }
}
