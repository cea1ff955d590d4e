/* CONV_2D of any kernel size, stride and padding (no dilation, no groups, one image), int8:
 * the kernel the generator specialises for each such layer that is not a 1x1
 * (converters/mcu_c/specialise.py), with the layer's sizes as constants.
 *
 * Each output pixel's receptive field is copied into a column (taps row by row, each tap's
 * input channels), a tap in the padding filled with the input zero point: the zero point is
 * folded into the bias (bias - zero_point * sum(w)), so a padded tap must add w * zero_point
 * to cancel its share, as TFLite, which skips the term, implies. The column is padded to a
 * multiple of four with the zero point too, against zero weights. Two columns are then
 * widened and multiplied as es_pointwise.h does with two pixels.
 *
 * The weights are packed as es_pointwise.h's (int16, or int8 with ``narrow``).
 * ``scratch`` holds the two int8 columns (2 * depth bytes) and then their widened words
 * (4 * depth bytes); ``depth`` is the padded column length.
 *
 * ``ring`` (not NULL: stride 1, an odd kernel with "same" padding, as many output channels as
 * input ones) lets the output be written over the input, row by row: each input row is copied
 * into a ring of pad_h + 1 rows before its output row overwrites it, and the window reads the
 * rows at and above the current one from the ring, those below from the input, which no output
 * row has reached yet. */
#ifndef ES_CONV_IM2COL_H
#define ES_CONV_IM2COL_H

#include "es_pointwise.h"

ES_ALWAYS_INLINE void es_im2col_s8(const int8_t *in, int8_t *column, const int32_t oy, const int32_t ox,
                                   const int32_t in_h, const int32_t in_w, const int32_t in_c, const int32_t k_h,
                                   const int32_t k_w, const int32_t stride_h, const int32_t stride_w,
                                   const int32_t pad_h, const int32_t pad_w, const int32_t depth,
                                   const int8_t zero_point) {
  const int32_t y0 = oy * stride_h - pad_h, x0 = ox * stride_w - pad_w;
  int32_t ky, kx, i;
  int8_t *at = column;
  for (ky = 0; ky < k_h; ++ky) {
    const int32_t y = y0 + ky;
    for (kx = 0; kx < k_w; ++kx, at += in_c) {
      const int32_t x = x0 + kx;
      if (y >= 0 && y < in_h && x >= 0 && x < in_w) {
        memcpy(at, in + (y * in_w + x) * in_c, (size_t)in_c);
      } else {
        for (i = 0; i < in_c; ++i) at[i] = zero_point;
      }
    }
  }
  for (i = k_h * k_w * in_c; i < depth; ++i) column[i] = zero_point;
}

#define ES_IM2COL_RING_MAX_K 7  /* rows[] of the ring path */

/* One pixel's column from the window's input rows (``rows``, NULL in the padding). */
ES_ALWAYS_INLINE void es_im2col_rows_s8(const int8_t *const *rows, int8_t *column, const int32_t ox,
                                        const int32_t in_w, const int32_t in_c, const int32_t k_h, const int32_t k_w,
                                        const int32_t pad_w, const int32_t depth, const int8_t zero_point) {
  const int32_t x0 = ox - pad_w;
  int32_t ky, kx, i;
  int8_t *at = column;
  for (ky = 0; ky < k_h; ++ky) {
    for (kx = 0; kx < k_w; ++kx, at += in_c) {
      const int32_t x = x0 + kx;
      if (rows[ky] != NULL && x >= 0 && x < in_w) {
        memcpy(at, rows[ky] + x * in_c, (size_t)in_c);
      } else {
        for (i = 0; i < in_c; ++i) at[i] = zero_point;
      }
    }
  }
  for (i = k_h * k_w * in_c; i < depth; ++i) column[i] = zero_point;
}

ES_ALWAYS_INLINE void es_conv_im2col_s8(const int8_t *in, int8_t *out, int8_t *scratch, const int32_t *packed,
                                        const int32_t *table, int8_t *ring, const int32_t in_h, const int32_t in_w,
                                        const int32_t in_c, const int32_t k_h, const int32_t k_w,
                                        const int32_t stride_h, const int32_t stride_w, const int32_t pad_h,
                                        const int32_t pad_w, const int32_t out_h, const int32_t out_w,
                                        const int32_t depth, const int32_t channels, const int8_t zero_point,
                                        const int32_t narrow, const int32_t act_min, const int32_t act_max) {
  int8_t *columns = scratch;
  int32_t *words = (int32_t *)(void *)(scratch + 2 * depth);  /* 2 * depth is a multiple of 8 */
  const int32_t pixels = out_h * out_w;
  int32_t px;
  if (ring != NULL) {
    const int32_t row_bytes = in_w * in_c;
    int32_t oy, ox, t;
    for (oy = 0; oy < out_h; ++oy) {
      const int8_t *rows[ES_IM2COL_RING_MAX_K];
      int8_t *row_out = out + oy * row_bytes;
      memcpy(ring + (oy % (pad_h + 1)) * row_bytes, in + oy * row_bytes, (size_t)row_bytes);
      for (t = 0; t < k_h; ++t) {
        const int32_t y = oy - pad_h + t;
        rows[t] = y < 0 || y >= in_h ? NULL : y <= oy ? ring + (y % (pad_h + 1)) * row_bytes : in + y * row_bytes;
      }
      for (ox = 0; ox < out_w; ox += 2) {
        /* An odd last pixel of the row is gathered twice and its second result dropped. */
        const int32_t second = ox + 1 < out_w;
        es_im2col_rows_s8(rows, columns, ox, in_w, in_c, k_h, k_w, pad_w, depth, zero_point);
        es_im2col_rows_s8(rows, columns + depth, ox + second, in_w, in_c, k_h, k_w, pad_w, depth, zero_point);
        es_widen_pair_s8(columns, columns + depth, words, depth);
        es_gemm_pair_s8(words, packed, table, row_out + ox * channels, row_out + (ox + 1) * channels, second, depth,
                        channels, narrow, act_min, act_max);
      }
    }
    return;
  }
  for (px = 0; px < pixels; px += 2) {
    /* An odd last pixel is gathered twice and its second result dropped. */
    const int32_t second = px + 1 < pixels, next = px + second;
    es_im2col_s8(in, columns, px / out_w, px % out_w, in_h, in_w, in_c, k_h, k_w, stride_h, stride_w, pad_h, pad_w,
                 depth, zero_point);
    es_im2col_s8(in, columns + depth, next / out_w, next % out_w, in_h, in_w, in_c, k_h, k_w, stride_h, stride_w,
                 pad_h, pad_w, depth, zero_point);
    es_widen_pair_s8(columns, columns + depth, words, depth);
    es_gemm_pair_s8(words, packed, table, out + px * channels, out + (px + 1) * channels, second, depth, channels,
                    narrow, act_min, act_max);
  }
}

#endif
