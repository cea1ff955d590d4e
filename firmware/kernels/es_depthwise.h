/* DEPTHWISE_CONV_2D up to 5x5, depth multiplier 1, no dilation, one image, int8: the kernel
 * the generator specialises for each such layer (converters/mcu_c/specialise.py), called with
 * the layer's sizes, kernel size, strides and padding as constants and always inlined there.
 *
 * Four channels at a time: one load brings a pixel's four input bytes, SXTB16 and
 * SXTB16 ROR 8 widen them into (c, c+2) and (c+1, c+3), and SMLABB/SMLATT multiply each lane
 * by its own channel's weight. Prepared offline:
 *   - ``packed``: per group of four channels, per tap (row by row), the words
 *     (w[c], w[c+2]) and (w[c+1], w[c+3]) as int16 lane pairs: 2 k_h k_w words a group;
 *   - ``table``: per channel {bias - input_zero_point * sum(w), M, Cc, e} (es_requantize_q);
 *   both padded to whole groups with zeros when the channels are not a multiple of four: the
 *   last group then reads only its own channels' bytes and stores only their outputs.
 * With the input zero point folded into the bias, a tap that falls in the padding must add
 * w * zero_point (TFLite skips the term, which is w * (zero_point + input_offset) = 0):
 * ``zero_point4`` is the zero point in all four bytes, read in place of the missing pixel.
 * Pixels whose window lies inside the image take a loop without any of those checks.
 *
 * In place (``ring`` not NULL; stride 1, output the input's size, written over it): before
 * output row y is computed, input row y is copied into a ring of pad_h + 1 rows, and rows
 * y - pad_h .. y are read from there (those above y are already overwritten, and row y is as
 * each output pixel is written), the rows below y from the buffer, which the output has not
 * reached. Without a
 * ring, an output placed where its input starts is written first pixel first, and one placed
 * where its input ends, last pixel first: the generator allows either only where every read
 * lands on bytes no output has reached yet (specialise.py). */
#ifndef ES_DEPTHWISE_H
#define ES_DEPTHWISE_H

#include "es_dsp.h"

/* One tap for four channels: the pixel's four bytes x, and the tap's two weight words read
 * from w, which moves on to the next tap's. */
#define ES_DEPTHWISE_TAP(x, w)                 \
  do {                                         \
    const int32_t even_ = es_sxtb16(x);        \
    const int32_t odd_ = es_sxtb16_ror8(x);    \
    int32_t w02_, w13_;                        \
    es_load_pair(&(w), &w02_, &w13_);          \
    acc0 = es_smlabb(even_, w02_, acc0);       \
    acc2 = es_smlatt(even_, w02_, acc2);       \
    acc1 = es_smlabb(odd_, w13_, acc1);        \
    acc3 = es_smlatt(odd_, w13_, acc3);        \
  } while (0)

/* Requantizes the first ``lanes`` (1-4) of four channels' accumulators and stores them. */
#define ES_DEPTHWISE_STORE(out, q, lanes)                                            \
  do {                                                                               \
    (out)[0] = es_requantize_q(acc0, (q), act_min, act_max);                         \
    if ((lanes) > 1) (out)[1] = es_requantize_q(acc1, (q) + 4, act_min, act_max);    \
    if ((lanes) > 2) (out)[2] = es_requantize_q(acc2, (q) + 8, act_min, act_max);    \
    if ((lanes) > 3) (out)[3] = es_requantize_q(acc3, (q) + 12, act_min, act_max);   \
  } while (0)

/* A pixel's bytes of channels g .. g + lanes - 1 (``lanes`` 1-4, a constant; the lanes past
 * them read 0): the last group of a layer whose channels are not a multiple of four must not
 * read the next pixel's bytes, or past the tensor's end. */
ES_ALWAYS_INLINE int32_t es_read_lanes(const int8_t *p, const int32_t lanes) {
  int32_t word = 0;
  if (lanes == 4) return es_read_s8x4(p);
  memcpy(&word, p, (size_t)lanes);  /* little-endian: the bytes land in the low lanes */
  return word;
}

#define ES_DEPTHWISE_MAX_K 5  /* rows[] and the 32-bit mask of taps inside the image */

/* One pixel's channels g .. g + lanes - 1 from a window inside the image (``column``: the
 * window's first byte in each row). */
ES_ALWAYS_INLINE void es_depthwise_inside(const int8_t *const *rows, int8_t *pixel_out, const int32_t *packed,
                                          const int32_t *table, const int32_t column, const int32_t g,
                                          const int32_t lanes, const int32_t channels, const int32_t k_h,
                                          const int32_t k_w, const int32_t act_min, const int32_t act_max) {
  const int32_t taps = k_h * k_w;
  const int32_t *w = packed + (g / 4) * 2 * taps;  /* moved on by each tap */
  const int32_t *q = table + 4 * g;
  int32_t acc0 = q[0], acc1 = q[4], acc2 = q[8], acc3 = q[12];
  int32_t t;
#pragma GCC unroll 25
  for (t = 0; t < taps; ++t) {
    ES_DEPTHWISE_TAP(es_read_lanes(rows[t / k_w] + column + (t % k_w) * channels + g, lanes), w);
  }
  ES_DEPTHWISE_STORE(pixel_out + g, q, lanes);
}

