/* CONV_2D 1x1, stride 1, no padding, one image, int8: the kernel the generator specialises
 * for each such layer (converters/mcu_c/specialise.py).
 *
 * The generated code calls it from one small function per layer with that layer's sizes as
 * constants, and it is always inlined there, so every loop bound is a constant. Two pixels
 * times two output channels per pass; per four input channels, two LDRD bring the two
 * pixels' widened values, two more the two channels' weights, and eight SMLAD do sixteen
 * multiply-accumulates. Prepared offline for it:
 *   - ``packed``: the weights widened to int16 lane pairs, per pair of output channels (an
 *     odd last channel paired with itself), per four input channels k..k+3: channel one's
 *     (w[k], w[k+2]) and (w[k+1], w[k+3]), then channel two's; or, for a layer given int8
 *     weights (``narrow``: half the flash, where the profile's would not hold the int16 ones),
 *     channel one's four bytes w[k..k+3] then channel two's, widened in the loop (SXTB16:
 *     four more instructions per sixteen multiply-accumulates);
 *   - ``table``: per output channel {bias - input_zero_point * sum(w), M, Cc, e}
 *     (es_requantize_q), so the input offset costs nothing per multiply.
 * ``scratch`` holds the two pixels widened the same way, interleaved per four channels.
 *
 * In place: both pixels are widened into ``scratch`` before either output is written, so the
 * output may overwrite the input as the portable in-place 1x1 allows (each output pixel
 * ends at or before the next input pixel starts). */
#ifndef ES_POINTWISE_H
#define ES_POINTWISE_H

#include "es_dsp.h"

/* Two pixels' ``depth`` bytes (a multiple of 4) as int16 lane pairs: per four channels,
 * pixel a's (x[k], x[k+2]) and (x[k+1], x[k+3]), then pixel b's. */
ES_ALWAYS_INLINE void es_widen_pair_s8(const int8_t *a, const int8_t *b, int32_t *words, const int32_t depth) {
  int32_t k;
  for (k = 0; k < depth; k += 4, words += 4) {
    const int32_t xa = es_read_s8x4(a + k), xb = es_read_s8x4(b + k);
    words[0] = es_sxtb16(xa);
    words[1] = es_sxtb16_ror8(xa);
    words[2] = es_sxtb16(xb);
    words[3] = es_sxtb16_ror8(xb);
  }
}

/* Every output channel of two pixels whose inputs ``x`` holds widened (es_widen_pair_s8),
 * written to out0 and, when ``second``, out1. */
ES_ALWAYS_INLINE void es_gemm_pair_s8(const int32_t *x, const int32_t *packed, const int32_t *table, int8_t *out0,
                                      int8_t *out1, const int32_t second, const int32_t depth, const int32_t channels,
                                      const int32_t narrow, const int32_t act_min, const int32_t act_max) {
  const int32_t *w = packed;
  int32_t oc, g;
  for (oc = 0; oc < channels; oc += 2) {
    const int32_t other = oc + 1 < channels;  /* an odd last channel: computed twice, stored once */
    const int32_t *q0 = table + 4 * oc;
    const int32_t *q1 = q0 + 4 * other;
    const int32_t *xs = x;
    int32_t a00 = q0[0], a01 = q0[0], a10 = q1[0], a11 = q1[0];
#pragma GCC unroll 2
    for (g = 0; g < depth; g += 4) {
      int32_t xa0, xa1, xb0, xb1, w0, w1;
      es_load_pair(&xs, &xa0, &xa1);
      if (narrow) {  /* both channels' four int8 weights in one pair of words */
        int32_t c0, c1;
        es_load_pair(&w, &c0, &c1);
        w0 = es_sxtb16(c0);
        w1 = es_sxtb16_ror8(c0);
        a00 = es_smlad(w1, xa1, es_smlad(w0, xa0, a00));
        es_load_pair(&xs, &xb0, &xb1);
        a01 = es_smlad(w1, xb1, es_smlad(w0, xb0, a01));
        w0 = es_sxtb16(c1);
        w1 = es_sxtb16_ror8(c1);
      } else {
        es_load_pair(&w, &w0, &w1);
        a00 = es_smlad(w1, xa1, es_smlad(w0, xa0, a00));
        es_load_pair(&xs, &xb0, &xb1);
        a01 = es_smlad(w1, xb1, es_smlad(w0, xb0, a01));
        es_load_pair(&w, &w0, &w1);
      }
      a10 = es_smlad(w1, xa1, es_smlad(w0, xa0, a10));
      a11 = es_smlad(w1, xb1, es_smlad(w0, xb0, a11));
    }
    out0[oc] = es_requantize_q(a00, q0, act_min, act_max);
    if (other) out0[oc + 1] = es_requantize_q(a10, q1, act_min, act_max);
    if (second) {
      out1[oc] = es_requantize_q(a01, q0, act_min, act_max);
      if (other) out1[oc + 1] = es_requantize_q(a11, q1, act_min, act_max);
    }
  }
}

ES_ALWAYS_INLINE void es_pointwise_s8(const int8_t *in, int8_t *out, int32_t *scratch, const int32_t *packed,
                                      const int32_t *table, const int32_t pixels, const int32_t depth,
                                      const int32_t channels, const int32_t narrow, const int32_t act_min,
                                      const int32_t act_max) {
  int32_t px;
  for (px = 0; px < pixels; px += 2) {
    /* An odd last pixel is widened twice and its second result dropped. */
    const int32_t second = px + 1 < pixels;
    es_widen_pair_s8(in + px * depth, in + (px + second) * depth, scratch, depth);
    es_gemm_pair_s8(scratch, packed, table, out + px * channels, out + (px + 1) * channels, second, depth, channels,
                    narrow, act_min, act_max);
  }
}

#endif
