"""Custom operators in a float .tflite, found before any work: which ones LiteRT has no kernel
for, so the float model cannot run and no target can be calibrated or checked against it.

MediaPipe's landmark models carry operators (Landmarks2TransformMatrix, TransformLandmarks,
TransformTensorBilinear) that only MediaPipe's own op resolver registers. LiteRT's Python
interpreter refuses them when it is built ("Encountered unresolved custom op"), which came out
as a RuntimeError traceback at the float reference outputs, after `inspect` had called every
target ready. Custom operators LiteRT does have (TFLite_Detection_PostProcess, and MediaPipe's
Convolution2DTransposeBias through XNNPACK) are kept: they are no reason to refuse.
"""

from __future__ import annotations

from typing import Any

from edgeserve.errors import SourceModelError


def custom_ops(model: Any) -> list[str]:
    """The custom operator codes the model's operators use, in every subgraph, sorted."""
    codes = model.operator_codes
    return sorted({codes[op.opcode_index].name for graph in model.subgraphs for op in graph.operators
                   if codes[op.opcode_index].is_custom})


def litert_refusal(data: bytes) -> tuple[Any, str | None]:
    """A LiteRT runner of ``data``, or None and LiteRT's reason when it cannot build one."""
    from edgeserve.runtime.backends.litert_run import TfliteRunner

    try:
        return TfliteRunner(data), None
    except (RuntimeError, ValueError) as exc:
        return None, " ".join(str(exc).split()) or type(exc).__name__


def refusal_reason(name: str, ops: list[str], said: str) -> str:
    """The one line every target gets for a float model LiteRT cannot build."""
    unresolved = [op for op in ops if op in said] or ops
    first = said.split(". ")[0].rstrip(".")  # "Encountered unresolved custom op: X", not its link
    return (f"{name} uses custom operator(s) {', '.join(unresolved)} that LiteRT has no kernel for (LiteRT: "
            f"{first[:200]}); edgeserve runs the float model to calibrate and check every target, so none can be "
            "built. What to do: export the model without them (the graph up to the operators before them), or "
            "convert the framework model the .tflite was made from")


def check_runnable(name: str, model: Any, data: bytes) -> Any:
    """The LiteRT runner of a float model that has custom operators, or SourceModelError naming
    the ones LiteRT cannot resolve. None when the model has no custom operator (nothing to ask)."""
    ops = custom_ops(model)
    if not ops:
        return None
    runner, said = litert_refusal(data)
    if runner is None:
        raise SourceModelError(refusal_reason(name, ops, said or ""))
    return runner
