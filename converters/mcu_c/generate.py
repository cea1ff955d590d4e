"""From full-INT8 .tflite bytes to the files of OUT/mcu-c/: lower, plan, emit."""

from __future__ import annotations

import dataclasses
from importlib import resources

from edgeserve.converters.mcu_c import emit
from edgeserve.converters.mcu_c.lower import Lowering, Step, UnsupportedOperatorError, _q
from edgeserve.converters.mcu_c.planner import Plan, plan
from edgeserve.errors import InputError
from edgeserve.tflite_model import TfliteModel


@dataclasses.dataclass
class Generated:
    name: str
    files: dict[str, str]  # relative path -> text
    steps: list[Step]
    plan: Plan
    kernel_files: tuple[str, ...]
    input_bytes: int
    output_bytes: int
    weight_bytes: int
    macs: int  # multiply-accumulates per inference (convolutions and fully connected layers)
    state_bytes: int = 0  # variables' buffers, outside the arena

    def summary(self) -> dict[str, object]:
        return {"macs": self.macs, "state_bytes": self.state_bytes, "arena_bytes": self.plan.arena_bytes, "arena_lower_bound": self.plan.lower_bound,
                "planner": self.plan.method, "planner_optimal": self.plan.optimal,
                "in_place_steps": len(self.plan.inplace_sources),
                "kernels": list(self.kernel_files), "weight_bytes": self.weight_bytes}


def kernel_text(filename: str) -> str:
    return resources.files("edgeserve._firmware").joinpath("kernels", filename).read_text()


def generate(model: TfliteModel, name: str, model_label: str, output_tensor: int | None = None) -> Generated:
    """The files for ``model``. ``output_tensor`` (tests): return that intermediate int8 tensor
    instead of the model's output, to compare a layer that varies more than the output does."""
    lowering = Lowering(model)
    steps = lowering.steps()
    graph = lowering.graph
    outputs = (output_tensor,) if output_tensor is not None else graph.outputs
    if len(graph.inputs) != 1 or len(graph.outputs) != 1:
        raise UnsupportedOperatorError(
            f"the mcu-c target takes one input and one output; this model has {len(graph.inputs)} and "
            f"{len(graph.outputs)}; -t mcu builds it for TFLM instead")
    if not steps or all(s.kernel is None for s in steps):
        raise InputError("the model computes nothing (no operator with a kernel)")

    def sizes(t: int) -> int:
        return graph.tensors[t].nbytes

    arena = plan(steps, sizes, graph.inputs, outputs)
    x, y = graph.tensors[graph.inputs[0]], graph.tensors[outputs[0]]
    io_in = emit.Io(x, *_q(x))
    io_out = emit.Io(y, *_q(y))
    kernel_files = tuple(sorted({s.source for s in steps if s.source}))
    variables = sorted(lowering.variables.values(), key=lambda v: v.index)
    files = {
        f"{name}.h": emit.render_header(name, model_label, io_in, io_out, arena, variables),
        f"{name}.c": emit.render_source(name, model_label, steps, arena, sizes, outputs[0], variables,
                                        f"{y.dtype_name}_t"),
    }
    for filename in (*emit.COMMON_FILES, *kernel_files):
        files[f"kernels/{filename}"] = kernel_text(filename)
    # Everything const the model brings to flash: weights, tables, constant operands, and
    # the variables' initial values.
    weight_bytes = sum(a.values.nbytes for s in steps for a in s.arrays) + sum(v.nbytes for v in variables)
    return Generated(name, files, steps, arena, kernel_files, x.nbytes, y.nbytes, weight_bytes, _macs(steps),
                     sum(v.nbytes for v in variables))


def _macs(steps: list[Step]) -> int:
    total = 0
    for s in steps:
        p = s.params
        if s.params_type == "es_conv_params":
            total += p["batches"] * p["out_h"] * p["out_w"] * p["out_c"] * p["k_h"] * p["k_w"] * p["k_c"]
        elif s.params_type == "es_fc_params":
            total += p["batches"] * p["in_depth"] * p["out_depth"]
    return total
