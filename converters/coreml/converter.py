"""Target ``coreml``: a Core ML package (ML program) checked against its source, on any OS.

prepare    plan the inputs (an ImageType carrying the PreprocessSpec for an image model,
           tensors otherwise), class labels, float reference outputs
calibrate  w8a8 only: activation ranges over the calibration set, computed by edgeserve's
           numpy MIL evaluator on the fp16 program (Core ML's own collector needs macOS)
emit       coremltools: fp16 ML program, then INT8 weights (and INT8 activations);
           author, licence, version and edgeserve provenance stamped into the package
verify     the written package, read back from disk, through the numpy evaluator (and Core ML
           predict on macOS) over the eval set, against the source: max |diff|, top-1
           agreement, task metric. An op the evaluator cannot run fails the conversion.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from edgeserve.converters import register
from edgeserve.converters._base import Check, ConversionContext, Converter, VerifyResult

from edgeserve.atomic import sha256_file, write_bytes, write_json
from edgeserve.quality.detections import DetectionGate
from edgeserve.errors import (
    InputError,
    ModelFileError,
    SourceModelError,
    UnsupportedOpError,
)
from edgeserve.quality.fixtures import load_arrays
from edgeserve.manifest.record import (
    check_file,
    edgeserve_version,
    file_record,
    package_versions,
)
from edgeserve.quality.metrics import (
    MetricResult,
    agreement,
    choose_metric,
    degenerate,
)
from edgeserve.converters._torch_source import ROUTE_FROM_TFLITE, torch_source
from edgeserve.quality.gate import Verdict, judge
from edgeserve.quality.options import DEFAULT_MIN_AGREEMENT, DEFAULT_MIN_SQNR_DB

ARTIFACT_NAME = "model.mlpackage"
FIXTURE_SAMPLES = 32
# Re-running the evaluator elsewhere may differ in float32 summation order (BLAS), which can
# move an fp16-rounded value by one step (1e-3 relative); a changed weight moves far more.
REVERIFY_ATOL = 1e-2
# The oldest deployment target each precision can use (ML program; constexpr weights;
# activation quantize/dequantize ops).
MIN_TARGET = {"fp16": "iOS15", "int8-weights": "iOS16", "w8a8": "iOS17"}
SOURCE_KINDS = ("keras", "keras-h5", "torch-export", "torchscript", "torch-module", "onnx", "tflite-float")
ARITHMETIC = "float32 arithmetic, every value rounded to its declared type (fp16 activations)"


@dataclasses.dataclass(frozen=True)
class Options:
    """coreml options (CLI: --coreml-precision, --deployment-target, --max-drop, --metric).

    ``labels`` (a list, or a text file with one label per line) makes the package a
    classifier; ``author``, ``license`` and ``version`` go into its metadata.
    """

    precision: str = "fp16"
    deployment_target: str = "iOS17"
    max_drop: float = 1.0
    min_sqnr_db: float = DEFAULT_MIN_SQNR_DB
    min_agreement: float = DEFAULT_MIN_AGREEMENT
    metric: str | None = None
    labels: tuple[str, ...] | None = None
    author: str | None = None
    license: str | None = None
    version: str | None = None

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> Options:
        from edgeserve.converters.coreml.quantize import PRECISIONS

        precision = options.get("coreml_precision") or "fp16"
        if precision not in PRECISIONS:
            raise InputError(f"--coreml-precision must be one of {', '.join(PRECISIONS)}; got {precision!r}")
        max_drop = options.get("max_drop")
        if max_drop is not None and max_drop < 0:
            raise InputError(f"--max-drop must be >= 0 percentage points; got {max_drop}")
        return cls(
            precision=precision,
            deployment_target=options.get("deployment_target") or "iOS17",
            max_drop=1.0 if max_drop is None else float(max_drop),
            # --min-sqnr was not passed on to Core ML's gate before: it judged every output at 10 dB.
            min_sqnr_db=_float_or(options.get("min_sqnr_db"), DEFAULT_MIN_SQNR_DB),
            min_agreement=_float_or(options.get("min_agreement"), DEFAULT_MIN_AGREEMENT),
            metric=options.get("metric"),
            labels=_labels(options.get("labels")),
            author=options.get("author"),
            license=options.get("license"),
            version=options.get("model_version"),
        )


@dataclasses.dataclass
class Verification:
    """The package's outputs on the eval set and how they compare with the source's."""

    method: str
    outputs: list[np.ndarray]  # the method's: Core ML's on macOS, else the evaluator's
    numpy_outputs: list[np.ndarray] | None  # None when an op is beyond the evaluator (macOS only)
    predict_outputs: list[np.ndarray] | None  # None off macOS
    metrics: MetricResult
    agreement: dict[str, float | None]
    mil_numpy: dict[str, Any]
    coreml_predict: dict[str, Any]
    verdict: Verdict

    def to_dict(self, evaluated_on: str) -> dict[str, Any]:
        return {
            "method": self.method,
            "max_abs_diff": self.agreement["max_abs_diff"],
            "top1_agreement": self.agreement.get("top1_agreement"),
            "sqnr_db": self.agreement.get("sqnr_db"),
            "samples": self.metrics.samples,
            "evaluated_on": evaluated_on,
            "mil_numpy": self.mil_numpy,
            "coreml_predict": self.coreml_predict,
        }


@register
class CoreMLConverter(Converter):
    name = "coreml"
    route_order = 3

    def route_from(self, kind: str, control_flow: bool = False) -> Any:
        from edgeserve.routes import KERAS_KINDS, ONNX_READER, TORCH_KINDS, Route

        if kind in KERAS_KINDS:
            return Route(self.name, ("tensorflow", "coremltools"))
        if kind == "saved_model":
            return Route(self.name, (), "coremltools does not take a SavedModel from Keras 3; convert the .keras or .h5 file")
        if kind in TORCH_KINDS:
            return Route(self.name, ("torch", "coremltools"))
        if kind == "tflite-float":  # coremltools has no TFLite frontend: through the ONNX the onnx target makes
            return Route(self.name, ("tf2onnx", ONNX_READER, "torch.export", "coremltools"))
        if kind == "tflite":
            return Route(self.name, (), "coremltools has no TFLite frontend; convert the model the .tflite was made from")
        return Route(self.name, ("onnx", ONNX_READER, "torch.export", "coremltools"))
    report_lines = "edgeserve.converters.coreml.report"
    summary = "Core ML package (fp16 / int8 weights / w8a8), verified numerically on Linux too"

    def isolated_imports(self, source_kind: str) -> tuple[str, ...]:
        framework = "tensorflow" if source_kind in ("keras", "keras-h5", "saved_model") else "torch"
        return ("coremltools", framework)

    def uses_calibration(self, options: Mapping[str, Any]) -> bool:
        # fp16 and int8-weights need no activation ranges; only w8a8 calibrates.
        return Options.from_mapping(options).precision == "w8a8"

    def convert(self, ctx: ConversionContext) -> dict[str, Any]:
        from edgeserve.converters.coreml import toolchain
        from edgeserve.converters.coreml.frontend import deployment_target

        if ctx.source.kind not in SOURCE_KINDS or ctx.calibration is None or ctx.evaluation is None:
            what = {"tflite": "is a full-integer .tflite (nothing to convert it back to float from)",
                    "saved_model": "is a SavedModel directory, which coremltools "
                    "does not take from Keras 3"}.get(ctx.source.kind, f"is a {ctx.source.kind} model")
            raise SourceModelError(
                f"{ctx.source.path.name} {what}; the coreml target converts a .keras or Keras 2 .h5 model, a "
                "PyTorch ExportedProgram (.pt2) or TorchScript (.pt), an ONNX file or a float .tflite. Convert the "
                "model the file was made from"
            )
        opts = Options.from_mapping(ctx.options)
        with ctx.progress.step("coreml: import coremltools"):
            ct = toolchain.coremltools()
        target = deployment_target(ct, opts.deployment_target)
        minimum = getattr(ct.target, MIN_TARGET[opts.precision])
        if target < minimum:
            raise InputError(
                f"--coreml-precision {opts.precision} needs --deployment-target {MIN_TARGET[opts.precision]} "
                f"(or macOS equivalent) or later; got {opts.deployment_target}"
            )
        plans = self.prepare(ctx, opts)
        messages: list[str] = []
        package, stats, table = self.emit(ctx, opts, plans, messages, torch_source(ctx))
        verification = self.verify(ctx, opts, package, plans)
        return self._write(ctx, opts, package, plans, verification, stats, table, messages)

    # ----- prepare ----------------------------------------------------------------------
    def prepare(self, ctx: ConversionContext, opts: Options) -> list[Any]:
        from edgeserve.converters.coreml.frontend import plan_inputs

        assert ctx.calibration is not None
        plans = plan_inputs(ctx.source, ctx.preprocess, [x.shape[1:] for x in ctx.calibration.inputs])
        with ctx.progress.step("coreml: float reference outputs"):
            reference = ctx.reference_outputs()
        if opts.labels:
            outputs = ctx.source.signature.outputs
            width = int(np.prod(reference[0].shape[1:]))
            if len(outputs) != 1 or width != len(opts.labels):
                raise InputError(
                    f"{len(opts.labels)} class labels given, but the model has {len(outputs)} output(s) and its "
                    f"first gives {width} values; a Core ML classifier needs one output with one score per label"
                )
        return plans

    # ----- calibrate + emit -------------------------------------------------------------
    def emit(self, ctx: ConversionContext, opts: Options, plans: list[Any], messages: list[str],
             source: Any) -> tuple[Path, Any, list[dict[str, Any]]]:
        """Convert ``source`` (what coremltools is given: ``torch_source``), quantize and save
        the package into the work directory (not yet OUT)."""
        from edgeserve.converters.coreml import quantize
        from edgeserve.converters.coreml.isolated import convert_in_child, finish_in_child

        with ctx.progress.step(f"coreml: convert {ctx.source.kind} with coremltools"):
            converted, said_there = convert_in_child(source, plans, target_name=opts.deployment_target,
                                                     labels=opts.labels, workdir=ctx.workdir)
        messages += said_there
        stats = self.calibrate(ctx, converted, plans) if opts.precision == "w8a8" else None
        package = ctx.workdir / "coreml" / ARTIFACT_NAME
        if package.exists():
            shutil.rmtree(package)
        step = {"fp16": "save", "int8-weights": "int8 weights", "w8a8": "int8 activations and weights"}
        with ctx.progress.step(f"coreml: {step[opts.precision]}"):
            messages += finish_in_child(converted, package, precision=opts.precision, stats=stats,
                                        metadata=self._metadata(ctx, opts), name=ctx.source.path.name)
        table: list[dict[str, Any]] = []
        if stats is not None:
            from edgeserve.converters.coreml.program import MilProgram

            table = quantize.activation_table(MilProgram.load(package), stats)
        return package, stats, table

    def calibrate(self, ctx: ConversionContext, float_package: Path, plans: list[Any]) -> Any:
        """Activation ranges of the fp16 program over the calibration set (for w8a8)."""
        from edgeserve.converters.coreml.program import MilProgram
        from edgeserve.converters.coreml.quantize import collect_activation_stats

        calibration = ctx.calibration
        assert calibration is not None
        program = MilProgram.load(float_package)
        feeds = ctx.progress.track(_feeds(plans, calibration.inputs), len(calibration),
                                   "coreml: activation ranges (numpy MIL evaluator)")
        return collect_activation_stats(program, feeds, own_ranges=self._float_tail(ctx, program))

    def _float_tail(self, ctx: ConversionContext, program: Any) -> list[str]:
        """The concats of outputs found, before quantizing, to join ranges one scale cannot
        hold (float_tail.py); none when there is no such output or it is not such a join (the
        manifest then lists the output under mixed_range_outputs with an empty float_tail)."""
        from edgeserve.converters.coreml.float_tail import concat_tail

        mixed = {i: m for i, m in ctx.mixed_range_outputs().items() if i < len(program.outputs)}
        if not mixed:
            return []
        tail = concat_tail(program, [(i, m["axis"]) for i, m in mixed.items()])
        return tail or []

    def _metadata(self, ctx: ConversionContext, opts: Options) -> dict[str, str]:
        """What the package's metadata says: its four fields, then edgeserve's provenance keys."""
        metadata = {"author": opts.author or f"edgeserve {edgeserve_version()}",
                    "license": opts.license or "unspecified",
                    "version": opts.version or ctx.source.sha256[:12],
                    "short_description": f"{ctx.source.path.name} converted by edgeserve (coreml, {opts.precision})"}
        for key, value in _provenance(ctx, opts).items():
            metadata[f"edgeserve.{key}"] = value if isinstance(value, str) else json.dumps(value)
        return metadata

    # ----- verify -----------------------------------------------------------------------
    def verify(self, ctx: ConversionContext, opts: Options, package: Path, plans: list[Any]) -> Verification:
        """Run the package as written against the source; Core ML predict too on macOS."""
        from edgeserve.converters.coreml import toolchain
        from edgeserve.converters.coreml.evaluator import MilEvaluator
        from edgeserve.converters.coreml.predict import run_core_ml
        from edgeserve.converters.coreml.program import MilProgram

        evaluation = ctx.evaluation
        assert evaluation is not None
        program = MilProgram.load(package)
        reference = ctx.reference_outputs()
        metric = choose_metric(opts.metric, evaluation.labels, reference[0])
        available, reason = toolchain.predict_available()
        coreml_predict: dict[str, Any] = {"skipped": reason}
        numpy_out = predict_out = None
        try:
            evaluator = MilEvaluator(program)
        except UnsupportedOpError as exc:
            if not available:
                raise  # "not verified: op X": never pass silently, and nothing is written
            mil_numpy: dict[str, Any] = {"not_verified": str(exc).split(" Supported ops:")[0], "op": exc.op}
        else:
            feeds = ctx.progress.track(_feeds(plans, evaluation.inputs), len(evaluation),
                                       "coreml: verifying with the numpy MIL evaluator")
            numpy_out = _run(evaluator, program, feeds)
            mil_numpy = _compare(reference, numpy_out, metric) | {"arithmetic": ARITHMETIC}
        if available:
            with ctx.progress.step("coreml: verifying with Core ML predict"):
                predict_out = run_core_ml(package, program, _feeds(plans, evaluation.inputs))
            coreml_predict = _compare(reference, predict_out, metric) | {"compute_units": "CPU_ONLY"}
        method = "coreml-predict" if predict_out is not None else "mil-numpy"
        outputs = predict_out if predict_out is not None else numpy_out
        assert outputs is not None
        verdict = judge(metric, reference, outputs, evaluation.labels, max_drop=opts.max_drop,
                        min_sqnr_db=opts.min_sqnr_db, min_agreement=opts.min_agreement,
                        metric_requested=opts.metric is not None,
                        names=[t.name for t in ctx.source.signature.outputs], detections=DetectionGate.of(ctx))
        agree = agreement(reference[0], outputs[0], classifier=metric == "top1")
        agree["max_abs_diff"] = max(float(np.max(np.abs(r - o))) for r, o in zip(reference, outputs))
        return Verification(method, outputs, numpy_out, predict_out, verdict.metrics, agree, mil_numpy,
                            coreml_predict, verdict)

    # ----- write ------------------------------------------------------------------------
    def _write(self, ctx: ConversionContext, opts: Options, package: Path, plans: list[Any],
               verification: Verification, stats: Any, table: list[dict[str, Any]],
               messages: list[str]) -> dict[str, Any]:
        from edgeserve.converters.coreml import toolchain
        from edgeserve.converters.coreml.program import MilProgram

        evaluation = ctx.evaluation
        assert evaluation is not None and ctx.calibration is not None
        out = ctx.out_dir
        artifact = _install(package, out / ARTIFACT_NAME)
        program = MilProgram.load(artifact)

        fixture_n = min(FIXTURE_SAMPLES, len(evaluation))
        fixture_inputs = [plan.to_package(x[:fixture_n]) for plan, x in zip(plans, evaluation.inputs)]
        fixture_path = out / "verify" / "coreml.npz"
        # What re-verification needs without the source or its framework: the package's inputs,
        # the source's outputs, and the evaluator's (and Core ML's) outputs at conversion time.
        _write_npz(fixture_path, inputs=fixture_inputs,
                   reference=[r[:fixture_n] for r in ctx.reference_outputs()],
                   raw=[o[:fixture_n] for o in verification.numpy_outputs or []],
                   predict=[o[:fixture_n] for o in verification.predict_outputs or []])

        metrics = verification.metrics
        status = "ok" if verification.verdict.ok else "failed"
        reason = verification.verdict.reason
        quantization = _quantization(opts, program, stats, ctx)
        # The package computes in fp16: a source spread below one fp16 step of its outputs is
        # one no comparison can see, the same as a constant.
        unverified = degenerate(ctx.reference_outputs(),
                                [float(np.max(np.abs(r))) * 2.0**-10 for r in ctx.reference_outputs()])
        report = {
            "target": self.name,
            "precision": opts.precision,
            "ops": program.op_counts(),
            "quantization": quantization,
            "activation_quantization": table,
            "verification": verification.to_dict(_evaluated_on(evaluation)) | {"degenerate": unverified},
            "coremltools_messages": messages,
        }
        report_path = write_json(out / "reports" / "coreml.json", report)
        record = _package_record(out, artifact)
        attempt = {"remedy": opts.precision, "description": f"Core ML {opts.precision}", "status": status,
                   "reason": reason, "metrics": metrics.to_dict()}
        return {
            "target": self.name,
            "status": status,
            **record,
            "precision": opts.precision,
            "deployment_target": opts.deployment_target,
            "specification_version": program.specification_version,
            "inputs": [plan.to_dict() for plan in plans],
            "outputs": [f.to_dict() for f in program.output_features],
            "classifier": {"labels": list(opts.labels), **(program.classifier or {})} if opts.labels else None,
            "ops": program.op_counts(),
            "quantization": quantization,
            # Multiply-accumulates by activation type, as tflite-int8's: int8 only in W8A8.
            "macs": _mac_share(program),
            "metrics": metrics.to_dict() | {"max_drop": opts.max_drop},
            "quality": verification.verdict.to_dict(),
            "agreement": verification.agreement,
            "attempts": [attempt],
            "metadata": {k: program.metadata[k] for k in ("author", "license", "version", "short_description")},
            "report": file_record(out, report_path),
            "verification": verification.to_dict(_evaluated_on(evaluation))
                            | {"fixture": file_record(out, fixture_path), "degenerate": unverified},
            "provenance": _provenance(ctx, opts) | {"coremltools_untested": list(toolchain.untested_versions)},
        }

    # ----- re-verification --------------------------------------------------------------
    def reverify(self, entry: Mapping[str, Any], root: Path) -> VerifyResult:
        from edgeserve.converters.coreml import toolchain
        from edgeserve.converters.coreml.evaluator import MilEvaluator
        from edgeserve.converters.coreml.predict import run_core_ml
        from edgeserve.converters.coreml.program import MilProgram

        checks: list[Check] = []
        fixture = entry["verification"]["fixture"]
        for label, record in {"package": entry, "report": entry["report"], "fixture": fixture}.items():
            problem = check_file(root, record)
            checks.append(Check(f"{label} sha256", problem is None, problem or record["sha256"][:16]))
        if not all(c.ok for c in checks):
            return VerifyResult(self.name, entry["path"], tuple(checks))
        package = root / entry["path"]
        try:
            program = MilProgram.load(package)
        except ModelFileError as exc:
            return VerifyResult(self.name, entry["path"], (*checks, Check("package reads", False, str(exc))))
        stamped = program.metadata["user_defined"].get("edgeserve.source_sha256")
        expected = entry.get("provenance", {}).get("source_sha256")
        checks.append(Check("provenance in the package", stamped == expected,
                            f"source sha256 {str(stamped)[:12]}… (manifest {str(expected)[:12]}…)"))
        arrays = load_arrays(root / fixture["path"])
        inputs = [arrays[f"inputs_{i}"] for i in range(len(entry["inputs"]))]
        reference = _group(arrays, "reference")
        names = [plan["name"] for plan in entry["inputs"]]
        feeds = [{n: x[i : i + 1] for n, x in zip(names, inputs)} for i in range(len(inputs[0]))]
        available, reason = toolchain.predict_available()
        outputs = None
        try:
            evaluator = MilEvaluator(program)
        except UnsupportedOpError as exc:
            checks.append(Check("numpy MIL evaluator", available, str(exc).split(" Supported ops:")[0]
                                + ("" if available else f"; and {reason}")))
        else:
            outputs = _run(evaluator, program, feeds)
            checks.append(_same_outputs("outputs equal the recorded ones (numpy MIL evaluator)", outputs,
                                        _group(arrays, "raw")))
        if available:
            outputs = run_core_ml(package, program, feeds)
            recorded = _group(arrays, "predict")
            if recorded:
                checks.append(_same_outputs("outputs equal the recorded ones (Core ML predict)", outputs, recorded))
        reason = entry["verification"].get("degenerate")
        checks.append(Check("reference outputs vary", reason is None, reason or "the check can tell models apart"))
        if outputs is None:
            return VerifyResult(self.name, entry["path"], tuple(checks))
        agree = agreement(reference[0], outputs[0], classifier=entry["metrics"]["metric"] == "top1")
        recorded_top1 = (entry.get("agreement") or {}).get("top1_agreement")
        if "top1_agreement" in agree and recorded_top1 is not None:
            checks.append(Check("top-1 agreement with the source", agree["top1_agreement"] >= recorded_top1 - 0.05,
                                f"{agree['top1_agreement']:.3f} on {len(inputs[0])} fixture samples "
                                f"(conversion: {recorded_top1:.3f})"))
        return VerifyResult(self.name, entry["path"], tuple(checks))


# ----- helpers ---------------------------------------------------------------------------------
def _group(arrays: Mapping[str, np.ndarray], name: str) -> list[np.ndarray]:
    return [arrays[f"{name}_{i}"] for i in range(sum(1 for k in arrays if k.startswith(f"{name}_")))]


def _same_outputs(name: str, outputs: Sequence[np.ndarray], recorded: Sequence[np.ndarray]) -> Check:
    if len(outputs) != len(recorded):
        return Check(name, False, f"{len(outputs)} output(s) now, {len(recorded)} recorded")
    diff = max(float(np.max(np.abs(o - r))) for o, r in zip(outputs, recorded))
    ok = bool(np.isfinite(diff)) and diff <= REVERIFY_ATOL
    return Check(name, ok, f"max difference {diff:.3g} over {len(outputs[0])} samples (allowed {REVERIFY_ATOL})")


def _float_or(value: Any, default: float) -> float:
    return default if value is None else float(value)


def _labels(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)):
        path = Path(value)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise InputError(f"cannot read the labels file {path}: {exc}") from exc
        labels = tuple(l.strip() for l in lines if l.strip())
    else:
        labels = tuple(str(v) for v in value)
    if not labels:
        raise InputError("the class label list is empty")
    if len(set(labels)) != len(labels):
        raise InputError("class labels must be unique (a Core ML classifier maps each label to one score)")
    return labels


def _feeds(plans: Sequence[Any], inputs: Sequence[np.ndarray]) -> Iterator[dict[str, np.ndarray]]:
    """One feed dict per sample, in the form the package takes (pixels for an image input)."""
    converted = [plan.to_package(x) for plan, x in zip(plans, inputs)]
    for i in range(len(converted[0])):
        yield {plan.name: x[i : i + 1] for plan, x in zip(plans, converted)}


def _run(evaluator: Any, program: Any, feeds: Any) -> list[np.ndarray]:
    from edgeserve.converters.coreml.predict import numeric_outputs

    rows = [numeric_outputs(program, evaluator.run(feed)) for feed in feeds]
    return [np.concatenate([r[i] for r in rows]) for i in range(len(rows[0]))]


def _compare(reference: Sequence[np.ndarray], outputs: Sequence[np.ndarray], metric: str) -> dict[str, Any]:
    agree = agreement(reference[0], outputs[0], classifier=metric == "top1")
    return {
        "max_abs_diff": max(float(np.max(np.abs(r - o))) for r, o in zip(reference, outputs)),
        "top1_agreement": agree.get("top1_agreement"),
        "sqnr_db": agree.get("sqnr_db"),
        "samples": int(outputs[0].shape[0]),
    }


def _quantization(opts: Options, program: Any, stats: Any, ctx: ConversionContext) -> dict[str, Any]:
    from edgeserve.converters.coreml.quantize import WEIGHT_THRESHOLD

    counts = program.op_counts()
    int8_weights = opts.precision != "fp16"
    calibration = ctx.calibration
    assert calibration is not None
    return {
        "scheme": opts.precision,
        "weights": (f"int8 symmetric per output channel (linear_quantize_weights, weight_threshold="
                    f"{WEIGHT_THRESHOLD}); 1-D constants fp16") if int8_weights else "fp16",
        "activations": "int8 symmetric per tensor (quantize/dequantize)" if opts.precision == "w8a8" else "fp16",
        "quantized_weights": counts.get("constexpr_affine_dequantize", 0)
                             + counts.get("constexpr_blockwise_shift_scale", 0),
        "activation_quantize_ops": counts.get("quantize", 0),
        **({} if stats is None or not (stats.own_ranges or ctx.mixed_range_outputs()) else {
            "float_tail": stats.own_ranges,
            "mixed_range_outputs": list(ctx.mixed_range_outputs().values())}),
        "activation_stats": None if stats is None else {
            "method": "mil-numpy",
            "note": "min/max of each value over every calibration sample, from edgeserve's numpy MIL "
                    "evaluator running the fp16 program; coremltools' linear_quantize_activations needs "
                    "Core ML predict (macOS only). Fed to coremltools' own insert-quantize passes.",
            "samples": stats.samples,
            "tensors": len(stats.ranges),
            "calibration_sha256": calibration.sha256,
        },
    }


def _provenance(ctx: ConversionContext, opts: Options) -> dict[str, Any]:
    assert ctx.calibration is not None
    return {
        "edgeserve_version": edgeserve_version(),
        "target": "coreml",
        "precision": opts.precision,
        "source_sha256": ctx.source.sha256,
        "source_framework": f"{ctx.source.framework} ({ctx.source.framework_version})",
        "calibration_sha256": ctx.calibration.sha256,
        "calibration_origin": ctx.calibration.origin,
        "coremltools_version": package_versions("coremltools")["coremltools"],
        **({"route": f"{ROUTE_FROM_TFLITE} -> coremltools",
            "tf2onnx_version": package_versions("tf2onnx")["tf2onnx"]} if ctx.source.kind == "tflite-float" else {}),
        "preprocess": ctx.preprocess.to_dict() if ctx.preprocess else None,
    }


def _evaluated_on(evaluation: Any) -> str:
    return "eval" if evaluation.labels is not None else evaluation.origin


def _package_record(root: Path, package: Path) -> dict[str, Any]:
    """path, sha256 (over every file, as edgeserve.atomic hashes a directory) and total bytes."""
    total = sum(p.stat().st_size for p in package.rglob("*") if p.is_file())
    return {"path": package.relative_to(root).as_posix(), "sha256": sha256_file(package), "bytes": total}


def _install(built: Path, final: Path) -> Path:
    """Move the verified package into place: readers see the old package or the new one."""
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".partial", dir=final.parent))
    try:
        shutil.copytree(built, staging, dirs_exist_ok=True)
        old = None
        if final.exists():
            old = final.with_name(f".{final.name}.old-{os.getpid()}")
            os.replace(final, old)
        os.replace(staging, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return final


def _write_npz(path: Path, **groups: Any) -> None:
    arrays = {f"{name}_{i}": np.asarray(a) for name, seq in groups.items() for i, a in enumerate(seq)}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    write_bytes(path, buffer.getvalue())


def _mac_share(program: Any) -> dict[str, Any]:
    from edgeserve.converters.coreml.mac_share import program_mac_share

    return program_mac_share(program)
