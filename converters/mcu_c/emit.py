"""The generated C: NAME.h (sizes, quantization, one function) and NAME.c (weights in const
arrays, parameters in const structs, one static arena, the kernel calls in order).

Deterministic: the same model and name give byte-identical files (no dates, no paths).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from edgeserve.converters.mcu_c.planner import Plan
from edgeserve.converters.mcu_c.state import Variable
from edgeserve.converters.mcu_c.steps import Ref, Step
from edgeserve.tflite.model import Tensor

VALUES_PER_LINE = 24
# Kernel files every build needs; the operators' own .c files are added to these.
COMMON_FILES = ("es_kernels.h", "es_fixedpoint.h")


@dataclasses.dataclass(frozen=True)
class Io:
    tensor: Tensor
    scale: float
    zero_point: int


def _values(array: np.ndarray) -> str:
    # repr() of a Python float is the shortest text that reads back as the same double.
    flat = [repr(v) for v in array.reshape(-1).tolist()]
    lines = [", ".join(flat[i:i + VALUES_PER_LINE]) for i in range(0, len(flat), VALUES_PER_LINE)]
    return "\n".join(f"  {line}," for line in lines)


def _field(value: Any, name: str) -> str:
    if isinstance(value, Ref):
        return f"{name}_{value.name}"
    if isinstance(value, dict):
        return "{" + ", ".join(f".{k} = {_field(v, name)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "{" + ", ".join(str(int(v)) for v in value) + "}"
    return str(int(value))


def _output_macros(up: str, outputs: Sequence[Io]) -> str:
    """One output: its size, scale and zero point. Several: they lie back to back in the
    caller's buffer, each with its offset, size, scale and zero point."""
    shape = lambda t: "x".join(str(d) for d in t.shape)  # noqa: E731
    first = outputs[0]
    if len(outputs) == 1:
        return (f"#define {up}_OUTPUT_BYTES {first.tensor.nbytes}   /* {first.tensor.dtype_name} {shape(first.tensor)} */\n"
                f"#define {up}_OUTPUT_TYPE {first.tensor.dtype_name}_t\n")
    lines = [f"#define {up}_OUTPUT_BYTES {sum(o.tensor.nbytes for o in outputs)}   /* {len(outputs)} outputs, "
             "back to back */",
             f"#define {up}_OUTPUT_TYPE {first.tensor.dtype_name}_t"]
    return "\n".join(lines) + "\n" + _back_to_back(up, "OUTPUT", outputs)


def _back_to_back(up: str, kind: str, tensors: Sequence[Io]) -> str:
    """Several inputs or outputs lying back to back in the caller's one buffer: their count,
    and each one's offset, size, scale and zero point (``kind``: "INPUT" or "OUTPUT")."""
    shape = lambda t: "x".join(str(d) for d in t.shape)  # noqa: E731
    lines = [f"#define {up}_{kind}_COUNT {len(tensors)}"]
    offset = 0
    for i, io in enumerate(tensors):
        label = io.tensor.name.replace("*/", "* /")
        lines += [f"/* {kind.lower()} {i}: {label}, {io.tensor.dtype_name} {shape(io.tensor)} */",
                  f"#define {up}_{kind}{i}_OFFSET {offset}",
                  f"#define {up}_{kind}{i}_BYTES {io.tensor.nbytes}",
                  f"#define {up}_{kind}{i}_SCALE {io.scale:.9g}f",
                  f"#define {up}_{kind}{i}_ZERO_POINT {io.zero_point}"]
        offset += io.tensor.nbytes
    return "\n".join(lines) + "\n"


