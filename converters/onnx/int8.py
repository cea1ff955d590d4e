"""Target ``onnx-int8``: static QDQ quantization of the ``onnx`` artifact, with the same data.

prepare    onnxruntime.quantization's pre-processing (shape inference, graph optimization);
           unnamed nodes get names so that they can be excluded
calibrate  the run's calibration set (same samples, same preprocessing, the model's layout),
           min/max ranges, int8 activations and per-channel int8 weights in QDQ format
verify     ONNX Runtime on the evaluation set against the source, as the onnx target
remedy     over the gate, as tflite-int8 does: an output whose float values join ranges one
           int8 scale cannot hold (found before quantizing) gets its final Concat left in
           float (float_tail.py); then int16 activations with the same int8
           weights (A16W8, standard QuantizeLinear at opset 21; skipped where the --profile
           has no int16 activations), then int8 activations with the worst nodes in float, one
           more at a time (the per-node error: float and QDQ activations compared with ORT's
           qdq_loss_debug, SQNR per tensor); every attempt is in the report
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from edgeserve._deps import package_version, require
from edgeserve.atomic import write_bytes, write_json
from edgeserve.console import quiet_libraries
from edgeserve.converters import register
from edgeserve.converters._base import ConversionContext, Converter, VerifyResult
from edgeserve.converters.onnx import check
from edgeserve.converters.onnx.converter import NO_ONNX_FROM_INT8, Options, float_onnx_steps, reverify_onnx
from edgeserve.converters.scoring import score
from edgeserve.quality.fixtures import write_fixture
from edgeserve.converters.onnx.float_tail import concat_tail
from edgeserve.errors import VerificationError, clip_words, first_line
from edgeserve.manifest.record import edgeserve_version, file_record
from edgeserve.quality.metrics import degenerate

ARTIFACT_NAME = "model_int8.onnx"
MAX_EXCLUDED = 3  # nodes kept in float, one more per attempt, before giving up
DEBUG_SAMPLES = 16
# What the A16W8 remedy's artifact is, in the manifest: ONNX Runtime's CPU provider has no int16
# compute kernels (measured: the same figures with and without its graph optimizations).
INT16_NOTE = ("int16 activations, int8 weights (A16W8): the model for runtimes with 16-bit activation kernels; "
              "ONNX Runtime's CPU provider runs each operator in float between the int16 "
              "QuantizeLinear/DequantizeLinear pairs, so it is no faster than the float model there")


def _reader(names: list[str], samples: Iterator[list[np.ndarray]]) -> Any:
    quantization = require("onnxruntime.quantization", "the onnx-int8 target")

    class Reader(quantization.CalibrationDataReader):
        def __init__(self) -> None:
            self._samples = iter(samples)

        def get_next(self) -> dict[str, np.ndarray] | None:
            sample = next(self._samples, None)
            # each input's own type: calibration arrays carry it (datasets.py), floats as float32
            return None if sample is None else {n: np.asarray(x, np.float32) if x.dtype.kind == "f" else x
                                                for n, x in zip(names, sample)}

    return Reader()


@register
class OnnxInt8Converter(Converter):
    name = "onnx-int8"
    route_order = 5

    def route_from(self, kind: str, control_flow: bool = False) -> Any:
        from edgeserve.routes import Route

        steps = float_onnx_steps(kind)
        return Route(self.name, (*steps, "onnxruntime.quantization")) if steps else Route(self.name, (), NO_ONNX_FROM_INT8)
    report_lines = "edgeserve.converters.onnx.report"
    summary = "static INT8 ONNX (QDQ, per-channel weights) for ONNX Runtime, with the run's calibration"

    def isolated_imports(self, source_kind: str) -> tuple[str, ...]:
        return ("onnx", "onnxruntime")

    def requires(self, source_kind: str) -> tuple[str, ...]:
        return ("onnx",)

    def convert(self, ctx: ConversionContext) -> dict[str, Any]:
        onnx = require("onnx", "the onnx-int8 target")
        require("onnxruntime.quantization", "the onnx-int8 target")
        entry = ctx.artifacts.get("onnx")
        if entry is None or entry.get("status") != "ok":
            raise VerificationError("onnx-int8 is built from the onnx artifact, which this run did not produce")
        opts = Options.from_mapping(ctx.options)
        pre = ctx.workdir / "onnx_pre.onnx"
        with ctx.progress.step("onnx-int8: pre-process"):
            names, pre_processed = _isolated("preprocess_step", str(ctx.out_dir / entry["path"]), str(pre),
                                             what="pre-processing the model for quantization")
        calibration = list(ctx.calibration.batch1())

        def quantize(excluded: list[str], activations: str) -> bytes:
            out = ctx.workdir / f"onnx_{activations}_{len(excluded)}.onnx"
            _isolated("quantize_step", str(pre), str(out), names, calibration, excluded, activations,
                      what=f"quantizing ({activations} activations, {len(excluded)} node(s) in float)")
            return out.read_bytes()

        attempts: list[dict[str, Any]] = []
        self._nodes_note: str | None = None
        node_errors: list[dict[str, Any]] | None = None
        first_int8: list[bytes] = []

        def table() -> list[dict[str, Any]]:
            """The per-node error of the all-int8 model, measured once, when a remedy needs it."""
            nonlocal node_errors
            if node_errors is None and not first_int8:  # the all-int8 model itself was broken
                node_errors, self._nodes_note = [], "no per-node table: the all-int8 model did not run"
            if node_errors is None:
                with ctx.progress.step("onnx-int8: per-node error"):
                    try:
                        node_errors = self.node_errors(ctx, pre, first_int8[0], names)
                    except VerificationError as exc:  # the debugger died: no table, so no node to keep float
                        node_errors, self._nodes_note = [], f"no per-node table: {exc}"
            return node_errors

        best: tuple[bytes, dict[str, Any], list[np.ndarray], dict[str, Any]] | None = None
        mixed = ctx.mixed_range_outputs()
        for remedy, activations, excluded in self._remedies(ctx, table, attempts, pre, mixed):
            what = f"{activations} activations" + (f", {len(excluded)} node(s) in float" if excluded else "")
            with ctx.progress.step(f"onnx-int8: quantize ({what})"):
                data = quantize(excluded, activations)
                # Judged as written (see check.session): the artifact's arithmetic, which is
                # what a device with exact int8 dot products (Arm, x86 with VNNI) computes.
                try:
                    outputs = check.run(check.session(data, exact=True, made_by="ONNX Runtime's quantizer"),
                                        list(ctx.evaluation.inputs))
                except VerificationError as exc:  # this scheme's model is broken: the next remedy may not be
                    attempts.append({"remedy": remedy, "activations": activations, "float_nodes": list(excluded),
                                     "status": "error", "reason": str(exc)[:500], "bytes": len(data)})
                    continue
            scored = score(ctx, outputs, opts)
            failed_by_metric = any(o["judged_by"] in ("metric", "agreement") and not o["ok"]
                                   for o in scored["quality"]["outputs"])
            status = "ok" if scored["ok"] else "drop too large" if failed_by_metric else "sqnr too low"
            attempts.append({"remedy": remedy, "activations": activations, "float_nodes": list(excluded),
                             "status": status,
                             "reason": scored["reason"], "metrics": scored["metrics"],
                             "agreement": scored["agreement"], "output_sqnr_db": scored["output_sqnr_db"],
                             "quality": scored["quality"], "bytes": len(data)})
            if best is None or scored["ok"] or scored["shortfall"] < best[1]["shortfall"]:
                best = (data, scored, outputs, attempts[-1])
            if scored["ok"]:
                break
            if not first_int8:
                first_int8.append(data)
        if best is None:  # every scheme's model was broken: each reason, whole, in one line
            raise VerificationError("no onnx-int8 attempt gave a model ONNX Runtime runs: " + "; ".join(
                f"{a['remedy']} ({a['activations']}): {a['reason']}" for a in attempts if a.get("status") == "error"))
        data, scored, outputs, chosen = best
        with ctx.progress.step("onnx-int8: this CPU's ONNX Runtime integer kernels"):
            host_kernels = _host_kernels(data, ctx, outputs)
        node_errors = node_errors if node_errors is not None else []
        out = ctx.out_dir
        artifact = write_bytes(out / ARTIFACT_NAME, data)
        head = ctx.evaluation.head(32)
        fixture = write_fixture(out / "verify" / "onnx-int8.npz", list(head.inputs),
                                      [r[: len(head)] for r in ctx.reference_outputs()],
                                      [o[: len(head)] for o in outputs])
        report = write_json(out / "reports" / "onnx-int8.json",
                            {"target": self.name, "attempts": attempts, "nodes": node_errors})
        quantized = onnx.load_model_from_string(data)
        ops: dict[str, int] = {}
        for node in quantized.graph.node:
            ops[node.op_type] = ops.get(node.op_type, 0) + 1
        left_in_float = _float_nodes(quantized)
        from edgeserve.converters.onnx.mac_share import onnx_mac_share
        return {
            "target": self.name,
            "status": "ok" if scored["ok"] else "failed",
            **file_record(out, artifact),
            "float_bytes": int(entry["bytes"]),
            "quantization": {"format": "QDQ", "remedy": chosen["remedy"], "activations": chosen["activations"],
                             "weights": "int8 per-channel",
                             "calibration": "min/max", "float_nodes": chosen["float_nodes"],
                             "opset": _opset(quantized),
                             **({"note": INT16_NOTE} if chosen["activations"] == "int16" else {})},
            "ops": ops,
            # Nodes that read a float activation: the ones kept in float on purpose, and those whose
            # operator onnxruntime.quantization does not quantize (it leaves them float silently).
            "left_in_float": left_in_float,
            "macs": onnx_mac_share(quantized),  # multiply-accumulates by activation type, as tflite-int8's
            "metrics": scored["metrics"],
            "agreement": scored["agreement"],
            "output_sqnr_db": scored["output_sqnr_db"],
            "quality": scored["quality"],
            "host_kernels": host_kernels,
            # Outputs whose float values join ranges one int8 scale cannot hold, found before quantizing.
            "mixed_range_outputs": list(mixed.values()),
            "attempts": attempts,
            "worst_nodes": node_errors[:5],
            **({"nodes_note": self._nodes_note} if getattr(self, "_nodes_note", None) else {}),
            "placement": check.placement(data),
            "report": file_record(out, report),
            "route": {"quantizer": "onnxruntime.quantization (quantize_static, QDQ)", "pre_process": pre_processed,
                      "tools": {"onnxruntime": package_version("onnxruntime")}},
            "verification": {"method": "onnxruntime-cpu", "samples": len(outputs[0]),
                             "fixture": file_record(out, fixture), "degenerate": degenerate(ctx.reference_outputs())},
            "provenance": {"edgeserve_version": edgeserve_version(), "source_sha256": ctx.source.sha256,
                           "calibration_sha256": ctx.calibration.sha256, "built_from": entry["path"]},
        }

    def _remedies(self, ctx: ConversionContext, table: Callable[[], list[dict[str, Any]]],
                  attempts: list[dict[str, Any]], pre: Path,
                  mixed: dict[int, dict[str, Any]]) -> Iterator[tuple[str, str, list[str]]]:
        """(remedy, activations, nodes kept in float) per attempt, in order. The per-node table
        is measured on the first (all-int8) attempt only when a float-node remedy is reached."""
        yield "int8", "int8", []
        failed = [o["index"] for o in (attempts[-1].get("quality") or {}).get("outputs", []) if not o["ok"]]
        if any(i in mixed for i in failed):
            onnx = require("onnx", "the onnx-int8 target")
            tail = concat_tail(onnx.load(str(pre), load_external_data=False),
                               [(i, mixed[i]["axis"]) for i in failed if i in mixed])
            if tail is None:
                attempts.append({"remedy": "float-tail", "activations": "int8", "float_nodes": [], "status": "skipped",
                                 "reason": "the output is not joined along its channel axis by a Concat (behind "
                                           "layout nodes only)"})
            else:
                yield "float-tail", "int8", tail
        profile = ctx.profile
        if profile is not None and not profile.quantization.int16_activations:
            attempts.append({"remedy": "int16", "activations": "int16", "float_nodes": [], "status": "skipped",
                             "reason": f"profile {profile.name} has no int16-activation kernels"})
        else:
            yield "int16", "int16", []
        excluded: list[str] = []
        while len(excluded) < MAX_EXCLUDED:
            remaining = [n["node"] for n in table() if n["node"] not in excluded]
            if not remaining:
                return
            excluded = [*excluded, remaining[0]]
            yield "float-nodes", "int8", excluded

    def node_errors(self, ctx: ConversionContext, pre: Path, quantized: bytes, names: list[str]) -> list[dict[str, Any]]:
        """Nodes by how much quantization changes their output (SQNR of float vs QDQ), worst first."""
        onnx = require("onnx", "the onnx-int8 target")
        qdq = ctx.workdir / "onnx_int8_debug.onnx"
        qdq.write_bytes(quantized)
        samples = list(ctx.evaluation.head(DEBUG_SAMPLES).batch1())
        errors = _isolated("activation_errors_step", str(pre), str(qdq), str(ctx.workdir), names, samples,
                           what="measuring the per-node int8 error (qdq_loss_debug)")
        producer = {out: node for node in onnx.load(str(pre)).graph.node for out in node.output}
        rows = []
        for tensor, sqnr in errors.items():
            node = producer.get(tensor)
            if node is None or sqnr is None or not np.isfinite(sqnr):
                continue
            rows.append({"node": node.name, "op": node.op_type, "tensor": tensor, "sqnr_db": round(float(sqnr), 2)})
        return sorted(rows, key=lambda r: r["sqnr_db"])

    def reverify(self, entry: Mapping[str, Any], root: Path) -> VerifyResult:
        return reverify_onnx(self.name, entry, root)


def _host_kernels(data: bytes, ctx: ConversionContext, exact: list[np.ndarray]) -> dict[str, Any]:
    """The same samples through ONNX Runtime's fused integer kernels on this machine, against
    the float source and against the model as written; a note when this CPU loses accuracy."""
    from edgeserve.quality.metrics import sqnr_db

    fused = check.run(check.session(data), list(ctx.evaluation.inputs))
    reference = ctx.reference_outputs()
    vs_source = [sqnr_db(r, f) for r, f in zip(reference, fused)]
    vs_exact = [sqnr_db(e, f) for e, f in zip(exact, fused)]
    exact_vs_source = [sqnr_db(r, e) for r, e in zip(reference, exact)]
    record: dict[str, Any] = {"sqnr_db_vs_source": vs_source, "sqnr_db_vs_exact": vs_exact,
                              "cpu_vnni": _cpu_has_vnni()}
    lost = [(a or 999.0) - (b or 999.0) for a, b in zip(exact_vs_source, vs_source)]
    if any(d > 1.0 for d in lost):
        record["note"] = (f"this CPU's ONNX Runtime integer kernels lose up to {max(lost):.1f} dB against the model "
                          "as written" + ("" if record["cpu_vnni"] else " (x86 without VNNI: u8 x s8 products "
                                          "summed in saturating 16-bit; Arm and VNNI CPUs compute it exactly)"))
    return record


def _opset(model: Any) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _cpu_has_vnni() -> bool | None:
    """VNNI (exact int8 dot products on x86); None where /proc/cpuinfo says nothing (not x86 Linux)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    if "flags" not in flags:
        return None
    return "avx512_vnni" in flags or "avx_vnni" in flags


