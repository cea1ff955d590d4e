"""``edgeserve inspect``: what a .tflite file or a manifest holds, without TensorFlow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from edgeserve.errors import InputError
from edgeserve.manifest import MANIFEST_NAME, load_manifest
from edgeserve.tflite_metadata import METADATA_NAME
from edgeserve.tflite_model import TfliteModel


def inspect_path(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise InputError(f"not found: {path}")
    # A Core ML package is a folder too: tell it from an output folder before looking for a manifest.
    if path.suffix.lower() == ".mlpackage":
        return inspect_mlpackage(path)
    if path.is_dir() or path.name == MANIFEST_NAME or path.suffix == ".json":
        return {"kind": "manifest", "path": str(path), "manifest": load_manifest(path)}
    if path.suffix.lower() == ".tflite":
        return inspect_tflite(path)
    raise InputError(f"cannot inspect {path.name}: expected a .tflite file, a .mlpackage or a manifest.json")


def inspect_mlpackage(path: Path) -> dict[str, Any]:
    """Interface, ops, weight precision and metadata of a Core ML package, read from its
    protobuf and weight file (no Core ML runtime needed, so this works on Linux)."""
    from collections import Counter

    from edgeserve.converters.coreml.program import MilProgram

    program = MilProgram.load(path)
    weights: Counter[str] = Counter()
    for op in program.ops:
        if op.type == "const" or op.type.startswith("constexpr_"):
            for _, var in op.outputs:
                if var.kind == "tensor" and var.shape and len(var.shape) > 0:
                    weights[op.type if op.type.startswith("constexpr_") else str(var.dtype)] += 1
    return {
        "kind": "coreml",
        "path": str(path),
        "bytes": sum(f.stat().st_size for f in path.rglob("*") if f.is_file()),
        "specification_version": program.specification_version,
        "opset": program.opset,
        "inputs": [f.to_dict() for f in program.input_features],
        "outputs": [f.to_dict() for f in program.output_features],
        "classifier": program.classifier,
        "ops": program.op_counts(),
        "weights": dict(weights),
        "metadata": program.metadata,
    }


def inspect_tflite(path: Path) -> dict[str, Any]:
    model = TfliteModel.from_file(path)
    sg = model.subgraphs[0]

    def tensor(i: int) -> dict[str, Any]:
        t = sg.tensors[i]
        q = t.quantization
        per_channel = q is not None and len(q.scale) > 1
        return {
            "name": t.name,
            "shape": list(t.shape),
            "dtype": t.dtype_name,
            "scale": (list(q.scale) if per_channel else q.scale[0]) if q and q.scale else None,
            "zero_point": (list(q.zero_point) if per_channel else q.zero_point[0]) if q and q.zero_point else None,
        }

    integer, problems = model.is_full_integer()
    weight_bytes = sum(t.nbytes for t in sg.tensors if t.is_constant)
    provenance = None
    if METADATA_NAME in model.metadata:
        try:
            provenance = json.loads(bytes(model.metadata[METADATA_NAME]).decode())
        except (UnicodeDecodeError, json.JSONDecodeError):
            provenance = {"error": "unreadable edgeserve metadata"}
    return {
        "kind": "tflite",
        "path": str(path),
        "bytes": path.stat().st_size,
        "subgraphs": len(model.subgraphs),
        "inputs": [tensor(i) for i in sg.inputs],
        "outputs": [tensor(i) for i in sg.outputs],
        "ops": model.op_counts(),
        "op_versions": model.op_versions(),
        "operators": len(sg.operators),
        "tensors": len(sg.tensors),
        "constant_bytes": weight_bytes,
        "integer_only": integer,
        "float_ops": problems[:20],
        "metadata": sorted(model.metadata),
        "edgeserve": provenance,
    }