def render_header(name: str, model_label: str, all_inputs: Sequence[Io], outputs: Sequence[Io], plan: Plan,
                  variables: Sequence[Variable] = (), library: str | None = None) -> str:
    up = name.upper()
    shape = lambda t: "x".join(str(d) for d in t.shape)  # noqa: E731
    out_type = f"{outputs[0].tensor.dtype_name}_t"
    inputs = all_inputs[0]
    in_type = f"{inputs.tensor.dtype_name}_t"
    if len(all_inputs) == 1:
        input_lines = (f"#define {up}_INPUT_BYTES {inputs.tensor.nbytes}   /* {inputs.tensor.dtype_name} "
                       f"{shape(inputs.tensor)} */\n#define {up}_INPUT_TYPE {in_type}\n")
        input_quantization = (f"#define {up}_INPUT_SCALE {inputs.scale:.9g}f\n"
                              f"#define {up}_INPUT_ZERO_POINT {inputs.zero_point}\n")
    else:
        input_lines = (f"#define {up}_INPUT_BYTES {sum(x.tensor.nbytes for x in all_inputs)}   /* {len(all_inputs)} "
                       f"inputs, back to back */\n#define {up}_INPUT_TYPE {in_type}\n")
        input_quantization = _back_to_back(up, "INPUT", all_inputs)
    single = (f"#define {up}_OUTPUT_SCALE {outputs[0].scale:.9g}f\n"
              f"#define {up}_OUTPUT_ZERO_POINT {outputs[0].zero_point}\n") if len(outputs) == 1 else ""
    state_bytes = sum(v.nbytes for v in variables)
    stateful = (f"""
/* Streaming state: {len(variables)} variable(s), {state_bytes} bytes in static buffers outside the
 * arena, kept between calls. {name}_reset() restores their initial values (the first call
 * to {name}_invoke() does it too); call it when a new stream starts. */
#define {up}_STATE_BYTES {state_bytes}
""" if variables else "")
    reset = f"void {name}_reset(void);\n" if variables else ""
    return f"""/* {name}: generated by edgeserve from {model_label}. Do not edit.
 *
 * Plain C99, no interpreter, no heap. Call {name}_invoke() with the quantized input;
 * it returns 0 and fills the output, or a negative code. The input is read in place
 * (never written), so it may live in flash or in a DMA buffer.
 *
 * One caller at a time: one static arena of {name.upper()}_ARENA_BYTES holds every
 * intermediate tensor (and the streaming state, if any, is one stream's). Call it from one
 * thread, or take a lock around it, and not from an interrupt handler that can interrupt a
 * call. Two models are two generated files with two names (each has its own arena); two
 * streams of one model are the same model generated under two names. Debug builds (without
 * NDEBUG) return {up}_ERROR_REENTERED when a call enters while another one runs. */
#ifndef {up}_H
#define {up}_H

#include <stdint.h>

{input_lines}{_output_macros(up, outputs)}#define {up}_ARENA_BYTES {plan.arena_bytes}
{input_quantization}{single}
#define {up}_ERROR_NULL_POINTER (-1)
#define {up}_ERROR_REENTERED (-4)   /* debug builds: a call entered while another one ran */
{_library_errors(up, library)}{stateful}
#ifdef __cplusplus
extern "C" {{
#endif

int {name}_invoke(const {in_type} *input, {out_type} *output);
{reset}
#ifdef __cplusplus
}}
#endif

#endif
"""


def _library_errors(up: str, library: str | None) -> str:
    if library is None:
        return ""
    return (f"#define {up}_ERROR_KERNEL (-2)    /* a {library} kernel refused its arguments */\n"
            f"#define {up}_ERROR_SCRATCH (-3)   /* test builds: {library} asked for more scratch than reserved */\n")


def _pointer(plan: Plan, tensor: int, name: str, writable: bool = False) -> str:
    """The C expression of ``tensor``'s first byte (an int8_t pointer)."""
    where, offset = plan.location[tensor]
    if where == "input":
        assert not writable, "no kernel writes into the caller's input"
        return f"input8 + {offset}" if offset else "input8"
    if where.startswith("state"):
        assert not writable, "variables change only through ASSIGN_VARIABLE"
        return f"{name}_{where[:5]}_{where[5:]}" + (f" + {offset}" if offset else "")
    return f"arena + {offset}"


