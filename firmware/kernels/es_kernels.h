/* edgeserve's portable INT8 kernels: C99, no heap, bit-exact with TFLite's reference kernels.
 *
 * Tensors are NHWC int8 (the _s16 kernels: int16 activations with int8 weights, the 16x8
 * scheme, whose zero points are 0) in memory the caller owns (one static arena in generated code).
 * Parameters are computed by the generator and stored as const structs, so they stay in
 * flash; a kernel never allocates, and reads and writes only its own tensors (the generated
 * code's region check proves this under AddressSanitizer). */
#ifndef ES_KERNELS_H
#define ES_KERNELS_H

#include <stdint.h>

/* CONV_2D and DEPTHWISE_CONV_2D. */
typedef struct {
  int32_t batches;
  int32_t in_h, in_w, in_c;
  int32_t out_h, out_w, out_c;
  int32_t k_h, k_w, k_c;         /* k_c: input channels per filter (in_c / groups); depthwise: 1 */
  int32_t stride_h, stride_w, dil_h, dil_w, pad_h, pad_w;
  int32_t depth_multiplier;      /* depthwise only */
  int32_t in_offset;             /* minus the input zero point */
  int32_t out_offset;            /* the output zero point */
  int32_t act_min, act_max;
  const int8_t *filter;          /* conv [out_c][k_h][k_w][k_c]; depthwise [k_h][k_w][out_c] */
  const int32_t *bias;           /* [out_c], or NULL */
  const int32_t *multiplier;     /* [out_c] */
  const int8_t *shift;           /* [out_c] */
  /* _s16 only: an int64 bias, and whether the accumulator is 64-bit (as TFLM's is unless the
   * bias is int32), which selects TFLM's 64-bit requantization. */
  const int64_t *bias64;         /* [out_c], or NULL */
  int32_t acc64;
} es_conv_params;

void es_conv2d(const es_conv_params *p, const int8_t *in, int8_t *out);
/* 1x1, stride 1, no padding: out may overlap in (out == in, or out ends where in ends when
 * out_c > in_c); `pixel` holds one input pixel (in_c bytes). */
void es_conv2d_1x1_inplace(const es_conv_params *p, const int8_t *in, int8_t *out, int8_t *pixel);
/* Stride 1, dilation 1, output the input's size and channels: out == in; `rows` holds
 * pad_h + 1 input rows (in_w * in_c bytes each). */
void es_conv2d_rows_inplace(const es_conv_params *p, const int8_t *in, int8_t *out, int8_t *rows);
void es_depthwise_conv2d(const es_conv_params *p, const int8_t *in, int8_t *out);
/* TRANSPOSE_CONV: filter [out_c][k_h][k_w][in_c]; pad_h/pad_w as TFLM computes them from the
 * output size; no dilation. */
void es_transpose_conv2d(const es_conv_params *p, const int8_t *in, int8_t *out);
void es_transpose_conv2d_s16(const es_conv_params *p, const int16_t *in, int16_t *out);
/* depth_multiplier 1: out may start where in starts or end where it ends; `plane` holds
 * one input channel (in_h * in_w bytes). */
void es_depthwise_conv2d_inplace(const es_conv_params *p, const int8_t *in, int8_t *out, int8_t *plane);
void es_conv2d_s16(const es_conv_params *p, const int16_t *in, int16_t *out);
void es_depthwise_conv2d_s16(const es_conv_params *p, const int16_t *in, int16_t *out);

/* FULLY_CONNECTED. */
typedef struct {
  int32_t batches, in_depth, out_depth;
  int32_t in_offset, filter_offset, out_offset;
  int32_t act_min, act_max;
  int32_t per_channel;           /* 0: multiplier[0] and shift[0] for every output */
  const int8_t *filter;          /* [out_depth][in_depth] */
  const int32_t *bias;           /* [out_depth], or NULL */
  /* input scale x filter scale / output scale as TFLM's fixed-point multiplier and shift:
   * what TFLM's reference kernel and CMSIS-NN compute on the device. LiteRT's desktop
   * reference kernel requantizes in double precision instead and can differ by a step or
   * two; a Cortex-M4 has no double-precision FPU, so that is not paid for here. */
  const int32_t *multiplier;     /* [out_depth], or [1] */
  const int8_t *shift;           /* [out_depth], or [1] */
  const int64_t *bias64;         /* _s16 only, as in es_conv_params */
  int32_t acc64;
} es_fc_params;

void es_fully_connected(const es_fc_params *p, const int8_t *in, int8_t *out);
void es_fully_connected_s16(const es_fc_params *p, const int16_t *in, int16_t *out);