/* The same for a window that touches the padding: the taps in ``valid`` read the image, the
 * others the input zero point. */
ES_ALWAYS_INLINE void es_depthwise_border(const int8_t *const *rows, int8_t *pixel_out, const int32_t *packed,
                                          const int32_t *table, const int32_t x0, const int32_t valid,
                                          const int32_t g, const int32_t lanes, const int32_t channels,
                                          const int32_t k_h, const int32_t k_w, const int32_t zero_point4,
                                          const int32_t act_min, const int32_t act_max) {
  const int32_t taps = k_h * k_w;
  const int32_t *w = packed + (g / 4) * 2 * taps;  /* moved on by each tap */
  const int32_t *q = table + 4 * g;
  int32_t acc0 = q[0], acc1 = q[4], acc2 = q[8], acc3 = q[12];
  int32_t t;
#pragma GCC unroll 25
  for (t = 0; t < taps; ++t) {
    const int32_t pixel = (valid >> t) & 1 ? es_read_lanes(rows[t / k_w] + (x0 + t % k_w) * channels + g, lanes)
                                           : zero_point4;
    ES_DEPTHWISE_TAP(pixel, w);
  }
  ES_DEPTHWISE_STORE(pixel_out + g, q, lanes);
}

/* One output row from the window's input rows (``rows``, NULL in the padding), written to
 * ``out`` (the row's first pixel), its pixels last first when ``reverse``. Four channels at a
 * time, then the last one to three. */
ES_ALWAYS_INLINE void es_depthwise_row_s8(const int8_t *const *rows, int8_t *out, const int32_t *packed,
                                          const int32_t *table, const int32_t in_w, const int32_t channels,
                                          const int32_t k_h, const int32_t k_w, const int32_t stride_w,
                                          const int32_t pad_w, const int32_t out_w, const int32_t zero_point4,
                                          const int32_t reverse, const int32_t act_min, const int32_t act_max) {
  const int32_t taps = k_h * k_w;
  const int32_t tail = channels % 4, whole = channels - tail;
  int32_t j, g, t;
  for (j = 0; j < out_w; ++j) {
    const int32_t ox = reverse ? out_w - 1 - j : j;
    const int32_t x0 = ox * stride_w - pad_w;
    int8_t *pixel_out = out + ox * channels;
    /* Two loops, not one with a branch inside: GCC would hoist the weight loads both
     * branches share above it, and spill them. */
    if (rows[0] != NULL && rows[k_h - 1] != NULL && x0 >= 0 && x0 + k_w <= in_w) {
      const int32_t column = x0 * channels;
      for (g = 0; g < whole; g += 4) {
        es_depthwise_inside(rows, pixel_out, packed, table, column, g, 4, channels, k_h, k_w, act_min, act_max);
      }
      if (tail) {
        es_depthwise_inside(rows, pixel_out, packed, table, column, whole, tail, channels, k_h, k_w, act_min,
                            act_max);
      }
    } else {
      /* Which taps fall inside the image, found once for every channel of this pixel. */
      int32_t valid = 0;
      for (t = 0; t < taps; ++t) {
        const int32_t x = x0 + t % k_w;
        if (rows[t / k_w] != NULL && x >= 0 && x < in_w) valid |= 1 << t;
      }
      for (g = 0; g < whole; g += 4) {
        es_depthwise_border(rows, pixel_out, packed, table, x0, valid, g, 4, channels, k_h, k_w, zero_point4,
                            act_min, act_max);
      }
      if (tail) {
        es_depthwise_border(rows, pixel_out, packed, table, x0, valid, whole, tail, channels, k_h, k_w,
                            zero_point4, act_min, act_max);
      }
    }
  }
}

ES_ALWAYS_INLINE void es_depthwise_s8(const int8_t *in, int8_t *out, int8_t *ring, const int32_t *packed,
                                      const int32_t *table, const int32_t in_h, const int32_t in_w,
                                      const int32_t channels, const int32_t k_h, const int32_t k_w,
                                      const int32_t stride_h, const int32_t stride_w, const int32_t pad_h,
                                      const int32_t pad_w, const int32_t out_h, const int32_t out_w,
                                      const int32_t zero_point4, const int32_t act_min, const int32_t act_max) {
  const int32_t row_bytes = in_w * channels;
  const int32_t reverse = ring == NULL && out > in;
  int32_t i, t;
  for (i = 0; i < out_h; ++i) {
    const int32_t oy = reverse ? out_h - 1 - i : i;
    const int32_t y0 = oy * stride_h - pad_h;
    const int8_t *rows[ES_DEPTHWISE_MAX_K];  /* the window's input rows; NULL in the padding */
    if (ring != NULL) memcpy(ring + (oy % (pad_h + 1)) * row_bytes, in + oy * row_bytes, (size_t)row_bytes);
    for (t = 0; t < k_h; ++t) {
      const int32_t y = y0 + t;
      rows[t] = y < 0 || y >= in_h ? NULL
                : ring != NULL && y <= oy ? ring + (y % (pad_h + 1)) * row_bytes : in + y * row_bytes;
    }
    es_depthwise_row_s8(rows, out + oy * out_w * channels, packed, table, in_w, channels, k_h, k_w, stride_w, pad_w,
                        out_w, zero_point4, reverse, act_min, act_max);
  }
}

#endif
