"""An artifact's outputs judged against the source's by the quality gate, in the form the onnx,
onnx-int8, executorch and executorch-int8 entries record (metrics, agreement, SQNR per output,
the verdict and how far it is from passing)."""

from __future__ import annotations

from typing import Any

from edgeserve.converters._base import ConversionContext
from edgeserve.quality.detections import DetectionGate
from edgeserve.quality.gate import judge
from edgeserve.quality.metrics import agreement, choose_metric, sqnr_db


def score(ctx: ConversionContext, outputs: list[Any], opts: Any, samples: int | None = None) -> dict[str, Any]:
    """The artifact's outputs on the evaluation set against the source's, as the gate judges them;
    on its first ``samples`` only when given (``outputs`` then holds those)."""
    reference = [r[:samples] for r in ctx.reference_outputs()]
    labels = ctx.evaluation.labels
    labels = labels[:samples] if labels is not None else None
    metric = choose_metric(opts.metric, labels, reference[0])
    verdict = judge(metric, reference, outputs, labels, max_drop=opts.max_drop,
                    min_sqnr_db=opts.min_sqnr_db, min_agreement=opts.min_agreement,
                        metric_requested=opts.metric is not None,
                    names=[t.name for t in ctx.source.signature.outputs], detections=DetectionGate.of(ctx))
    return {
        "metrics": verdict.metrics.to_dict() | {"max_drop": opts.max_drop},
        "agreement": agreement(reference[0], outputs[0], classifier=metric == "top1"),
        "output_sqnr_db": {f"output_{i}": sqnr_db(r, o) for i, (r, o) in enumerate(zip(reference, outputs))},
        "quality": verdict.to_dict(),
        "shortfall": verdict.shortfall(),
        "reason": verdict.reason,
        "ok": verdict.ok,
    }
