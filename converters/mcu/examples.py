"""Usage examples written beside a model's TFLM files: a program, a sketch, a CMake file.

``render_examples`` returns ``{file name: text}``:

* ``main.cc`` — a complete TFLM program: checks the schema version, registers exactly the
  model's operators, allocates the planned arena (printing ``arena_used_bytes()`` hints
  when it is too small), fills input 0, invokes, prints output 0.
* ``NAME/NAME.ino`` — the same as an Arduino sketch (setup once, infer in loop, Serial).
  Arduino compiles only the sketch folder, so :func:`sketch_files` names the copies of
  the generated files that go into ``NAME/`` (``.cc`` renamed ``.cpp``, which every
  Arduino builder compiles).
* ``CMakeLists.txt`` — an ``add_library(NAME_model STATIC ...)`` target and an optional
  example executable, for a project that already builds TFLM.

The programs read scale and zero point from the tensors at run time, so they stay right if
the model is requantized; shapes and types are baked in and checked at run time, so a
model swapped without regenerating fails with a message instead of reading past a buffer.
The templates live here as strings, not as package data files, so the wheel needs no
extra package-data patterns for ``.ino`` and ``.txt``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from string import Template
from typing import TYPE_CHECKING, Any

from edgeserve.errors import InputError
from edgeserve.converters.microcontroller.names import c_identifier

if TYPE_CHECKING:
    from edgeserve.tflite.model import Tensor


@dataclass(frozen=True)
class _CType:
    tflite: str  # TfLiteType enumerator
    member: str  # TfLitePtrUnion member
    c: str
    lo: int | None = None  # value range of an integer type, for clamping after quantizing
    hi: int | None = None


_TYPES: dict[str, _CType] = {
    "int8": _CType("kTfLiteInt8", "int8", "int8_t", -128, 127),
    "uint8": _CType("kTfLiteUInt8", "uint8", "uint8_t", 0, 255),
    "int16": _CType("kTfLiteInt16", "i16", "int16_t", -32768, 32767),
    "int32": _CType("kTfLiteInt32", "i32", "int32_t", -(2**31), 2**31 - 1),
    "float32": _CType("kTfLiteFloat32", "f", "float"),
}


@dataclass(frozen=True)
class TensorDesc:
    """What the examples need to know about one input or output tensor.

    ``scale`` 0 means not quantized (a float tensor, or raw integers such as token ids).
    The values are for the comments and the run-time checks; the programs quantize with
    the scale and zero point TFLM reports for the tensor.
    """

    shape: tuple[int, ...]
    dtype: str = "int8"
    scale: float = 0.0
    zero_point: int = 0
    name: str = ""

    def __post_init__(self) -> None:
        if self.dtype not in _TYPES:
            raise InputError(
                f"tensor {self.name or '?'} has type {self.dtype}: the examples handle "
                f"{', '.join(_TYPES)}"
            )
        if any(dim <= 0 for dim in self.shape):
            raise InputError(
                f"tensor {self.name or '?'} has shape {list(self.shape)}: expected fixed "
                "positive dimensions (TFLM needs static shapes)"
            )

    @classmethod
    def from_tensor(cls, tensor: Tensor) -> TensorDesc:
        """Describe a tensor of :class:`edgeserve.tflite.model.TfliteModel`."""
        quant = tensor.quantization
        scale = quant.scale[0] if quant is not None and len(quant.scale) == 1 else 0.0
        zero_point = quant.zero_point[0] if quant is not None and len(quant.zero_point) == 1 else 0
        return cls(tuple(tensor.shape), tensor.dtype_name.lower(), scale, zero_point, tensor.name)

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def quantized(self) -> bool:
        return self.scale > 0 and self.dtype != "float32"

    def describe(self) -> str:
        """One line for a C++ ``//`` comment: no line breaks, no line-splicing backslash."""
        what = f"{self.dtype}[{', '.join(map(str, self.shape))}]"
        if self.quantized:
            what += f", scale {self.scale:.9g}, zero point {self.zero_point}"
        name = " ".join(self.name.replace("\\", "/").split())
        return f"{name} {what}" if name else what


