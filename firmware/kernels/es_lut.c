/* LOGISTIC, TANH, RELU, RELU6, LEAKY_RELU and SQRT on int8: a 256-entry table the generator fills
 * with the reference kernel's own arithmetic for every input value (converters/mcu_c/quant.py),
 * so the lookup reproduces it for every input. int16 LOGISTIC interpolates in TFLite's table of
 * sigmoid(i / 24) instead, as its reference kernel does. */
#include "es_kernels.h"

void es_lookup(const es_lookup_params *p, const int8_t *in, int8_t *out) {
  int32_t i;
  for (i = 0; i < p->count; ++i) out[i] = p->table[(uint8_t)in[i]];
}

void es_logistic_s16(const es_logistic16_params *p, const int16_t *in, int16_t *out) {
  const int32_t round = p->left_shift > 0 ? 1 << (p->left_shift - 1) : 0;
  int32_t i;
  for (i = 0; i < p->count; ++i) {
    /* The input in steps of 1/(3 x 4096) (3/4 of the table's 1/24 per 2^9 steps). */
    const int32_t x = (in[i] * p->multiplier + round) >> p->left_shift;
    const uint32_t magnitude = (uint32_t)(x < 0 ? -x : x);
    const uint32_t at = magnitude >> 9;
    uint32_t result;
    if (at >= 255) {
      result = (uint32_t)0x7FFF << 10;  /* saturated */
    } else {  /* linear between two table entries, on the 9 fractional bits */
      const uint32_t a = p->table[at], b = p->table[at + 1];
      result = (a << 9) + (magnitude & 0x1ff) * (b - a);
    }
    /* sigmoid(-x) = 1 - sigmoid(x); then back to 16 bits with rounding. */
    result = x >= 0 ? result + (1u << 9) : (1u << 25) - result + (1u << 9) - 1u;
    out[i] = (int16_t)(result >> 10);
  }
}
