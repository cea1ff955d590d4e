"""Targets ``executorch`` (float) and ``executorch-int8``: a .pte lowered to XNNPACK.

prepare  the source as a torch ExportedProgram (PyTorch sources as they are, ONNX through
         edgeserve's reader, a float .tflite, Keras model or SavedModel through tf2onnx and
         the reader: _torch_source)
lower    in a child process (lower.py): INT8 through PT2E with XNNPACKQuantizer (symmetric
         per-channel int8 weights, int8 activations observed over the --calib samples; over
         the gate, dynamic int8 activations, see MODES), then to_edge_transform_and_lower with
         the XNNPACK partitioner and to_executorch
verify   executorch.runtime runs the .pte on the evaluation set, judged against the source by
         the same quality gate as every other target; the share of operators XNNPACK took and
         the ones left on ExecuTorch's portable kernels are in the entry and the report
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from edgeserve._deps import TORCH_TRACING, extra_of, installed, package_version
from edgeserve.atomic import write_bytes, write_json
from edgeserve.converters import register
from edgeserve.converters._base import Check, ConversionContext, Converter, VerifyResult
from edgeserve.converters._torch_source import route_to_torch, torch_source
from edgeserve.converters.scoring import score
from edgeserve.quality.fixtures import read_fixture, write_fixture
from edgeserve.errors import EdgeServeError, MissingDependencyError, SourceModelError, VerificationError
from edgeserve.manifest.record import check_file, edgeserve_version, file_record
from edgeserve.quality.metrics import degenerate
from edgeserve.quality.options import GateOptions

FIXTURE_SAMPLES = 32
# A re-run of the same .pte on the same inputs: XNNPACK picks the same kernels, so only
# threading order could move a float sum; the bound says "the same program".
REVERIFY_RTOL = 1e-4
_CHILD = "edgeserve.converters.executorch.lower"
# What each target tries, in order, until one passes the gate. XNNPACK's quantizer has no 16-bit
# activations, so the INT8 target's remedy is dynamic quantization: each convolution's and linear
# layer's input is given its int8 scale at run time from its own range, where static ranges from
# the calibration set cannot hold every input (a detector's near-empty maps on most frames).
MODES = {"fp32": ("fp32",), "int8": ("int8", "int8-float-tail", "int8-dynamic")}
ACTIVATIONS = {"int8": "int8 static", "int8-float-tail": "int8 static", "int8-dynamic": "int8 dynamic"}
FLOAT_TAIL = ", the concatenations that make {} in float"
# Each INT8 form is judged by the gate as PT2E's q/dq program run in torch before it is lowered:
# XNNPACK's kernels carry out the same quantized arithmetic. Measured on the corpus on the same
# samples (docs/executorch.md): the lowered .pte at most 0.44 dB above the simulation in static
# int8 and 2.3 dB in dynamic (XNNPACK picks its run-time int8 ranges its own way); simulated on
# fewer samples than judged, the figures were up to 6.0 dB apart, hence the evaluation samples
# themselves (up to SIMULATED_SAMPLES).
SIMULATED_SAMPLES = 64
DYNAMIC_NOTE = ("dynamic quantization: int8 weights; each convolution's and linear layer's input quantized "
                "to int8 at run time from its own range (XNNPACK's qd8 kernels), every other operator in float, "
                "and a convolution behind an explicit pad in float too (ExecuTorch 1.5.1's XNNPACK fails to run "
                "it dynamically quantized)")


class _ExecutorchBase(Converter):
    route_order = 6

    def route_from(self, kind: str, control_flow: bool = False) -> Any:
        """ExecuTorch lowers a PyTorch program: PyTorch sources directly, ONNX through the reader,
        a float .tflite, Keras model or SavedModel through tf2onnx and the reader."""
        from edgeserve.routes import KERAS_KINDS, ONNX_READER, TORCH_KINDS, Route

        if kind == "tflite":
            return Route(self.name, (), "a full-integer .tflite has no PyTorch program; convert the float source")
        through_tf2onnx = ("tensorflow", "tf2onnx", ONNX_READER, "torch.export")
        first = {"onnx": ("onnx", ONNX_READER, "torch.export"),
                 "tflite-float": ("tf2onnx", ONNX_READER, "torch.export"),
                 "saved_model": through_tf2onnx, **{k: through_tf2onnx for k in KERAS_KINDS}}.get(
            kind, ("torch",) if kind in TORCH_KINDS else ())
        quantize = ("torchao PT2E",) if self.precision == "int8" else ()
        return Route(self.name, (*first, *quantize, "executorch (XNNPACK)"))
    report_lines = "edgeserve.converters.executorch.report"
    precision = "fp32"
    artifact = "model.pte"

    def isolated_imports(self, source_kind: str) -> tuple[str, ...]:
        return ("torch", "executorch.exir")

    def uses_calibration(self, options: Mapping[str, Any]) -> bool:
        return self.precision == "int8"

    def convert(self, ctx: ConversionContext) -> dict[str, Any]:
        if not installed("executorch"):
            raise MissingDependencyError("executorch", extra_of("executorch"), f"the {self.name} target")
        if ctx.evaluation is None:
            raise SourceModelError(f"{ctx.source.path.name} is a full-integer .tflite; the {self.name} target "
                                   "lowers a float PyTorch program (a PyTorch, ONNX or float .tflite source)")
        opts = GateOptions.from_mapping(ctx.options)
        source = torch_source(ctx, tensorflow_too=True)
        with TORCH_TRACING:
            program = getattr(source, "program", None)
        if program is None:
            raise SourceModelError(
                f"{ctx.source.path.name} ({ctx.source.kind}) has no route to a PyTorch ExportedProgram, which "
                f"ExecuTorch lowers; the {self.name} target takes a PyTorch (.pt2, TorchScript, nn.Module), ONNX, "
                "Keras or float .tflite source. Convert the PyTorch model the file was made from")
        import torch

        saved = ctx.workdir / self.name / "program.pt2"
        saved.parent.mkdir(parents=True, exist_ok=True)
        with TORCH_TRACING:
            torch.export.save(program, str(saved))
        calibration = list(ctx.calibration.inputs) if self.precision == "int8" and ctx.calibration else None
        # floats as float32; integer inputs (token ids, bytes) in their own type, as the program takes them
        inputs = [np.asarray(x, np.float32) if x.dtype.kind == "f" else x for x in ctx.evaluation.inputs]
        mixed = ctx.mixed_range_outputs() if self.precision == "int8" else {}
        attempts: list[dict[str, Any]] = []
        best = self._lower_until_it_passes(ctx, saved, calibration, inputs, opts, mixed, attempts)
        mode, built, outputs, scored, pte = best
        behind_pads, int8_layers = built.pop("float_behind_pads", 0), built.pop("int8_layers", 0)
        float_joins = built.pop("float_joins", [])
        macs = built.pop("macs", None)
        out = ctx.out_dir
        artifact = write_bytes(out / self.artifact, pte.read_bytes())
        head = ctx.evaluation.head(FIXTURE_SAMPLES)
        fixture = write_fixture(out / "verify" / f"{self.name}.npz", list(head.inputs),
                                [r[: len(head)] for r in ctx.reference_outputs()], [o[: len(head)] for o in outputs])
        total = built["delegated_nodes"] + built["portable_nodes"]
        delegation = built | {"delegated_share": round(built["delegated_nodes"] / total, 4) if total else None}
        report = write_json(out / "reports" / f"{self.name}.json", {"target": self.name, "delegation": delegation,
                                                                   "quality": scored["quality"]})
        route = route_to_torch(ctx.source.kind) + " -> "
        lowered = "no delegate: XNNPACK refused" if delegation["xnnpack_error"] else "XNNPACK"
        if mode in ACTIVATIONS:
            tail = FLOAT_TAIL.format(", ".join(mixed[i]["output"] for i in float_joins)) if float_joins else ""
            route += f"PT2E (XNNPACKQuantizer, per-channel int8 weights, {ACTIVATIONS[mode]} activations{tail}) -> "
        route += f"to_edge_transform_and_lower ({lowered}) -> to_executorch"
        return {
            "target": self.name,
            "status": "ok" if scored["ok"] else "failed",
            **file_record(out, artifact),
            "precision": self.precision,
            "inputs": [{"name": t.name, "shape": [1, *[int(d) for d in x.shape[1:]]], "dtype": x.dtype.name}
                       for t, x in zip(ctx.source.signature.inputs, inputs)],
            "outputs": [{"name": t.name, "shape": [1, *o.shape[1:]]} for t, o in zip(ctx.source.signature.outputs,
                                                                                     outputs)],
            "delegation": delegation,
            # Multiply-accumulates by activation type, as tflite-int8's and onnx-int8's.
            **({"macs": macs} if macs is not None else {}),
            "metrics": scored["metrics"],
            "agreement": scored["agreement"],
            "output_sqnr_db": scored["output_sqnr_db"],
            "quality": scored["quality"],
            **({"quantization": {"weights": "int8 per-channel", "activations": ACTIVATIONS[mode],
                                 "int8_layers": int8_layers, "remedy": mode,
                                 **({"note": DYNAMIC_NOTE, "float_convolutions_behind_pads": behind_pads}
                                    if mode == "int8-dynamic" else {})}}
               if mode in ACTIVATIONS else {}),
            # Outputs whose float values join ranges one int8 scale cannot hold, found before quantizing.
            **({"mixed_range_outputs": list(mixed.values())} if mixed else {}),
            "attempts": attempts,
            "route": {"export": route, "tools": {"executorch": package_version("executorch"),
                                                 "torch": package_version("torch"),
                                                 "torchao": package_version("torchao")}},
            "report": file_record(out, report),
            "verification": {
                "method": "executorch.runtime (" + ("portable kernels" if delegation["xnnpack_error"] else
                                                    "XNNPACK delegate") + ")",
                "samples": len(outputs[0]),
                "fixture": file_record(out, fixture),
                "degenerate": degenerate(ctx.reference_outputs()),
            },
            "provenance": {"edgeserve_version": edgeserve_version(), "source_sha256": ctx.source.sha256,
                           **({"calibration_sha256": ctx.calibration.sha256} if calibration is not None else {})},
        }

    def _lower_until_it_passes(self, ctx: ConversionContext, saved: Path, calibration: list[np.ndarray] | None,
                               inputs: list[np.ndarray], opts: GateOptions, mixed: dict[int, dict[str, Any]],
                               attempts: list[dict[str, Any]]) -> tuple[str, dict[str, Any], list[np.ndarray],
                                                                        dict[str, Any], Path]:
        """The float form lowered once; the INT8 forms of MODES each judged before they are lowered
        (see _simulate), the first one the gate passes there lowered and judged again as a .pte.
        When none passes in simulation, the one closest to passing is lowered, once, so that the
        failed target leaves the .pte its figures describe. Every form is recorded in ``attempts``."""
        if self.precision != "int8":
            built, outputs, pte = self._lower(ctx, "fp32", saved, calibration, inputs, ())
            scored = score(ctx, outputs, opts)
            return "fp32", built, outputs, scored, pte
        pending = list(MODES["int8"])
        simulated: dict[str, tuple[dict[str, Any], tuple[tuple[int, int], ...], int]] = {}
        best: tuple[str, dict[str, Any], list[np.ndarray], dict[str, Any], Path] | None = None
        failed_before: list[int] = []  # the outputs the last judged form failed on
        while True:
            choice = None
            while pending and choice is None:
                mode = pending.pop(0)
                # The float tail (tflite-int8's remedy) only for outputs found to join ranges one int8
                # scale cannot hold, and only when static int8 failed on one of them.
                joins = tuple((index, mixed[index]["axis"]) for index in failed_before if index in mixed)
                if mode == "int8-float-tail" and not joins:
                    continue
                judged = self._simulate(ctx, mode, saved, calibration, inputs, joins, opts, attempts)
                if judged is None:
                    continue
                simulated[mode] = (judged, joins, len(attempts) - 1)
                failed_before = [o["index"] for o in judged["quality"]["outputs"] if not o["ok"]]
                choice = mode if judged["ok"] else None
            if choice is None:
                if best is not None or not simulated:
                    break  # a .pte was judged, and no form left passes even in simulation
                choice = min(simulated, key=lambda m: simulated[m][0]["shortfall"])
            judged, joins, index = simulated.pop(choice)
            try:
                built, outputs, pte = self._lower(ctx, choice, saved, calibration, inputs, joins)
            except EdgeServeError as exc:
                # A form ExecuTorch cannot build: said in its attempt, and the next one is lowered.
                attempts[index] = {"remedy": choice, "activations": ACTIVATIONS[choice], "status": "error",
                                   "reason": str(exc), "simulated_sqnr_db": attempts[index]["simulated_sqnr_db"]}
                continue
            built["float_joins"] = [i for i, _ in joins] if choice == "int8-float-tail" else []
            scored = score(ctx, outputs, opts)
            failed_before = [o["index"] for o in scored["quality"]["outputs"] if not o["ok"]]
            attempt = {"remedy": choice, "activations": ACTIVATIONS[choice],
                       "status": "ok" if scored["ok"] else "failed", "reason": scored["reason"],
                       "output_sqnr_db": scored["output_sqnr_db"],
                       "simulated_sqnr_db": attempts[index]["simulated_sqnr_db"],
                       "quality": scored["quality"], "portable_ops": built["portable_ops"]}
            if not judged["ok"]:
                attempt["note"] = ("lowered though it failed in simulation, no form passing there"
                                   + ("" if best is None else " either")
                                   + f"; its simulation: {attempts[index]['reason'].removeprefix('simulated: ')}")
            attempts[index] = attempt
            if best is None or scored["ok"] or scored["shortfall"] < best[3]["shortfall"]:
                best = (choice, built, outputs, scored, pte)
            if scored["ok"] or not judged["ok"]:
                break
        if best is None:  # every form broke in ExecuTorch: the first one's reason is the target's
            errors = [a["reason"] for a in attempts if a["status"] == "error"]
            raise SourceModelError(errors[0] if errors else f"no INT8 form of {ctx.source.path.name} was built")
        return best

    def _simulate(self, ctx: ConversionContext, mode: str, saved: Path, calibration: list[np.ndarray] | None,
                  inputs: list[np.ndarray], joins: tuple[tuple[int, int], ...], opts: GateOptions,
                  attempts: list[dict[str, Any]]) -> dict[str, Any] | None:
        """A quantized form judged by the gate before it is lowered: PT2E's q/dq program run in
        torch on the evaluation samples (up to SIMULATED_SAMPLES), the arithmetic XNNPACK's kernels
        carry out. Its attempt is recorded (not lowered); None when the form could not be made."""
        pte = ctx.workdir / self.name / mode / self.artifact
        pte.parent.mkdir(parents=True, exist_ok=True)
        samples = min(SIMULATED_SAMPLES, len(inputs[0]))
        record = {"remedy": mode, "activations": ACTIVATIONS[mode]}
        with ctx.progress.step(f"{self.name}: quantize ({ACTIVATIONS[mode]} activations) and judge it in torch "
                               "(child process)"):
            try:
                built = _in_child("build", str(saved), mode, calibration, str(pte), inputs, joins, samples,
                                  str(pte.parent / "quantized.pt2"),
                                  what=f"quantizing the {self.name} program ({ACTIVATIONS[mode]} activations)")
            except EdgeServeError as exc:
                attempts.append(record | {"status": "error", "reason": str(exc)})
                return None
        if mode == "int8-dynamic" and not built["int8_layers"]:
            # Nothing it quantizes (silero-vad: its unrolled LSTM is matrix products, not linear
            # layers, and its convolutions sit behind pads): a float .pte, not an INT8 one.
            attempts.append(record | {"status": "error", "reason": "dynamic quantization made no layer int8 (it takes "
                                                                    "convolutions and linear layers, none behind an "
                                                                    "explicit pad)"})
            return None
        judged = score(ctx, built["simulated"], opts, samples=samples)
        attempts.append(record | {
            "status": "ok" if judged["ok"] else "failed", "lowered": False,
            "simulated_sqnr_db": {int(k.removeprefix("output_")): v for k, v in judged["output_sqnr_db"].items()
                                  if v is not None},
            "reason": f"simulated: {judged['reason'] or 'passes'} (PT2E's program in torch, {samples} "
                      "evaluation samples)"})
        return judged

    def _lower(self, ctx: ConversionContext, mode: str, saved: Path, calibration: list[np.ndarray] | None,
               inputs: list[np.ndarray], joins: tuple[tuple[int, int], ...]) -> tuple[dict[str, Any],
                                                                                   list[np.ndarray], Path]:
        """The form lowered to XNNPACK (from the program its simulation kept) and run in
        executorch.runtime on every evaluation sample, in a child."""
        pte = ctx.workdir / self.name / mode / self.artifact
        pte.parent.mkdir(parents=True, exist_ok=True)
        what = f" ({ACTIVATIONS[mode]} activations)" if mode in ACTIVATIONS else ""
        with ctx.progress.step(f"{self.name}: lower to XNNPACK and run in executorch.runtime{what} (child process)"):
            built = _in_child("build", str(saved), mode, calibration, str(pte), inputs, joins, None,
                              str(pte.parent / "quantized.pt2"), what=f"lowering and running the {self.name} .pte{what}")
        built.pop("reused_quantized", None)
        return built, built.pop("outputs"), pte

    def reverify(self, entry: Mapping[str, Any], root: Path) -> VerifyResult:
        """Hashes, then executorch.runtime (in a child) gives the recorded outputs again."""
        checks: list[Check] = []
        for label, record in (("artifact", entry), ("fixture", entry["verification"]["fixture"])):
            problem = check_file(root, record)
            checks.append(Check(f"{label} sha256", problem is None, problem or record["sha256"][:16]))
        if not all(c.ok for c in checks):
            return VerifyResult(self.name, entry["path"], tuple(checks))
        inputs, _, recorded = read_fixture(root / entry["verification"]["fixture"]["path"])
        try:
            outputs = _in_child("run", str(root / entry["path"]), inputs, what=f"running the {self.name} .pte")
        except EdgeServeError as exc:
            checks.append(Check("runs in executorch.runtime", False, str(exc)))
            return VerifyResult(self.name, entry["path"], tuple(checks))
        worst = max(float(np.max(np.abs(o - r))) for o, r in zip(outputs, recorded))
        scale = max(float(np.max(np.abs(r))) for r in recorded) or 1.0
        same = worst <= REVERIFY_RTOL * scale + 1e-6
        checks.append(Check("outputs equal the recorded ones (executorch.runtime)", same,
                            f"max |diff| {worst:.3g} over {len(inputs[0])} samples"))
        reason = entry["verification"].get("degenerate")
        checks.append(Check("reference outputs vary", reason is None, reason or "the check can tell models apart"))
        return VerifyResult(self.name, entry["path"], tuple(checks))


def _in_child(function: str, *args: Any, what: str) -> Any:
    """A step of lower.py in a child: a crash or an exception there is this target's refusal
    (one line naming ExecuTorch and the step), never the end of the other targets' work."""
    from edgeserve.isolation import NativeCrashError, run_isolated

    try:
        return run_isolated(f"{_CHILD}:{function}", *args, tool="ExecuTorch", what=what)
    except NativeCrashError as exc:
        raise VerificationError(f"{exc}; no .pte was written") from exc
    except EdgeServeError as exc:
        version = package_version("executorch") or ""
        message = str(exc).splitlines()[0][:500].replace("ExecuTorch failed", f"ExecuTorch {version} failed", 1)
        raise SourceModelError(message) from exc


@register
class ExecutorchConverter(_ExecutorchBase):
    name = "executorch"
    summary = "float .pte for ExecuTorch (XNNPACK delegate), checked in executorch.runtime against the source"


@register
class ExecutorchInt8Converter(_ExecutorchBase):
    name = "executorch-int8"
    route_order = 7
    summary = ("INT8 .pte for ExecuTorch (PT2E, XNNPACKQuantizer, per-channel weights, the run's calibration), "
               "checked in executorch.runtime against the source")
    precision = "int8"
    artifact = "model_int8.pte"
