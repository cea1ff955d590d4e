"""`-t mcu-c --cmsis-nn DIR`: the layers CMSIS-NN has a kernel for call it; the rest keep
edgeserve's portable kernels.

CMSIS-NN is Arm's library of int8 kernels for Cortex-M (DSP and MVE paths, and a plain C
path elsewhere); TFLM's own Cortex-M builds call it. It is bit-exact with TFLM's reference
kernels by design, so a step moved to it keeps the same oracle. Each choice is made per
layer here, with the reason a layer stays portable; the parameters are the ones the step
already computed (TFLM's Prepare arithmetic), passed in CMSIS-NN's structs.

Scratch buffers are sized with the DSP build's rules (Cortex-M4/M7/M33: what
``arm_*_get_buffer_size_dsp`` returns), which the plain C path never exceeds; an MVE build
(Cortex-M55/M85) asks for other sizes, so the generated file refuses to compile for one.
Test builds also compare each size with what the library itself asks for.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from edgeserve.converters.microcontroller.arena import cmsis_nn_avgpool_scratch, cmsis_nn_conv_scratch, cmsis_nn_depthwise_scratch
from edgeserve.converters.mcu_c.cmsis_nn_tree import HEADER, CmsisNnTree
from edgeserve.converters.mcu_c.specialise import generated_kernel
from edgeserve.converters.mcu_c.steps import ConstArray, LibraryCall, Step
from edgeserve.errors import InputError

LIBRARY = "cmsis-nn"
# Operator -> the CMSIS-NN function the generated code calls (the tree must declare it).
FUNCTIONS = {
    "CONV_2D": "arm_convolve_wrapper_s8",
    "DEPTHWISE_CONV_2D": "arm_depthwise_conv_wrapper_s8",
    "FULLY_CONNECTED": "arm_fully_connected_wrapper_s8",
    "AVERAGE_POOL_2D": "arm_avgpool_s8",
    "MAX_POOL_2D": "arm_max_pool_s8",
    "ADD": "arm_elementwise_add_s8",
    "MUL": "arm_elementwise_mul_s8",
    "SOFTMAX": "arm_softmax_s8",
    "MAXIMUM": "arm_maximum_s8",
    "MINIMUM": "arm_minimum_s8",
}


@dataclasses.dataclass(frozen=True)
class Choice:
    """What one step runs: the library's kernel, or the portable one and why."""

    position: int
    op: str
    index: int
    kernel: str
    library: str  # "cmsis-nn", "generated" or "portable"
    why: str | None = None  # a portable step of an operator CMSIS-NN covers: why not here

    def record(self) -> dict[str, Any]:
        return {"op": self.op, "index": self.index, "kernel": self.kernel, "library": self.library,
                **({"why_portable": self.why} if self.why else {})}


def _dims(n: int, h: int, w: int, c: int) -> str:
    return f"{{.n = {n}, .h = {h}, .w = {w}, .c = {c}}}"


def _activation(p: dict[str, Any]) -> str:
    return f".activation = {{.min = {p['act_min']}, .max = {p['act_max']}}}"


def _tile(h: int, w: int) -> str:
    return f"{{.w = {w}, .h = {h}}}"


def _int32_shifts(step: Step) -> list[ConstArray]:
    """CMSIS-NN reads shifts as int32 (edgeserve's kernels keep them in int8: less flash)."""
    return [ConstArray(a.name, "int32_t", a.values.astype(np.int32)) if a.name.startswith("s") else a
            for a in step.arrays]


def _array(step: Step, prefix: str) -> str | None:
    return next((f"@P@{a.name}" for a in step.arrays if a.name.startswith(prefix)), None)


