"""One ONNX node as a ``torch.nn.Module``, so that what it computes carries its name.

litert-torch names each tensor of a .tflite by the modules it was computed in (class and
attribute name). The ONNX reader (reader.py) runs the whole graph in one module, so every
row of the per-layer table read "OnnxGraph" and the keep-in-float remedy could not tell nodes
apart. On the litert-torch route each top-level node runs as a submodule instead: a class named
after its operator, an attribute named after its position and name, so the table reads
"n12_conv2d_3_tmp_0 (Conv)".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch  # imported only on the ONNX routes, which need torch


class OnnxNode(torch.nn.Module):
    """Runs one node's translation; one subclass per operator type (:func:`node_class`)."""

    def __init__(self, translate: Callable[[list[Any], dict[str, Any]], Any]) -> None:
        super().__init__()
        self.translate = translate

    def forward(self, args: list[Any], attrs: dict[str, Any]) -> Any:
        return self.translate(args, attrs)


_NODE_CLASSES: dict[str, type] = {}


def node_class(op: str) -> type:
    """OnnxNode's subclass for operator ``op`` (a class named ``op``, made once)."""
    if op not in _NODE_CLASSES:
        _NODE_CLASSES[op] = type(op, (OnnxNode,), {"__module__": __name__, "__qualname__": op})
    return _NODE_CLASSES[op]


def node_attribute(index: int, name: str) -> str:
    """A Python identifier for node ``index`` named ``name``: its position keeps it unique."""
    cleaned = re.sub(r"\W+", "_", name).strip("_")[:40]
    return f"n{index}_{cleaned}" if cleaned else f"n{index}"