def _float_nodes(model: Any) -> list[dict[str, str]]:
    """Compute nodes that run in float: in QDQ form a quantized node's every output goes into a
    QuantizeLinear; a float node's output is read as is (or is a graph output itself)."""
    consumers: dict[str, list[str]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node.op_type)
    graph_outputs = {v.name for v in model.graph.output}
    found = []
    for node in model.graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear", "Constant"):
            continue
        if any(out in graph_outputs or any(c != "QuantizeLinear" for c in consumers.get(out, []))
               for out in node.output):
            found.append({"node": node.name, "op": node.op_type})
    return found


# ----- ONNX Runtime's quantizer, in a child process -----------------------------------------
# Its pre-processing, calibration and debugging run ONNX Runtime's native graph optimizer and
# kernels on a model nobody has run before; a crash there is this target's one error line
# (edgeserve.isolation), never the end of the other targets' work. Arguments are paths and arrays.
def _isolated(step: str, *args: Any, what: str) -> Any:
    from edgeserve.isolation import NativeCrashError, run_isolated

    try:
        return run_isolated(f"{__name__}:{step}", *args, tool="ONNX Runtime's quantizer", what=what)
    except NativeCrashError as exc:
        raise VerificationError(f"{exc}; no onnx-int8 model was written") from exc


