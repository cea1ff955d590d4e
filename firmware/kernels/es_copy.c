/* Data movement: TRANSPOSE, STRIDED_SLICE, PAD, CONCATENATION, DEPTH_TO_SPACE, SPACE_TO_DEPTH (as
 * concatenations of block rows) and GATHER_ND with constant indices. No arithmetic, so they are
 * exact by construction; the generator turns each into strides over at most 4 axes. */
#include <string.h>

#include "es_kernels.h"

void es_copy4d(const es_copy_params *p, const int8_t *in, int8_t *out) {
  int32_t i0, i1, i2, i3;
  for (i0 = 0; i0 < p->dims[0]; ++i0)
    for (i1 = 0; i1 < p->dims[1]; ++i1)
      for (i2 = 0; i2 < p->dims[2]; ++i2) {
        const int8_t *src = in + p->in_offset + i0 * p->in_strides[0] + i1 * p->in_strides[1] + i2 * p->in_strides[2];
        int8_t *dst = out + p->out_offset + i0 * p->out_strides[0] + i1 * p->out_strides[1] + i2 * p->out_strides[2];
        if (p->in_strides[3] == 1 && p->out_strides[3] == 1) {
          memcpy(dst, src, (size_t)p->dims[3]);
        } else {
          for (i3 = 0; i3 < p->dims[3]; ++i3) dst[i3 * p->out_strides[3]] = src[i3 * p->in_strides[3]];
        }
      }
}

void es_pad(const es_pad_params *p, const int8_t *in, int8_t *out) {
  memset(out, p->value, (size_t)p->out_bytes);
  es_copy4d(&p->interior, in, out);
}

void es_concatenation(const es_concat_params *p, const int8_t *const *inputs, int8_t *out) {
  int32_t i;
  for (i = 0; i < p->count; ++i) es_copy4d(&p->parts[i], inputs[i], out);
}

void es_gather(const es_gather_params *p, const int8_t *in, int8_t *out) {
  int32_t i;
  for (i = 0; i < p->rows; ++i) {
    memcpy(out + (size_t)i * (size_t)p->row_bytes, in + (size_t)p->index[i] * (size_t)p->row_bytes,
           (size_t)p->row_bytes);
  }
}
