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
    if path.is_dir() or path.name == MANIFEST_NAME or path.suffix == ".json":
        return {"kind": "manifest", "path": str(path), "manifest": load_manifest(path)}
    if path.suffix.lower() == ".tflite":
        return inspect_tflite(path)
    raise InputError(f"cannot inspect {path.name}: expected a .tflite file or a manifest.json")


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