def _conv(step: Step) -> tuple[LibraryCall, int]:
    p, i = step.params, step.index
    depthwise = step.op == "DEPTHWISE_CONV_2D"
    dims = [_dims(p["batches"], p["in_h"], p["in_w"], p["in_c"]),
            # conv filters are [out_c, k_h, k_w, in_c / groups]; depthwise [1, k_h, k_w, out_c]
            _dims(1, p["k_h"], p["k_w"], p["out_c"]) if depthwise else _dims(p["out_c"], p["k_h"], p["k_w"], p["k_c"]),
            _dims(1, 1, 1, p["out_c"]), _dims(p["batches"], p["out_h"], p["out_w"], p["out_c"])]
    kind = "cmsis_nn_dw_conv_params" if depthwise else "cmsis_nn_conv_params"
    multiplier = f".ch_mult = {p['depth_multiplier']}, " if depthwise else ""
    declarations = (
        f"static const {kind} @P@cp{i} = {{.input_offset = {p['in_offset']}, .output_offset = {p['out_offset']}, "
        f"{multiplier}.stride = {_tile(p['stride_h'], p['stride_w'])}, .padding = {_tile(p['pad_h'], p['pad_w'])}, "
        f".dilation = {_tile(p['dil_h'], p['dil_w'])}, {_activation(p)}}};",
        # CMSIS-NN's struct holds non-const pointers; it only reads through them.
        f"static const cmsis_nn_per_channel_quant_params @P@cq{i} = {{.multiplier = (int32_t *)@P@m{i}, "
        f".shift = (int32_t *)@P@s{i}}};",
        f"static const cmsis_nn_dims @P@cd{i}[4] = {{{', '.join(dims)}}};",
    )
    function = FUNCTIONS[step.op]
    scratch = _conv_scratch(p, depthwise)
    bias = _array(step, "b") or "NULL"
    call = LibraryCall(LIBRARY, function, declarations,
                       ("@CTX@", f"&@P@cp{i}", f"&@P@cq{i}", f"&@P@cd{i}[0]", "@IN0@", f"&@P@cd{i}[1]", f"@P@w{i}",
                        f"&@P@cd{i}[2]", bias, f"&@P@cd{i}[3]", "@OUT@"),
                       scratch_check=f"{function}_get_buffer_size(&@P@cp{i}, &@P@cd{i}[0], &@P@cd{i}[1], &@P@cd{i}[3])")
    return call, scratch


def _conv_scratch(p: dict[str, Any], depthwise: bool) -> int:
    """The DSP build's arm_*_wrapper_s8_get_buffer_size_dsp for these parameters (the rules
    -t mcu plans TFLM's CMSIS-NN arena with)."""
    if depthwise:
        return cmsis_nn_depthwise_scratch(p["batches"], p["in_c"], p["out_c"], p["k_h"], p["k_w"], p["pad_h"],
                                          p["pad_w"], p["dil_h"], p["dil_w"])
    return cmsis_nn_conv_scratch(p["k_h"], p["k_w"], p["in_c"], p["k_c"], p["pad_h"], p["pad_w"], p["dil_h"], p["dil_w"])


def _fully_connected(step: Step) -> tuple[LibraryCall, int]:
    p, i = step.params, step.index
    declarations = (
        f"static const cmsis_nn_fc_params @P@cp{i} = {{.input_offset = {p['in_offset']}, "
        f".filter_offset = {p['filter_offset']}, .output_offset = {p['out_offset']}, {_activation(p)}}};",
        f"static const cmsis_nn_quant_params @P@cq{i} = {{.multiplier = (int32_t *)@P@m{i}, "
        f".shift = (int32_t *)@P@s{i}, .is_per_channel = {p['per_channel']}}};",
        # TFLM's layout of the FC dims: the filter's n is the accumulation depth.
        f"static const cmsis_nn_dims @P@cd{i}[4] = {{{_dims(p['batches'], 1, 1, p['in_depth'])}, "
        f"{_dims(p['in_depth'], 1, 1, p['out_depth'])}, {_dims(1, 1, 1, p['out_depth'])}, "
        f"{_dims(p['batches'], 1, 1, p['out_depth'])}}};",
    )
    call = LibraryCall(LIBRARY, FUNCTIONS[step.op], declarations,
                       ("@CTX@", f"&@P@cp{i}", f"&@P@cq{i}", f"&@P@cd{i}[0]", "@IN0@", f"&@P@cd{i}[1]", f"@P@w{i}",
                        f"&@P@cd{i}[2]", _array(step, "b") or "NULL", f"&@P@cd{i}[3]", "@OUT@"),
                       scratch_check=f"arm_fully_connected_s8_get_buffer_size(&@P@cd{i}[1])")
    return call, 0  # the DSP build needs no kernel sums (an MVE build would)