def render_examples(
    name: str,
    arena_header: str,
    ops_header: str,
    input_desc: TensorDesc,
    output_desc: TensorDesc,
    *,
    extra_sources: Sequence[str] = (),
    resource_variables: int = 0,
) -> dict[str, str]:
    """Texts of ``main.cc``, ``NAME/NAME.ino`` and ``CMakeLists.txt`` for model ``name``.

    Args:
        name: the model's C name; the data header is ``NAME_model_data.h``.
        arena_header: file name of the header defining ``NAME_model::kTensorArenaSize``.
        ops_header: file name of the header defining ``NAME_model::OpResolver`` and
            ``NAME_model::RegisterOps``.
        input_desc: input 0 of the model's main subgraph (the one the programs fill).
        output_desc: output 0 (the one they print).
        extra_sources: generated ``.cc`` files besides ``NAME_model_data.cc`` that the
            library needs (e.g. an ops source file, if the ops header is not header-only).
        resource_variables: the model's resource variables (streaming state); the programs
            then create ``MicroResourceVariables`` for exactly that many from the arena
            before the interpreter, which the planned arena counts.

    Example::

        graph = model.subgraphs[0]
        inp = TensorDesc.from_tensor(graph.tensors[graph.inputs[0]])
        out = TensorDesc.from_tensor(graph.tensors[graph.outputs[0]])
        files = render_examples("kws", "kws_model_arena.h", "kws_model_ops.h", inp, out)
    """
    name = c_identifier(name)
    values = _values(name, arena_header, ops_header, input_desc, output_desc)
    values["sources"] = " ".join([f"{name}_model_data.cc", *extra_sources])
    values.update(_interpreter_setup(resource_variables))
    return {
        "main.cc": _MAIN.substitute(values, body=_HELPERS.substitute(values)),
        f"{name}/{name}.ino": _SKETCH.substitute(values, body=_HELPERS.substitute(values)),
        "CMakeLists.txt": _CMAKE.substitute(values),
    }


def sketch_files(name: str, generated: Mapping[str, str]) -> dict[str, str]:
    """Map generated file names to their copies' names in the Arduino sketch folder ``NAME/``.

    Arduino compiles only the sketch folder, so the headers and the data source need copies
    there. Headers keep their names; ``.cc`` becomes ``.cpp`` (older Arduino builders
    compile only ``.c``, ``.cpp`` and ``.S`` files of a sketch). Only top-level
    ``NAME_model*`` files are copied: not ``main.cc`` (a second ``main``), not the sketch.
    """
    name = c_identifier(name)
    placed = {}
    for file_name in generated:
        if "/" in file_name or not file_name.startswith(f"{name}_model"):
            continue
        if file_name.endswith(".h"):
            placed[file_name] = f"{name}/{file_name}"
        elif file_name.endswith(".cc"):
            placed[file_name] = f"{name}/{file_name[:-3]}.cpp"
    return placed


def _values(
    name: str, arena_header: str, ops_header: str, inp: TensorDesc, out: TensorDesc
) -> dict[str, Any]:
    from edgeserve import __version__

    tin, tout = _TYPES[inp.dtype], _TYPES[out.dtype]
    if inp.quantized:
        fill = (f"static_cast<{tin.c}>("
                f"Quantize(ExampleInput(i), input->params, {tin.lo}, {tin.hi}))")
    elif tin.c == "float":
        fill = "ExampleInput(i)"
    else:  # raw integers (ids, counts): no scale to apply
        fill = f"static_cast<{tin.c}>(ExampleInput(i))"
    raw = f"output->data.{tout.member}[i]"
    read = f"Dequantize({raw}, output->params)" if out.quantized else f"static_cast<float>({raw})"
    return {
        "name": name,
        "ns": f"{name}_model",
        "version": __version__,
        "arena_header": arena_header,
        "ops_header": ops_header,
        "data_header": f"{name}_model_data.h",
        "input_doc": inp.describe(),
        "output_doc": out.describe(),
        "in_elements": inp.elements,
        "out_elements": out.elements,
        "in_type": tin.tflite,
        "out_type": tout.tflite,
        "in_ctype": tin.c,
        "out_ctype": tout.c,
        "in_member": tin.member,
        "fill": fill,
        "read": read,
        "raw": raw,
        "raw_fmt": "%f" if tout.c == "float" else "%ld",
        "raw_cast": "double" if tout.c == "float" else "long",
        "name_upper": name.upper(),
        "conversions": (_QUANTIZE if inp.quantized else "")
        + (_DEQUANTIZE if out.quantized else ""),
    }


