"""Target ``tflite-int8``: full-integer post-training quantization, verified before it is done.

prepare    export a batch-1 SavedModel of the source; float reference outputs on the eval set
calibrate  TFLite calibration over the calibration set, and TensorFlow's quantization
           debugger over a slice of the eval set for the per-layer error table
emit       one .tflite per attempt: int8 first, then the remedies (an output's final
           concatenation in float where its float values join ranges one scale cannot hold,
           found before quantization; int16 activations with int8 weights where the profile
           allows it; then the worst layers kept in float)
verify     run each attempt with LiteRT, check every operator runs on integer tensors,
           judge every output against the float source (edgeserve/quality/gate.py); keep the first
           that passes
"""

from __future__ import annotations

import logging

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from edgeserve._deps import package_version
from edgeserve.atomic import write_bytes, write_json
from edgeserve.console import NativeOutput, capture_native_stderr
from edgeserve.converters import register
from edgeserve.converters._base import ConversionContext, Converter, VerifyResult
from edgeserve.converters.tflite_int8.attempts import Attempt, Options, Remedy
from edgeserve.converters.tflite_int8.float_tail import concatenation_tail, float_front
from edgeserve.converters.tflite_int8.layer_errors import LayerError, LayerTable
from edgeserve.converters.tflite_int8.output_order import source_order, upstream_tensors
from edgeserve.converters.tflite_int8.quantizer_route import QuantizerRoute
from edgeserve.converters.tflite_int8.refused import refused_operators
from edgeserve.converters.tflite_int8.reverify import integer_problems, reverify_artifact
from edgeserve.converters.tflite_int8.run import Run
from edgeserve.converters.tflite_int8.tf_route import TensorFlowRoute
from edgeserve.quality.detections import DetectionGate
from edgeserve.mac_share import mac_share
from edgeserve.isolation import BudgetExceededError, budget
from edgeserve.errors import (
    EdgeServeError,
    SourceModelError,
    UnsupportedOpError,
    VerificationError,
    clip_words,
    first_line,
)
from edgeserve.manifest.record import edgeserve_version, file_record
from edgeserve.quality.metrics import agreement, choose_metric, degenerate, sqnr_db
from edgeserve.quality.gate import judge
from edgeserve.sources.onnx.source import ROUTE_ONNX2TF
from edgeserve.tflite.model import TfliteModel

ARTIFACT_NAME = "model_int8.tflite"
FIXTURE_SAMPLES = 32
# Remedies keeping float what LiteRT's int8 kernels refuse, each adding the next refused operator.
MAX_REFUSED_ROUNDS = 3


log = logging.getLogger(__name__)


