/* FULLY_CONNECTED, int8 (LiteRT's reference kernel: requantized in double precision). */
#include "es_fixedpoint.h"
#include "es_kernels.h"

/* std::round of a double (ties away from zero) without libm: |v| - trunc(|v|) is exact. */
static int32_t round_away(double v) {
  const double a = v < 0 ? -v : v;
  int64_t t = (int64_t)a;
  if (a - (double)t >= 0.5) ++t;
  return (int32_t)(v < 0 ? -t : t);
}

void es_fully_connected(const es_fc_params *p, const int8_t *in, int8_t *out) {
  int32_t b, o, d;
  for (b = 0; b < p->batches; ++b) {
    const int8_t *row = in + b * p->in_depth;
    for (o = 0; o < p->out_depth; ++o) {
      const int8_t *weights = p->filter + o * p->in_depth;
      int32_t acc = 0;
      for (d = 0; d < p->in_depth; ++d) acc += (weights[d] + p->filter_offset) * (row[d] + p->in_offset);
      if (p->bias) acc += p->bias[o];
      acc = round_away((double)acc * p->scale[p->per_channel ? o : 0]) + p->out_offset;
      out[b * p->out_depth + o] = (int8_t)es_clamp(acc, p->act_min, p->act_max);
    }
  }
}
