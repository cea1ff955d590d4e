"""The model a PyTorch-program tool is given (coremltools, ExecuTorch), whatever the source.

coremltools and ExecuTorch have no TFLite frontend, so a float .tflite goes the way its ONNX
export does (tf2onnx, in a child process) and on through edgeserve's ONNX reader to a torch
program, as an ONNX source would. ExecuTorch has no TensorFlow frontend either, so it asks the
same of a Keras model or SavedModel (coremltools reads those itself). Every other source is
given as it is. The artifact is then checked against the source itself (LiteRT running the
.tflite, TensorFlow running the Keras model), not against the intermediate ONNX.
"""

from __future__ import annotations

from typing import Any

ROUTE_FROM_TFLITE = "float .tflite -> tf2onnx -> edgeserve ONNX reader -> torch.export"
ROUTE_FROM_TENSORFLOW = "batch-1 SavedModel -> tf2onnx -> edgeserve ONNX reader -> torch.export"
TENSORFLOW_KINDS = ("keras", "keras-h5", "saved_model")


def torch_source(ctx: Any, tensorflow_too: bool = False) -> Any:
    """``ctx.source``, or the ONNX reader's source of its tf2onnx export for a float .tflite
    (and, with ``tensorflow_too``, for a Keras model or SavedModel)."""
    kinds = ("tflite-float", *(TENSORFLOW_KINDS if tensorflow_too else ()))
    if ctx.source.kind not in kinds:
        return ctx.source
    return ctx.once("torch_source", lambda: _via_onnx(ctx))  # coreml and executorch in one run share it


def _via_onnx(ctx: Any) -> Any:
    from edgeserve._deps import require
    from edgeserve.converters.onnx.export import float_onnx
    from edgeserve.sources import load_source

    onnx = require("onnx", "a TensorFlow model as a torch program")
    with ctx.progress.step(f"{ctx.source.kind} -> ONNX (tf2onnx) -> torch (edgeserve ONNX reader)"):
        made = float_onnx(ctx, dynamic_batch=False)
        path = ctx.workdir / "torch_source" / "from_tensorflow.onnx"
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx.save_model(made.model, str(path))
        source = load_source(path)
        # Its errors name the user's file and how it got here, not a file the user never made.
        source.shown_as = f"{ctx.source.path.name} (through {made.route})"
        return source


def route_to_torch(kind: str) -> str:
    """How a source of ``kind`` became the torch program, for the manifest's route."""
    if kind == "tflite-float":
        return ROUTE_FROM_TFLITE
    if kind in TENSORFLOW_KINDS:
        return ROUTE_FROM_TENSORFLOW
    if kind == "onnx":
        return "onnx -> edgeserve ONNX reader -> torch.export"
    return "torch.export"