# Shared by main.cc and the sketch: pure functions, no printing, so each program reports
# through its own channel (MicroPrintf or Serial). Quantize and Dequantize are included
# only when used: an unused function in an anonymous namespace is a warning.
_HELPERS = Template("""\
// Input 0:  $input_doc
// Output 0: $output_doc
constexpr size_t kInputElements = $in_elements;
constexpr size_t kOutputElements = $out_elements;

// The input in the units the float model was trained on (after its preprocessing).
// Replace with real data: sensor samples, or pixels normalized as in training.
float ExampleInput(size_t index) {
  return static_cast<float>(index % 16) / 16.0f;
}
$conversions
// The tensors TFLM hands out come from the model in flash; if it was replaced without
// regenerating this file, stop instead of reading or writing past their buffers.
bool IsExpected(const TfLiteTensor* tensor, TfLiteType type, size_t elements,
                size_t element_bytes) {
  return tensor != nullptr && tensor->type == type &&
         tensor->bytes == elements * element_bytes;
}

void FillInput(TfLiteTensor* input) {
  for (size_t i = 0; i < kInputElements; ++i) {
    input->data.$in_member[i] =
        $fill;
  }
}
""")

_QUANTIZE = """
// real = scale * (q - zero_point), so q = round(real / scale) + zero_point, clamped.
int32_t Quantize(float value, const TfLiteQuantizationParams& params, int32_t lo,
                 int32_t hi) {
  const float scaled = value / params.scale;
  const int32_t rounded =
      static_cast<int32_t>(scaled >= 0.0f ? scaled + 0.5f : scaled - 0.5f);
  const int32_t q = rounded + params.zero_point;
  return q < lo ? lo : (q > hi ? hi : q);
}
"""

_DEQUANTIZE = """
float Dequantize(int32_t q, const TfLiteQuantizationParams& params) {
  return params.scale * static_cast<float>(q - params.zero_point);
}
"""