# ONNX Runtime's pre-processing, then less of it where it fails: its symbolic shape inference
# stops on graphs it does not know ("TypeError: object of type 'NoneType' has no len()" on a
# model from a wheel, issue 48) and its optimizer can too, while the quantizer itself needs
# neither. Last, the model as exported with ONNX's own shape inference.
PRE_PROCESS = (("quant_pre_process", {}),
               ("quant_pre_process without symbolic shape inference", {"skip_symbolic_shape": True}),
               ("quant_pre_process without symbolic shapes or its optimizer",
                {"skip_symbolic_shape": True, "skip_optimization": True}))


def preprocess_step(source: str, destination: str) -> tuple[list[str], dict[str, Any]]:
    """Pre-processed for quantization, every node named (so it can be excluded): the graph's
    data inputs, and which pre-processing was used (with why each fuller one was not)."""
    onnx = require("onnx", "the onnx-int8 target")
    from onnxruntime.quantization.shape_inference import quant_pre_process

    failed: list[str] = []
    for how, flags in PRE_PROCESS:
        try:
            with quiet_libraries():
                quant_pre_process(source, destination, **flags)
            break
        except Exception as exc:  # noqa: BLE001 - ORT's shape inference and optimizer raise many types
            failed.append(clip_words(f"{how}: {type(exc).__name__}: {first_line(exc)}", 300))
    else:
        how = "ONNX shape inference only (ONNX Runtime's pre-processing failed)"
        onnx.save(onnx.shape_inference.infer_shapes(onnx.load(source)), destination)
    model = onnx.load(destination)
    for i, node in enumerate(model.graph.node):
        node.name = node.name or f"{node.op_type}_{i}"
    _own_biases(onnx, model)
    _flatten_gemm_biases(onnx, model)
    onnx.save(model, destination)
    inputs = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    return inputs, {"used": how, **({"not_used": failed} if failed else {})}


