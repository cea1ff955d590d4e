/* Vector table and reset for QEMU's mps2-an386 (Cortex-M4F): enough to run a generated
 * model under semihosting. Reset enables the FPU (the image is built -mfloat-abi=hard),
 * copies .data from flash, clears .bss, opens newlib's semihosted stdio (rdimon) and calls
 * main(); the stack is the vector table's, at the top of SRAM. newlib's own crt0 is not
 * used (-nostartfiles): it takes the stack from the emulator's SYS_HEAPINFO answer, which
 * lands inside the code region and collides with large images. SysTick counts its wraps,
 * so long inferences can be timed past the 24-bit counter. */
#include <stdint.h>

extern uint32_t __StackTop, __etext, __data_start__, __data_end__, __bss_start__, __bss_end__;
extern void initialise_monitor_handles(void);
extern int main(void);
extern void exit(int status);

void Reset_Handler(void);
void Default_Handler(void);
void SysTick_Handler(void);

volatile uint32_t es_systick_wraps;

__attribute__((section(".isr_vector"), used))
void (*const es_vectors[16])(void) = {
    (void (*)(void))(&__StackTop), Reset_Handler,
    Default_Handler, Default_Handler, Default_Handler, Default_Handler, Default_Handler,
    0, 0, 0, 0,
    Default_Handler, Default_Handler, 0, Default_Handler, SysTick_Handler,
};

void Reset_Handler(void) {
  uint32_t *src = &__etext, *dst = &__data_start__;
  *(volatile uint32_t *)0xE000ED88 |= 0xFu << 20; /* CPACR: full access to CP10, CP11 */
  __asm volatile("dsb\n isb");
  while (dst < &__data_end__) *dst++ = *src++;
  for (dst = &__bss_start__; dst < &__bss_end__;) *dst++ = 0;
  initialise_monitor_handles();
  exit(main());
  for (;;) {}
}

void SysTick_Handler(void) { ++es_systick_wraps; }

/* newlib's exit() runs the .fini hooks crt0 would have provided; there are none here. */
void _init(void);
void _fini(void);
void _init(void) {}
void _fini(void) {}

void Default_Handler(void) {
  for (;;) {}
}
