/* ADD, SUB, MUL, MAXIMUM and MINIMUM on int8 and int16 (TFLM's reference kernels), with broadcasting.
 * Each *_one computes one clamped output value; the loops store it as the tensors' type. */
#include "es_fixedpoint.h"
#include "es_kernels.h"

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
