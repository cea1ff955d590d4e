"""Target ``onnx``: a float ONNX model for ONNX Runtime, checked against the source.

prepare  the float ONNX by the source's route (export.py); opset 17+, batch 1 by default
check    onnx.checker with strict shape inference (the runtime's own checks)
verify   ONNX Runtime (CPU) on the evaluation set against the source: metric, drop, top-1
         agreement, max |diff|; a fixture for `edgeserve verify`
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edgeserve.atomic import write_bytes
from edgeserve.converters import register
from edgeserve.converters._base import Check, ConversionContext, Converter, VerifyResult
from edgeserve.converters.onnx import check
from edgeserve.converters.onnx.export import float_onnx
from edgeserve.errors import SourceModelError, VerificationError
from edgeserve.manifest.record import check_file, edgeserve_version, file_record
from edgeserve.quality.metrics import degenerate
from edgeserve.converters.scoring import score
from edgeserve.quality.fixtures import read_fixture, write_fixture
from edgeserve.quality.options import GateOptions

ARTIFACT_NAME = "model.onnx"
FIXTURE_SAMPLES = 32


@dataclasses.dataclass(frozen=True)
class Options(GateOptions):
    dynamic_batch: bool = False


NO_ONNX_FROM_INT8 = "a full-integer .tflite has no ONNX route; convert the float source"


def float_onnx_steps(kind: str) -> tuple[str, ...]:
    """The tools that make the float ONNX both ONNX targets start from; () for a full-integer .tflite."""
    from edgeserve.routes import TORCH_KINDS

    if kind == "tflite":
        return ()
    return {"onnx": ("onnx",), "tflite-float": ("tf2onnx",)}.get(
        kind, ("torch.onnx.export",) if kind in TORCH_KINDS else ("tensorflow", "tf2onnx"))


@register
class OnnxConverter(Converter):
    name = "onnx"
    route_order = 4

    def route_from(self, kind: str, control_flow: bool = False) -> Any:
        from edgeserve.routes import Route

        steps = float_onnx_steps(kind)
        return Route(self.name, steps) if steps else Route(self.name, (), NO_ONNX_FROM_INT8)
    report_lines = "edgeserve.converters.onnx.report"
    summary = "float ONNX (opset 17+, batch 1) for ONNX Runtime, checked against the source"

    def uses_calibration(self, options: Mapping[str, Any]) -> bool:
        return False  # scored on the evaluation set only

    def convert(self, ctx: ConversionContext) -> dict[str, Any]:
        if ctx.evaluation is None:
            raise SourceModelError(f"{ctx.source.path.name} is a full-integer .tflite; the onnx target converts a "
                                   "float source (Keras, PyTorch, ONNX or a float .tflite)")
        opts = Options.from_mapping(ctx.options)
        with ctx.progress.step("onnx: export"):
            made = float_onnx(ctx, opts.dynamic_batch)
        data = made.model.SerializeToString()
        with ctx.progress.step("onnx: check and run in ONNX Runtime"):
            # onnx.checker (strict shapes) first, as the runtime does
            sess = check.session(data, made_by=f"edgeserve's export ({made.route})")
            outputs = check.run(sess, list(ctx.evaluation.inputs))
        scored = score(ctx, outputs, opts)
        batched = self.batched_check(sess, ctx, outputs) if opts.dynamic_batch else None
        out = ctx.out_dir
        artifact = write_bytes(out / ARTIFACT_NAME, data)
        head = ctx.evaluation.head(FIXTURE_SAMPLES)
        fixture = write_fixture(out / "verify" / "onnx.npz", list(head.inputs),
                                      [r[: len(head)] for r in ctx.reference_outputs()],
                                      [o[: len(head)] for o in outputs])
        return {
            "target": self.name,
            "status": "ok" if scored["ok"] else "failed",
            **file_record(out, artifact),
            "opset": max((o.version for o in made.model.opset_import if o.domain in ("", "ai.onnx")), default=0),
            "inputs": [{"name": i.name, "shape": list(i.shape), "dtype": i.type} for i in sess.get_inputs()],
            "outputs": [{"name": o.name, "shape": list(o.shape), "dtype": o.type} for o in sess.get_outputs()],
            "nodes": len(made.model.graph.node),
            "metrics": scored["metrics"],
            "agreement": scored["agreement"],
            "output_sqnr_db": scored["output_sqnr_db"],
            "quality": scored["quality"],
            "attempts": [],
            "route": {"export": made.route, "tools": made.tools, "notes": list(made.notes)},
            "placement": check.placement(data),
            "verification": {
                "method": "onnxruntime-cpu",
                "samples": len(outputs[0]),
                "fixture": file_record(out, fixture),
                "degenerate": degenerate(ctx.reference_outputs()),
                "batched": batched,
            },
            "provenance": {"edgeserve_version": edgeserve_version(), "source_sha256": ctx.source.sha256},
        }

    @staticmethod
    def batched_check(sess: Any, ctx: ConversionContext, one_by_one: list[Any]) -> dict[str, Any]:
        """With --dynamic-batch: 8 samples in one run give what they give one at a time, or the
        graph is not batch-agnostic (a reshape that baked in the export's batch) and this fails."""
        import numpy as np

        n = min(8, len(one_by_one[0]))
        names = [i.name for i in sess.get_inputs()]
        try:
            together = sess.run(None, {k: np.ascontiguousarray(x[:n], np.float32)
                                       for k, x in zip(names, ctx.evaluation.inputs)})
        except Exception as exc:  # ORT raises its own Fail type for a shape mismatch
            raise VerificationError(f"--dynamic-batch: the exported graph does not run {n} samples at once "
                                    f"({str(exc).splitlines()[0][:200]}); its batch is fixed inside") from exc
        worst = max(float(np.max(np.abs(t - o[:n]))) for t, o in zip(together, one_by_one))
        if worst > 1e-4 * max(1.0, max(float(np.max(np.abs(o))) for o in one_by_one)):
            raise VerificationError(f"--dynamic-batch: {n} samples at once differ from one at a time by {worst:.3g}")
        return {"samples": n, "max_abs_diff": worst}

    def reverify(self, entry: Mapping[str, Any], root: Path) -> VerifyResult:
        return reverify_onnx(self.name, entry, root)


def reverify_onnx(target: str, entry: Mapping[str, Any], root: Path) -> VerifyResult:
    """Hashes, then ONNX Runtime on the fixture inputs gives the recorded outputs again."""
    import numpy as np

    checks: list[Check] = []
    for label, record in (("artifact", entry), ("fixture", entry["verification"]["fixture"])):
        problem = check_file(root, record)
        checks.append(Check(f"{label} sha256", problem is None, problem or record["sha256"][:16]))
    if not all(c.ok for c in checks):
        return VerifyResult(target, entry["path"], tuple(checks))
    inputs, reference, recorded = read_fixture(root / entry["verification"]["fixture"]["path"])
    # onnx-int8 was recorded as written (no fused integer kernels): re-run it the same way.
    data = (root / entry["path"]).read_bytes()
    outputs = check.run(check.session(data, exact=target == "onnx-int8"), inputs)
    worst = max(float(np.max(np.abs(o - r))) for o, r in zip(outputs, recorded))
    scale = max(float(np.max(np.abs(r))) for r in recorded) or 1.0
    checks.append(Check("outputs equal the recorded ones (ONNX Runtime)", worst <= check.REVERIFY_RTOL * scale + 1e-6,
                        f"max |diff| {worst:.3g} over {len(inputs[0])} samples"))
    reason = entry["verification"].get("degenerate")
    checks.append(Check("reference outputs vary", reason is None, reason or "the check can tell models apart"))
    return VerifyResult(target, entry["path"], tuple(checks))
