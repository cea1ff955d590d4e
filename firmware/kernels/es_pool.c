/* AVERAGE_POOL_2D and MAX_POOL_2D, int8 and int16 (TFLite reference_integer_ops::AveragePool, MaxPool). */
#include "es_fixedpoint.h"
#include "es_kernels.h"

/* One loop for both element types (C99 has no templates). */
#define ES_POOL_BODY(T, LOWEST)                                                                                \
  do {                                                                                                         \
    int32_t b, oy, ox, c;                                                                                      \
    for (b = 0; b < p->batches; ++b) {                                                                         \
      const T *image = in + b * p->in_h * p->in_w * p->channels;                                               \
      T *result = out + b * p->out_h * p->out_w * p->channels;                                                 \
      for (oy = 0; oy < p->out_h; ++oy) {                                                                      \
        const int32_t y0 = oy * p->stride_h - p->pad_h;                                                        \
        const int32_t ky0 = y0 < 0 ? -y0 : 0;                                                                  \
        const int32_t ky1 = p->in_h - y0 < p->k_h ? p->in_h - y0 : p->k_h;                                     \
        for (ox = 0; ox < p->out_w; ++ox) {                                                                    \
          const int32_t x0 = ox * p->stride_w - p->pad_w;                                                      \
          const int32_t kx0 = x0 < 0 ? -x0 : 0;                                                                \
          const int32_t kx1 = p->in_w - x0 < p->k_w ? p->in_w - x0 : p->k_w;                                   \
          for (c = 0; c < p->channels; ++c) {                                                                  \
            int32_t acc = average ? 0 : LOWEST, count = 0, ky, kx;                                             \
            for (ky = ky0; ky < ky1; ++ky) {                                                                   \
              for (kx = kx0; kx < kx1; ++kx) {                                                                 \
                const int32_t v = image[((y0 + ky) * p->in_w + x0 + kx) * p->channels + c];                    \
                if (average) acc += v; else if (v > acc) acc = v;                                              \
                ++count;                                                                                       \
              }                                                                                                \
            }                                                                                                  \
            if (average) {                                                                                     \
              if (count == 0) count = 1;  /* the reference kernel fails here; a valid plan never gets here */  \
              /* Division rounding half away from zero, as the reference kernel does. */                       \
              acc = acc > 0 ? (acc + count / 2) / count : (acc - count / 2) / count;                           \
            }                                                                                                  \
            result[(oy * p->out_w + ox) * p->channels + c] = (T)es_clamp(acc, p->act_min, p->act_max);         \
          }                                                                                                    \
        }                                                                                                      \
      }                                                                                                        \
    }                                                                                                          \
  } while (0)

static void pool(const es_pool_params *p, const int8_t *in, int8_t *out, int average) {
  ES_POOL_BODY(int8_t, -128);
}

static void pool16(const es_pool_params *p, const int16_t *in, int16_t *out, int average) {
  ES_POOL_BODY(int16_t, -32768);
}

void es_average_pool(const es_pool_params *p, const int8_t *in, int8_t *out) { pool(p, in, out, 1); }
void es_max_pool(const es_pool_params *p, const int8_t *in, int8_t *out) { pool(p, in, out, 0); }
void es_average_pool_s16(const es_pool_params *p, const int16_t *in, int16_t *out) { pool16(p, in, out, 1); }
void es_max_pool_s16(const es_pool_params *p, const int16_t *in, int16_t *out) { pool16(p, in, out, 0); }
