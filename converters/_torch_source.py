"""The model a PyTorch-program tool is given (coremltools, ExecuTorch), whatever the source.

coremltools and ExecuTorch have no TFLite frontend, so a float .tflite goes the way its ONNX
export does (tf2onnx, in a child process) and on through edgeserve's ONNX reader to a torch
program, as an ONNX source would. Every other source is given as it is. The artifact is
then checked against the source itself (LiteRT running the .tflite), not the intermediate ONNX.
"""

from __future__ import annotations

from typing import Any

ROUTE_FROM_TFLITE = "float .tflite -> tf2onnx -> edgeserve ONNX reader -> torch.export"


def torch_source(ctx: Any) -> Any:
    """``ctx.source``, or for a float .tflite the ONNX reader's source of its tf2onnx export."""
    if ctx.source.kind != "tflite-float":
        return ctx.source
    if "torch_source" in ctx.shared:  # coreml and executorch in one run share it
        return ctx.shared["torch_source"]
    from edgeserve._deps import require
    from edgeserve.converters.onnx.export import float_onnx
    from edgeserve.sources import load_source

    onnx = require("onnx", "a float .tflite as a torch program")
    with ctx.progress.step("float .tflite -> ONNX (tf2onnx) -> torch (edgeserve ONNX reader)"):
        made = float_onnx(ctx, dynamic_batch=False)
        path = ctx.workdir / "torch_source" / "from_tflite.onnx"
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx.save_model(made.model, str(path))
        source = load_source(path)
    ctx.shared["torch_source"] = source
    return source
