"""Which route takes each kind of source to each target, or why none does.

This is the source x target matrix of the README as data: ``edgeserve inspect SOURCE``
prints it for one source before anything is converted, and the converters follow the
same routes. A route names the tools it needs; it is "ready" when they are installed.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from typing import Any

from edgeserve._deps import extra_of

# A route's step -> the module it needs (its extra: _deps.extra_of, the one map of extras).
_TOOLS = {
    "tensorflow": "tensorflow",
    "ai-edge-quantizer": "ai_edge_quantizer",
    "litert-torch": "litert_torch",
    "torch": "torch",
    "torch.export": "torch",
    "onnx": "onnx",
    "tf2onnx": "tf2onnx",
    "torch.onnx.export": "onnxscript",
    "onnxruntime.quantization": "onnxruntime",
    "coremltools": "coremltools",
    "tflite-micro": "tflite_micro",
    "executorch (XNNPACK)": "executorch",
    "torchao PT2E": "torchao",
}

_KERAS = ("keras", "keras-h5")
_TORCH = ("torch-export", "torchscript", "torch-module")

# Why ONNX files are also read by edgeserve itself (edgeserve/sources/onnx/reader.py), measured
# on this project's pins (Python 3.11, tensorflow 2.21, numpy 2, torch 2.13 CPU): onnx2tf 2.6
# declares Python >= 3.12 and exact pins of its own, so `make setup` installs it without them
# (its flatbuffer_direct backend runs on 3.11). On the corpus the reader's float model did as
# well or better on all 5 ONNX models (docs/sources.md), so onnx2tf is the TFLite targets'
# second route, for graphs the reader cannot take. onnx2torch imports torchvision, whose PyPI
# wheels are CUDA builds that do not load beside the CPU torch build; coremltools dropped its
# ONNX frontend: Core ML and ExecuTorch go through the reader.
ONNX_READER = "edgeserve ONNX reader"
# The TFLite targets of an ONNX source start from the reader's float .tflite, and from
# onnx2tf's when the reader's cannot be made or gives no INT8 model that passes
# (edgeserve/sources/onnx/source.py; the manifest says which, and why).
ONNX_TO_TFLITE = f"{ONNX_READER} -> torch.export -> litert-torch, else onnx2tf"
MCU_C = "edgeserve C generator"  # pure Python; gcc and qemu only check what it writes


@dataclasses.dataclass(frozen=True)
class Route:
    target: str
    steps: tuple[str, ...]  # tools in order; empty when there is no route
    reason: str = ""  # why there is no route

    @property
    def exists(self) -> bool:
        return bool(self.steps)

    def missing(self) -> list[str]:
        """Tools of this route that are not installed, as 'package (extra)'."""
        out = []
        for step in self.steps:
            module = _TOOLS.get(step)
            if module and importlib.util.find_spec(module) is None:
                out.append(f"{step} (pip install 'edgeserve[{extra_of(module)}]')")
        return out

    def to_dict(self) -> dict[str, Any]:
        missing = self.missing() if self.exists else []
        return {"target": self.target, "route": " -> ".join(self.steps) or None, "exists": self.exists,
                "ready": self.exists and not missing, "missing": missing, "reason": self.reason or None}


# What -t mcu's arena planner and -t mcu-c refuse today (converters/microcontroller/arena.py,
# converters/mcu_c/state.py), said before converting: subgraphs other than the CALL_ONCE
# initialisation of resource variables.
MCU_CONTROL_FLOW = ("the microcontroller targets model one subgraph plus CALL_ONCE initialisers; control flow "
                    "(IF, WHILE, other subgraphs) is not modelled yet")


def routes_for(kind: str, control_flow: bool = False) -> list[Route]:
    """The route of a source kind to every target, in target order (``control_flow``: a .tflite
    with IF/WHILE or subgraphs that are not CALL_ONCE initialisers)."""
    routes = _all_routes(kind)
    return [Route(r.target, (), MCU_CONTROL_FLOW) if r.target in ("mcu", "mcu-c") and control_flow else r
            for r in routes]


def _all_routes(kind: str) -> list[Route]:
    if kind == "tflite":
        return _routes(kind) + [Route(t, (), "a full-integer .tflite has no ONNX route; convert the float source")
                                for t in ("onnx", "onnx-int8")] + \
            [Route(t, (), "a full-integer .tflite has no PyTorch program; convert the float source")
             for t in ("executorch", "executorch-int8")]
    float_onnx = {"onnx": ("onnx",), "tflite-float": ("tf2onnx",)}.get(
        kind, ("torch.onnx.export",) if kind in _TORCH else ("tensorflow", "tf2onnx"))
    onnx = Route("onnx", float_onnx)
    return _routes(kind) + [onnx, Route("onnx-int8", (*float_onnx, "onnxruntime.quantization"))] + \
        _executorch_routes(kind)


def _executorch_routes(kind: str) -> list[Route]:
    """ExecuTorch lowers a PyTorch program: PyTorch sources directly, ONNX through the reader,
    a float .tflite, Keras model or SavedModel through tf2onnx and the reader."""
    through_tf2onnx = ("tensorflow", "tf2onnx", ONNX_READER, "torch.export")
    first = {"onnx": ("onnx", ONNX_READER, "torch.export"),
             "tflite-float": ("tf2onnx", ONNX_READER, "torch.export"),
             "saved_model": through_tf2onnx, **{k: through_tf2onnx for k in _KERAS}}.get(
        kind, ("torch",) if kind in _TORCH else None)
    if first is None:
        reason = "ExecuTorch lowers a PyTorch program; convert the PyTorch or ONNX model this one was made from"
        return [Route("executorch", (), reason), Route("executorch-int8", (), reason)]
    lower = ("executorch (XNNPACK)",)
    return [Route("executorch", (*first, *lower)), Route("executorch-int8", (*first, "torchao PT2E", *lower))]


def _routes(kind: str) -> list[Route]:
    if kind in _KERAS or kind == "saved_model":
        int8 = Route("tflite-int8", ("tensorflow",))
        coreml = Route("coreml", ("tensorflow", "coremltools")) if kind in _KERAS else Route(
            "coreml", (), "coremltools does not take a SavedModel from Keras 3; convert the .keras or .h5 file")
    elif kind in _TORCH:
        first = ("torch",) if kind != "torchscript" else ("torch", "torch.export (TS2EP)")
        int8 = Route("tflite-int8", (*first, "litert-torch", "ai-edge-quantizer"))
        coreml = Route("coreml", ("torch", "coremltools"))
    elif kind == "tflite-float":
        int8 = Route("tflite-int8", ("ai-edge-quantizer",))
        # coremltools has no TFLite frontend: through the ONNX the onnx target makes.
        coreml = Route("coreml", ("tf2onnx", ONNX_READER, "torch.export", "coremltools"))
    elif kind == "tflite":
        return [
            Route("tflite-int8", (), "already a full-integer .tflite: use it as it is, or with -t mcu"),
            Route("mcu", ("tflite-micro",)),
            Route("mcu-c", (MCU_C,)),
            Route("coreml", (), "coremltools has no TFLite frontend; convert the model the .tflite was made from"),
        ]
    elif kind == "onnx":
        int8 = Route("tflite-int8", ("onnx", ONNX_TO_TFLITE, "ai-edge-quantizer"))
        coreml = Route("coreml", ("onnx", ONNX_READER, "torch.export", "coremltools"))
    else:
        raise ValueError(f"unknown source kind {kind!r}")
    mcu = Route("mcu", (*int8.steps, "tflite-micro")) if int8.exists else Route("mcu", (), int8.reason)
    mcu_c = Route("mcu-c", (*int8.steps, MCU_C)) if int8.exists else Route("mcu-c", (), int8.reason)
    return [int8, mcu, mcu_c, coreml]