def _typed(kernel: str, pointer: str, writable: bool = False) -> str:
    """``pointer`` as the kernel takes it: the _s16 kernels take int16_t pointers."""
    if not kernel.endswith("_s16"):
        return pointer
    return f"(int16_t *)({pointer})" if writable else f"(const int16_t *)({pointer})"


def render_source(name: str, model_label: str, steps: Sequence[Step], plan: Plan, sizes: Any,
                  outputs: Sequence[int], variables: Sequence[Variable] = (), output_type: str = "int8_t",
                  input_type: str = "int8_t") -> str:
    up = name.upper()
    library = any(step.library_call is not None and step.library_call.library == "cmsis-nn" for step in steps)
    headers = sorted({step.library_call.header for step in steps if step.library_call and step.library_call.header})
    parts = [f"""/* {name}: generated by edgeserve from {model_label}. Do not edit.
 * Arena: {plan.arena_bytes} bytes, placed by {plan.method}; lower bound {plan.lower_bound}. */
#include <stddef.h>
#include <string.h>

#include "es_kernels.h"
""" + "".join(f'#include "{header}"\n' for header in headers) + f"""#include "{name}.h"
""" + (_LIBRARY_PRELUDE.replace("@UP@", up) if library else "")]
    parts.append("/* Weights and per-channel requantization: const, so they stay in flash. */")
    for step in steps:
        for array in step.arrays:
            parts.append(f"static const {array.ctype} {name}_{array.name}[{array.values.size}] = {{\n"
                         f"{_values(array.values)}\n}};")
    parts.append("")
    for step in steps:
        if step.library_call is not None:
            parts.extend(d.replace("@P@", f"{name}_") for d in step.library_call.declarations)
    for position, step in enumerate(steps):
        if step.params_type is None or step.library_call is not None:
            continue
        for array in step.struct_arrays:
            items = ",\n".join(f"  {_field(item, name)}" for item in array.items)
            parts.append(f"static const {array.ctype} {name}_{array.name}[{len(array.items)}] = {{\n{items}\n}};")
        fields = [f"  .{k} = {_field(v, name)}," for k, v in step.params.items()]
        for array in step.arrays:
            role = {"w": "filter", "b": "bias", "l": "bias64", "m": "multiplier", "s": "shift", "k": None,
                    "t": None, "g": None}[array.name[0]]
            if role:  # "k": a constant operand, passed as an argument; "t", "g": referenced by params
                fields.append(f"  .{role} = {name}_{array.name},")
        parts.append(f"static const {step.params_type} {name}_p{position} = {{  /* {step.op} {step.index} */\n"
                     + "\n".join(fields) + "\n};")
    words = max(1, (plan.arena_bytes + 3) // 4)
    parts.append(f"""
/* Every intermediate tensor at an offset fixed at generation time (int32_t: word-aligned). */
static int32_t {name}_arena_words[{words}];

#ifdef ES_REGION_CHECK
/* Test builds only: before each kernel, everything in the arena but that kernel's own
 * tensors is made unreadable (AddressSanitizer), proving no kernel strays. */
void es_region_check(const int8_t *arena, int32_t arena_bytes, const int32_t *regions, int32_t count);
#define {up}_REGIONS(...) do {{ static const int32_t r_[] = {{__VA_ARGS__}}; \\
    es_region_check(arena, {up}_ARENA_BYTES, r_, (int32_t)(sizeof r_ / sizeof r_[0]) / 2); }} while (0)
#else
#define {up}_REGIONS(...) do {{ }} while (0)
#endif

#ifdef ES_STEP_TICKS
/* Test builds only: the board's harness notes the time after each operator's kernel. */
void es_step_done(int32_t op_index);
#define {up}_STEP_DONE(op) es_step_done(op)
#else
#define {up}_STEP_DONE(op) do {{ }} while (0)
#endif
{_render_state(name, variables)}
static int {name}_run(const {input_type} *input, {output_type} *output) {{
  int8_t *arena = (int8_t *){name}_arena_words;
  const int8_t *input8 = (const int8_t *)input;  /* tensors are placed and read as bytes */
  if (input == NULL || output == NULL) return {up}_ERROR_NULL_POINTER;""" + (f"""
  if (!{name}_ready) {name}_reset();""" if variables else ""))
    for position, step in enumerate(steps):
        if step.kernel is None:
            continue
        regions: list[int] = []
        for t in (*step.inputs, step.output):
            where, offset = plan.location.get(t, ("none", 0))
            if where == "arena":
                regions += [offset, sizes(t)]
        if step.kernel == "memcpy":  # ASSIGN_VARIABLE: the new value into the variable's buffer
            parts.append(f"  {up}_REGIONS({', '.join(str(r) for r in regions)});" if regions else "")
            parts.append(f"  memcpy({name}_state_{step.state}, {_pointer(plan, step.inputs[0], name)}, "
                         f"{sizes(step.inputs[0])});  /* {step.index}: ASSIGN_VARIABLE {step.params['name']} */")
            continue
        if step.library_call is not None:
            parts.extend(_library_call(name, position, step, plan, regions))
            parts.append(f"  {up}_STEP_DONE({step.index});")
            continue
        args = [f"&{name}_p{position}"]
        kernel = step.kernel
        if position in plan.inplace_sources:
            assert step.inplace is not None
            kernel = step.inplace.kernel
            temp = plan.temp_offset(position)
            if temp is not None:
                regions += [temp, step.inplace.temp_bytes]
        operands = [_typed(kernel, f"{name}_{t.name}" if isinstance(t, Ref) else _pointer(plan, t, name))
                    for t in (step.call_inputs or step.inputs)]
        if step.pack_inputs:  # a C99 compound literal: the kernel takes an array of inputs
            args.append("(const int8_t *const[]){" + ", ".join(operands) + "}")
        else:
            args += operands
        args.append(_typed(kernel, _pointer(plan, step.output, name, writable=True), writable=True))
        if position in plan.inplace_sources and plan.temp_offset(position) is not None:
            args.append(f"arena + {plan.temp_offset(position)}")
        parts.append(f"  {up}_REGIONS({', '.join(str(r) for r in regions)});")
        parts.append(f"  {kernel}({', '.join(args)});  /* {step.index}: {step.op} */")
        parts.append(f"  {up}_STEP_DONE({step.index});")
    if len(outputs) == 1:
        parts.append(f"  {up}_REGIONS({plan.location[outputs[0]][1]}, {up}_OUTPUT_BYTES);")
        parts.append(f"  memcpy(output, {_pointer(plan, outputs[0], name)}, {up}_OUTPUT_BYTES);")
    else:
        for i, tensor in enumerate(outputs):
            parts.append(f"  {up}_REGIONS({plan.location[tensor][1]}, {up}_OUTPUT{i}_BYTES);")
            parts.append(f"  memcpy((int8_t *)output + {up}_OUTPUT{i}_OFFSET, {_pointer(plan, tensor, name)}, "
                         f"{up}_OUTPUT{i}_BYTES);")
    parts.append("  return 0;\n}\n")
    parts.append(_entry(name, up, input_type, output_type))
    return "\n".join(parts)


def _entry(name: str, up: str, input_type: str, output_type: str) -> str:
    """NAME_invoke around the body. One static arena (and the state) serves every call, so two
    callers at once (two threads, or an interrupt handler calling into a running invoke) give
    wrong outputs (80 to 99 % of the time with two threads, TSan counted 71 races). Debug builds
    (no NDEBUG) refuse a call that enters while another runs; the check is a flag, not an atomic
    (C99 has none), so it catches overlaps, not every one."""
    return f"""#ifndef NDEBUG
static volatile int {name}_running;

int {name}_invoke(const {input_type} *input, {output_type} *output) {{
  int status;
  if ({name}_running) return {up}_ERROR_REENTERED;
  {name}_running = 1;
  status = {name}_run(input, output);
  {name}_running = 0;
  return status;
}}
#else
int {name}_invoke(const {input_type} *input, {output_type} *output) {{
  return {name}_run(input, output);
}}
#endif
"""


# Before the first library call: the library's declarations, and the checks test builds make.
_LIBRARY_PRELUDE = """#include "arm_nnfunctions.h"

#if defined(ARM_MATH_MVEI)
#error "the CMSIS-NN scratch buffers here are sized for DSP and plain C builds, not MVE (Helium) cores"
#endif

#if defined(ES_SCRATCH_CHECK) && defined(ARM_MATH_DSP)
/* Test builds only: on a DSP core, the library's own buffer-size function asks for exactly
 * the scratch reserved in the arena; elsewhere (plain C), for no more. */
#define @UP@_SCRATCH(needed, reserved) do { if ((needed) != (reserved)) return @UP@_ERROR_SCRATCH; } while (0)
#elif defined(ES_SCRATCH_CHECK)
#define @UP@_SCRATCH(needed, reserved) do { if ((needed) > (reserved)) return @UP@_ERROR_SCRATCH; } while (0)
#else
#define @UP@_SCRATCH(needed, reserved) do { } while (0)
#endif
"""


def _library_call(name: str, position: int, step: Step, plan: Plan, regions: list[int]) -> list[str]:
    """One library call in the invoke function: its scratch context, regions and status check."""
    call = step.library_call
    assert call is not None
    up = name.upper()
    scratch = plan.scratch_offset(position)
    if scratch is not None:
        regions = [*regions, scratch, step.scratch_bytes]
    operands = [f"{name}_{t.name}" if isinstance(t, Ref) else _pointer(plan, t, name)
                for t in (step.call_inputs or step.inputs)]
    values = {"@P@": f"{name}_", "@OUT@": _pointer(plan, step.output, name, writable=True),
              "@CTX@": "&ctx_", "@SCRATCH@": f"arena + {scratch}" if scratch is not None else "NULL",
              **{f"@IN{i}@": operand for i, operand in enumerate(operands)}}

    def fill(text: str) -> str:
        for key, value in values.items():
            text = text.replace(key, value)
        return text

    lines = [f"  {up}_REGIONS({', '.join(str(r) for r in regions)});"]
    invocation = f"{fill(call.function)}({', '.join(fill(a) for a in call.arguments)})"
    uses_ctx = "@CTX@" in call.arguments
    if uses_ctx:
        buffer = f"arena + {scratch}" if scratch is not None else "NULL"
        lines.append(f"  {{  /* {step.index}: {step.op} */")
        lines.append(f"    const cmsis_nn_context ctx_ = {{{buffer}, {step.scratch_bytes}}};")
        if call.scratch_check:
            lines.append(f"    {up}_SCRATCH({fill(call.scratch_check)}, {step.scratch_bytes});")
        lines.append(f"    if ({invocation} != ARM_CMSIS_NN_SUCCESS) return {up}_ERROR_KERNEL;" if call.returns_status
                     else f"    {invocation};")
        lines.append("  }")
    elif call.returns_status:
        lines.append(f"  if ({invocation} != ARM_CMSIS_NN_SUCCESS) return {up}_ERROR_KERNEL;  /* {step.index}: {step.op} */")
    else:
        lines.append(f"  {invocation};  /* {step.index}: {step.op} */")
    return lines


def _render_state(name: str, variables: Sequence[Variable]) -> str:
    """Variables' buffers, their initial values (const: flash) and NAME_reset()."""
    if not variables:
        return ""
    lines = ["", "/* Streaming state: one static buffer per variable, kept between calls. */"]
    for v in variables:
        lines.append(f"static int8_t {name}_state_{v.index}[{v.nbytes}];  /* {v.name} */")
        lines.append(f"static const int8_t {name}_init_{v.index}[{v.nbytes}] = {{\n{_values(v.initial)}\n}};")
    lines.append(f"static int {name}_ready;")
    lines.append("")
    lines.append(f"void {name}_reset(void) {{")
    lines += [f"  memcpy({name}_state_{v.index}, {name}_init_{v.index}, {v.nbytes});" for v in variables]
    lines.append(f"  {name}_ready = 1;")
    lines.append("}")
    return "\n".join(lines) + "\n"
