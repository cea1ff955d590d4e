/* MEAN over any of 4 axes, int8 and int16 (LiteRT's reference QuantizedMeanOrSum): the sum
 * minus the zero points, times a multiplier that folds in 1 / count. */
#include "es_fixedpoint.h"
#include "es_kernels.h"

/* One loop for both element types (C99 has no templates). */
#define ES_MEAN_BODY(T, LO, HI)                                                                                    \
  do {                                                                                                             \
    int32_t outer[4], inner[4], a, o0, o1, o2, o3, r0, r1, r2, r3;                                                 \
    for (a = 0; a < 4; ++a) {                                                                                      \
      outer[a] = p->reduce[a] ? 1 : p->dims[a];                                                                    \
      inner[a] = p->reduce[a] ? p->dims[a] : 1;                                                                    \
    }                                                                                                              \
    for (o0 = 0; o0 < outer[0]; ++o0)                                                                              \
      for (o1 = 0; o1 < outer[1]; ++o1)                                                                            \
        for (o2 = 0; o2 < outer[2]; ++o2)                                                                          \
          for (o3 = 0; o3 < outer[3]; ++o3) {                                                                      \
            int32_t sum = 0, value;                                                                                \
            for (r0 = 0; r0 < inner[0]; ++r0)                                                                      \
              for (r1 = 0; r1 < inner[1]; ++r1)                                                                    \
                for (r2 = 0; r2 < inner[2]; ++r2)                                                                  \
                  for (r3 = 0; r3 < inner[3]; ++r3)                                                                \
                    sum += in[(o0 + r0) * p->strides[0] + (o1 + r1) * p->strides[1] +                              \
                              (o2 + r2) * p->strides[2] + (o3 + r3) * p->strides[3]];                              \
            value = es_mul_by_qm(sum - p->in_zero_point * p->count, p->multiplier, p->shift) + p->out_zero_point;  \
            *out++ = (T)es_clamp(value, LO, HI);                                                                   \
          }                                                                                                        \
  } while (0)

void es_mean(const es_mean_params *p, const int8_t *in, int8_t *out) { ES_MEAN_BODY(int8_t, -128, 127); }

void es_mean_s16(const es_mean_params *p, const int16_t *in, int16_t *out) { ES_MEAN_BODY(int16_t, -32768, 32767); }
