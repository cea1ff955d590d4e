"""INT8 weights and INT8 activations for an ML program, with statistics computed on Linux.

``int8-weights``: coremltools' ``linear_quantize_weights``, symmetric per output channel,
with ``weight_threshold=0`` so that small layers are quantized too (coremltools' default
2048 leaves every layer of a small model in fp16). coremltools never quantizes 1-D
constants (biases, norm parameters): they stay fp16.

``w8a8``: coremltools' ``linear_quantize_activations`` runs Core ML ``predict`` to collect
activation ranges, which exists only on macOS. Here the ranges come from edgeserve's numpy
evaluator running the fp16 program over the calibration set (the same samples the TFLite
target calibrates with), and are handed to the same coremltools graph passes that
``linear_quantize_activations`` runs (insert quantize/dequantize pairs before and after
the patterns Core ML runs in int8, then drop redundant pairs). Ranges are min/max over
*all* calibration samples; coremltools 9's own collector keeps only the last sample's
range (its ``_update_tensor_range`` overwrites before comparing).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import numpy as np

from edgeserve.converters.coreml.evaluator import MilEvaluator
from edgeserve.converters.coreml.program import MilProgram

PRECISIONS = ("fp16", "int8-weights", "w8a8")
WEIGHT_THRESHOLD = 0


@dataclasses.dataclass
class ActivationStats:
    """min/max of every floating-point value the program computes, over the calibration set."""

    ranges: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    samples: int = 0
    own_ranges: list[str] = dataclasses.field(default_factory=list)  # concats whose parts keep their own

    def observe(self, name: str, value: np.ndarray) -> None:
        if value.size == 0:
            return
        lo, hi = float(np.min(value)), float(np.max(value))
        seen = self.ranges.get(name)
        if seen is None:
            self.ranges[name] = {"rmin": lo, "rmax": hi}
        else:
            seen["rmin"], seen["rmax"] = min(seen["rmin"], lo), max(seen["rmax"], hi)


def collect_activation_stats(program: MilProgram, feeds: Iterable[Mapping[str, np.ndarray]],
                             own_ranges: Collection[str] = ()) -> ActivationStats:
    """Run ``program`` over every calibration sample and keep each value's range; the concats
    named in ``own_ranges`` (a float tail: converters/coreml/float_tail.py) keep a range per part."""
    evaluator = MilEvaluator(program)
    stats = ActivationStats(own_ranges=list(own_ranges))
    for feed in feeds:
        evaluator.run(feed, observe=stats.observe)
        stats.samples += 1
    # Inputs and outputs of one concat share a range (one scale for the whole tensor).
    for op in program.ops:
        if op.type != "concat" or op.name in own_ranges:
            continue
        names = [b.name for b in op.inputs.get("values", ()) if b.name] + [op.outputs[0][0]]
        known = [stats.ranges[n] for n in names if n in stats.ranges]
        if known:
            lo, hi = min(r["rmin"] for r in known), max(r["rmax"] for r in known)
            for n in names:
                if n in stats.ranges:
                    stats.ranges[n] = {"rmin": lo, "rmax": hi}
    return stats


# The smallest symmetric range whose int8 scale (range / 127) is a normal fp16 number (2**-14):
# Core ML stores activation scales in fp16, where anything much smaller rounds to 0.
_MIN_ABS_RANGE = 2.0 ** -14 * 127


def quantizable_ranges(ranges: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """``ranges`` with all-zero ones widened so that their scale is not 0.

    A value that is 0 for every calibration sample (a dead ReLU, a zero-initialised branch)
    has range [0, 0]; symmetric int8 gives it scale 0, which coremltools refuses ("scale
    cannot be 0") after the whole conversion. Zero is encoded exactly at any scale, so a
    tiny symmetric range changes nothing the calibration saw.
    """
    out: dict[str, dict[str, float]] = {}
    for name, r in ranges.items():
        if max(abs(r["rmin"]), abs(r["rmax"])) < _MIN_ABS_RANGE:
            out[name] = {"rmin": -_MIN_ABS_RANGE, "rmax": _MIN_ABS_RANGE}
        else:
            out[name] = dict(r)
    return out


def weight_config(cto: Any) -> Any:
    return cto.coreml.OptimizationConfig(global_config=cto.coreml.OpLinearQuantizerConfig(
        mode="linear_symmetric", dtype="int8", granularity="per_channel", weight_threshold=WEIGHT_THRESHOLD))


def quantize_weights(mlmodel: Any) -> Any:
    import coremltools.optimize as cto

    return cto.coreml.linear_quantize_weights(mlmodel, weight_config(cto))


def quantize_activations(mlmodel: Any, stats: ActivationStats) -> Any:
    """Insert INT8 quantize/dequantize pairs with ``stats`` (what linear_quantize_activations does
    after its macOS-only calibration run)."""
    import coremltools.optimize as cto
    from coremltools import _SPECIFICATION_VERSION_IOS_17
    from coremltools.converters.mil.frontend.milproto import load as milproto
    from coremltools.converters.mil.mil.passes.graph_pass import PassOption
    from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY
    from coremltools.models import utils as model_utils

    config = cto.coreml.OptimizationConfig(
        global_config=cto.coreml.OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8"))
    passes = []
    for name in ("compression::insert_prefix_quantize_dequantize_pair",
                 "compression::insert_suffix_quantize_dequantize_pair"):
        graph_pass = PASS_REGISTRY[name]
        graph_pass.set_options([PassOption("config", config),
                                PassOption("activation_stats", quantizable_ranges(stats.ranges))])
        passes.append(graph_pass)
    passes.append(PASS_REGISTRY["common::dequantize_quantize_pair_elimination"])
    return model_utils._apply_graph_pass(
        mlmodel, passes, spec_version=_SPECIFICATION_VERSION_IOS_17,
        pymil_load_func=milproto.load, skip_model_load=True,
    )


def activation_table(program: MilProgram, stats: ActivationStats) -> list[dict[str, Any]]:
    """Each ``quantize`` op of the quantized program: the value it quantizes, its range and scale."""
    rows = []
    for op in program.ops:
        if op.type != "quantize":
            continue
        source = op.inputs["input"][0].name
        scale = op.attributes.get("scale")
        if scale is None and "scale" in op.inputs:
            scale = program.constant(op.inputs["scale"][0])
        rng = stats.ranges.get(source or "", {})
        rows.append({"op": op.name, "tensor": source, "rmin": rng.get("rmin"), "rmax": rng.get("rmax"),
                     "scale": float(np.asarray(scale).reshape(-1)[0]) if scale is not None else None})
    return rows
