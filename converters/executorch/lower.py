"""The ExecuTorch steps, run by converter.py in a child process (edgeserve.isolation).

ExecuTorch's runtime (and its XNNPACK delegate) is C++ loaded into the process that runs a
.pte; lowering runs torch's export passes. Both happen here, in a fresh Python, so that a
crash costs the child, and the parent only ever sees arrays and dictionaries.
"""

from __future__ import annotations

import contextlib
import operator
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np


def build(program_path: str, precision: str, calibration: list[np.ndarray] | None, pte_path: str,
          check_inputs: list[np.ndarray], float_joins: tuple[tuple[int, int], ...] = (),
          simulate: int | None = None, kept: str | None = None) -> dict[str, Any]:
    """Lower the saved ExportedProgram to a .pte (quantized first for "int8", "int8-float-tail"
    and "int8-dynamic"), write it, and run it on ``check_inputs`` (N-first arrays, one per model
    input) with executorch.runtime. ``float_joins``: the outputs (index, mixed channel axis) whose
    joins "int8-float-tail" leaves unquantized.

    ``simulate`` (quantized forms): instead of lowering, the quantized program runs in torch on
    the first ``simulate`` samples (PT2E's own q/dq model, the arithmetic XNNPACK's kernels carry
    out) and its outputs are returned ({"lowered": False, "simulated": [...]}), the program kept in
    ``kept``: converter.py judges each form so before it lowers one, since lowering is most of a
    form's time (PaddleOCR's 320x320 text detector: 243 s of 380, profiled; docs/executorch.md).
    A later call of that form takes the kept program instead of quantizing again."""
    import torch

    warnings.filterwarnings("ignore")
    program = torch.export.load(program_path)
    example = tuple(torch.from_numpy(np.ascontiguousarray(x[:1])) for x in check_inputs)
    # Weights the ONNX reader computed while tracing arrive as lifted constants, which XNNPACK
    # takes for activations (measured: half of a MobileNetV3's convolutions left on the
    # portable kernels) and PT2E cannot fold: as parameters, then exported again.
    program = torch.export.export(_constants_as_parameters(program.module()), example)
    # Fold what only depends on weights (a transpose the reader's Gemm applies to its weight):
    # XNNPACK's linear takes constant weights only. Before PT2E, never after: after, it would
    # fold each weight's dequantize too, leaving float weights in an "INT8" .pte (measured: the
    # INT8 file as big as the float one).
    from executorch.exir.passes.constant_prop_pass import constant_prop_pass

    program = constant_prop_pass(program)
    behind_pads = int8_layers = 0
    reused = False
    if precision in ("int8", "int8-float-tail", "int8-dynamic"):
        quantized_kernels()
        if precision == "int8-dynamic":
            behind_pads = sum(1 for node in program.graph.nodes if node.op == "call_function"
                              and "conv" in str(node.target) and not _not_behind_a_pad(node))
        reused = bool(kept and Path(kept).exists())
        if reused:
            import torchao.quantization.pt2e.quantize_pt2e  # noqa: F401 - registers the q/dq operators it names

            program = torch.export.load(kept)
        else:
            program = _quantized(program, example, calibration or [], dynamic=precision == "int8-dynamic",
                                 float_joins=float_joins if precision == "int8-float-tail" else ())
        # Layers whose weights are int8 now: each has one per-channel dequantize of its weight.
        int8_layers = sum(1 for node in program.graph.nodes
                          if node.op == "call_function" and "dequantize_per_channel" in str(node.target))
        if precision == "int8-dynamic" and not int8_layers:
            return {"lowered": False, "int8_layers": 0, "float_behind_pads": behind_pads}  # nothing int8 to run
        if simulate:
            if kept:
                torch.export.save(program, kept)
            return {"lowered": False, "simulated": _simulated(program, [x[:simulate] for x in check_inputs]),
                    "float_behind_pads": behind_pads, "int8_layers": int8_layers}
    from edgeserve.converters.executorch.mac_share import program_mac_share

    macs = program_mac_share(program)  # what runs in int8, counted on the program XNNPACK is given
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.devtools.backend_debug import get_delegation_info
    from executorch.exir import to_edge_transform_and_lower

    xnnpack_error = None
    try:
        edge = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
    except Exception as exc:  # an XNNPACK pass that cannot take the graph: say so, lower without it
        xnnpack_error = _root_cause(exc)
        edge = to_edge_transform_and_lower(program)
    Path(pte_path).write_bytes(edge.to_executorch().buffer)
    outputs, refusal = _run_or_why(pte_path, check_inputs)
    if refusal is not None and xnnpack_error is None:
        # XNNPACK took the graph at lowering but refuses to build it at load time (BlazeFace's
        # INT8 depthwise convolutions: "xnn_status_invalid_parameter"): the portable kernels.
        xnnpack_error = refusal
        edge = to_edge_transform_and_lower(program)
        Path(pte_path).write_bytes(edge.to_executorch().buffer)
        outputs, refusal = _run_or_why(pte_path, check_inputs)
    if refusal is not None:
        raise RuntimeError(refusal)
    info = get_delegation_info(edge.exported_program().graph_module)
    portable = sorted(op for op, b in getattr(info, "delegation_by_operator", {}).items()
                      if b.non_delegated and op not in ("getitem", "alloc"))  # tuple access, memory planning
    return {"delegated_nodes": int(info.num_delegated_nodes), "portable_nodes": int(info.num_non_delegated_nodes),
            "delegated_subgraphs": int(info.num_delegated_subgraphs), "portable_ops": portable,
            "xnnpack_error": xnnpack_error, "float_behind_pads": behind_pads, "int8_layers": int8_layers,
            "outputs": outputs, "reused_quantized": reused, "macs": macs}


