/* The few Cortex-M DSP instructions the generated kernels use, and the same arithmetic in C99
 * for every other compiler target (the host builds, cores without the DSP extension).
 *
 * Lanes: a 32-bit word holds two int16 values, the low half first (little-endian; the
 * generated weight tables are packed that way, so a big-endian build is refused). */
#ifndef ES_DSP_H
#define ES_DSP_H

#include <stdint.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#error "the generated kernels read little-endian words"
#endif

#define ES_ALWAYS_INLINE static inline __attribute__((always_inline))
/* Each layer's function on its own: inlined into one body, GCC spills the accumulators.
 * GCC's scheduling before register allocation moves every load of an unrolled loop to its
 * top, which needs more registers than a Cortex-M has and spills them: off for these. */
#if defined(__GNUC__) && !defined(__clang__)
#define ES_LAYER static __attribute__((noinline, optimize("no-schedule-insns")))
#else
#define ES_LAYER static __attribute__((noinline))
#endif

/* Four bytes from any address (LDR on Cortex-M4, which loads unaligned words). */
ES_ALWAYS_INLINE int32_t es_read_s8x4(const int8_t *p) {
  int32_t word;
  memcpy(&word, p, sizeof word);
  return word;
}

#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP == 1

/* Bytes 0 and 2, sign-extended into the two halves. */
ES_ALWAYS_INLINE int32_t es_sxtb16(int32_t x) {
  int32_t r;
  __asm__("sxtb16 %0, %1" : "=r"(r) : "r"(x));
  return r;
}

/* Bytes 1 and 3: one instruction (the rotation is part of SXTB16), which GCC 12 does not
 * fuse from a separate rotate. */
ES_ALWAYS_INLINE int32_t es_sxtb16_ror8(int32_t x) {
  int32_t r;
  __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(x));
  return r;
}

/* acc + lo(a) * lo(b) + hi(a) * hi(b). */
ES_ALWAYS_INLINE int32_t es_smlad(int32_t a, int32_t b, int32_t acc) {
  int32_t r;
  __asm__("smlad %0, %1, %2, %3" : "=r"(r) : "r"(a), "r"(b), "r"(acc));
  return r;
}

/* acc + lo(a) * lo(b), and acc + hi(a) * hi(b). */
ES_ALWAYS_INLINE int32_t es_smlabb(int32_t a, int32_t b, int32_t acc) {
  int32_t r;
  __asm__("smlabb %0, %1, %2, %3" : "=r"(r) : "r"(a), "r"(b), "r"(acc));
  return r;
}

ES_ALWAYS_INLINE int32_t es_smlatt(int32_t a, int32_t b, int32_t acc) {
  int32_t r;
  __asm__("smlatt %0, %1, %2, %3" : "=r"(r) : "r"(a), "r"(b), "r"(acc));
  return r;
}

/* Two words from a word-aligned table, the pointer moved past them: LDRD with post-increment.
 * Written as an instruction so each load stays where it is used: as plain loads, GCC 12
 * hoists a depthwise group's 18 weight words to the top of its loop and spills them. */
ES_ALWAYS_INLINE void es_load_pair(const int32_t **p, int32_t *a, int32_t *b) {
  __asm__("ldrd %0, %1, [%2], #8" : "=r"(*a), "=r"(*b), "+r"(*p));
}

/* x saturated to int8: SSAT #8. */
ES_ALWAYS_INLINE int32_t es_ssat8(int32_t x) {
  int32_t r;
  __asm__("ssat %0, #8, %1" : "=r"(r) : "r"(x));
  return r;
}

/* The high word of (c << 32) + a * b, rounded: SMMLAR. */
ES_ALWAYS_INLINE int32_t es_smmlar(int32_t a, int32_t b, int32_t c) {
  int32_t r;
  __asm__("smmlar %0, %1, %2, %3" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}

#else

ES_ALWAYS_INLINE int32_t es_pack16(int32_t lo, int32_t hi) {
  return (int32_t)(((uint32_t)hi << 16) | ((uint32_t)lo & 0xFFFFu));
}

ES_ALWAYS_INLINE int32_t es_sxtb16(int32_t x) {
  return es_pack16((int8_t)(x & 0xFF), (int8_t)((x >> 16) & 0xFF));
}

ES_ALWAYS_INLINE int32_t es_sxtb16_ror8(int32_t x) {
  return es_pack16((int8_t)((x >> 8) & 0xFF), (int8_t)((x >> 24) & 0xFF));
}

ES_ALWAYS_INLINE int32_t es_smlad(int32_t a, int32_t b, int32_t acc) {
  /* The generator bounds every sum to well inside int32 (specialise.py). */
  return acc + (int16_t)(a & 0xFFFF) * (int16_t)(b & 0xFFFF) + (int16_t)(a >> 16) * (int16_t)(b >> 16);
}

ES_ALWAYS_INLINE int32_t es_smlabb(int32_t a, int32_t b, int32_t acc) {
  return acc + (int16_t)(a & 0xFFFF) * (int16_t)(b & 0xFFFF);
}

ES_ALWAYS_INLINE int32_t es_smlatt(int32_t a, int32_t b, int32_t acc) {
  return acc + (int16_t)(a >> 16) * (int16_t)(b >> 16);
}

ES_ALWAYS_INLINE void es_load_pair(const int32_t **p, int32_t *a, int32_t *b) {
  *a = (*p)[0];
  *b = (*p)[1];
  *p += 2;
}

ES_ALWAYS_INLINE int32_t es_ssat8(int32_t x) {
  return x < -128 ? -128 : (x > 127 ? 127 : x);
}

ES_ALWAYS_INLINE int32_t es_smmlar(int32_t a, int32_t b, int32_t c) {
  /* Exact in int64 for the operands the generator allows (|a * b| < 2^61, |c| < 2^28). */
  return (int32_t)(((int64_t)c * 4294967296LL + (int64_t)a * b + 2147483648LL) >> 32);
}

#endif

/* TFLite's int8 requantization (MultiplyByQuantizedMultiplier with its double rounding, plus
 * the output zero point, then the activation's clamp) in one multiply and one shift, for a
 * multiplier M >= 0 and a right shift e >= 1:
 *   out = SMMLAR(2 acc, M, Cc + (acc >> 31)) >> e,  Cc = 2^(e-1) + zero_point * 2^e.
 * Derived and checked in docs/plans/issue-51.md (4a); the generator checks each layer's
 * conditions (specialise.py), and tests compare every output with TFLM's kernels.
 * ``q`` is the channel's {bias, M, Cc, e}. The activation's bounds are constants where the
 * generated code calls this, so the compares an int8 range does not need fold away. */
ES_ALWAYS_INLINE int8_t es_requantize_q(int32_t acc, const int32_t *q, int32_t act_min, int32_t act_max) {
  int32_t v = es_ssat8(es_smmlar(acc * 2, q[1], q[2] + (acc >> 31)) >> q[3]);
  if (act_min > -128 && v < act_min) v = act_min;
  if (act_max < 127 && v > act_max) v = act_max;
  return (int8_t)v;
}

#endif
