/* Host harness for a generated model: reads N raw inputs from stdin, writes N raw
 * outputs to stdout, in order (a stateful model sees them as one stream). Compiled with
 * -DES_HEADER='"name.h"' -DES_INVOKE=name_invoke -DES_INPUT_BYTES=... -DES_OUTPUT_BYTES=...
 * -DES_INPUT_TYPE=... -DES_OUTPUT_TYPE=...; a stateful model adds -DES_RESET=name_reset, and a second argument
 * K resets the stream after every K inputs. With -DES_REGION_CHECK and AddressSanitizer it
 * also proves each kernel touches only its own tensors in the arena. */
#include <stdio.h>
#include <stdlib.h>

#include ES_HEADER

#ifndef ES_INPUT_TYPE
#define ES_INPUT_TYPE int8_t
#endif

#ifdef ES_REGION_CHECK
#include <sanitizer/asan_interface.h>
void es_region_check(const int8_t *arena, int32_t arena_bytes, const int32_t *regions, int32_t count);
void es_region_check(const int8_t *arena, int32_t arena_bytes, const int32_t *regions, int32_t count) {
  int32_t i;
  ASAN_POISON_MEMORY_REGION(arena, (size_t)arena_bytes);
  for (i = 0; i < count; ++i) ASAN_UNPOISON_MEMORY_REGION(arena + regions[2 * i], (size_t)regions[2 * i + 1]);
}
#endif

int main(int argc, char **argv) {
  long count = argc > 1 ? strtol(argv[1], NULL, 10) : 1, i;
  long reset_every = argc > 2 ? strtol(argv[2], NULL, 10) : 0;
  /* Exactly-sized heap buffers: AddressSanitizer sees any read past the input. */
  ES_INPUT_TYPE *input = malloc(ES_INPUT_BYTES);
  ES_OUTPUT_TYPE *output = malloc(ES_OUTPUT_BYTES);
  if (input == NULL || output == NULL) return 3;
  for (i = 0; i < count; ++i) {
    int status;
    if (fread(input, 1, ES_INPUT_BYTES, stdin) != (size_t)ES_INPUT_BYTES) {
      fprintf(stderr, "harness: input %ld is short\n", i);
      return 2;
    }
#ifdef ES_RESET
    if (reset_every > 0 && i > 0 && i % reset_every == 0) ES_RESET();
#else
    if (reset_every > 0) {
      fprintf(stderr, "harness: the model has no state to reset\n");
      return 2;
    }
#endif
    status = ES_INVOKE(input, output);
    if (status != 0) {
      fprintf(stderr, "harness: invoke returned %d\n", status);
      return 1;
    }
    fwrite(output, 1, ES_OUTPUT_BYTES, stdout);
  }
  free(input);
  free(output);
  return 0;
}