BIASED = ("Conv", "ConvTranspose", "Gemm")


def _own_biases(onnx: Any, model: Any) -> None:
    """Each Conv, ConvTranspose and Gemm reads a bias initializer of its own (the same values).
    onnxruntime 1.32's QDQ quantizer copies a bias several nodes share (each needs a scale of its
    own) and names the copy the bias's name and a number, checked against initializer names only:
    BirdNET's tf2onnx graph shares ".../SE_CONV_1/Conv2D" among four squeeze-excite convolutions
    and names the first one's output ".../SE_CONV_1/Conv2D2", the name the third copy got, so a
    Sigmoid read a bias and the written model failed onnx.checker. Copies named here are unique
    among every tensor of the graph, and the quantizer then has nothing to copy."""
    constants = {t.name: t for t in model.graph.initializer}
    overridable = {v.name for v in model.graph.input}  # an initializer a caller may feed stays shared
    taken = set(constants) | overridable | {o for n in model.graph.node for o in n.output} | \
        {v.name for v in model.graph.value_info}
    read: set[str] = set()
    for node in model.graph.node:
        if node.op_type not in BIASED or len(node.input) < 3 or node.input[2] not in constants \
                or node.input[2] in overridable:
            continue
        bias = node.input[2]
        if bias not in read:
            read.add(bias)
            continue
        name = f"{bias}_of_{node.name}"
        while name in taken:
            name += "_"
        copy = onnx.TensorProto()
        copy.CopyFrom(constants[bias])
        copy.name = name
        model.graph.initializer.append(copy)
        taken.add(name)
        node.input[2] = name


