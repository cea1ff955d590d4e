/* FULLY_CONNECTED, int8: TFLM's reference kernel (fixed-point requantization, no float). */
#include "es_fixedpoint.h"
#include "es_kernels.h"

void es_fully_connected(const es_fc_params *p, const int8_t *in, int8_t *out) {
  int32_t b, o, d;
  for (b = 0; b < p->batches; ++b) {
    const int8_t *row = in + b * p->in_depth;
    for (o = 0; o < p->out_depth; ++o) {
      const int8_t *weights = p->filter + o * p->in_depth;
      const int32_t c = p->per_channel ? o : 0;
      int32_t acc = 0;
      if (p->filter_offset == 0 && p->in_offset == 0) {  /* the generator folded in_offset into the bias */
        for (d = 0; d < p->in_depth; ++d) acc += weights[d] * row[d];
      } else {
        for (d = 0; d < p->in_depth; ++d) acc += (weights[d] + p->filter_offset) * (row[d] + p->in_offset);
      }
      if (p->bias) acc += p->bias[o];
      acc = es_mul_by_qm(acc, p->multiplier[c], p->shift[c]) + p->out_offset;
      out[b * p->out_depth + o] = (int8_t)es_clamp(acc, p->act_min, p->act_max);
    }
  }
}

/* int16 activations, int8 weights (reference_integer_ops::FullyConnected[PerChannel] for
 * int16): the input's zero point is 0, the accumulator 64-bit unless the bias is int32. */
void es_fully_connected_s16(const es_fc_params *p, const int16_t *in, int16_t *out) {
  int32_t b, o, d;
  for (b = 0; b < p->batches; ++b) {
    const int16_t *row = in + b * p->in_depth;
    for (o = 0; o < p->out_depth; ++o) {
      const int8_t *weights = p->filter + o * p->in_depth;
      const int32_t c = p->per_channel ? o : 0;
      int64_t acc = 0;
      for (d = 0; d < p->in_depth; ++d) acc += (weights[d] + p->filter_offset) * (row[d] + p->in_offset);
      out[b * p->out_depth + o] = es_requantize_s16(p->act_min, p->act_max, p->acc64, p->bias, p->bias64, acc, o,
                                                    p->multiplier[c], p->shift[c]);
    }
  }
}