_MAIN = Template("""\
// $name: run the model once with TensorFlow Lite for Microcontrollers and print output 0.
// Generated by edgeserve $version as a starting point; edit freely (regenerating
// overwrites this file).
//
// Build: see CMakeLists.txt. Log output goes through TFLM's DebugLog: stderr on a host,
// the console on ESP-IDF (which starts at app_main, defined below); on cortex_m_generic
// register a UART writer with RegisterDebugLogCallback() before calling
// ${ns}_run_once(). newlib-nano prints %f only when linked with -u _printf_float.

#include <cstddef>
#include <cstdint>

#include "tensorflow/lite/micro/arena_allocator/single_arena_buffer_allocator.h"
#include "tensorflow/lite/micro/memory_planner/greedy_memory_planner.h"
#include "tensorflow/lite/micro/micro_allocator.h"
#include "tensorflow/lite/micro/micro_interpreter.h"
#include "tensorflow/lite/micro/micro_log.h"
$state_includes#include "tensorflow/lite/micro/system_setup.h"
#include "tensorflow/lite/schema/schema_generated.h"

#include "$arena_header"
#include "$data_header"
#include "$ops_header"

// TFLM places every tensor and its own bookkeeping here. edgeserve planned the size for
// this model; the plan assumes the 16-byte alignment.
alignas(16) static uint8_t tensor_arena[$ns::kTensorArenaSize];

namespace {

$body$probe
void PrintArenaAdvice() {
  MicroPrintf("If TFLM says above that memory is missing: the size was planned for one "
              "TFLM build and word size and yours needs more (a 64-bit host, or kernels "
              "with larger scratch buffers). Raise ${name_upper}_MODEL_TENSOR_ARENA_SIZE "
              "in $arena_header by at least the missing bytes and run again (a later "
              "step may need more).");
}

int RunOnce() {
  tflite::InitializeTarget();

  const tflite::Model* model = tflite::GetModel(g_${name}_model_data);
  if (model->version() != TFLITE_SCHEMA_VERSION) {
    MicroPrintf("Model schema version %d, but this TFLM reads version %d.",
                static_cast<int>(model->version()), TFLITE_SCHEMA_VERSION);
    return 1;
  }

  // Exactly the operators this model uses: far smaller than registering every kernel.
  static $ns::OpResolver resolver;
  if ($ns::RegisterOps(resolver) != kTfLiteOk) {
    MicroPrintf("RegisterOps failed: the resolver could not take every operator.");
    return 1;
  }

  if (sizeof(tensor_arena) < ${name_upper}_MODEL_ARENA_TAIL_SIZE || !ArenaHoldsTflmSetup()) {
    MicroPrintf("AllocateTensors not tried: a %u-byte arena cannot hold the %u bytes of persistent "
                "data TFLM keeps for this model at the arena's end (TFLM aborts, instead of "
                "reporting, when a kernel finds no room there): %u bytes are missing.",
                static_cast<unsigned>(sizeof(tensor_arena)),
                static_cast<unsigned>(${name_upper}_MODEL_ARENA_TAIL_SIZE),
                static_cast<unsigned>(sizeof(tensor_arena) < ${name_upper}_MODEL_ARENA_TAIL_SIZE
                                          ? ${name_upper}_MODEL_ARENA_TAIL_SIZE - sizeof(tensor_arena)
                                          : 0u));
    PrintArenaAdvice();
    return 1;
  }
$interpreter_main
  if (interpreter.AllocateTensors() != kTfLiteOk) {
    MicroPrintf("AllocateTensors failed in a %u-byte arena (%u bytes taken when it failed).",
                static_cast<unsigned>(sizeof(tensor_arena)),
                static_cast<unsigned>(interpreter.arena_used_bytes()));
    PrintArenaAdvice();
    return 1;
  }
  // arena_used_bytes() leaves out the temporary memory AllocateTensors() needed on the
  // way (TFLM frees it before returning), so an arena cut down to it fails.
  MicroPrintf("Arena: %u of %u bytes in use after AllocateTensors().",
              static_cast<unsigned>(interpreter.arena_used_bytes()),
              static_cast<unsigned>(sizeof(tensor_arena)));

  TfLiteTensor* input = interpreter.input(0);
  if (!IsExpected(input, $in_type, kInputElements, sizeof($in_ctype))) {
    MicroPrintf("Input 0 is not the tensor this program was generated for: regenerate it.");
    return 1;
  }
  FillInput(input);

  if (interpreter.Invoke() != kTfLiteOk) {
    MicroPrintf("Invoke failed.");
    return 1;
  }

  const TfLiteTensor* output = interpreter.output(0);
  if (!IsExpected(output, $out_type, kOutputElements, sizeof($out_ctype))) {
    MicroPrintf("Output 0 is not the tensor this program was generated for: regenerate it.");
    return 1;
  }
  size_t best = 0;
  float best_value = 0.0f;
  for (size_t i = 0; i < kOutputElements; ++i) {
    const float value = $read;
    if (i < 10) {
      MicroPrintf("output[%u] = %f (raw $raw_fmt)", static_cast<unsigned>(i),
                  static_cast<double>(value), static_cast<$raw_cast>($raw));
    }
    if (i == 0 || value > best_value) {
      best = i;
      best_value = value;
    }
  }
  if (kOutputElements > 1) {
    MicroPrintf("largest: output[%u] = %f of %u values", static_cast<unsigned>(best),
                static_cast<double>(best_value), static_cast<unsigned>(kOutputElements));
  }
  return 0;
}

}  // namespace

// Callable from C startup code that owns main() (an STM32CubeIDE main.c after the HAL and
// UART are initialized, an RTOS task): build with -DEDGESERVE_NO_MAIN and call this.
extern "C" int ${ns}_run_once(void) { return RunOnce(); }

#if defined(ESP_PLATFORM)
// ESP-IDF starts the application at app_main, not main.
extern "C" void app_main(void) { ${ns}_run_once(); }
#elif !defined(EDGESERVE_NO_MAIN)
int main() { return ${ns}_run_once(); }
#endif
""")

