/* Runs a generated model on the emulated board: each embedded input once, printing the
 * output bytes and the SysTick ticks the inference took. Under qemu-system-arm
 * -icount shift=0 one tick is 40 guest instructions (see ../shared/tflm/README.md).
 * Compiled with -DES_HEADER='"name.h"' -DES_INVOKE=name_invoke -DES_OUTPUT_BYTES=...
 * -DES_OUTPUT_TYPE=...
 * and an es_inputs.h that defines ES_INPUT_COUNT and es_inputs[][]. */
#include <stdint.h>
#include <stdio.h>

#include ES_HEADER
#include "es_inputs.h"
#include "es_stack.h"

#define SYST_CSR (*(volatile uint32_t *)0xE000E010)
#define SYST_RVR (*(volatile uint32_t *)0xE000E014)
#define SYST_CVR (*(volatile uint32_t *)0xE000E018)

extern volatile uint32_t es_systick_wraps;

static uint64_t ticks(void) {
  uint32_t wraps, value;
  do {
    wraps = es_systick_wraps;
    value = SYST_CVR;
  } while (wraps != es_systick_wraps);
  return (uint64_t)wraps * 0x1000000u + (0xFFFFFFu - value);
}

#ifdef ES_STEP_TICKS
/* -DES_STEP_TICKS: the generated code calls this after each operator's kernel; the ticks
 * since the previous call are kept and printed after the inference ("step OP TICKS"), so
 * printing costs the inference nothing. */
#define ES_MAX_STEPS 512
static int32_t es_step_op[ES_MAX_STEPS];
static uint32_t es_step_ticks[ES_MAX_STEPS];
static int es_steps;
static uint64_t es_step_last;

void es_step_done(int32_t op_index) {
  const uint64_t now = ticks();
  if (es_steps < ES_MAX_STEPS) {
    es_step_op[es_steps] = op_index;
    es_step_ticks[es_steps++] = (uint32_t)(now - es_step_last);
  }
  es_step_last = ticks();  /* this function's own time is left out */
}
#endif

/* Values, not bytes: an int16 model's output holds half as many as it has bytes. */
#define ES_OUTPUT_VALUES (ES_OUTPUT_BYTES / (int)sizeof(ES_OUTPUT_TYPE))

int main(void) {
  static ES_OUTPUT_TYPE output[ES_OUTPUT_VALUES];
  int i, j;
  es_paint_stack();
  SYST_RVR = 0xFFFFFFu;
  SYST_CVR = 0;
  SYST_CSR = 7; /* processor clock, interrupt on wrap, enabled */
  while (SYST_CVR == 0) {
  } /* the first reload: until then the current value reads 0 */
  for (i = 0; i < ES_INPUT_COUNT; ++i) {
    uint64_t start, stop;
    int status;
#ifdef ES_STEP_TICKS
    es_steps = 0;
    es_step_last = ticks();
#endif
    start = ticks();
    status = ES_INVOKE(es_inputs[i], output);
    stop = ticks();
    if (status != 0) {
      printf("error %d\n", status);
      return 1;
    }
    printf("out");
    for (j = 0; j < ES_OUTPUT_VALUES; ++j) printf(" %d", (int)output[j]);
    printf("\nticks %lu\n", (unsigned long)(stop - start));
#ifdef ES_STEP_TICKS
    for (j = 0; j < es_steps; ++j) printf("step %ld %lu\n", (long)es_step_op[j], (unsigned long)es_step_ticks[j]);
#endif
  }
  printf("stack %lu\n", (unsigned long)es_stack_used());
  return 0;
}
