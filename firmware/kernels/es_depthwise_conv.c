/* DEPTHWISE_CONV_2D, int8 per-channel (TFLite reference_integer_ops::DepthwiseConvPerChannel). */
#include "es_fixedpoint.h"
#include "es_kernels.h"

static int8_t requantize(const es_conv_params *p, int32_t acc, int32_t channel) {
  if (p->bias) acc += p->bias[channel];
  acc = es_mul_by_qm(acc, p->multiplier[channel], p->shift[channel]) + p->out_offset;
  return (int8_t)es_clamp(acc, p->act_min, p->act_max);
}

void es_depthwise_conv2d(const es_conv_params *p, const int8_t *in, int8_t *out) {
  int32_t b, oy, ox, ic, m;
  for (b = 0; b < p->batches; ++b) {
    const int8_t *image = in + b * p->in_h * p->in_w * p->in_c;
    for (oy = 0; oy < p->out_h; ++oy) {
      const int32_t y0 = oy * p->stride_h - p->pad_h;
      for (ox = 0; ox < p->out_w; ++ox) {
        const int32_t x0 = ox * p->stride_w - p->pad_w;
        for (ic = 0; ic < p->in_c; ++ic) {
          for (m = 0; m < p->depth_multiplier; ++m) {
            const int32_t oc = ic * p->depth_multiplier + m;
            int32_t acc = 0, ky, kx;
            for (ky = 0; ky < p->k_h; ++ky) {
              const int32_t y = y0 + ky * p->dil_h;
              if (y < 0 || y >= p->in_h) continue;
              for (kx = 0; kx < p->k_w; ++kx) {
                const int32_t x = x0 + kx * p->dil_w;
                if (x < 0 || x >= p->in_w) continue;
                acc += p->filter[(ky * p->k_w + kx) * p->out_c + oc] *
                       (image[(y * p->in_w + x) * p->in_c + ic] + p->in_offset);
              }
            }
            *out++ = requantize(p, acc, oc);
          }
        }
      }
    }
  }
}

void es_depthwise_conv2d_inplace(const es_conv_params *p, const int8_t *in, int8_t *out, int8_t *plane) {
  const int32_t c_count = p->in_c;
  int32_t c, i, oy, ox;
  for (c = 0; c < c_count; ++c) {
    /* Output channel c only overwrites bytes of input channel c, which are copied out
     * first: the channel counts are equal and the output starts at the input's start or
     * ends at its end, both a whole number of pixels away. */
    for (i = 0; i < p->in_h * p->in_w; ++i) plane[i] = in[i * c_count + c];
    for (oy = 0; oy < p->out_h; ++oy) {
      const int32_t y0 = oy * p->stride_h - p->pad_h;
      for (ox = 0; ox < p->out_w; ++ox) {
        const int32_t x0 = ox * p->stride_w - p->pad_w;
        int32_t acc = 0, ky, kx;
        for (ky = 0; ky < p->k_h; ++ky) {
          const int32_t y = y0 + ky * p->dil_h;
          if (y < 0 || y >= p->in_h) continue;
          for (kx = 0; kx < p->k_w; ++kx) {
            const int32_t x = x0 + kx * p->dil_w;
            if (x < 0 || x >= p->in_w) continue;
            acc += p->filter[(ky * p->k_w + kx) * c_count + c] * (plane[y * p->in_w + x] + p->in_offset);
          }
        }
        out[(oy * p->out_w + ox) * c_count + c] = requantize(p, acc, c);
      }
    }
  }
}

/* int16 activations, int8 weights (reference_integer_ops::DepthwiseConvPerChannel for int16,
 * whose bias is int64): no offsets, a 64-bit accumulator. */
void es_depthwise_conv2d_s16(const es_conv_params *p, const int16_t *in, int16_t *out) {
  int32_t b, oy, ox, ic, m;
  for (b = 0; b < p->batches; ++b) {
    const int16_t *image = in + b * p->in_h * p->in_w * p->in_c;
    for (oy = 0; oy < p->out_h; ++oy) {
      const int32_t y0 = oy * p->stride_h - p->pad_h;
      for (ox = 0; ox < p->out_w; ++ox) {
        const int32_t x0 = ox * p->stride_w - p->pad_w;
        for (ic = 0; ic < p->in_c; ++ic) {
          for (m = 0; m < p->depth_multiplier; ++m) {
            const int32_t oc = ic * p->depth_multiplier + m;
            int64_t acc = 0;
            int32_t ky, kx;
            for (ky = 0; ky < p->k_h; ++ky) {
              const int32_t y = y0 + ky * p->dil_h;
              if (y < 0 || y >= p->in_h) continue;
              for (kx = 0; kx < p->k_w; ++kx) {
                const int32_t x = x0 + kx * p->dil_w;
                if (x < 0 || x >= p->in_w) continue;
                acc += p->filter[(ky * p->k_w + kx) * p->out_c + oc] * image[(y * p->in_w + x) * p->in_c + ic];
              }
            }
            *out++ = es_requantize_s16(p->act_min, p->act_max, p->acc64, p->bias, p->bias64, acc, oc,
                                       p->multiplier[oc], p->shift[oc]);
          }
        }
      }
    }
  }
}
