"""Which route takes each kind of source to each target, or why none does.

This is the source x target matrix of the README as data: ``edgeserve inspect SOURCE``
prints it for one source before anything is converted. Each converter says its own route from
each source kind (``Converter.route_from``), the one it follows; this module holds what routes
share (the Route record, the tools and the extras that bring them), and edgeserve.inspect
collects them (routes_for). A route
names the tools it needs; it is "ready" when they are installed.
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

# Source kinds (edgeserve.sources) in the groups the routes tell apart.
KERAS_KINDS = ("keras", "keras-h5")
TORCH_KINDS = ("torch-export", "torchscript", "torch-module")
SOURCE_KINDS = (*KERAS_KINDS, "saved_model", *TORCH_KINDS, "tflite-float", "tflite", "onnx")

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


# What the microcontroller targets' arena planners refuse today (converters/microcontroller/arena.py,
# converters/mcu_c/state.py), said before converting: subgraphs other than the CALL_ONCE
# initialisation of resource variables.
MCU_CONTROL_FLOW = ("the microcontroller targets model one subgraph plus CALL_ONCE initialisers; control flow "
                    "(IF, WHILE, other subgraphs) is not modelled yet")
