/* A 1x1 convolution streamed into the depthwise convolution that reads it (MobileNet's expand
 * then stride-2 step, where the expanded tensor is the largest of the network): the 1x1's
 * output rows go to a ring of k_h rows, each computed once when the depthwise first needs it,
 * so that tensor never exists whole. The generator streams a pair only when the depthwise
 * shrinks the map and nothing else reads the 1x1's output (converters/mcu_c/specialise.py).
 *
 * ``scratch``: the ring (k_h * in_w * mid bytes), then the 1x1's widened pixel pair
 * (4 * depth bytes, word-aligned). Output rows are written first row first, or last row first
 * when the output lies after the input (written over its end; the 1x1 rows are then computed
 * last row first too). The generator lets the output start where the input starts, or end
 * where it ends, only where no row it writes holds input a later 1x1 row still reads. */
#ifndef ES_STREAM_H
#define ES_STREAM_H

#include "es_depthwise.h"
#include "es_pointwise.h"

ES_ALWAYS_INLINE void es_pointwise_depthwise_s8(
    const int8_t *in, int8_t *out, int8_t *scratch, const int32_t *packed1, const int32_t *table1,
    const int32_t *packed2, const int32_t *table2, const int32_t in_h, const int32_t in_w, const int32_t depth,
    const int32_t mid, const int32_t narrow, const int32_t act_min1, const int32_t act_max1, const int32_t k_h,
    const int32_t k_w, const int32_t stride_h, const int32_t stride_w, const int32_t pad_h, const int32_t pad_w,
    const int32_t out_h, const int32_t out_w, const int32_t zero_point4, const int32_t act_min2,
    const int32_t act_max2) {
  const int32_t row_bytes = in_w * mid;
  int8_t *ring = scratch;
  int32_t *widened = (int32_t *)(void *)(scratch + k_h * row_bytes);  /* the generator keeps it word-aligned */
  const int32_t reverse = out > in;
  int32_t next = 0;  /* first row first: the next 1x1 row to compute */
  int32_t lowest = (out_h - 1) * stride_h - pad_h + k_h;  /* last row first: the last 1x1 row computed */
  int32_t i, t;
  if (lowest > in_h) {
    lowest = in_h;
  }
  for (i = 0; i < out_h; ++i) {
    const int32_t oy = reverse ? out_h - 1 - i : i;
    const int32_t y0 = oy * stride_h - pad_h;
    const int8_t *rows[ES_DEPTHWISE_MAX_K];
    if (reverse) {
      while (lowest > 0 && lowest > y0) {
        --lowest;
        es_pointwise_s8(in + lowest * in_w * depth, ring + (lowest % k_h) * row_bytes, widened, packed1, table1,
                        in_w, depth, mid, narrow, act_min1, act_max1);
      }
    } else {
      for (; next < in_h && next < y0 + k_h; ++next) {
        es_pointwise_s8(in + next * in_w * depth, ring + (next % k_h) * row_bytes, widened, packed1, table1, in_w,
                        depth, mid, narrow, act_min1, act_max1);
      }
    }
    for (t = 0; t < k_h; ++t) {
      const int32_t y = y0 + t;
      rows[t] = y < 0 || y >= in_h ? NULL : ring + (y % k_h) * row_bytes;
    }
    es_depthwise_row_s8(rows, out + oy * out_w * mid, packed2, table2, in_w, mid, k_h, k_w, stride_w, pad_w, out_w,
                        zero_point4, 0, act_min2, act_max2);
  }
}

#endif
