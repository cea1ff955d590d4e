/* CONV_2D, int8 with per-channel requantization (TFLite reference_integer_ops::ConvPerChannel). */
#include <string.h>

#include "es_fixedpoint.h"
#include "es_kernels.h"

static int8_t requantize(const es_conv_params *p, int32_t acc, int32_t channel) {
  if (p->bias) acc += p->bias[channel];
  acc = es_mul_by_qm(acc, p->multiplier[channel], p->shift[channel]) + p->out_offset;
  return (int8_t)es_clamp(acc, p->act_min, p->act_max);
}

void es_conv2d(const es_conv_params *p, const int8_t *in, int8_t *out) {
  const int32_t groups = p->in_c / p->k_c;
  const int32_t per_group = p->out_c / groups;
  int32_t b, oy, ox, oc;
  for (b = 0; b < p->batches; ++b) {
    const int8_t *image = in + (int32_t)b * p->in_h * p->in_w * p->in_c;
    for (oy = 0; oy < p->out_h; ++oy) {
      const int32_t y0 = oy * p->stride_h - p->pad_h;
      for (ox = 0; ox < p->out_w; ++ox) {
        const int32_t x0 = ox * p->stride_w - p->pad_w;
        for (oc = 0; oc < p->out_c; ++oc) {
          const int8_t *filter = p->filter + oc * p->k_h * p->k_w * p->k_c;
          const int32_t channel0 = (oc / per_group) * p->k_c;
          int32_t acc = 0, ky, kx, ic;
          for (ky = 0; ky < p->k_h; ++ky) {
            const int32_t y = y0 + ky * p->dil_h;
            if (y < 0 || y >= p->in_h) continue;  /* zero padding: the term is skipped */
            for (kx = 0; kx < p->k_w; ++kx) {
              const int32_t x = x0 + kx * p->dil_w;
              const int8_t *pixel, *weights;
              if (x < 0 || x >= p->in_w) continue;
              pixel = image + (y * p->in_w + x) * p->in_c + channel0;
              weights = filter + (ky * p->k_w + kx) * p->k_c;
              for (ic = 0; ic < p->k_c; ++ic) acc += weights[ic] * (pixel[ic] + p->in_offset);
            }
          }
          *out++ = requantize(p, acc, oc);
        }
      }
    }
  }
}

void es_conv2d_1x1_inplace(const es_conv_params *p, const int8_t *in, int8_t *out, int8_t *pixel) {
  const int32_t pixels = p->batches * p->in_h * p->in_w;
  int32_t px, oc, ic;
  for (px = 0; px < pixels; ++px) {
    /* The output pixel may overwrite this input pixel: read it out first. Pixels after it
     * lie beyond the output written so far (the generator places out to make sure). */
    memcpy(pixel, in + px * p->in_c, (size_t)p->in_c);
    for (oc = 0; oc < p->out_c; ++oc) {
      const int8_t *weights = p->filter + oc * p->in_c;
      int32_t acc = 0;
      for (ic = 0; ic < p->in_c; ++ic) acc += weights[ic] * (pixel[ic] + p->in_offset);
      out[px * p->out_c + oc] = requantize(p, acc, oc);
    }
  }
}

void es_conv2d_rows_inplace(const es_conv_params *p, const int8_t *in, int8_t *out, int8_t *rows) {
  /* Stride 1, same size and channels: output row y is written over input row y. The rows
   * it overwrites are still needed by the next pad_h output rows, so each input row is
   * copied into a ring of pad_h + 1 rows first; rows below y are read from the ring, rows
   * above y from the buffer, where they are still intact. */
  const int32_t row_bytes = p->in_w * p->in_c;
  const int32_t slots = p->pad_h + 1;
  int32_t y, ox, oc;
  for (y = 0; y < p->out_h; ++y) {
    memcpy(rows + (y % slots) * row_bytes, in + y * row_bytes, (size_t)row_bytes);
    for (ox = 0; ox < p->out_w; ++ox) {
      const int32_t x0 = ox - p->pad_w;
      for (oc = 0; oc < p->out_c; ++oc) {
        const int8_t *filter = p->filter + oc * p->k_h * p->k_w * p->k_c;
        int32_t acc = 0, ky, kx, ic;
        for (ky = 0; ky < p->k_h; ++ky) {
          const int32_t iy = y - p->pad_h + ky;
          const int8_t *row;
          if (iy < 0 || iy >= p->in_h) continue;
          row = iy <= y ? rows + (iy % slots) * row_bytes : in + iy * row_bytes;
          for (kx = 0; kx < p->k_w; ++kx) {
            const int32_t ix = x0 + kx;
            const int8_t *pixel, *weights;
            if (ix < 0 || ix >= p->in_w) continue;
            pixel = row + ix * p->in_c;
            weights = filter + (ky * p->k_w + kx) * p->k_c;
            for (ic = 0; ic < p->k_c; ++ic) acc += weights[ic] * (pixel[ic] + p->in_offset);
          }
        }
        out[y * row_bytes + ox * p->out_c + oc] = requantize(p, acc, oc);
      }
    }
  }
}

/* int16 activations, int8 weights (TFLite reference_integer_ops::ConvPerChannel for int16):
 * no input or output offset (the 16x8 scheme's zero points are 0), the accumulator and the
 * requantization 64-bit unless the bias is int32. */
void es_conv2d_s16(const es_conv_params *p, const int16_t *in, int16_t *out) {
  const int32_t groups = p->in_c / p->k_c;
  const int32_t per_group = p->out_c / groups;
  int32_t b, oy, ox, oc;
  for (b = 0; b < p->batches; ++b) {
    const int16_t *image = in + (int32_t)b * p->in_h * p->in_w * p->in_c;
    for (oy = 0; oy < p->out_h; ++oy) {
      const int32_t y0 = oy * p->stride_h - p->pad_h;
      for (ox = 0; ox < p->out_w; ++ox) {
        const int32_t x0 = ox * p->stride_w - p->pad_w;
        for (oc = 0; oc < p->out_c; ++oc) {
          const int8_t *filter = p->filter + oc * p->k_h * p->k_w * p->k_c;
          const int32_t channel0 = (oc / per_group) * p->k_c;
          int64_t acc = 0;
          int32_t ky, kx, ic;
          for (ky = 0; ky < p->k_h; ++ky) {
            const int32_t y = y0 + ky * p->dil_h;
            if (y < 0 || y >= p->in_h) continue;
            for (kx = 0; kx < p->k_w; ++kx) {
              const int32_t x = x0 + kx * p->dil_w;
              const int16_t *pixel;
              const int8_t *weights;
              if (x < 0 || x >= p->in_w) continue;
              pixel = image + (y * p->in_w + x) * p->in_c + channel0;
              weights = filter + (ky * p->k_w + kx) * p->k_c;
              for (ic = 0; ic < p->k_c; ++ic) acc += weights[ic] * pixel[ic];  /* each product fits int32 */
            }
          }
          *out++ = es_requantize_s16(p->act_min, p->act_max, p->acc64, p->bias, p->bias64, acc, oc,
                                     p->multiplier[oc], p->shift[oc]);
        }
      }
    }
  }
}