def _flatten_gemm_biases(onnx: Any, model: Any) -> None:
    """A Gemm's constant bias of shape [1, N] becomes [N] (the same sum: both broadcast over the
    [M, N] product). onnxruntime 1.32's QDQ quantizer quantizes a Gemm bias per output channel
    as if it were 1-D: a [1, N] one (magika's classifier, exported by jax2tf) fails its int32
    range check with a ValueError, or gets a per-axis DequantizeLinear ONNX Runtime refuses."""
    constants = {t.name: t for t in model.graph.initializer}
    users: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            users[name] = users.get(name, 0) + 1
    for node in model.graph.node:
        if node.op_type != "Gemm" or len(node.input) < 3 or node.input[2] not in constants:
            continue
        bias = constants[node.input[2]]
        if len(bias.dims) != 2 or bias.dims[0] != 1:
            continue
        flat = onnx.numpy_helper.to_array(bias).reshape(-1)
        if users[bias.name] == 1 and bias.name not in {v.name for v in model.graph.input}:
            bias.CopyFrom(onnx.numpy_helper.from_array(flat, bias.name))
        else:  # shared with another node: a 1-D copy for this Gemm alone
            name = f"{bias.name}_1d_{node.name}"
            model.graph.initializer.append(onnx.numpy_helper.from_array(flat, name))
            node.input[2] = name