def _simulated(program: Any, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The quantized program's outputs in torch, sample by sample (batch 1, as it is lowered), stacked."""
    import torch

    module = program.module()
    rows = []
    with torch.no_grad():
        for i in range(len(inputs[0])):
            got = module(*(torch.from_numpy(np.ascontiguousarray(x[i:i + 1])) for x in inputs))
            got = got if isinstance(got, (tuple, list)) else (got,)
            rows.append([np.asarray(o.detach().numpy(), np.float32) for o in got])
    return _stacked(rows)


def _stacked(rows: list[list[np.ndarray]]) -> list[np.ndarray]:
    """Per-sample outputs (one list per sample) as one N-first array per output."""
    return [np.concatenate([row[k] for row in rows]) for k in range(len(rows[0]))]


def _run_or_why(pte_path: str, inputs: list[np.ndarray]) -> tuple[list[np.ndarray] | None, str | None]:
    """The outputs, or why the runtime would not load the program (its native log's last error
    line, which names the node; the exception only says "error: 0x1")."""
    from edgeserve.console import capture_native_stderr

    native = None
    try:
        with capture_native_stderr() as native:
            return run(pte_path, inputs), None
    except RuntimeError as exc:
        # cpuinfo's own lines ("Failed to open midr file", on every x86 machine) say nothing of the program.
        said = [line.split("] ", 1)[-1] for line in (native.text if native else "").splitlines()
                if "ailed" in line and not line.startswith("[cpuinfo")]
        if "Failed to load method" not in str(exc):
            # An execute that fails ("error 0x1") is a refusal of this form; the native log says which step.
            raise RuntimeError(f"{exc} ({said[0]})" if said else str(exc)) from exc
        return None, f"the runtime could not load the lowered program: {said[0] if said else str(exc)}"


def _root_cause(exc: BaseException) -> str:
    """The innermost exception's first line: ExecuTorch wraps a pass's assertion in "an error
    occurred when running the 'ChannelsLastTaggedReshapePass' pass", which names no reason."""
    passes = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    while exc.__cause__ is not None:
        exc = exc.__cause__
    inner = (str(exc).splitlines() or [type(exc).__name__])[0]
    return f"{passes[:200]}: {inner[:200]}" if inner not in passes else passes[:300]


def quantized_kernels() -> None:
    """Register ExecuTorch's quantize/dequantize kernels (for lowering and for the runtime):
    a q/dq node XNNPACK did not take needs them, or the method fails to load ("error 0x1")."""
    import executorch.kernels.quantized  # noqa: F401


def run(pte_path: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The .pte's outputs, sample by sample (batch 1, as it was lowered), stacked."""
    import torch
    from executorch.runtime import Runtime

    quantized_kernels()

    method = Runtime.get().load_program(pte_path).load_method("forward")
    rows: list[list[np.ndarray]] = []
    for i in range(len(inputs[0])):
        outputs = method.execute([torch.from_numpy(np.ascontiguousarray(x[i:i + 1])) for x in inputs])
        rows.append([o.detach().numpy().copy() for o in outputs])
    return _stacked(rows)


def _quantized(program: Any, example: tuple[Any, ...], calibration: list[np.ndarray], dynamic: bool = False,
               float_joins: tuple[tuple[int, int], ...] = ()) -> Any:
    """PT2E INT8 with XNNPACK's quantizer, then exported again: symmetric per-channel int8
    weights, and int8 activations with ranges observed over every calibration sample (static),
    or (``dynamic``) the inputs of convolutions and linear layers quantized to int8 at run time
    from each tensor's own range, every other operator in float. The concatenations that make
    the outputs ``float_joins`` stay unannotated, so in float."""
    import torch
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    module = _constants_as_parameters(program.module())  # constant propagation lifted new ones
    if dynamic:
        _relu_as_clamp(module)
        _hard_swish_as_one_operator(module)
        _constant_operands_at_full_rank(module)
    quantizer = XNNPACKQuantizer().set_global(_fine_weight_scales(
        get_symmetric_quantization_config(is_per_channel=True, is_dynamic=dynamic)))
    if dynamic:
        quantizer.set_filter_function(_not_behind_a_pad)
    elif float_joins:
        # XNNPACK's quantizer gives a cat one scale for all its inputs: left out, each input keeps
        # the scale its own producer's observer sets, and the join happens in float.
        joins = _output_joins(module, float_joins)
        if not joins:
            raise RuntimeError("no output to keep float is made by concatenations (torch.cat) and layout moves only")
        from torchao.quantization.pt2e.quantizer import QuantizationAnnotation

        # ExecuTorch 1.5.1's cat annotator does not ask the filter; it skips a node already
        # annotated, so each join is marked annotated with nothing to quantize.
        for node in module.graph.nodes:
            if node.name in joins:
                node.meta["quantization_annotation"] = QuantizationAnnotation(_annotated=True)
        quantizer.set_filter_function(lambda node: node.name not in joins)
    prepared = prepare_pt2e(module, quantizer)
    # Dynamic too: its weight observers record the per-channel ranges on the first forward (with
    # none, XNNPACK's partitioner meets one weight scale where it wants one per channel).
    for i in range(len(calibration[0]) if calibration else 0):
        prepared(*(torch.from_numpy(np.ascontiguousarray(x[i:i + 1])) for x in calibration))
    with _no_qat_folding():
        converted = convert_pt2e(prepared)
    return torch.export.export(converted, example)


@contextlib.contextmanager
def _no_qat_folding() -> Iterator[None]:
    """convert_pt2e without its fold of QAT convolution + batch-norm patterns. Those patterns come
    from prepare_qat_pt2e only; after prepare_pt2e (post-training) the fold finds nothing to
    replace, but whenever a batch norm is left in the graph (one after a transposed convolution)
    it first exports every pattern it knows: PaddleOCR's DBNet, measured in one process, 20.9 ->
    8.0 s a static convert and 11.5 -> 0.1 s a dynamic one, outputs bit-identical (a test holds
    that). torchao names the fold in quantize_pt2e's namespace; where it does not, nothing changes."""
    import torchao.quantization.pt2e.quantize_pt2e as quantize_pt2e

    fold = getattr(quantize_pt2e, "_fold_conv_bn_qat", None)
    if fold is None:
        yield
        return
    quantize_pt2e._fold_conv_bn_qat = lambda module: module
    try:
        yield
    finally:
        quantize_pt2e._fold_conv_bn_qat = fold


# The smallest weight scale PT2E may choose. XNNPACK's quantizer floors every scale at 2**-12, so
# a channel whose weights stay under 127 * 2**-12 = 0.031 keeps a few levels and one under 2**-13
# rounds to zero: PaddleOCR's DBNet has a convolution whose weights, its batch norm folded in,
# reach 2e-4, and its output became the bias alone (0 dB in both INT8 forms). LiteRT's and ONNX
# Runtime's quantizers have no such floor. 2**-24 keeps full resolution down to 7.6e-6, with the
# requantization scales XNNPACK derives from it far above its 2**-32 lower bound.
WEIGHT_SCALE_FLOOR = 2.0 ** -24


def _fine_weight_scales(config: Any) -> Any:
    """``config`` with its weight observer's scale floor at WEIGHT_SCALE_FLOOR (unchanged where
    torchao builds observers another way: the small-weights test then fails, and says so)."""
    import dataclasses
    import functools

    made = getattr(config.weight.observer_or_fake_quant_ctr, "p", None)  # PartialWrapper(partial(Class, eps=...))
    if not isinstance(made, functools.partial) or not hasattr(made.func, "with_args"):
        return config
    finer = made.func.with_args(**{**made.keywords, "eps": WEIGHT_SCALE_FLOOR})
    return dataclasses.replace(config, weight=dataclasses.replace(config.weight, observer_or_fake_quant_ctr=finer))


def _output_joins(module: Any, outputs: tuple[tuple[int, int], ...]) -> set[str]:
    """Names of the aten.cat nodes from the channel joins of each graph output in ``outputs``
    ((index, the axis whose channels hold the different ranges)) to that output, through views and
    permutes (converters/join_tail.py; tflite-int8's remedy: converters/tflite_int8/float_tail.py);
    empty when one of them is not made by joins and layout moves only."""
    import torch

    from edgeserve.converters.join_tail import Step, join_tail, reshaped_axis, transposed_axis

    moves = (torch.ops.aten.view.default, torch.ops.aten.reshape.default, torch.ops.aten.clone.default,
             torch.ops.aten._unsafe_view.default, torch.ops.aten.contiguous.default)

    def shape(node: Any) -> list[int] | None:
        value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
        return [int(d) for d in value.shape] if value is not None and hasattr(value, "shape") else None

    def describe(node: Any) -> Step | None:
        if not isinstance(node, torch.fx.Node) or not node.args:
            return None
        if node.target == torch.ops.aten.cat.default:
            rank = len(shape(node) or []) or None
            axis = int(node.args[1]) if len(node.args) > 1 else 0
            return Step(node.name, tuple(node.args[0]), axis=axis % rank if rank else None)
        if node.target == torch.ops.aten.permute.default:
            return Step(node.name, (node.args[0],), before=transposed_axis(list(node.args[1])))
        if node.target in moves:
            return Step(node.name, (node.args[0],), before=reshaped_axis(shape(node.args[0]), shape(node)))
        return None

    results = next(node for node in module.graph.nodes if node.op == "output").args[0]
    found: set[str] = set()
    for index, axis in outputs:
        tail = join_tail(results[index], axis, describe) if index < len(results) else None
        if tail is None:
            return set()
        found |= {name for name in tail if isinstance(name, str)}
    return found


def _relu_as_clamp(module: Any) -> None:
    """ReLU written as clamp(x, 0), the same function. XNNPACK's quantizer quantizes a convolution
    dynamically only when no ReLU alone reads it (its conv + ReLU pattern exists for static
    quantization only), so without this every convolution of a ReLU network stayed float."""
    import torch

    for node in module.graph.nodes:
        if node.op == "call_function" and node.target in (torch.ops.aten.relu.default, torch.ops.aten.relu_.default):
            node.target, node.args = torch.ops.aten.clamp.default, (node.args[0], 0.0)
    module.recompile()


def _hard_swish_as_one_operator(module: Any) -> None:
    """x * clamp(x + 3, 0, 6) / 6, as ONNX exporters write a hard-swish (PP-PicoDet has 98), as
    one aten.hardswish: the same function, which XNNPACK has as one operator. ExecuTorch 1.5.1's
    XNNPACK delegate fails every execute of a dynamically quantized program where such a written-
    out activation (or x * sigmoid(x)) feeds a convolution on one branch of a fork whose other
    branch ends in the same activation ("Propagating input shapes failed", error 0x1; reduced from
    PP-PicoDet to five convolutions); with the one operator it runs."""
    import torch

    aten = torch.ops.aten

    def constant(node: Any) -> float | None:
        if isinstance(node, (int, float)) and not isinstance(node, bool):
            return float(node)
        if isinstance(node, torch.fx.Node) and node.op == "get_attr" and "." not in node.target:
            held = getattr(module, node.target, None)
            if isinstance(held, torch.Tensor) and held.numel() == 1:
                return float(held.reshape(()))
        return None

    def is_call(node: Any, *targets: Any) -> bool:
        return isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target in targets

    graph, found = module.graph, 0
    for div in list(graph.nodes):
        if not is_call(div, aten.div.Tensor) or constant(div.args[1]) != 6.0 or not is_call(div.args[0], aten.mul.Tensor):
            continue
        mul = div.args[0]
        for x, clamp in (mul.args[:2], mul.args[1::-1]):
            if not (is_call(clamp, aten.clamp.default) and tuple(constant(a) for a in clamp.args[1:3]) == (0.0, 6.0)
                    and is_call(clamp.args[0], aten.add.Tensor) and clamp.args[0].args[0] is x
                    and constant(clamp.args[0].args[1]) == 3.0):
                continue
            with graph.inserting_before(div):
                one = graph.call_function(aten.hardswish.default, (x,))
            one.meta = dict(div.meta)
            div.replace_all_uses_with(one)
            found += 1
            break
    if found:
        graph.eliminate_dead_code()
        module.recompile()


# Elementwise operators whose second operand may be a constant the first one is broadcast against.
_BROADCAST_BINARY = ("add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor", "maximum.default", "minimum.default")


def _constant_operands_at_full_rank(module: Any) -> None:
    """A scalar or low-rank constant operand of an elementwise operator as a parameter of the
    other operand's rank (the same values, broadcast the same way). ExecuTorch 1.5.1's XNNPACK
    delegate receives such a constant as an input of the delegate, and a dynamically quantized
    delegate propagates its input shapes on every execute, which fails on a rank under the
    other operand's ("Propagating input shapes failed with code: xnn_status_invalid_parameter",
    then "error 0x1"). Measured: a hard-swish's "/ 6" (PP-PicoDet has 98) before any dynamically
    quantized convolution failed that way; at full rank it runs."""
    import torch

    graph, count = module.graph, 0
    for node in list(graph.nodes):
        if node.op != "call_function" or not any(str(node.target).endswith(name) for name in _BROADCAST_BINARY) \
                or len(node.args) < 2:
            continue
        operands = list(node.args[:2])
        # The constant on either side: PaddleOCR's DBNet multiplies a learned scale of shape (1,)
        # by a tensor (mul(scale, x)), which XNNPACK's channels-last pass cannot take below rank 4.
        for held_at in (1, 0):
            other = operands[1 - held_at]
            value = other.meta.get("val") if isinstance(other, torch.fx.Node) and other.op != "get_attr" else None
            if value is None or not hasattr(value, "shape") or not value.is_floating_point():
                continue
            constant = _at_rank(module, operands[held_at], len(value.shape), value.dtype)
            if constant is None:
                continue
            name = f"_full_rank_constant_{count}"
            count += 1
            module.register_parameter(name, torch.nn.Parameter(constant, requires_grad=False))
            with graph.inserting_before(node):
                operands[held_at] = graph.get_attr(name)
            node.args = (*operands, *node.args[2:])
            break
    if count:
        graph.eliminate_dead_code()
        module.recompile()


def _at_rank(module: Any, operand: Any, rank: int, dtype: Any) -> Any:
    """``operand`` (a Python number or a module attribute holding a float tensor of rank under
    ``rank``) as a tensor of ``rank`` dimensions, broadcast the same way; None for anything else."""
    import torch

    if isinstance(operand, (int, float)) and not isinstance(operand, bool):
        return torch.full((1,) * rank, float(operand), dtype=dtype)
    if isinstance(operand, torch.fx.Node) and operand.op == "get_attr":
        held = operator.attrgetter(operand.target)(module)  # "scale", or "1.scale" in a submodule
        if isinstance(held, torch.Tensor) and held.is_floating_point() and held.dim() < rank:
            return held.detach().reshape((1,) * (rank - held.dim()) + tuple(held.shape))
    return None


def _not_behind_a_pad(node: Any) -> bool:
    """False for a layer whose input is an explicit pad (the "same" padding of a strided
    convolution exported from TensorFlow): ExecuTorch 1.5.1's XNNPACK delegate lowers a dynamically
    quantized convolution behind a pad and then fails every execute ("error 0x1"; measured on a
    pad, symmetric or not, then a conv, and on MediaPipe's models); such a layer stays float."""
    import torch

    pads = (torch.ops.aten.pad.default, torch.ops.aten.constant_pad_nd.default)
    # Through layout moves: MediaPipe's pose detector pads its NHWC input, then transposes it.
    moves = (torch.ops.aten.permute.default, torch.ops.aten.transpose.int, torch.ops.aten.contiguous.default,
             torch.ops.aten.clone.default)
    source = node.args[0] if node.args else None
    while isinstance(source, torch.fx.Node) and source.target in moves and source.args:
        source = source.args[0]
    return not (isinstance(source, torch.fx.Node) and source.target in pads)


def _constants_as_parameters(module: Any) -> Any:
    """Tensors the program lifted as plain constants (weights edgeserve's ONNX reader computed
    while tracing) as parameters: PT2E's conv + batch-norm folding reads a weight only from an
    attribute, and writes the folded one back as a parameter of the same name."""
    import torch

    graph = module.graph
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target == torch.ops.aten.lift_fresh_copy.default \
                and node.args[0].op == "get_attr":
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)
    for node in graph.nodes:
        # Buffers too (the reader registers float initializers as buffers): PT2E writes the folded
        # weight back with register_parameter, which refuses a name a buffer holds.
        # Float tensors only: an integer one is an index (a reflect pad's gather), and as a
        # parameter ExecuTorch's constant propagation fails on it ("is not a buffer", silero-vad).
        if node.op == "get_attr" and "." not in node.target and node.target not in module._parameters \
                and isinstance(getattr(module, node.target), torch.Tensor) \
                and getattr(module, node.target).is_floating_point():
            value = getattr(module, node.target)
            if node.target in module._buffers:
                del module._buffers[node.target]
            else:
                delattr(module, node.target)
            module.register_parameter(node.target, torch.nn.Parameter(value, requires_grad=False))
    module.recompile()
    return module
