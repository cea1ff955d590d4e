/* SOFTMAX, int8 in and out (TFLite reference_ops::Softmax, quantized).
 *
 * exp() and 1/(1+x) in gemmlowp's fixed point: values are int32 with a fixed number of
 * integer bits (Q5.26 for the scaled differences, Q0.31 for exp results, Q12.19 for their
 * sum). The polynomial and Newton-Raphson constants are gemmlowp's published ones. */
#include "es_fixedpoint.h"
#include "es_kernels.h"

/* exp(a) for a in [-1/4, 0), Q0.31: Taylor series around -1/8. */
static int32_t exp_quarter(int32_t a) {
  const int32_t exp_minus_one_eighth = 1895147668;
  const int32_t one_third = 715827883;
  const int32_t x = a + (1 << 28);  /* a + 1/8 */
  const int32_t x2 = es_srdhm(x, x);
  const int32_t x3 = es_srdhm(x2, x);
  const int32_t x4 = es_srdhm(x2, x2);
  const int32_t x4_over_4 = es_rdivpot(x4, 2);
  const int32_t poly = es_rdivpot(es_srdhm(x4_over_4 + x3, one_third) + x2, 1);
  return exp_minus_one_eighth + es_srdhm(exp_minus_one_eighth, x + poly);
}

/* exp(a) for a <= 0 given in Q5.26, result in Q0.31. */
static int32_t exp_negative(int32_t a) {
  /* exp(-2^k) in Q0.31 for k = -2..4, applied for each set bit of the whole-quarters part. */
  static const int32_t factors[7] = {1672461947, 1302514674, 790015084, 290630308, 39332535, 720401, 242};
  const int32_t quarter = 1 << 24;
  const int32_t mod_minus_quarter = (a & (quarter - 1)) - quarter;
  int32_t result = exp_quarter(es_sat_mul_pot(mod_minus_quarter, 5));
  const int32_t remainder = mod_minus_quarter - a;
  int k;
  for (k = 0; k < 7; ++k) {
    if (remainder & (1 << (24 + k))) result = es_srdhm(result, factors[k]);
  }
  return a == 0 ? INT32_MAX : result;
}

void es_softmax(const es_softmax_params *p, const int8_t *in, int8_t *out) {
  int32_t r, c;
  for (r = 0; r < p->rows; ++r) {
    const int8_t *row = in + r * p->depth;
    int8_t *result = out + r * p->depth;
    int32_t max = -128, sum = 0, headroom, bits_over_unit, scale, exponent;
    for (c = 0; c < p->depth; ++c) if (row[c] > max) max = row[c];
    for (c = 0; c < p->depth; ++c) {
      const int32_t diff = row[c] - max;
      if (diff >= p->diff_min) {
        const int32_t scaled = es_srdhm((int32_t)((uint32_t)diff << p->input_left_shift), p->input_multiplier);
        sum += es_rdivpot(exp_negative(scaled), 12);  /* Q0.31 -> Q12.19 */
      }
    }
    headroom = es_clz((uint32_t)sum);
    bits_over_unit = 12 - headroom;
    scale = es_one_over_one_plus((int32_t)(((uint32_t)sum << headroom) - (1u << 31)));
    exponent = bits_over_unit + 31 - 8;
    for (c = 0; c < p->depth; ++c) {
      const int32_t diff = row[c] - max;
      if (diff >= p->diff_min) {
        const int32_t scaled = es_srdhm((int32_t)((uint32_t)diff << p->input_left_shift), p->input_multiplier);
        const int32_t value = es_rdivpot(es_srdhm(scale, exp_negative(scaled)), exponent) - 128;
        result[c] = (int8_t)es_clamp(value, -128, 127);
      } else {
        result[c] = -128;
      }
    }
  }
}
