/* ADD, SUB, MUL, MAXIMUM and MINIMUM on int8 (TFLM's reference kernels), with broadcasting. */
#include "es_fixedpoint.h"
#include "es_kernels.h"

static int8_t add_one(const es_binary_params *p, int32_t a, int32_t b) {
  const int32_t shifted1 = (a + p->in1_offset) * (1 << p->left_shift);
  const int32_t shifted2 = (b + p->in2_offset) * (1 << p->left_shift);
  const int32_t scaled1 = es_mul_by_qm(shifted1, p->in1_multiplier, p->in1_shift);
  const int32_t scaled2 = es_mul_by_qm(shifted2, p->in2_multiplier, p->in2_shift);
  const int32_t raw = es_mul_by_qm(scaled1 + scaled2, p->out_multiplier, p->out_shift) + p->out_offset;
  return (int8_t)es_clamp(raw, p->act_min, p->act_max);
}

/* SUB: ADD's rescaling (with SUB's own multipliers), the second input subtracted. */
static int8_t sub_one(const es_binary_params *p, int32_t a, int32_t b) {
  const int32_t shifted1 = (a + p->in1_offset) * (1 << p->left_shift);
  const int32_t shifted2 = (b + p->in2_offset) * (1 << p->left_shift);
  const int32_t scaled1 = es_mul_by_qm(shifted1, p->in1_multiplier, p->in1_shift);
  const int32_t scaled2 = es_mul_by_qm(shifted2, p->in2_multiplier, p->in2_shift);
  const int32_t raw = es_mul_by_qm(scaled1 - scaled2, p->out_multiplier, p->out_shift) + p->out_offset;
  return (int8_t)es_clamp(raw, p->act_min, p->act_max);
}

/* MAXIMUM and MINIMUM compare the stored values: inputs and output share one quantization. */
static int8_t max_one(const es_binary_params *p, int32_t a, int32_t b) {
  (void)p;
  return (int8_t)(a > b ? a : b);
}

static int8_t min_one(const es_binary_params *p, int32_t a, int32_t b) {
  (void)p;
  return (int8_t)(a < b ? a : b);
}

static int8_t mul_one(const es_binary_params *p, int32_t a, int32_t b) {
  const int32_t product = (a + p->in1_offset) * (b + p->in2_offset);
  const int32_t raw = es_mul_by_qm(product, p->out_multiplier, p->out_shift) + p->out_offset;
  return (int8_t)es_clamp(raw, p->act_min, p->act_max);
}

static void binary(const es_binary_params *p, const int8_t *in1, const int8_t *in2, int8_t *out,
                   int8_t (*one)(const es_binary_params *, int32_t, int32_t)) {
  int32_t i0, i1, i2, i3;
  if (p->same_shape) {
    const int32_t n = p->dims[0] * p->dims[1] * p->dims[2] * p->dims[3];
    int32_t i;
    for (i = 0; i < n; ++i) out[i] = one(p, in1[i], in2[i]);
    return;
  }
  for (i0 = 0; i0 < p->dims[0]; ++i0)
    for (i1 = 0; i1 < p->dims[1]; ++i1)
      for (i2 = 0; i2 < p->dims[2]; ++i2)
        for (i3 = 0; i3 < p->dims[3]; ++i3) {
          const int32_t a = in1[i0 * p->stride1[0] + i1 * p->stride1[1] + i2 * p->stride1[2] + i3 * p->stride1[3]];
          const int32_t b = in2[i0 * p->stride2[0] + i1 * p->stride2[1] + i2 * p->stride2[2] + i3 * p->stride2[3]];
          *out++ = one(p, a, b);
        }
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
