/* The stack's high-water mark on the emulated board: fill the free stack with a pattern
 * before the work, and after it find the deepest word that changed. The stack grows down
 * from __StackTop; newlib's heap (printf's buffers) grows up from `end`, so the pattern
 * starts ES_HEAP_ALLOWANCE bytes above it. */
#ifndef ES_STACK_H
#define ES_STACK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

extern uint32_t __StackTop, end;

#define ES_STACK_PATTERN 0xA5A5A5A5u
#define ES_HEAP_ALLOWANCE (64u * 1024u)

static inline uint32_t *es_paint_floor(void) {
  return (uint32_t *)((uintptr_t)&end + ES_HEAP_ALLOWANCE);
}

/* Paints from the floor up to 256 bytes below the current stack pointer. */
static inline void es_paint_stack(void) {
  uint32_t here = 0;
  volatile uint32_t *p = es_paint_floor();
  volatile uint32_t *limit = (volatile uint32_t *)((uintptr_t)&here - 256u);
  while (p < limit) *p++ = ES_STACK_PATTERN;
}

/* Bytes between the top of the stack and the deepest word the program wrote. */
static inline uint32_t es_stack_used(void) {
  const uint32_t *p = es_paint_floor();
  while (p < &__StackTop && *p == ES_STACK_PATTERN) ++p;
  return (uint32_t)((uintptr_t)&__StackTop - (uintptr_t)p);
}

#ifdef __cplusplus
}
#endif

#endif
