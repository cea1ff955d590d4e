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
The text is in firmware/templates/tflm/ (read through microcontroller/templates.py); this module
fills it in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from edgeserve.errors import InputError
from edgeserve.converters.microcontroller.names import c_identifier
from edgeserve.converters.microcontroller.templates import template, text

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
_HELPERS = template("tflm/helpers.cc.in")

_QUANTIZE = text("tflm/quantize.cc.in")

_DEQUANTIZE = text("tflm/dequantize.cc.in")

_MAIN = template("tflm/main.cc.in")

_SKETCH = template("tflm/sketch.ino.in")

_CMAKE = template("tflm/CMakeLists.txt.in")


_PROBE = template("tflm/probe.cc.in")

# MicroResourceVariables::Create allocates the object and one MicroResourceVariable per
# variable (a private struct: two names, a buffer pointer, a size_t and flags, 40 bytes on
# a 64-bit host and 20 on a 32-bit MCU, as converters/tflm/persistent.py plans them), each
# aligned to MicroArenaBufferAlignment(); a failure there is a null dereference too.
_STATE_PROBE = template("tflm/state_probe.cc.in")


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