_SKETCH = Template("""\
// $name on an Arduino board with TensorFlow Lite for Microcontrollers: set up once, then
// run the model every second and print output 0 and the inference time over Serial.
// Generated by edgeserve $version as a starting point; edit freely.
//
// This folder must also hold the generated $data_header, ${name}_model_data.cpp,
// $ops_header and $arena_header (edgeserve copies them here).
// Library: Chirale_TensorFLowLite from the Library Manager (Nano 33 BLE, Portenta,
// Nicla, Nano ESP32). With the older Arduino_TensorFlowLite (a git clone of
// tflite-micro-arduino-examples), include <TensorFlowLite.h> instead.

#include <Chirale_TensorFlowLite.h>

#include "tensorflow/lite/micro/arena_allocator/single_arena_buffer_allocator.h"
#include "tensorflow/lite/micro/memory_planner/greedy_memory_planner.h"
#include "tensorflow/lite/micro/micro_allocator.h"
#include "tensorflow/lite/micro/micro_interpreter.h"
$state_includes#include "tensorflow/lite/micro/system_setup.h"
#include "tensorflow/lite/schema/schema_generated.h"

#include "$arena_header"
#include "$data_header"
#include "$ops_header"

// TFLM places every tensor and its own bookkeeping here; 16-byte aligned as planned.
alignas(16) static uint8_t tensor_arena[$ns::kTensorArenaSize];

namespace {

$body$probe
tflite::MicroInterpreter* interpreter = nullptr;

void Halt(const char* why) {
  Serial.println(why);
  while (true) {
    delay(1000);
  }
}

}  // namespace

void setup() {
  Serial.begin(115200);
  while (!Serial && millis() < 5000) {
    // Wait up to 5 s for the Serial Monitor so the first lines are not lost.
  }
  tflite::InitializeTarget();

  const tflite::Model* model = tflite::GetModel(g_${name}_model_data);
  if (model->version() != TFLITE_SCHEMA_VERSION) {
    Halt("Model schema version differs from the library's TFLITE_SCHEMA_VERSION.");
  }
  static $ns::OpResolver resolver;
  if ($ns::RegisterOps(resolver) != kTfLiteOk) {
    Halt("RegisterOps failed: the resolver could not take every operator.");
  }
  if (sizeof(tensor_arena) < ${name_upper}_MODEL_ARENA_TAIL_SIZE || !ArenaHoldsTflmSetup()) {
    Halt("The arena cannot hold TFLM's persistent data: raise ${name_upper}_MODEL_TENSOR_ARENA_SIZE in $arena_header.");
  }
$interpreter_sketch
  interpreter = &static_interpreter;
  if (interpreter->AllocateTensors() != kTfLiteOk) {
    Serial.print("Arena bytes taken when it failed: ");
    Serial.println(static_cast<unsigned long>(interpreter->arena_used_bytes()));
    Halt("AllocateTensors failed: raise ${name_upper}_MODEL_TENSOR_ARENA_SIZE in $arena_header.");
  }
  // Leaves out the temporary memory AllocateTensors() needed on the way: not a safe
  // arena size on its own.
  Serial.print("Arena bytes in use after AllocateTensors(): ");
  Serial.print(static_cast<unsigned long>(interpreter->arena_used_bytes()));
  Serial.print(" of ");
  Serial.println(static_cast<unsigned long>(sizeof(tensor_arena)));

  if (!IsExpected(interpreter->input(0), $in_type, kInputElements, sizeof($in_ctype)) ||
      !IsExpected(interpreter->output(0), $out_type, kOutputElements, sizeof($out_ctype))) {
    Halt("The model's tensors are not the ones this sketch was generated for.");
  }
}

void loop() {
  TfLiteTensor* input = interpreter->input(0);
  FillInput(input);

  const unsigned long started = micros();
  const TfLiteStatus status = interpreter->Invoke();
  const unsigned long took = micros() - started;
  if (status != kTfLiteOk) {
    Halt("Invoke failed.");
  }

  const TfLiteTensor* output = interpreter->output(0);
  size_t best = 0;
  float best_value = 0.0f;
  for (size_t i = 0; i < kOutputElements; ++i) {
    const float value = $read;
    if (i == 0 || value > best_value) {
      best = i;
      best_value = value;
    }
  }
  Serial.print("inference us: ");
  Serial.print(took);
  Serial.print("  largest output[");
  Serial.print(static_cast<unsigned long>(best));
  Serial.print("] = ");
  Serial.println(best_value, 4);
  delay(1000);
}
""")