@register
class TfliteInt8Converter(Converter):
    name = "tflite-int8"
    route_order = 0
    report_lines = "edgeserve.converters.tflite_int8.report"

    def route_from(self, kind: str, control_flow: bool = False) -> Any:
        from edgeserve.routes import KERAS_KINDS, ONNX_TO_TFLITE, TORCH_KINDS, Route

        if kind in KERAS_KINDS or kind == "saved_model":
            return Route(self.name, ("tensorflow",))
        if kind in TORCH_KINDS:
            first = ("torch",) if kind != "torchscript" else ("torch", "torch.export (TS2EP)")
            return Route(self.name, (*first, "litert-torch", "ai-edge-quantizer"))
        if kind == "tflite-float":
            return Route(self.name, ("ai-edge-quantizer",))
        if kind == "tflite":
            return Route(self.name, (), "already a full-integer .tflite: use it as it is, or with -t mcu")
        return Route(self.name, ("onnx", ONNX_TO_TFLITE, "ai-edge-quantizer"))
    summary = "full-integer INT8 .tflite for LiteRT / TFLM, verified against the source"

    def isolated_imports(self, source_kind: str) -> tuple[str, ...]:
        if source_kind in ("keras", "keras-h5", "saved_model"):
            return ("tensorflow",)  # the TF converter and its quantization debugger
        lowering = {"onnx": ("onnx2tf",), "torch-export": ("litert_torch",), "torchscript": ("litert_torch",)}
        return (*lowering.get(source_kind, ()), "ai_edge_quantizer")

    def convert(self, ctx: ConversionContext) -> dict[str, Any]:
        if ctx.calibration is None or ctx.evaluation is None:
            raise SourceModelError(
                f"{ctx.source.path.name} is already a full-integer .tflite; tflite-int8 converts a float "
                "source (Keras, PyTorch, ONNX or a float .tflite). Use it with -t mcu directly"
            )
        opts = Options.from_mapping(ctx.options)
        run = Run(ctx, opts)
        route = self.route(run)
        with ctx.progress.step("float reference outputs"):
            ctx.reference_outputs()
        run.route_record = self._describe_route(run, route)
        with budget(opts.remedy_budget_s):
            return self._search(run, route)

    def _search(self, run: Run, route: TensorFlowRoute | QuantizerRoute) -> dict[str, Any]:
        """The attempts on ``route`` (and the other routes an ONNX or Keras source has), inside
        the remedy budget, and the best of them written."""
        ctx, opts = run.ctx, run.opts
        layers = self.calibrate(run, route)
        metric = choose_metric(opts.metric, ctx.evaluation.labels, ctx.reference_outputs()[0])
        run.mixed = ctx.mixed_range_outputs()

        try:
            attempts = self._attempts(run, route, layers, metric)
        except UnsupportedOpError as exc:
            if not _onnx_source(ctx, route):
                raise
            refused: UnsupportedOpError | None = exc
            attempts = [Attempt(Remedy("int8", "int8 activations, int8 per-channel weights"), "error",
                                first_line(exc))]
        else:
            refused = None
        passed = [a for a in attempts if a.status == "ok"]
        # Passing only as a mixed model (an operator ai-edge-quantizer has no int8 rule for, as
        # the reader writes it) is not the end either: the other route may write that part with
        # operators that quantize (onnx2tf fuses a GELU the reader spells with Erf -> MINIMUM).
        mixed_only = bool(passed) and all(a.no_int8_rule for a in passed)
        if _onnx_source(ctx, route) and (not passed or mixed_only):
            attempts, layers, run = self._other_onnx_route(run, route, metric, attempts, layers, refused,
                                                           integer_only_wins=mixed_only)
        crashed = [a.reason for a in attempts if "crashed (" in a.reason]
        if isinstance(route, TensorFlowRoute) and crashed and not any(a.model for a in attempts):
            # TensorFlow's converter died on every scheme (a Keras LSTM: its calibrator segfaults).
            # The same model reaches ai-edge-quantizer another way: tf2onnx, the ONNX reader, litert-torch.
            try:
                with ctx.progress.step("TensorFlow's converter crashed: the model through tf2onnx and the ONNX reader"):
                    fallback = self._route_through_onnx(run)
            except EdgeServeError as exc:  # no way around: both failures go into the one error line
                attempts.append(Attempt(Remedy("int8", "through tf2onnx and the ONNX reader"), "error",
                                        f"tf2onnx -> ONNX reader: {first_line(exc)}"))
                return self._write(run, attempts, layers)
            run.route_record = self._describe_route(run, fallback) | {"instead_of": f"{route.name}: {crashed[0]}"}
            layers = self.calibrate(run, fallback)
            attempts += self._attempts(run, fallback, layers, metric)
        return self._write(run, attempts, layers)

    def _other_onnx_route(self, run: Run, route: QuantizerRoute, metric: str, attempts: list[Attempt],
                          layers: LayerTable, refused: UnsupportedOpError | None,
                          integer_only_wins: bool = False) -> tuple[list[Attempt], LayerTable, Run]:
        """An ONNX source whose float model (the reader's, or onnx2tf's) gave no INT8 model that
        passes: the other route's float model through the same remedies, kept if it does better
        (a passing model, or a model at all). Otherwise the first route's outcome stands. Returns
        the attempts kept, their per-layer table and the run they were made on.

        ``integer_only_wins``: the first route passed, but only as a mixed model; the other
        route's is kept only if it passes integer-only (no operator left without an int8 rule)."""
        ctx, first = run.ctx, run.floated
        try:
            with capture_native_stderr():
                other = ctx.source.other_float_tflite(ctx.workdir / "other_route", first,
                                                      f"{first.route}: {_summary(attempts)}")
            if other is None:  # the float model already came from the second route, or there is none
                raise refused or EdgeServeError(
                    f"the other route was tried first and failed: {first.fallback}" if first.fallback
                    else "no other route (onnx2tf is not installed, or EDGESERVE_ONNX_ROUTE names one)")
            with ctx.progress.step(f"no passing INT8 model: {other.route}"):
                second = QuantizerRoute(other.model, ctx.calibration, run.opts.io, other.route, route.alternative,
                                        _io_names(ctx))
            theirs_run = run.on_route(other)
            theirs_run.route_record = self._describe_route(theirs_run, second)
            second_layers = self.calibrate(theirs_run, second)
            theirs = self._attempts(theirs_run, second, second_layers, metric)
        except EdgeServeError as exc:
            if refused is not None:
                raise refused from (exc if exc is not refused else None)  # neither route: the first refusal
            run.noted(other_route_tried=first_line(exc))
            return attempts, layers, run
        if integer_only_wins:
            if any(a.status == "ok" and not a.no_int8_rule for a in theirs):
                theirs_run.noted(instead_of=f"{first.route}: passed only as a mixed model "
                                            f"({', '.join(attempts[-1].no_int8_rule)} in float)")
                return theirs, second_layers, theirs_run
        elif any(a.status == "ok" for a in theirs) or not any(a.model is not None for a in attempts):
            return theirs, second_layers, theirs_run
        run.noted(other_route_tried=f"{other.route}: {_summary(theirs)}")
        return attempts, layers, run

    def _attempts(self, run: Run, route: TensorFlowRoute | QuantizerRoute, layers: LayerTable,
                  metric: str) -> list[Attempt]:
        """The remedies in order on ``route``, each verified, until one passes the gate."""
        ctx, opts = run.ctx, run.opts
        attempts: list[Attempt] = []
        run.focus, run.failed, run.refused = None, [], []
        remedies = iter(self._remedies(run, route, layers))
        while True:
            try:
                remedy = next(remedies)
            except StopIteration:
                break
            except BudgetExceededError as exc:  # the per-layer table a remedy needed ran past it
                self._stopped(run, attempts, exc)
                break
            if isinstance(remedy, Attempt):  # a remedy that does not apply, with its reason
                attempts.append(remedy)
                continue
            with ctx.progress.step(f"tflite-int8: {remedy.description}"):
                attempt = self.emit(route, remedy)
            if attempt.stopped:
                attempts.append(attempt)
                self._stopped(run, attempts, None)
                break
            if attempt.model is not None:
                self.verify(ctx, attempt, metric, opts)
                if remedy.name == "int8" and attempt.verdict is not None and not attempt.verdict.ok:
                    run.failed = attempt.verdict.failed_outputs
                    run.focus = upstream_tensors(attempt.model, _output_order(attempt.model, ctx), run.failed)
                if attempt.status == "error" and remedy.name in ("int8", "float-refused"):
                    run.refused += [pair for pair in refused_operators(attempt.model, attempt.reason)
                                    if pair not in run.refused]
            attempts.append(attempt)
            if attempt.status == "ok":
                break
        return attempts

    def _stopped(self, run: Run, attempts: list[Attempt], exc: BudgetExceededError | None) -> None:
        """Record that the remedy search stopped at its budget: the best attempt so far stands."""
        tried = ", ".join(a.remedy.name for a in attempts) or "none"
        run.noted(stopped=f"the remedy search stopped when its {run.opts.remedy_budget_s:.0f} s budget ran out "
                          f"(--remedy-budget){f' while {exc.what}' if exc else ''}; attempts made: {tried}")

    def _route_through_onnx(self, run: Run) -> QuantizerRoute:
        """A TensorFlow source as a float .tflite made the PyTorch way: its tf2onnx export read by
        edgeserve's ONNX reader (a Keras LSTM's while_loop is an ONNX Loop there) and lowered by
        litert-torch, then ai-edge-quantizer as for every non-TensorFlow source."""
        from edgeserve.converters._torch_source import torch_source
        from edgeserve.sources import FloatTflite

        ctx = run.ctx
        onnx_source = torch_source(ctx, tensorflow_too=True)
        with capture_native_stderr():
            made = onnx_source.float_tflite(ctx.workdir / "via_onnx")
        # The reader's model, onnx2tf's when the reader cannot make one (made.route says which)
        route = f"batch-1 SavedModel -> tf2onnx -> {made.route.removeprefix('ONNX -> ')}"
        run.floated = FloatTflite(made.model, route, {"tf2onnx": package_version("tf2onnx"), **made.tools},
                                  made.fallback)
        return QuantizerRoute(made.model, ctx.calibration, run.opts.io, route, "", _io_names(ctx))

    # ----- prepare ----------------------------------------------------------------------
    def route(self, run: Run) -> TensorFlowRoute | QuantizerRoute:
        """The TensorFlow converter for TensorFlow sources; ai-edge-quantizer for every other one."""
        ctx, opts = run.ctx, run.opts
        if ctx.source.tflite_route == "saved-model":
            return TensorFlowRoute(ctx.batch1_saved_model(), ctx.calibration, opts.io, opts.debug_samples)
        with ctx.progress.step("float .tflite"), capture_native_stderr():
            floated = ctx.source.float_tflite(ctx.workdir)
        run.floated = floated
        with ctx.progress.step("prepare the float .tflite for quantization"):
            return QuantizerRoute(floated.model, ctx.calibration, opts.io, floated.route, _alternative(ctx, floated),
                                  _io_names(ctx))

    def _describe_route(self, run: Run, route: TensorFlowRoute | QuantizerRoute) -> dict[str, Any]:
        """The route and every tool's version, and (float-.tflite route) the float model against its source."""
        record: dict[str, Any] = {"quantizer": route.name, "tools": route.tools()}
        if isinstance(route, QuantizerRoute):
            floated = run.floated
            record["tools"] = floated.tools | record["tools"]
            record["float_model"] = floated.route
            if floated.fallback:
                record["float_model_fallback"] = floated.fallback  # why the first route's model was not used
            record["preparations"] = list(route.prepared.steps)
            # Filled when the int8 model is made (the same dict): what edgeserve quantized itself.
            record["int8_by_edgeserve"] = route.made_integer
            # Filled when the int16x8 remedy is tried: operators written as int16-capable ones.
            record["int16x8_rewrites"] = route.int16_rewrites
            record["float_vs_source"] = _float_fidelity(route.float_model, run.ctx)
        else:
            record["float_model"] = "batch-1 SavedModel"
        return record

    # ----- calibrate --------------------------------------------------------------------
    def calibrate(self, run: Run, route: TensorFlowRoute | QuantizerRoute) -> LayerTable:
        """The per-layer error table, measured when a remedy first needs it (the int8 model
        missed its gate) or now when the user asked for it (--per-layer): on a model whose int8
        attempt passes it was a quarter of a small conversion's time and nothing used it."""
        run.layers_note = None
        table = LayerTable(lambda: self._measure_layers(run, route))
        if run.opts.per_layer:
            table.get()
        return table

    def _measure_layers(self, run: Run, route: TensorFlowRoute | QuantizerRoute) -> list[LayerError]:
        """Empty, with the reason kept for the report, when the tool measuring it crashed or LiteRT
        refuses to run the all-int8 model (the other attempts, and their outcome, still stand)."""
        from edgeserve.isolation import NativeCrashError

        assert run.ctx.evaluation is not None
        debug = run.ctx.evaluation.head(run.opts.debug_samples)
        with run.ctx.progress.step(f"per-layer error ({len(debug)} samples)"):
            try:
                # With what LiteRT refused kept float: the all-int8 model is one it will not run.
                refused = [tensor for _, tensor in run.refused] if isinstance(route, QuantizerRoute) else None
                return route.layer_errors(debug, keep_float=refused)
            except (NativeCrashError, VerificationError) as exc:
                run.layers_note = f"no per-layer table: {exc}"
                log.warning("%s; converting without it", exc)
                return []

    def _remedies(self, run: Run, route: TensorFlowRoute | QuantizerRoute,
                  table: LayerTable) -> Iterator[Remedy | Attempt]:
        """The remedies in order; one that cannot apply comes as a skipped Attempt with its reason."""
        opts = run.opts
        yield Remedy("int8", "int8 activations, int8 per-channel weights")
        # LiteRT refused to run an int8 kernel (a DIV whose divisor sits at its zero point): that
        # operator in float, then the next one it refuses with it, a few rounds at most.
        rounds: set[tuple[tuple[str, str], ...]] = set()
        while run.refused and tuple(run.refused) not in rounds and len(rounds) < MAX_REFUSED_ROUNDS:
            rounds.add(tuple(run.refused))
            yield self._float_refused(run, route)
        tail = self._float_tail(run, route)
        if tail is not None:
            yield tail
        profile = run.ctx.profile
        int16 = Remedy("int16x8", "int16 activations, int8 weights")
        if profile is not None and not profile.quantization.int16_activations:
            yield Attempt(int16, "skipped", f"profile {profile.name} has no int16-activation kernels")
        else:
            yield int16
        front = self._float_front(route, opts)
        if front is not None:
            yield front
        if opts.io == "uint8":
            # The debugger's selective quantization can only make int8 (or float) model I/O.
            yield Attempt(Remedy("float-layers", "int8 with the worst layers in float"), "skipped",
                          "keeping layers in float is not available with --io uint8")
            return
        # The worst layers among those that feed the outputs that failed: a bad layer in
        # another head cannot repair them (all of them when the failing outputs are unknown).
        layers = table.get()
        focus = run.focus
        ranked = [l for l in layers if focus is None or l.tensor in focus] or layers
        # Never every layer in float: that is the float model, not a remedy.
        limit = len(ranked) if len(ranked) < len(layers) else len(layers) - 1
        tried: set[int] = set()
        for k in (1, 2, 4, 8):
            k = min(k, limit)
            if k < 1 or k in tried:
                continue
            tried.add(k)
            worst = tuple(ranked[:k])
            names = ", ".join(l.short_name for l in worst)
            # On the quantizer's route, what LiteRT refused in int8 stays float with them.
            refused = tuple(run.refused) if isinstance(route, QuantizerRoute) else ()
            also = " (and what LiteRT refused in int8)" if refused else ""
            yield Remedy("float-layers", f"int8 with the {k} worst layer(s) in float: {names}{also}", worst,
                         float_tail=refused)

    def _float_tail(self, run: Run, route: TensorFlowRoute | QuantizerRoute) -> Remedy | Attempt | None:
        """The float-tail remedy (float_tail.py) when int8 failed on an output found, before
        quantization, to join ranges one scale cannot hold; None when no such output failed."""
        mixed = [i for i in run.failed if i in run.mixed]
        if not mixed:
            return None
        names = ", ".join(run.mixed[i]["output"] for i in mixed)
        title = f"int8 with the concatenations that make {names} in float"
        if not isinstance(route, QuantizerRoute):
            return Attempt(Remedy("float-tail", title), "skipped",
                           "TensorFlow's converter keeps only the per-layer table's layers in float")
        if run.opts.io == "uint8":  # as for float-layers: uint8 I/O is made from an all-int8 model only
            return Attempt(Remedy("float-tail", title), "skipped", "a float tail is not available with --io uint8")
        order = _output_order(route.float_model, run.ctx)
        tail = concatenation_tail(route.float_model, [(order[i], run.mixed[i]["axis"]) for i in mixed])
        if tail is None:
            return Attempt(Remedy("float-tail", title), "skipped",
                           f"{names} is not joined along its channel axis by a CONCATENATION (behind layout "
                           "operators only)")
        return Remedy("float-tail", f"{title} (each part keeps its own int8 scale)", float_tail=tuple(tail))

    def _float_refused(self, run: Run, route: TensorFlowRoute | QuantizerRoute) -> Remedy | Attempt:
        """The operators LiteRT refused to run in int8 kept float, their neighbours int8."""
        refused = run.refused[0]
        more = f" and {len(run.refused) - 1} operator(s) computing its divisor" if len(run.refused) > 1 else ""
        title = f"int8 with what LiteRT's int8 kernels refused in float: {refused[0]} ({refused[1]}){more}"
        if not isinstance(route, QuantizerRoute):
            return Attempt(Remedy("float-refused", title), "skipped",
                           "TensorFlow's converter keeps only the per-layer table's layers in float")
        if run.opts.io == "uint8":  # as for float-layers: uint8 I/O is made from an all-int8 model only
            return Attempt(Remedy("float-refused", title), "skipped", "keeping operators float is not available "
                           "with --io uint8")
        return Remedy("float-refused", title, float_tail=tuple(run.refused))

    def _float_front(self, route: TensorFlowRoute | QuantizerRoute, opts: Options) -> Remedy | Attempt | None:
        """The float-front remedy when the int8 model is mixed (an operator without an int8 rule
        left float) and failed: what feeds that operator stays float too, so it reads float
        values rather than int8 ones (float_tail.float_front); None when nothing is left float."""
        if not isinstance(route, QuantizerRoute) or not route.no_int8_rule:
            return None
        ops = ", ".join(route.no_int8_rule)
        title = f"int8 with what feeds {ops} in float"
        if opts.io == "uint8":  # as for float-layers: uint8 I/O is made from an all-int8 model only
            return Attempt(Remedy("float-front", title), "skipped", "a float front is not available with --io uint8")
        front = float_front(route.float_model, set(route.no_int8_rule))
        if front is None:
            return None
        return Remedy("float-front", f"{title} ({len(front)} operator(s))", float_tail=tuple(front))

    # ----- emit -------------------------------------------------------------------------
    def emit(self, route: TensorFlowRoute | QuantizerRoute, remedy: Remedy) -> Attempt:
        attempt = Attempt(remedy, "error")
        native = NativeOutput()
        try:
            with capture_native_stderr() as native:
                model = route.emit(remedy)
        except UnsupportedOpError as exc:
            if remedy.name == "int8":
                raise  # not even int8 makes the model integer: one error naming the operator, nothing written
            attempt.reason = first_line(exc)  # a remedy's own scheme (int16 activations) lacks the kernel
            return attempt
        except BudgetExceededError as exc:
            attempt.reason, attempt.stopped = first_line(exc), True
            return attempt
        except Exception as exc:  # the converters raise many types; the reason goes in the report
            attempt.reason = f"{route.name}: " + _converter_reason(exc, native.text)
            return attempt
        attempt.model = model
        attempt.no_int8_rule = dict(getattr(route, "no_int8_rule", {}))
        return attempt

    # ----- verify -----------------------------------------------------------------------
    def verify(self, ctx: ConversionContext, attempt: Attempt, metric: str, opts: Options) -> None:
        from edgeserve.runtime.backends.litert_run import TfliteRunner, predict_on_cores

        assert attempt.model is not None
        float_io = opts.io == "float"
        parsed = TfliteModel.from_bytes(attempt.model)
        attempt.integer_problems = integer_problems(parsed, float_io)
        attempt.macs = mac_share(parsed)
        evaluation = ctx.evaluation
        try:
            runner = TfliteRunner(attempt.model)
            outputs = predict_on_cores(attempt.model, list(evaluation.inputs),
                                       lambda ticks, total: ctx.progress.track(ticks, total, "verifying with LiteRT"),
                                       first=runner)
        except (RuntimeError, ValueError) as exc:  # a kernel refused this attempt's model: the next may do
            said = " ".join(str(exc).split()) or type(exc).__name__
            attempt.status, attempt.reason = "error", f"LiteRT could not run this model: {said[:300]}"
            return
        attempt.io_dtype = runner.inputs[0].dtype.name
        attempt.outputs = outputs
        # The artifact's outputs in the source's order (the converter may list them otherwise).
        order = _output_order(attempt.model, ctx)
        quantized = [outputs[p] for p in order]
        details = [runner.outputs[p] for p in order]
        reference = ctx.reference_outputs()
        verdict = judge(metric, reference, quantized, evaluation.labels, max_drop=opts.max_drop,
                        min_sqnr_db=opts.min_sqnr_db, min_agreement=opts.min_agreement,
                        metric_requested=opts.metric is not None,
                        names=[d.name for d in details], detections=DetectionGate.of(ctx))
        attempt.verdict, attempt.metrics = verdict, verdict.metrics
        attempt.agreement = agreement(reference[0], quantized[0], classifier=metric == "top1")
        attempt.output_sqnr_db = {d.name: sqnr_db(r, q) for d, r, q in zip(details, reference, quantized)}
        if attempt.remedy.name == "int8" and attempt.integer_problems and not attempt.no_int8_rule:
            attempt.status, attempt.reason = "error", "not integer-only: " + "; ".join(attempt.integer_problems[:3])
        elif not verdict.ok:
            attempt.status = "drop too large" if not verdict.outputs[0].ok and \
                verdict.outputs[0].judged_by in ("metric", "agreement") else "sqnr too low"
            attempt.reason = verdict.reason
        elif attempt.macs["float_percent"] is not None and attempt.macs["float_percent"] > opts.max_float_macs:
            # Accurate because it is float: not an INT8 model, whatever its name says.
            attempt.status = "mostly float"
            attempt.reason = (f"{attempt.macs['float_percent']:g} % of its multiply-accumulates are float, above "
                              f"--max-float-macs {opts.max_float_macs:g} %")
        else:
            attempt.status = "ok"

    # ----- write ------------------------------------------------------------------------
    def _write(self, run: Run, attempts: list[Attempt], table: LayerTable) -> dict[str, Any]:
        from edgeserve.runtime.backends.litert_run import TfliteRunner

        ctx, opts = run.ctx, run.opts
        layers = table.measured_or_empty()
        if not table.measured:
            run.layers_note = "not measured: no remedy needed it (--per-layer measures it on every run)"

        built = [a for a in attempts if a.model is not None and a.metrics is not None]
        if not built:
            reasons = "; ".join(f"{a.remedy.name}: {a.reason}" for a in attempts)
            raise VerificationError(f"no tflite-int8 attempt produced a model: {reasons}")
        chosen = next((a for a in built if a.status == "ok"), None)
        best = chosen or min(built, key=lambda a: a.verdict.shortfall() if a.verdict else (1 << 30, 0.0, 0.0))
        assert best.model is not None and best.metrics is not None

        provenance = {
            "edgeserve_version": edgeserve_version(),
            "target": self.name,
            "source_sha256": ctx.source.sha256,
            "calibration_sha256": ctx.calibration.sha256,
            "calibration_origin": ctx.calibration.origin,
            "remedy": best.remedy.name,
            "route": run.route_record,
            "preprocess": ctx.preprocess.to_dict() if ctx.preprocess else None,
        }
        from edgeserve.tflite.metadata import add_metadata

        model = add_metadata(best.model, provenance)
        out = ctx.out_dir
        artifact = write_bytes(out / ARTIFACT_NAME, model)

        # A fixture for `edgeserve verify`: inputs, the source's float outputs and the
        # artifact's raw outputs, so re-verification needs neither TensorFlow nor the data.
        fixture_set = ctx.evaluation.head(FIXTURE_SAMPLES)
        runner = TfliteRunner(model)
        # The raw outputs from those verification measured: quantizing a dequantized int8 or int16
        # value gives back the integer exactly, and running the fixture again took a 320x320
        # detector's int16 model 9 s on one interpreter.
        assert best.outputs is not None
        raw = [d.quantize(o[: len(fixture_set)]) for d, o in zip(runner.outputs, best.outputs)]
        fixture_path = out / "verify" / "tflite-int8.npz"
        reference = [r[: len(fixture_set)] for r in ctx.reference_outputs()]
        _write_npz(fixture_path, inputs=fixture_set.inputs, reference=reference, raw=raw)

        parsed = TfliteModel.from_bytes(model)
        order = _output_order(model, ctx)
        report = {
            "target": self.name,
            "layers": [l.to_dict() for l in layers],
            **({"layers_note": run.layers_note} if run.layers_note else {}),
            "attempts": [a.to_dict() for a in attempts],
            "mixed_range_outputs": list(run.mixed.values()),
            "rounding_noise_steps": round(1 / np.sqrt(12), 4),
        }
        report_path = write_json(out / "reports" / "tflite-int8.json", report)
        metrics = best.metrics.to_dict() | {"max_drop": opts.max_drop}
        assert best.verdict is not None
        return {
            "target": self.name,
            "status": "ok" if chosen else "failed",
            **file_record(out, artifact),
            "inputs": [d.to_dict() for d in runner.inputs],
            "outputs": [d.to_dict() for d in runner.outputs],
            # Position of each source output (in the source's order) among "outputs".
            "source_output_order": order,
            "ops": parsed.op_counts(),
            "op_versions": parsed.op_versions(),
            "integer_only": not best.integer_problems,
            "float_ops": best.integer_problems,
            "macs": (best.macs or {}) | {"max_float_percent": opts.max_float_macs},
            # A mixed model: operators ai-edge-quantizer has no int8 rule for, computed in float.
            **({"no_int8_rule": best.no_int8_rule} if best.no_int8_rule else {}),
            "quantization": {
                "scheme": best.remedy.name,
                "weights": "int8 per-channel",
                "activations": "int16" if best.remedy.name == "int16x8" else "int8",
                "io": best.io_dtype,
                "float_layers": best.remedy.float_names,
            },
            "metrics": metrics,
            "agreement": best.agreement,
            "output_sqnr_db": best.output_sqnr_db,
            "quality": best.verdict.to_dict(),
            "route": run.route_record,
            # Outputs whose float values join ranges one int8 scale cannot hold, found before quantizing.
            "mixed_range_outputs": list(run.mixed.values()),
            "attempts": [a.to_dict() for a in attempts],
            "worst_layers": [l.to_dict() for l in layers[:5]],
            "report": file_record(out, report_path),
            "verification": {
                "method": "litert",
                "evaluated_on": "eval" if ctx.evaluation.labels is not None else ctx.evaluation.origin,
                "samples": best.metrics.samples,
                "fixture": file_record(out, fixture_path),
                "degenerate": degenerate(ctx.reference_outputs(),
                                         [runner.outputs[p].scale or 0.0 for p in order]
                                         if best.io_dtype != "float32" else None),
            },
        }

    # ----- re-verification --------------------------------------------------------------
    def reverify(self, entry: Mapping[str, Any], root: Path) -> VerifyResult:
        return reverify_artifact(entry, root)