def _pool(step: Step) -> tuple[LibraryCall, int]:
    p, i = step.params, step.index
    declarations = (
        f"static const cmsis_nn_pool_params @P@cp{i} = {{.stride = {_tile(p['stride_h'], p['stride_w'])}, "
        f".padding = {_tile(p['pad_h'], p['pad_w'])}, {_activation(p)}}};",
        f"static const cmsis_nn_dims @P@cd{i}[3] = {{{_dims(1, p['in_h'], p['in_w'], p['channels'])}, "
        f"{_dims(1, p['k_h'], p['k_w'], 1)}, {_dims(1, p['out_h'], p['out_w'], p['channels'])}}};",
    )
    average = step.op == "AVERAGE_POOL_2D"
    call = LibraryCall(LIBRARY, FUNCTIONS[step.op], declarations,
                       ("@CTX@", f"&@P@cp{i}", f"&@P@cd{i}[0]", "@IN0@", f"&@P@cd{i}[1]", f"&@P@cd{i}[2]", "@OUT@"),
                       scratch_check=(f"arm_avgpool_s8_get_buffer_size({p['out_w']}, {p['channels']})"
                                      if average else None))
    return call, cmsis_nn_avgpool_scratch(p["channels"]) if average else 0


def _elementwise(step: Step) -> tuple[LibraryCall, int]:
    p = step.params
    count = int(np.prod(p["dims"]))
    operands = ("@IN0@", "@IN1@")
    if step.op == "ADD":
        arguments = (*operands, str(p["in1_offset"]), str(p["in1_multiplier"]), str(p["in1_shift"]),
                     str(p["in2_offset"]), str(p["in2_multiplier"]), str(p["in2_shift"]), str(p["left_shift"]),
                     "@OUT@", str(p["out_offset"]), str(p["out_multiplier"]), str(p["out_shift"]),
                     str(p["act_min"]), str(p["act_max"]), str(count))
    else:
        arguments = (*operands, str(p["in1_offset"]), str(p["in2_offset"]), "@OUT@", str(p["out_offset"]),
                     str(p["out_multiplier"]), str(p["out_shift"]), str(p["act_min"]), str(p["act_max"]), str(count))
    return LibraryCall(LIBRARY, FUNCTIONS[step.op], (), arguments), 0


def _extreme(step: Step) -> tuple[LibraryCall, int]:
    """MAXIMUM/MINIMUM: CMSIS-NN broadcasts over 4-D shapes as TFLM's own CMSIS-NN build calls
    it; an operand's shape is the output's, with 1 along the axes it is broadcast over."""
    p, i = step.params, step.index
    shapes = [[d if s else 1 for d, s in zip(p["dims"], p[key])] for key in ("stride1", "stride2")]
    declarations = (f"static const cmsis_nn_dims @P@cd{i}[3] = {{{_dims(*shapes[0])}, {_dims(*shapes[1])}, "
                    f"{_dims(*p['dims'])}}};",)
    arguments = ("@CTX@", "@IN0@", f"&@P@cd{i}[0]", "@IN1@", f"&@P@cd{i}[1]", "@OUT@", f"&@P@cd{i}[2]")
    return LibraryCall(LIBRARY, FUNCTIONS[step.op], declarations, arguments), 0


def _softmax(step: Step) -> tuple[LibraryCall, int]:
    p = step.params
    arguments = ("@IN0@", str(p["rows"]), str(p["depth"]), str(p["input_multiplier"]), str(p["input_left_shift"]),
                 str(p["diff_min"]), "@OUT@")
    return LibraryCall(LIBRARY, FUNCTIONS[step.op], (), arguments, returns_status=False), 0


