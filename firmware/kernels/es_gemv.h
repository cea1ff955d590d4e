/* FULLY_CONNECTED, int8: the kernel the generator specialises for each such layer
 * (converters/mcu_c/specialise.py), with its sizes as constants.
 *
 * The weights and the per-channel table are es_pointwise.h's (a fully connected layer is a
 * 1x1 convolution over its rows): two rows at a time go through es_gemm_pair_s8, from rows
 * widened into ``scratch`` (4 * depth bytes; only a layer of two rows or more has it); a last
 * odd row (a classifier's only one) through es_gemv_s8, which widens the row's four bytes in
 * the loop, two output channels per pass (per four inputs: one LDR and two SXTB16 of the row,
 * two LDRD of weights, four SMLAD for eight multiply-accumulates), so a one-row layer needs no
 * scratch: widening its row beforehand would hold twice its input (micro_speech: 8,000 B). */
#ifndef ES_GEMV_H
#define ES_GEMV_H

#include "es_pointwise.h"

/* Every output channel of one row of ``depth`` int8 inputs. */
ES_ALWAYS_INLINE void es_gemv_s8(const int8_t *x, const int32_t *packed, const int32_t *table, int8_t *out,
                                 const int32_t depth, const int32_t channels, const int32_t narrow,
                                 const int32_t act_min, const int32_t act_max) {
  const int32_t *w = packed;
  int32_t oc, g;
  for (oc = 0; oc < channels; oc += 2) {
    const int32_t other = oc + 1 < channels;  /* an odd last channel: computed twice, stored once */
    const int32_t *q0 = table + 4 * oc;
    const int32_t *q1 = q0 + 4 * other;
    int32_t a0 = q0[0], a1 = q1[0];
#pragma GCC unroll 2
    for (g = 0; g < depth; g += 4) {
      const int32_t four = es_read_s8x4(x + g);
      const int32_t x0 = es_sxtb16(four), x1 = es_sxtb16_ror8(four);
      int32_t w0, w1;
      if (narrow) {  /* both channels' four int8 weights in one pair of words */
        int32_t c0, c1;
        es_load_pair(&w, &c0, &c1);
        a0 = es_smlad(es_sxtb16_ror8(c0), x1, es_smlad(es_sxtb16(c0), x0, a0));
        a1 = es_smlad(es_sxtb16_ror8(c1), x1, es_smlad(es_sxtb16(c1), x0, a1));
      } else {
        es_load_pair(&w, &w0, &w1);
        a0 = es_smlad(w1, x1, es_smlad(w0, x0, a0));
        es_load_pair(&w, &w0, &w1);
        a1 = es_smlad(w1, x1, es_smlad(w0, x0, a1));
      }
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