def quantize_step(pre: str, out: str, names: list[str], samples: list[list[np.ndarray]], excluded: list[str],
                  activations: str = "int8") -> None:
    """Static QDQ: int8 or int16 activations (min/max over ``samples``), per-channel int8 weights.
    For int16 the quantizer raises the model to opset 21, whose standard QuantizeLinear takes
    int16 (no com.microsoft operators: any runtime that implements opset 21 reads it)."""
    quantization = require("onnxruntime.quantization", "the onnx-int8 target")
    activation_type = {"int8": quantization.QuantType.QInt8, "int16": quantization.QuantType.QInt16}[activations]
    with quiet_libraries():
        quantization.quantize_static(
            pre, out, _reader(names, iter(samples)),
            quant_format=quantization.QuantFormat.QDQ, per_channel=True,
            activation_type=activation_type, weight_type=quantization.QuantType.QInt8,
            calibrate_method=quantization.CalibrationMethod.MinMax, nodes_to_exclude=excluded or None)


def activation_errors_step(pre: str, qdq: str, workdir: str, names: list[str],
                           samples: list[list[np.ndarray]]) -> dict[str, float | None]:
    """Tensor -> SQNR (dB) of its QDQ activation against the float one, over ``samples``."""
    from onnxruntime.quantization import qdq_loss_debug as debug

    augmented = {}
    with quiet_libraries():
        for label, path in (("float", pre), ("qdq", qdq)):
            augmented[label] = str(Path(workdir) / f"augmented_{label}.onnx")
            debug.modify_model_output_intermediate_tensors(path, augmented[label])
        acts = {label: debug.collect_activations(path, _reader(names, iter(samples)))
                for label, path in augmented.items()}
        errors = debug.compute_activation_error(debug.create_activation_matching(acts["qdq"], acts["float"]))
    return {tensor: (None if error.get("xmodel_err") is None else float(error["xmodel_err"]))
            for tensor, error in errors.items()}
