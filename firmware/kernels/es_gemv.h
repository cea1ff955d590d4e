/* FULLY_CONNECTED, int8: the kernel the generator specialises for each such layer
 * (converters/mcu_c/specialise.py), with its sizes as constants.
 *
 * The weights and the per-channel table are es_pointwise.h's (a fully connected layer is a
 * 1x1 convolution over its rows): two rows at a time go through es_gemm_pair_s8, from rows
 * widened into ``scratch`` (4 * depth bytes; only a layer of two rows or more has it); a last
 * odd row (a classifier's only one) through es_gemv_s8, which widens the row's four bytes in
 * the loop, four output channels per pass (per four inputs: one LDR and two SXTB16 of the
 * row, four LDRD of weights, eight SMLAD for sixteen multiply-accumulates), so a one-row layer
 * needs no scratch: widening its row beforehand would hold twice its input (micro_speech:
 * 8,000 B). */
#ifndef ES_GEMV_H
#define ES_GEMV_H

#include "es_pointwise.h"

/* Output channels [oc, oc + 4) of one row of ``depth`` int8 inputs: two channel pairs of the
 * packed weights, ``w`` and the pair after it (``block`` words on). */
#define ES_GEMV_WEIGHTS(w, narrow, x0, x1, a, b) do {                                   \
    int32_t w0_, w1_;                                                                   \
    if (narrow) { /* both channels' four int8 weights in one pair of words */           \
      int32_t c0_, c1_;                                                                 \
      es_load_pair(&(w), &c0_, &c1_);                                                   \
      a = es_smlad(es_sxtb16_ror8(c0_), x1, es_smlad(es_sxtb16(c0_), x0, a));           \
      b = es_smlad(es_sxtb16_ror8(c1_), x1, es_smlad(es_sxtb16(c1_), x0, b));           \
    } else {                                                                            \
      es_load_pair(&(w), &w0_, &w1_);                                                   \
      a = es_smlad(w1_, x1, es_smlad(w0_, x0, a));                                      \
      es_load_pair(&(w), &w0_, &w1_);                                                   \
      b = es_smlad(w1_, x1, es_smlad(w0_, x0, b));                                      \
    }                                                                                   \
  } while (0)

/* Every output channel of one row of ``depth`` int8 inputs, four channels a pass (the row's
 * bytes widened once for all four), then a last pair. */
ES_ALWAYS_INLINE void es_gemv_s8(const int8_t *x, const int32_t *packed, const int32_t *table, int8_t *out,
                                 const int32_t depth, const int32_t channels, const int32_t narrow,
                                 const int32_t act_min, const int32_t act_max) {
  const int32_t block = narrow ? depth / 2 : depth;  /* words of one channel pair's weights */
  const int32_t *w = packed;
  int32_t oc = 0, g;
  for (; oc + 3 < channels; oc += 4) {
    const int32_t *q = table + 4 * oc;
    const int32_t *v = w + block;
    int32_t a0 = q[0], a1 = q[4], a2 = q[8], a3 = q[12];
    for (g = 0; g < depth; g += 4) {
      const int32_t four = es_read_s8x4(x + g);
      const int32_t x0 = es_sxtb16(four), x1 = es_sxtb16_ror8(four);
      ES_GEMV_WEIGHTS(w, narrow, x0, x1, a0, a1);
      ES_GEMV_WEIGHTS(v, narrow, x0, x1, a2, a3);
    }
    w = v;
    out[oc] = es_requantize_q(a0, q, act_min, act_max);
    out[oc + 1] = es_requantize_q(a1, q + 4, act_min, act_max);
    out[oc + 2] = es_requantize_q(a2, q + 8, act_min, act_max);
    out[oc + 3] = es_requantize_q(a3, q + 12, act_min, act_max);
  }
  for (; oc < channels; oc += 2) {
    const int32_t other = oc + 1 < channels;  /* an odd last channel: computed twice, stored once */
    const int32_t *q0 = table + 4 * oc;
    const int32_t *q1 = q0 + 4 * other;
    int32_t a0 = q0[0], a1 = q1[0];
    for (g = 0; g < depth; g += 4) {
      const int32_t four = es_read_s8x4(x + g);
      const int32_t x0 = es_sxtb16(four), x1 = es_sxtb16_ror8(four);
      ES_GEMV_WEIGHTS(w, narrow, x0, x1, a0, a1);
    }
    out[oc] = es_requantize_q(a0, q0, act_min, act_max);
    if (other) out[oc + 1] = es_requantize_q(a1, q1, act_min, act_max);
  }
}

ES_ALWAYS_INLINE void es_fully_connected_s8(const int8_t *in, int8_t *out, int32_t *scratch, const int32_t *packed,
                                            const int32_t *table, const int32_t rows, const int32_t depth,
                                            const int32_t channels, const int32_t narrow, const int32_t act_min,
                                            const int32_t act_max) {
  int32_t r;
  for (r = 0; r + 1 < rows; r += 2) {
    es_widen_pair_s8(in + r * depth, in + (r + 1) * depth, scratch, depth);
    es_gemm_pair_s8(scratch, packed, table, out + r * channels, out + (r + 1) * channels, 1, depth, channels, narrow,
                    act_min, act_max);
  }
  if (r < rows) {
    es_gemv_s8(in + r * depth, packed, table, out + r * channels, depth, channels, narrow, act_min, act_max);
  }
}

#endif
