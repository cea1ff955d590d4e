/* L2_NORMALIZATION on int8 along the last axis, with the TFLite reference arithmetic that TFLM
 * and LiteRT share: per row, the sum of squares of (x - zero point) in int32, its inverse square
 * root as a Q0.31 multiplier and a shift (five Newton-Raphson steps in Q3.28, starting from 1,
 * as common.h's GetInvSqrtQuantizedMultiplierExp computes it), then each element times that
 * multiplier onto the fixed output scale 1/128 (zero point 0), clamped to int8. */
#include "es_fixedpoint.h"
#include "es_kernels.h"

/* 1/sqrt(sum) as multiplier * 2^shift: the row's sum of squares in, Q0.31 out. */
static void es_inv_sqrt(int32_t sum, int32_t *multiplier, int *shift) {
  const int32_t one_q3 = 1 << 28, three_halves_q3 = (1 << 28) + (1 << 27);
  const int32_t half_sqrt2_q0 = 1518500250; /* sqrt(2)/2 in Q0.31 */
  int32_t input_q3, half_input_q3, x;
  int right = 11, pairs, i;
  if (sum <= 1) { /* 0 (a row of zero points) is taken as 1, as the reference does */
    *multiplier = INT32_MAX;
    *shift = 0;
    return;
  }
  while (sum >= (1 << 29)) {
    sum /= 4;
    ++right;
  }
  /* bring sum into [2^27, 2^29) by whole bit pairs */
  pairs = (es_clz((uint32_t)sum) - 1) / 2 - 1;
  right -= pairs;
  sum <<= 2 * pairs;
  input_q3 = sum >> 1;
  half_input_q3 = es_rdivpot(input_q3, 1);
  x = one_q3;
  for (i = 0; i < 5; ++i) {
    /* x^3 in Q9.22 read back as Q3.28; 1.5x - x^3 * input/2 in Q6.25 read back as Q3.28 */
    const int32_t cube = es_sat_mul_pot(es_srdhm(es_srdhm(x, x), x), 6);
    x = es_sat_mul_pot(es_srdhm(three_halves_q3, x) - es_srdhm(half_input_q3, cube), 3);
  }
  x = es_srdhm(x, half_sqrt2_q0);
  if (right < 0) {
    x = (int32_t)((uint32_t)x << -right);
    right = 0;
  }
  *multiplier = x;
  *shift = -right; /* a left shift, for es_mul_by_qm */
}

void es_l2_normalization(const es_l2_normalization_params *p, const int8_t *in, int8_t *out) {
  int32_t row, i;
  for (row = 0; row < p->rows; ++row) {
    const int8_t *x = in + row * p->depth;
    int8_t *y = out + row * p->depth;
    int32_t sum = 0, multiplier;
    int shift;
    for (i = 0; i < p->depth; ++i) {
      const int32_t v = x[i] + p->in_offset;
      sum += v * v;
    }
    es_inv_sqrt(sum, &multiplier, &shift);
    for (i = 0; i < p->depth; ++i) {
      /* 7: the output's 1/128 scale */
      y[i] = (int8_t)es_clamp(es_mul_by_qm(x[i] + p->in_offset, multiplier, shift + 7), -128, 127);
    }
  }
}