/* AVERAGE_POOL_2D and MAX_POOL_2D. */
typedef struct {
  int32_t batches, in_h, in_w, channels, out_h, out_w;
  int32_t k_h, k_w, stride_h, stride_w, pad_h, pad_w;
  int32_t act_min, act_max;
} es_pool_params;

/* Both may run in place (out at in's start or end) when the output is one pixel per
 * channel (global pooling). */
void es_average_pool(const es_pool_params *p, const int8_t *in, int8_t *out);
void es_max_pool(const es_pool_params *p, const int8_t *in, int8_t *out);
void es_average_pool_s16(const es_pool_params *p, const int16_t *in, int16_t *out);
void es_max_pool_s16(const es_pool_params *p, const int16_t *in, int16_t *out);

/* The two-operand elementwise kernels, with broadcasting over up to 4 dimensions. */
typedef struct {
  int32_t dims[4];               /* output shape, padded on the left with 1 */
  int32_t stride1[4], stride2[4];/* element strides of the inputs, 0 along broadcast axes */
  int32_t same_shape;            /* 1: a flat loop over dims[0]*..*dims[3] elements */
  int32_t in1_offset, in2_offset, out_offset;
  int32_t left_shift;            /* ADD, SUB and the comparisons */
  int32_t in1_multiplier, in1_shift, in2_multiplier, in2_shift;  /* likewise */
  int32_t out_multiplier, out_shift;
  int32_t act_min, act_max;
} es_binary_params;

/* out may equal in1 or in2 when same_shape is set. */
void es_add(const es_binary_params *p, const int8_t *in1, const int8_t *in2, int8_t *out);
void es_mul(const es_binary_params *p, const int8_t *in1, const int8_t *in2, int8_t *out);
void es_sub(const es_binary_params *p, const int8_t *in1, const int8_t *in2, int8_t *out);
void es_maximum(const es_binary_params *p, const int8_t *in1, const int8_t *in2, int8_t *out);
void es_minimum(const es_binary_params *p, const int8_t *in1, const int8_t *in2, int8_t *out);
/* DIV, and the comparisons (output: bool bytes, 0 or 1; left_shift and the input multipliers). */
void es_div(const es_binary_params *p, const int8_t *in1, const int8_t *in2, int8_t *out);
void es_greater(const es_binary_params *p, const int8_t *in1, const int8_t *in2, int8_t *out);
void es_greater_equal(const es_binary_params *p, const int8_t *in1, const int8_t *in2, int8_t *out);
void es_less(const es_binary_params *p, const int8_t *in1, const int8_t *in2, int8_t *out);
void es_less_equal(const es_binary_params *p, const int8_t *in1, const int8_t *in2, int8_t *out);
void es_equal(const es_binary_params *p, const int8_t *in1, const int8_t *in2, int8_t *out);
void es_not_equal(const es_binary_params *p, const int8_t *in1, const int8_t *in2, int8_t *out);

/* SELECT / SELECT_V2 over up to 4 dimensions; strides are 0 along broadcast axes. */
typedef struct {
  int32_t dims[4];
  int32_t stride_c[4], stride_x[4], stride_y[4];
  int32_t element_bytes;  /* 1 (int8) or 2 (int16) */
} es_select_params;

void es_select(const es_select_params *p, const int8_t *condition, const void *x, const void *y, void *out);
/* int16: the same arithmetic (ADD and SUB with left_shift 15, as TFLM's general int16 path). */
void es_add_s16(const es_binary_params *p, const int16_t *in1, const int16_t *in2, int16_t *out);
void es_mul_s16(const es_binary_params *p, const int16_t *in1, const int16_t *in2, int16_t *out);
void es_sub_s16(const es_binary_params *p, const int16_t *in1, const int16_t *in2, int16_t *out);
void es_maximum_s16(const es_binary_params *p, const int16_t *in1, const int16_t *in2, int16_t *out);
void es_minimum_s16(const es_binary_params *p, const int16_t *in1, const int16_t *in2, int16_t *out);

/* SOFTMAX over the last dimension. */
typedef struct {
  int32_t rows, depth;
  int32_t input_multiplier, input_left_shift, diff_min;
} es_softmax_params;

/* out may equal in. */
void es_softmax(const es_softmax_params *p, const int8_t *in, int8_t *out);

/* Strided copies (TRANSPOSE, STRIDED_SLICE, and the parts of PAD and CONCATENATION). */
typedef struct {
  int32_t dims[4];               /* elements copied along each axis */
  int32_t in_offset, in_strides[4];
  int32_t out_offset, out_strides[4];
} es_copy_params;

void es_copy4d(const es_copy_params *p, const int8_t *in, int8_t *out);

/* GATHER_ND with constant indices (a reflect pad as edgeserve's ONNX reader writes it): output
 * row i is input row index[i], row_bytes bytes each. */