def _why_portable(step: Step) -> str | None:
    """None when CMSIS-NN takes this step; else why it stays on the portable kernel."""
    p = step.params
    if step.op in ("AVERAGE_POOL_2D", "MAX_POOL_2D") and p["batches"] != 1:
        return "CMSIS-NN's pooling takes one image"
    if step.op in ("ADD", "MUL") and not p["same_shape"]:
        return "a broadcast: CMSIS-NN's elementwise kernels take equal shapes"
    return None


BUILDERS = {"CONV_2D": _conv, "DEPTHWISE_CONV_2D": _conv, "FULLY_CONNECTED": _fully_connected,
            "AVERAGE_POOL_2D": _pool, "MAX_POOL_2D": _pool, "ADD": _elementwise, "MUL": _elementwise,
            "SOFTMAX": _softmax, "MAXIMUM": _extreme, "MINIMUM": _extreme}


def assign(steps: list[Step], tree: CmsisNnTree | None = None) -> tuple[list[Step], list[Choice]]:
    """The steps with CMSIS-NN calls where a layer fits, and the choice for every step.

    ``tree``: the user's CMSIS-NN, whose header must declare every function a layer needs
    (a tree too old for one is refused by name, before anything is written); None: assume
    it does (tests of the generator alone).
    """
    out: list[Step] = []
    choices: list[Choice] = []
    for position, step in enumerate(steps):
        if step.kernel is None or step.kernel == "memcpy":
            out.append(step)
            continue
        if step.library_call is not None:  # a kernel generated for this layer (specialise.py)
            out.append(step)
            choices.append(Choice(position, step.op, step.index, generated_kernel(step), step.library_call.library))
            continue
        if step.kernel.endswith("_s16") and step.op in BUILDERS:
            out.append(step)  # CMSIS-NN has _s16 kernels; calling them is not built yet
            choices.append(Choice(position, step.op, step.index, step.kernel, "portable",
                                  "int16 activations (edgeserve calls CMSIS-NN's int8 kernels only)"))
            continue
        if step.op not in BUILDERS or step.kernel != _PORTABLE[step.op]:
            out.append(step)
            choices.append(Choice(position, step.op, step.index, step.kernel, "portable"))
            continue
        why = _why_portable(step)
        function = FUNCTIONS[step.op]
        if why is None and tree is not None and function not in tree.declared:
            raise InputError(
                f"the CMSIS-NN at {tree.root} is too old for {step.op} (operator {step.index}): its {HEADER.as_posix()} "
                f"does not declare {function}; point --cmsis-nn at a newer CMSIS-NN, or leave it out")
        if why is not None:
            out.append(step)
            choices.append(Choice(position, step.op, step.index, step.kernel, "portable", why))
            continue
        call, scratch = BUILDERS[step.op](step)
        # The library's kernels are not written to overwrite their input, but elementwise
        # ones (read element i, write element i) and softmax (reads a row, then writes it)
        # may, as the portable ones do.
        inplace = step.inplace if step.op in ("ADD", "MUL", "SOFTMAX") else None
        out.append(dataclasses.replace(step, arrays=_int32_shifts(step), library_call=call, scratch_bytes=scratch,
                                       inplace=inplace, source=None))
        choices.append(Choice(position, step.op, step.index, call.function, LIBRARY))
    return out, choices


# The portable kernel each operator lowers to; a step lowered otherwise (none today) is
# left alone.
_PORTABLE = {"CONV_2D": "es_conv2d", "DEPTHWISE_CONV_2D": "es_depthwise_conv2d",
             "FULLY_CONNECTED": "es_fully_connected", "AVERAGE_POOL_2D": "es_average_pool",
             "MAX_POOL_2D": "es_max_pool", "ADD": "es_add", "MUL": "es_mul", "SOFTMAX": "es_softmax",
             "MAXIMUM": "es_maximum", "MINIMUM": "es_minimum"}
