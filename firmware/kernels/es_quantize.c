/* QUANTIZE from int8 to int8, or to uint8 for a model output, and between int8 and int16
 * (TFLite reference Requantize). */
#include "es_fixedpoint.h"
#include "es_kernels.h"

void es_requantize(const es_requantize_params *p, const int8_t *in, int8_t *out) {
  int32_t i;
  for (i = 0; i < p->count; ++i) {
    const int32_t value = es_mul_by_qm(in[i] - p->in_zero_point, p->multiplier, p->shift) + p->out_zero_point;
    if (p->out_unsigned) {
      ((uint8_t *)out)[i] = (uint8_t)es_clamp(value, 0, 255); /* bytes may be read as any character type */
    } else {
      out[i] = (int8_t)es_clamp(value, -128, 127);
    }
  }
}

void es_requantize16(const es_requantize16_params *p, const void *in, void *out) {
  int32_t i;
  for (i = 0; i < p->count; ++i) {
    const int32_t x = p->in_bits == 16 ? ((const int16_t *)in)[i] : ((const int8_t *)in)[i];
    const int32_t value = es_clamp(es_mul_by_qm(x - p->in_zero_point, p->multiplier, p->shift) + p->out_zero_point,
                                   p->act_min, p->act_max);
    if (p->out_bits == 16) {
      ((int16_t *)out)[i] = (int16_t)value;
    } else {
      ((int8_t *)out)[i] = (int8_t)value;
    }
  }
}