def _output_order(model: bytes, ctx: ConversionContext) -> list[int]:
    outputs = ctx.source.signature.outputs
    return source_order(model, [t.name for t in outputs], [tuple(t.shape) for t in outputs])


def _onnx_source(ctx: ConversionContext, route: TensorFlowRoute | QuantizerRoute) -> bool:
    """An ONNX file's source on the quantizer route: it has a second route to a float model."""
    return isinstance(route, QuantizerRoute) and hasattr(ctx.source, "other_float_tflite")


def _alternative(ctx: ConversionContext, floated: Any) -> str:
    """What a refusal offers instead: -t coreml runs a model in float, but reads an ONNX file
    through edgeserve's reader, so not when onnx2tf's model stands in for a model the reader
    could not make."""
    if ctx.source.kind.startswith("tflite") or (floated.fallback and floated.route == ROUTE_ONNX2TF):
        return ""
    return ", or convert with -t coreml, which runs it in float"


def _io_names(ctx: ConversionContext) -> tuple[list[str], list[str]]:
    """The source's input and output names, which the float .tflite's are renamed to."""
    signature = ctx.source.signature
    return [t.name for t in signature.inputs], [t.name for t in signature.outputs]


def _summary(attempts: list[Attempt]) -> str:
    return "; ".join(f"{a.remedy.name} {a.status}" + (f" ({clip_words(a.reason, 120)})" if a.reason and a.status != "ok" else "")
                     for a in attempts)


