/* TRANSPOSE_CONV, int8 with per-channel requantization: TFLite's
 * reference_integer_ops::TransposeConv arithmetic.
 *
 * TFLM scatters each input pixel into an int32 accumulator per output element (4 bytes
 * of scratch per output byte). This gathers instead: each output element sums the input
 * pixels that reach it, in one int32 register, and is written once. The sums are the same
 * integers, so the result is bit-exact, and no scratch is needed. */
#include <stddef.h>

#include "es_fixedpoint.h"
#include "es_kernels.h"

void es_transpose_conv2d(const es_conv_params *p, const int8_t *in, int8_t *out) {
  int32_t b, oy, ox, oc;
  for (b = 0; b < p->batches; ++b) {
    const int8_t *image = in + (int32_t)b * p->in_h * p->in_w * p->in_c;
    for (oy = 0; oy < p->out_h; ++oy) {
      for (ox = 0; ox < p->out_w; ++ox) {
        for (oc = 0; oc < p->out_c; ++oc) {
          const int8_t *filter = p->filter + oc * p->k_h * p->k_w * p->in_c;
          int32_t acc = 0, ky, kx, ic;
          for (ky = 0; ky < p->k_h; ++ky) {
            /* Input row iy reaches output row iy * stride - pad + ky. */
            const int32_t ty = oy + p->pad_h - ky;
            int32_t iy;
            if (ty < 0 || ty % p->stride_h) continue;
            iy = ty / p->stride_h;
            if (iy >= p->in_h) continue;
            for (kx = 0; kx < p->k_w; ++kx) {
              const int32_t tx = ox + p->pad_w - kx;
              const int8_t *pixel, *weights;
              int32_t ix;
              if (tx < 0 || tx % p->stride_w) continue;
              ix = tx / p->stride_w;
              if (ix >= p->in_w) continue;
              pixel = image + (iy * p->in_w + ix) * p->in_c;
              weights = filter + (ky * p->k_w + kx) * p->in_c;
              for (ic = 0; ic < p->in_c; ++ic) acc += weights[ic] * (pixel[ic] + p->in_offset);
            }
          }
          if (p->bias) acc += p->bias[oc];
          acc = es_mul_by_qm(acc, p->multiplier[oc], p->shift[oc]) + p->out_offset;
          *out++ = (int8_t)es_clamp(acc, p->act_min, p->act_max);
        }
      }
    }
  }
}

/* int16 activations, int8 weights (TFLM's TransposeConv for int16): a 64-bit accumulator and
 * an int64 bias (TFLM widens an int16 one first; the generator does that here), requantized
 * with TFLite's 64-bit multiplier. Gathered as above. */
void es_transpose_conv2d_s16(const es_conv_params *p, const int16_t *in, int16_t *out) {
  int32_t b, oy, ox, oc;
  for (b = 0; b < p->batches; ++b) {
    const int16_t *image = in + (int32_t)b * p->in_h * p->in_w * p->in_c;
    for (oy = 0; oy < p->out_h; ++oy) {
      for (ox = 0; ox < p->out_w; ++ox) {
        for (oc = 0; oc < p->out_c; ++oc) {
          const int8_t *filter = p->filter + oc * p->k_h * p->k_w * p->in_c;
          int64_t acc = 0;
          int32_t ky, kx, ic;
          for (ky = 0; ky < p->k_h; ++ky) {
            const int32_t ty = oy + p->pad_h - ky;
            int32_t iy;
            if (ty < 0 || ty % p->stride_h) continue;
            iy = ty / p->stride_h;
            if (iy >= p->in_h) continue;
            for (kx = 0; kx < p->k_w; ++kx) {
              const int32_t tx = ox + p->pad_w - kx;
              const int16_t *pixel;
              const int8_t *weights;
              int32_t ix;
              if (tx < 0 || tx % p->stride_w) continue;
              ix = tx / p->stride_w;
              if (ix >= p->in_w) continue;
              pixel = image + (iy * p->in_w + ix) * p->in_c;
              weights = filter + (ky * p->k_w + kx) * p->in_c;
              for (ic = 0; ic < p->in_c; ++ic) acc += weights[ic] * pixel[ic];
            }
          }
          *out++ = es_requantize_s16(p->act_min, p->act_max, 1, NULL, p->bias64, acc, oc, p->multiplier[oc],
                                     p->shift[oc]);
        }
      }
    }
  }
}
