// Runs what `-t mcu` generated (model data, exact op resolver, planned arena) with TFLM on
// the emulated board, the same way es_main.c runs the interpreter-free C: each embedded
// input once, printing the output bytes and the SysTick ticks the Invoke() took (under
// qemu-system-arm -icount shift=0 one tick is 40 guest instructions), then the stack's
// high-water mark, found by painting the free stack before the first inference.
// Compiled with -DES_NS=name_model -DES_DATA=g_name_model_data
// -DES_DATA_H='"name_model_data.h"' -DES_OPS_H='"name_model_ops.h"'
// -DES_ARENA_H='"name_model_arena.h"' and an es_inputs.h with ES_INPUT_COUNT and es_inputs.
// On a failed AllocateTensors it prints "error AllocateTensors" and returns 1.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>

#include "tensorflow/lite/micro/micro_interpreter.h"
#include "tensorflow/lite/schema/schema_generated.h"

#include ES_ARENA_H
#include ES_DATA_H
#include ES_OPS_H
#include "es_inputs.h"
#include "es_stack.h"

#define SYST_CSR (*(volatile uint32_t *)0xE000E010)
#define SYST_RVR (*(volatile uint32_t *)0xE000E014)
#define SYST_CVR (*(volatile uint32_t *)0xE000E018)

extern "C" volatile uint32_t es_systick_wraps;

namespace {

// The planned arena, unless the build gives another size (-DES_ARENA_BYTES=...): the plan is
// for TFLM's reference kernels, and an optimised kernel library may ask for other scratch.
#ifdef ES_ARENA_BYTES
alignas(16) uint8_t tensor_arena[ES_ARENA_BYTES];
#else
alignas(16) uint8_t tensor_arena[ES_NS::kTensorArenaSize];
#endif

uint64_t Ticks() {
  uint32_t wraps, value;
  do {
    wraps = es_systick_wraps;
    value = SYST_CVR;
  } while (wraps != es_systick_wraps);
  return static_cast<uint64_t>(wraps) * 0x1000000u + (0xFFFFFFu - value);
}

}  // namespace

int main() {
  es_paint_stack();
  const tflite::Model* model = tflite::GetModel(ES_DATA);
  // Built in static storage and never destroyed: the image links without the C runtime's
  // start files, so there is no __dso_handle for a static object's destructor to register.
  alignas(ES_NS::OpResolver) static uint8_t resolver_storage[sizeof(ES_NS::OpResolver)];
  alignas(tflite::MicroInterpreter) static uint8_t interpreter_storage[sizeof(tflite::MicroInterpreter)];
  ES_NS::OpResolver& resolver = *new (resolver_storage) ES_NS::OpResolver();
  if (ES_NS::RegisterOps(resolver) != kTfLiteOk) {
    printf("error RegisterOps\n");
    return 1;
  }
  tflite::MicroInterpreter& interpreter = *new (interpreter_storage)
      tflite::MicroInterpreter(model, resolver, tensor_arena, sizeof(tensor_arena));
  if (interpreter.AllocateTensors() != kTfLiteOk) {
    printf("error AllocateTensors in %u bytes\n", static_cast<unsigned>(sizeof(tensor_arena)));
    return 1;
  }
  TfLiteTensor* input = interpreter.input(0);
  const TfLiteTensor* output = interpreter.output(0);
  SYST_RVR = 0xFFFFFFu;
  SYST_CVR = 0;
  SYST_CSR = 7;  // processor clock, interrupt on wrap, enabled
  while (SYST_CVR == 0) {
  }  // the first reload: until then the current value reads 0
  for (int i = 0; i < ES_INPUT_COUNT; ++i) {
    std::memcpy(input->data.int8, es_inputs[i], input->bytes);
    const uint64_t start = Ticks();
    const TfLiteStatus status = interpreter.Invoke();
    const uint64_t stop = Ticks();
    if (status != kTfLiteOk) {
      printf("error Invoke %d\n", static_cast<int>(status));
      return 1;
    }
    printf("out");
    for (size_t j = 0; j < output->bytes; ++j) printf(" %d", static_cast<int>(output->data.int8[j]));
    printf("\nticks %lu\n", static_cast<unsigned long>(stop - start));
  }
  printf("arena_used %u\n", static_cast<unsigned>(interpreter.arena_used_bytes()));
  printf("stack %lu\n", static_cast<unsigned long>(es_stack_used()));
  return 0;
}