typedef struct {
  int32_t rows, row_bytes;
  const int32_t *index;
} es_gather_params;

void es_gather(const es_gather_params *p, const int8_t *in, int8_t *out);

typedef struct {
  int32_t out_bytes;
  int32_t value;                 /* the output zero point: a real 0 */
  es_copy_params interior;
} es_pad_params;

void es_pad(const es_pad_params *p, const int8_t *in, int8_t *out);

typedef struct {
  int32_t count;
  const es_copy_params *parts;   /* one per input, into its slice of the output */
} es_concat_params;

void es_concatenation(const es_concat_params *p, const int8_t *const *inputs, int8_t *out);

/* QUANTIZE int8 -> int8 (or uint8 when out_unsigned): a change of scale and zero point. */
typedef struct {
  int32_t count, in_zero_point, out_zero_point, multiplier, shift, out_unsigned;
} es_requantize_params;

void es_requantize(const es_requantize_params *p, const int8_t *in, int8_t *out);

/* QUANTIZE between int8 and int16 (either way, or int16 -> int16), and int16 RELU and RELU6 (a
 * requantization clamped to [act_min, act_max]): in_bits and out_bits are 8 or 16. */
typedef struct {
  int32_t count, in_zero_point, out_zero_point, multiplier, shift, in_bits, out_bits;
  int32_t act_min, act_max;
} es_requantize16_params;

void es_requantize16(const es_requantize16_params *p, const void *in, void *out);

/* LOGISTIC, TANH: table[(uint8_t)x] is the output for input x. */
typedef struct {
  int32_t count;
  const int8_t *table;
} es_lookup_params;

/* out may equal in. */
void es_lookup(const es_lookup_params *p, const int8_t *in, int8_t *out);

/* int16 LOGISTIC (TFLite's reference_integer_ops::Logistic for int16): the input rescaled by
 * multiplier / 2^left_shift, then interpolated in table[256] = sigmoid(i / 24) in 0.16. */
typedef struct {
  int32_t count, multiplier, left_shift;
  const uint16_t *table;
} es_logistic16_params;

/* out may equal in. */
void es_logistic_s16(const es_logistic16_params *p, const int16_t *in, int16_t *out);

/* RESIZE_NEAREST_NEIGHBOR and RESIZE_BILINEAR: per output row y, input rows y0[y] (and
 * y1[y], blended with weight wy[y] / 1024 of y1); the same per column. Nearest reads only
 * y0 and x0 (the others are NULL). */
typedef struct {
  int32_t batches, in_h, in_w, depth, out_h, out_w;
  const int32_t *y0, *y1, *wy, *x0, *x1, *wx;
} es_resize_params;

void es_resize_nearest(const es_resize_params *p, const int8_t *in, int8_t *out);
void es_resize_bilinear(const es_resize_params *p, const int8_t *in, int8_t *out);
/* int16 bilinear (LiteRT's reference ResizeBilinearInteger; TFLM has no int16 one). Nearest
 * needs none: it moves bytes, so the generator gives it depth in bytes. */
void es_resize_bilinear_s16(const es_resize_params *p, const int16_t *in, int16_t *out);

/* PRELU: alpha [alpha_count] repeats along the input (its trailing dimensions). */
typedef struct {
  int32_t count, alpha_count;
  int32_t in_offset, alpha_offset, out_offset;   /* minus the input and alpha zero points; the output's */
  int32_t multiplier_pos, shift_pos;             /* input scale / output scale */
  int32_t multiplier_neg, shift_neg;             /* input scale x alpha scale / output scale */
  const int8_t *alpha;
} es_prelu_params;

/* out may equal in. */
void es_prelu(const es_prelu_params *p, const int8_t *in, int8_t *out);

/* L2_NORMALIZATION along the last axis: rows x depth values; the output is on the fixed scale
 * 1/128, zero point 0, as TFLite's int8 kernels write it. out may equal in: each row is read
 * whole before it is written. */
typedef struct {
  int32_t rows, depth, in_offset;  /* in_offset: minus the input's zero point */
} es_l2_normalization_params;

void es_l2_normalization(const es_l2_normalization_params *p, const int8_t *in, int8_t *out);

/* MEAN: reduce[a] marks the reduced axes of the (left-padded) 4-D input. */
typedef struct {
  int32_t dims[4], strides[4], reduce[4];
  int32_t count;                 /* elements summed per output */
  int32_t in_zero_point, out_zero_point, multiplier, shift;
} es_mean_params;

void es_mean(const es_mean_params *p, const int8_t *in, int8_t *out);
void es_mean_s16(const es_mean_params *p, const int16_t *in, int16_t *out);

#endif
