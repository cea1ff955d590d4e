/* LOGISTIC and TANH on int8: a 256-entry table computed by the generator exactly as
 * LiteRT's reference kernel fills its own (float32 transform of each dequantized value,
 * rounded and clamped), so the lookup reproduces it for every input. */
#include "es_kernels.h"

void es_lookup(const es_lookup_params *p, const int8_t *in, int8_t *out) {
  int32_t i;
  for (i = 0; i < p->count; ++i) out[i] = p->table[(uint8_t)in[i]];
}
