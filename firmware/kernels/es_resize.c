/* RESIZE_NEAREST_NEIGHBOR and RESIZE_BILINEAR on int8 NHWC (and int16), as TFLM's reference kernels
 * compute them. The generator works out, per output row and column, which input rows and
 * columns are read and (bilinear) the weight of the second in 1/1024 steps, with the
 * kernels' own integer and float32 rules (converters/mcu_c/quant.py), so the loops here
 * only gather and blend. Input and output share one quantization: TFLM does not rescale. */
#include <string.h>

#include "es_kernels.h"

void es_resize_nearest(const es_resize_params *p, const int8_t *in, int8_t *out) {
  int32_t b, y, x;
  for (b = 0; b < p->batches; ++b) {
    const int8_t *image = in + b * p->in_h * p->in_w * p->depth;
    for (y = 0; y < p->out_h; ++y) {
      const int8_t *row = image + p->y0[y] * p->in_w * p->depth;
      for (x = 0; x < p->out_w; ++x) {
        memcpy(out, row + p->x0[x] * p->depth, (size_t)p->depth);
        out += p->depth;
      }
    }
  }
}

void es_resize_bilinear(const es_resize_params *p, const int8_t *in, int8_t *out) {
  int32_t b, y, x, c;
  for (b = 0; b < p->batches; ++b) {
    const int8_t *image = in + b * p->in_h * p->in_w * p->depth;
    for (y = 0; y < p->out_h; ++y) {
      const int8_t *r0 = image + p->y0[y] * p->in_w * p->depth;
      const int8_t *r1 = image + p->y1[y] * p->in_w * p->depth;
      const int32_t fy = p->wy[y];
      for (x = 0; x < p->out_w; ++x) {
        const int32_t fx = p->wx[x];
        const int8_t *a = r0 + p->x0[x] * p->depth, *bb = r1 + p->x0[x] * p->depth;
        const int8_t *cc = r0 + p->x1[x] * p->depth, *d = r1 + p->x1[x] * p->depth;
        for (c = 0; c < p->depth; ++c) {
          /* Weights lie in (-1024, 2048) for the scales TFLite allows: |sum| < 2^30, so
           * 32 bits hold what the reference kernel sums in 64. */
          const int32_t sum = a[c] * (1024 - fy) * (1024 - fx) + bb[c] * fy * (1024 - fx) +
                              cc[c] * (1024 - fy) * fx + d[c] * fy * fx;
          /* Round half away from zero, then divide toward zero (double rounding build). */
          *out++ = (int8_t)((sum + (sum > 0 ? (1 << 19) : -(1 << 19))) / (1 << 20));
        }
      }
    }
  }
}

void es_resize_bilinear_s16(const es_resize_params *p, const int16_t *in, int16_t *out) {
  int32_t b, y, x, c;
  for (b = 0; b < p->batches; ++b) {
    const int16_t *image = in + b * p->in_h * p->in_w * p->depth;
    for (y = 0; y < p->out_h; ++y) {
      const int16_t *r0 = image + p->y0[y] * p->in_w * p->depth;
      const int16_t *r1 = image + p->y1[y] * p->in_w * p->depth;
      const int64_t fy = p->wy[y];
      for (x = 0; x < p->out_w; ++x) {
        const int64_t fx = p->wx[x];
        const int16_t *a = r0 + p->x0[x] * p->depth, *bb = r1 + p->x0[x] * p->depth;
        const int16_t *cc = r0 + p->x1[x] * p->depth, *d = r1 + p->x1[x] * p->depth;
        for (c = 0; c < p->depth; ++c) {
          /* int16 values times 2^20 of weight need 64 bits, as the reference kernel sums them. */
          const int64_t sum = a[c] * (1024 - fy) * (1024 - fx) + bb[c] * fy * (1024 - fx) +
                              cc[c] * (1024 - fy) * fx + d[c] * fy * fx;
          *out++ = (int16_t)((sum + (sum > 0 ? (1 << 19) : -(1 << 19))) / (1 << 20));
        }
      }
    }
  }
}
