"""From full-INT8 .tflite bytes to the files of OUT/mcu-c/: lower, plan, emit."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from importlib import resources

import numpy as np

from edgeserve.converters.mcu_c import emit
from edgeserve.converters.mcu_c import specialise
from edgeserve.converters.mcu_c.generated_plan import Stream, fewest_chain_bytes, plan_generated
from edgeserve.converters.mcu_c.cmsis_nn import LIBRARY, Choice, assign
from edgeserve.converters.mcu_c.cmsis_nn_tree import CmsisNnTree, cmake_snippet
from edgeserve.converters.mcu_c.lower import Lowering, UnsupportedOperatorError, _q
from edgeserve.converters.mcu_c.steps import Step
from edgeserve.converters.mcu_c.planner import Plan, plan
from edgeserve.converters.mcu_c.project import project_files
from edgeserve.errors import InputError
from edgeserve.tflite.model import TfliteModel


KERNELS = ("portable", "generated")  # --kernels


@dataclasses.dataclass
class Generated:
    name: str
    files: dict[str, str]  # relative path -> text
    steps: list[Step]
    plan: Plan
    kernel_files: tuple[str, ...]
    input_bytes: int
    output_bytes: int  # every output, back to back in the model's order
    weight_bytes: int
    macs: int  # multiply-accumulates per inference (convolutions and fully connected layers)
    state_bytes: int = 0  # variables' buffers, outside the arena
    # Where each output lies in the caller's output buffer: name, offset, bytes, shape, scale, zero point.
    output_layout: list[dict[str, object]] = dataclasses.field(default_factory=list)
    # --cmsis-nn or --kernels generated: the kernel each step runs, and the library's sources
    # the model needs.
    choices: list[Choice] = dataclasses.field(default_factory=list)
    library_sources: list[str] = dataclasses.field(default_factory=list)
    # --kernels generated: the layers of a generated kernel's shape that kept another kernel,
    # operator index -> why.
    not_generated: dict[int, str] = dataclasses.field(default_factory=dict)
    kernels: str = "portable"  # --kernels
    int8_weights: tuple[int, ...] = ()  # generated layers whose weights stay int8 (a flash budget)
    streams: list[Stream] = dataclasses.field(default_factory=list)  # 1x1 -> stride-2 depthwise pairs considered

    def summary(self) -> dict[str, object]:
        library = {}
        if self.library_sources:
            on_library = [c for c in self.choices if c.library == LIBRARY]
            library = {"cmsis_nn": {"layers": len(on_library), "of": len(self.choices),
                                    "functions": sorted({c.kernel for c in on_library}),
                                    "sources": self.library_sources,
                                    "scratch_bytes": max((s.scratch_bytes for s in self.steps), default=0)}}
        generated = [c for c in self.choices if c.library == specialise.LIBRARY]
        if self.kernels == "generated":
            library["generated_kernels"] = {"layers": len(generated), "of": len(self.choices),
                                            "kernels": sorted({c.kernel for c in generated}),
                                            "not_generated": {str(k): v for k, v in sorted(self.not_generated.items())},
                                            "int8_weights": list(self.int8_weights),
                                            "streamed": [stream.record() for stream in self.streams]}
        return {"macs": self.macs, "state_bytes": self.state_bytes, "arena_bytes": self.plan.arena_bytes, "arena_lower_bound": self.plan.lower_bound,
                "planner": self.plan.method, "planner_optimal": self.plan.optimal,
                "in_place_steps": len(self.plan.inplace_sources),
                "kernels": list(self.kernel_files), "weight_bytes": self.weight_bytes,
                "outputs": self.output_layout, **library}


def kernel_text(filename: str) -> str:
    return resources.files("edgeserve._firmware").joinpath("kernels", filename).read_text()


def generate(model: TfliteModel, name: str, model_label: str, output_tensor: int | None = None,
             cmsis_nn: CmsisNnTree | None = None, kernels: str = "portable",
             int8_weights: Collection[int] = (), streaming: bool = True) -> Generated:
    """The files for ``model``. ``output_tensor`` (tests): return that intermediate int8 tensor
    instead of the model's output, to compare a layer that varies more than the output does.
    ``cmsis_nn``: call that CMSIS-NN where a layer fits it (cmsis_nn.py). ``kernels``:
    "generated" writes the layers specialise.py covers as code of their own (first: CMSIS-NN
    takes what is left), "portable" keeps edgeserve's kernels; ``int8_weights``: operators whose
    generated kernel reads int8 weights rather than int16 (half the flash, a little slower);
    ``streaming`` False (tests, benchmarks): no 1x1 streamed into the depthwise after it."""
    if kernels not in KERNELS:
        raise InputError(f"--kernels takes {' or '.join(KERNELS)}; given {kernels!r}")
    lowering = Lowering(model)
    lowered = lowering.steps()
    keep = set(lowering.graph.outputs) | ({output_tensor} if output_tensor is not None else set())
    found: dict[frozenset[int], tuple[list[Step], list[Choice], dict[int, str]]] = {}

    def build(whole: frozenset[int]) -> list[Step]:
        """The steps with generated kernels, the 1x1s in ``whole`` not streamed; then CMSIS-NN."""
        if whole not in found:
            chosen, missed = lowered, {}
            if kernels == "generated":
                chosen, missed = specialise.specialise(lowered, int8_weights, keep=keep, whole=whole)
            choices: list[Choice] = []
            if cmsis_nn is not None:
                chosen, choices = assign(chosen, cmsis_nn)
            elif kernels == "generated":
                choices = [Choice(position, s.op, s.index, specialise.generated_kernel(s) if s.library_call else s.kernel,
                                  s.library_call.library if s.library_call else "portable", missed.get(position))
                           for position, s in enumerate(chosen) if s.kernel not in (None, "memcpy")]
            found[whole] = (chosen, choices, missed)
        return found[whole][0]

    steps = build(frozenset())
    graph = lowering.graph
    outputs = (output_tensor,) if output_tensor is not None else tuple(graph.outputs)
    in_kinds = sorted({graph.tensors[t].dtype_name for t in graph.inputs})
    if len(in_kinds) != 1:
        # Several inputs are read back to back from the caller's one buffer (a recurrent
        # model's samples and state), so they share its element type.
        raise UnsupportedOperatorError(
            f"the mcu-c target reads every input from one buffer; this model's inputs are {', '.join(in_kinds)}; "
            "-t mcu builds it for TFLM instead")
    kinds = sorted({graph.tensors[t].dtype_name for t in outputs})
    if len(kinds) != 1 or len(set(outputs)) != len(outputs) or set(graph.inputs) & set(outputs):
        # Several outputs are written back to back into the caller's one buffer, so they
        # share its element type; an output that is the input or another output has no
        # bytes of its own to copy.
        raise UnsupportedOperatorError(
            f"the mcu-c target writes every output into one buffer; this model's outputs are "
            f"{', '.join(kinds)} (or repeat a tensor); -t mcu builds it for TFLM instead")
    if not steps or all(s.kernel is None for s in steps):
        raise InputError("the model computes nothing (no operator with a kernel)")

    def sizes(t: int) -> int:
        return graph.tensors[t].nbytes

    def planner(trial: list[Step]) -> Plan:
        return plan(trial, sizes, graph.inputs, outputs)

    whole: frozenset[int] = frozenset()
    streams: list[Stream] = []
    if kernels == "generated" and streaming:
        steps, arena, streams, whole = plan_generated(build, planner, sizes)
    elif kernels == "generated":
        whole = frozenset(s.index for s in steps)
        steps, arena, _ = fewest_chain_bytes(build(whole), planner, sizes)
    else:
        arena = planner(steps)
    _, choices, missed = found[whole]
    xs = [graph.tensors[t] for t in graph.inputs]
    x = xs[0]
    ys = [graph.tensors[t] for t in outputs]
    io_in = [emit.Io(t, *_q(t)) for t in xs]
    io_outs = [emit.Io(y, *_q(y)) for y in ys]
    generated_steps = [s for s in steps if s.library_call and s.library_call.library == specialise.LIBRARY]
    kernel_files = tuple(sorted({s.source for s in steps if s.source}
                                | {header for s in generated_steps
                                   for header in (s.library_call.header, *specialise.INCLUDES[specialise.generated_kernel(s)])}))
    variables = sorted(lowering.variables.values(), key=lambda v: v.index)
    files = {
        f"{name}.h": emit.render_header(name, model_label, io_in, io_outs, arena, variables,
                                        LIBRARY if any(s.library_call and s.library_call.library == LIBRARY
                                                       for s in steps) else None),
        f"{name}.c": emit.render_source(name, model_label, steps, arena, sizes, outputs, variables,
                                        f"{ys[0].dtype_name}_t", f"{x.dtype_name}_t"),
    }
    for filename in (*emit.COMMON_FILES, *kernel_files):
        files[f"kernels/{filename}"] = kernel_text(filename)
    library_sources: list[str] = []
    calls = [s.library_call for s in steps if s.library_call is not None and s.library_call.library == LIBRARY]
    if cmsis_nn is not None and calls:
        # The functions called, and the buffer-size functions test builds call.
        wanted = {c.function for c in calls} | {c.scratch_check.split("(")[0] for c in calls if c.scratch_check}
        library_sources = cmsis_nn.sources_for(sorted(wanted))
        files[f"{name}.cmake"] = cmake_snippet(name, library_sources)
        files["cmsis_nn_sources.txt"] = "".join(f"{s}\n" for s in library_sources)
    files |= project_files(name, len(outputs), cmsis_nn=bool(library_sources), inputs=len(xs))
    # Everything const the model brings to flash: weights, tables, constant operands, and
    # the variables' initial values.
    weight_bytes = sum(a.values.nbytes for s in steps for a in s.arrays) + sum(v.nbytes for v in variables)
    offsets = np.cumsum([0] + [y.nbytes for y in ys]).tolist()
    layout = [{"name": io.tensor.name, "offset": int(offset), "bytes": io.tensor.nbytes, "shape": list(io.tensor.shape),
               "dtype": io.tensor.dtype_name, "scale": io.scale, "zero_point": io.zero_point}
              for io, offset in zip(io_outs, offsets)]
    return Generated(name, files, steps, arena, kernel_files, sum(t.nbytes for t in xs), sum(y.nbytes for y in ys),
                     weight_bytes,
                     _macs(steps), sum(v.nbytes for v in variables), layout, choices, library_sources,
                     {steps[position].index: why for position, why in missed.items()}, kernels,
                     specialise.narrowed(steps, int8_weights), streams)


def _macs(steps: list[Step]) -> int:
    total = 0
    for s in steps:
        p = s.params
        if s.params_type == "es_conv_params":
            total += p["batches"] * p["out_h"] * p["out_w"] * p["out_c"] * p["k_h"] * p["k_w"] * p["k_c"]
            total += p.get("streamed_macs", 0)  # a depthwise a 1x1 streams into (specialise.py)
        elif s.params_type == "es_fc_params":
            total += p["batches"] * p["in_depth"] * p["out_depth"]
    return total
