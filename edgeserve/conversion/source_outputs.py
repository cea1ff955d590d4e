"""Which output of each artifact is which output of the source, written into the manifest.

Each tool names outputs its own way: the digits CNN's one output is ``StatefulPartitionedCall:0``
in its .tflite, ``Identity`` in Core ML and ``keras_tensor_20`` in ONNX, and TensorFlow's
converter can put a multi-output model's outputs in another order (converters/tflite_int8/
output_order.py). The manifest records the source's output names once (``source.outputs``) and,
in every passing artifact's ``outputs``, the source output each one is (``source_output``), so
code that reads one artifact reads them all alike.

Where the label comes from, so that it is what the checks proved: tflite-int8 records the
position of each source output (``source_output_order``), from which its outputs were compared
with the source's; an artifact built from another's model (mcu-c from tflite-int8's) has that
model's outputs, matched by name; every other target compares output i with source output i, so
a pass proves the position.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def label_outputs(entry: dict[str, Any], source_names: Sequence[str],
                  built_from: Mapping[str, Mapping[str, Any]]) -> None:
    """Set ``source_output`` on each of ``entry["outputs"]`` where the checks that passed say it."""
    outputs = entry.get("outputs")
    if entry.get("status") != "ok" or not isinstance(outputs, list) or not outputs \
            or not all(isinstance(o, dict) and "name" in o for o in outputs):
        return
    for parent in built_from.values():
        known = {o.get("name"): o.get("source_output") for o in parent.get("outputs") or []
                 if isinstance(o, dict) and o.get("source_output")}
        if known and all(o["name"] in known for o in outputs):
            for o in outputs:
                o["source_output"] = known[o["name"]]
            return
    order = entry.get("source_output_order")
    if order is None:
        order = list(range(len(outputs)))
    if len(order) != len(outputs) or len(source_names) != len(outputs) or sorted(order) != list(range(len(outputs))):
        return  # counts that do not match (a detector's decoder inside the artifact): no label is proved
    for k, position in enumerate(order):
        outputs[position]["source_output"] = source_names[k]