def _write_npz(path: Path, **groups: Any) -> None:
    arrays = {f"{name}_{i}": np.asarray(a) for name, seq in groups.items() for i, a in enumerate(seq)}
    path.parent.mkdir(parents=True, exist_ok=True)
    import io

    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    write_bytes(path, buffer.getvalue())


def _converter_reason(exc: BaseException, native: str) -> str:
    lines = [l for l in (str(exc) + "\n" + native).splitlines() if "error" in l.lower()]
    text = lines[0] if lines else (str(exc).splitlines() or [type(exc).__name__])[0]
    return text.strip()[:400]


def _float_fidelity(float_model: bytes, ctx: ConversionContext, samples: int = 32) -> dict[str, Any]:
    """The float .tflite the quantizer starts from, against the source on the first eval samples.

    A route that changes the float numbers (a wrong layout, a dropped op) shows here, apart
    from what quantization costs.
    """
    from edgeserve.runtime.backends.litert_run import TfliteRunner

    head = ctx.evaluation.head(samples)
    runner = TfliteRunner(float_model)
    got, _ = runner.predict(list(head.inputs))
    reference = [r[: len(head)] for r in ctx.reference_outputs()]
    return {
        "samples": len(head),
        "max_abs_diff": {d.name: float(np.max(np.abs(g - r))) if g.size else 0.0
                         for d, g, r in zip(runner.outputs, got, reference)},
        "sqnr_db": {d.name: sqnr_db(r, g) for d, g, r in zip(runner.outputs, got, reference)},
    }