_CMAKE = Template("""\
# $name model for TensorFlow Lite for Microcontrollers, generated by edgeserve $version.
#
# Use from your project:  add_subdirectory(path/to/mcu)  then
#                         target_link_libraries(your_app PRIVATE ${ns})
#
# TFLM itself is not built here. Give CMake a TFLM library built for the same CPU and
# flags, as a target named tflm (ESP-IDF: the espressif__esp-tflite-micro component; a
# vendor SDK's target), or as a static library from TFLM's own Makefile, e.g.
#   make -f tensorflow/lite/micro/tools/make/Makefile TARGET=cortex_m_generic \\
#        TARGET_ARCH=cortex-m4 OPTIMIZED_KERNEL_DIR=cmsis_nn microlite
# which leaves gen/<target>_<arch>_<build>_<kernels>_gcc/lib/libtensorflow-microlite.a.
# Code that includes TFLM headers must be compiled with TF_LITE_STATIC_MEMORY defined,
# as the library was: TfLiteTensor's layout depends on it.
cmake_minimum_required(VERSION 3.16)
# Also buildable on its own (cmake -S mcu -B build ...); a parent project's add_subdirectory
# gets a nested project, which CMake allows.
project(${ns} CXX)

set(TFLM_LIBRARY "" CACHE FILEPATH "libtensorflow-microlite.a, if no tflm target exists")
set(TFLM_INCLUDE_DIRS "" CACHE STRING
    "TFLM headers if no tflm target exists: the tflite-micro checkout and, from its \\
tensorflow/lite/micro/tools/make/downloads, flatbuffers/include and gemmlowp")

if(NOT TARGET tflm AND TFLM_LIBRARY)
  add_library(tflm STATIC IMPORTED)
  set_target_properties(tflm PROPERTIES
    IMPORTED_LOCATION "$${TFLM_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "$${TFLM_INCLUDE_DIRS}"
    INTERFACE_COMPILE_DEFINITIONS TF_LITE_STATIC_MEMORY)
endif()

# The model bytes (plain C++, no TFLM dependency), the op resolver and arena headers.
add_library($ns STATIC $sources)
target_include_directories($ns PUBLIC $${CMAKE_CURRENT_LIST_DIR})
target_compile_features($ns PUBLIC cxx_std_17)
if(TARGET tflm)
  target_link_libraries($ns PUBLIC tflm)
endif()

# The example program (main.cc); on a board, link it with your startup code and
# linker script as usual.
option(${name_upper}_MODEL_BUILD_EXAMPLE "Build main.cc (needs TFLM)" OFF)
if(${name_upper}_MODEL_BUILD_EXAMPLE)
  if(NOT TARGET tflm)
    message(FATAL_ERROR "${name_upper}_MODEL_BUILD_EXAMPLE needs TFLM: set TFLM_LIBRARY "
                        "and TFLM_INCLUDE_DIRS, or define a tflm target first")
  endif()
  add_executable(${ns}_example main.cc)
  target_link_libraries(${ns}_example PRIVATE $ns)
endif()
""")


