/* PRELU on int8, with TFLM's reference arithmetic: a non-negative input (after its offset)
 * is requantized by input scale / output scale, a negative one is multiplied by its alpha
 * (after alpha's offset) and requantized by input scale x alpha scale / output scale.
 * alpha repeats every alpha_count elements: its shape is the input's trailing dimensions
 * (the generator checks this), usually one value per channel. */
#include "es_fixedpoint.h"
#include "es_kernels.h"

void es_prelu(const es_prelu_params *p, const int8_t *in, int8_t *out) {
  int32_t i, a = 0;
  for (i = 0; i < p->count; ++i) {
    const int32_t x = p->in_offset + in[i];
    int32_t y;
    if (x >= 0) {
      y = es_mul_by_qm(x, p->multiplier_pos, p->shift_pos);
    } else {
      y = es_mul_by_qm(x * (p->alpha_offset + p->alpha[a]), p->multiplier_neg, p->shift_neg);
    }
    out[i] = (int8_t)es_clamp(y + p->out_offset, -128, 127);
    if (++a == p->alpha_count) a = 0;
  }
}
