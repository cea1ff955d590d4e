/* LOGISTIC, TANH, RELU, RELU6 and LEAKY_RELU on int8: a 256-entry table the generator fills
 * with the reference kernel's own arithmetic for every input value (converters/mcu_c/quant.py),
 * so the lookup reproduces it for every input. */
#include "es_kernels.h"

void es_lookup(const es_lookup_params *p, const int8_t *in, int8_t *out) {
  int32_t i;
  for (i = 0; i < p->count; ++i) out[i] = p->table[(uint8_t)in[i]];
}