_PROBE = Template("""
// TFLM keeps its persistent data at the end of the arena (the "tail": its allocator and
// planner, per-tensor and per-node structs, each kernel's Init data), and running out of
// room there is not an error status: the allocator objects, or a kernel's Init data, come
// back null and the next step dereferences them, so the program aborts instead of
// printing advice. The planned tail size (the arena header) covers the kernels; the same
// allocations TFLM makes for its own objects, tried first on a throwaway allocator over
// the arena, cover a TFLM build whose structs are larger than planned.
bool ArenaHoldsTflmSetup() {
  tflite::SingleArenaBufferAllocator probe(tensor_arena, sizeof(tensor_arena));
  return probe.AllocatePersistentBuffer(sizeof(tflite::SingleArenaBufferAllocator),
                                        alignof(tflite::SingleArenaBufferAllocator)) != nullptr &&
         probe.AllocatePersistentBuffer(sizeof(tflite::GreedyMemoryPlanner),
                                        alignof(tflite::GreedyMemoryPlanner)) != nullptr &&
         probe.AllocatePersistentBuffer(sizeof(tflite::MicroAllocator),
                                        alignof(tflite::MicroAllocator)) != nullptr$state_probe;
}
""")

# MicroResourceVariables::Create allocates the object and one MicroResourceVariable per
# variable (a private struct: two names, a buffer pointer, a size_t and flags, 40 bytes on
# a 64-bit host and 20 on a 32-bit MCU, as converters/mcu/persistent.py plans them), each
# aligned to MicroArenaBufferAlignment(); a failure there is a null dereference too.
_STATE_PROBE = Template(""" &&
         probe.AllocatePersistentBuffer(sizeof(tflite::MicroResourceVariables),
                                        tflite::MicroArenaBufferAlignment()) != nullptr &&
         probe.AllocatePersistentBuffer((sizeof(void*) == 8 ? 40u : 20u) * $count,
                                        tflite::MicroArenaBufferAlignment()) != nullptr""")


def _interpreter_setup(resource_variables: int) -> dict[str, str]:
    """How main.cc and the sketch construct the interpreter, with or without state."""
    state_probe = _STATE_PROBE.substitute(count=resource_variables) if resource_variables else ""
    probe = {"probe": _PROBE.substitute(state_probe=state_probe)}
    if not resource_variables:
        return {**probe,
            "interpreter_main": "  static tflite::MicroInterpreter interpreter(model, resolver, tensor_arena,\n"
                                "                                              sizeof(tensor_arena));",
            "interpreter_sketch": "  static tflite::MicroInterpreter static_interpreter(model, resolver, tensor_arena,\n"
                                  "                                                     sizeof(tensor_arena));",
            "state_includes": "",
        }
    setup = (
        f"  // The model keeps its state in {resource_variables} resource variable(s) (VAR_HANDLE):\n"
        "  // TFLM needs them created from the arena before the interpreter, in this order,\n"
        "  // which is how the planned arena counts them.\n"
        "  static tflite::MicroAllocator* allocator =\n"
        "      tflite::MicroAllocator::Create(tensor_arena, sizeof(tensor_arena));\n"
        "  static tflite::MicroResourceVariables* variables =\n"
        f"      tflite::MicroResourceVariables::Create(allocator, {resource_variables});\n")
    return {**probe,
        "interpreter_main": setup + "  static tflite::MicroInterpreter interpreter(model, resolver, allocator, variables);",
        "interpreter_sketch": setup + "  static tflite::MicroInterpreter static_interpreter(model, resolver, allocator, variables);",
        "state_includes": '#include "tensorflow/lite/micro/micro_resource_variable.h"\n',
    }
