"""``edgeserve inspect``: what a .tflite file, a Core ML package, a manifest or a source model holds,
and for a model, the route to each target."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from edgeserve.atomic import NOT_REGULAR, special_file
from edgeserve.errors import InputError
from edgeserve.manifest.record import MANIFEST_NAME, load_manifest
from edgeserve.routes import SOURCE_KINDS, Route
from edgeserve.tflite.metadata import METADATA_NAME
from edgeserve.tflite.model import TfliteModel


def inspect_path(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise InputError(f"not found: {path}")
    if special_file(path):  # reading a FIFO with no writer would block for ever
        raise InputError(f"{path} {NOT_REGULAR}; give the model file")
    # A Core ML package is a folder too: tell it from an output folder before looking for a manifest.
    if path.suffix.lower() == ".mlpackage":
        return inspect_mlpackage(path)
    if path.name == MANIFEST_NAME or path.suffix == ".json" or (path.is_dir() and (path / MANIFEST_NAME).exists()):
        return {"kind": "manifest", "path": str(path), "manifest": load_manifest(path)}
    if path.suffix.lower() == ".tflite":
        info = inspect_tflite(path)
        kind = "tflite" if info["integer_only"] else "tflite-float"
        model = TfliteModel.from_file(path)
        control_flow = bool(model.control_flow())
        routes = routes_for(kind, control_flow)
        if kind == "tflite" and not control_flow:  # the microcontroller targets' own checks: no framework
            routes = [_checked(route, model) for route in routes]
        from edgeserve.sources.tflite_custom_ops import custom_ops

        info["custom_ops"] = custom_ops(model)
        if kind == "tflite-float" and info["custom_ops"]:
            routes = _custom_checked(routes, path, model, info["custom_ops"])
        return info | {"source_kind": kind, "routes": [r.to_dict() for r in routes]}
    if path.suffix.lower() == ".onnx":
        return inspect_onnx(path)
    if path.is_dir() and not (path / "saved_model.pb").exists():
        raise InputError(f"cannot inspect {path}: a folder without {MANIFEST_NAME} or saved_model.pb")
    return inspect_source(path)


def _checked(route: Route, model: TfliteModel) -> Route:
    """``route`` refused with the target's own reason when its operator check (the converter's
    ``check_operators``: TFLM's resolver, the C generator's lowering) refuses ``model``: such
    checks are pure Python and take milliseconds, so inspect says what convert would, not "ready"."""
    from edgeserve.converters import get_converter
    from edgeserve.errors import EdgeServeError

    try:
        get_converter(route.target).check_operators(model)
    except EdgeServeError as exc:
        return Route(route.target, (), str(exc).splitlines()[0])
    except Exception as exc:  # noqa: BLE001 - a damaged model: inspect reports, it does not crash
        return Route(route.target, (), f"the {route.target} check could not read this model "
                                       f"({type(exc).__name__}: {str(exc)[:160]})")
    return route


def _custom_checked(routes: list[Route], path: Path, model: TfliteModel, ops: list[str]) -> list[Route]:
    """Every route refused, with convert's reason, when LiteRT cannot build the float model for
    its custom operators (convert runs it for the reference); unchanged when LiteRT can, or
    is not installed to ask (the routes then say LiteRT is missing)."""
    from edgeserve.errors import EdgeServeError, MissingDependencyError, first_line
    from edgeserve.sources.tflite_custom_ops import litert_refusal, refusal_reason
    from edgeserve.tflite.verify import validate_tflite

    try:
        validate_tflite(model.file_bytes)  # LiteRT is asked in this process: only what it can trust
        runner, said = litert_refusal(model.file_bytes)
    except MissingDependencyError:
        return routes
    except EdgeServeError as exc:  # a damaged file: every route says so, as convert would
        return [Route(route.target, (), first_line(exc)) for route in routes]
    if runner is not None:
        return routes
    reason = refusal_reason(path.name, ops, said or "")
    return [Route(route.target, (), reason) for route in routes]


def inspect_source(path: Path) -> dict[str, Any]:
    """A source model's signature, operators and route to each target, before any conversion."""
    from edgeserve.console import capture_native_stderr
    from edgeserve.sources import load_source, source_kind

    source_kind(path)  # an unknown format is an error naming the accepted ones, before any import
    with capture_native_stderr():
        source = load_source(path)
        ops = source.operator_counts()
    return {
        "kind": "source",
        "path": str(path),
        "source_kind": source.kind,
        "framework": source.framework_version,
        "inputs": [t.to_dict() for t in source.signature.inputs],
        "outputs": [t.to_dict() for t in source.signature.outputs],
        "ops": dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
        "routes": [r.to_dict() for r in routes_for(source.kind)],
    }


def inspect_onnx(path: Path) -> dict[str, Any]:
    """An ONNX file's signature and operators (read with the onnx package), and why no route exists."""
    import collections

    from edgeserve._deps import require
    from edgeserve.onnx_check import read_onnx_file, validate_onnx

    data = read_onnx_file(path)  # external data from beside the model, as convert reads it
    validate_onnx(data)
    onnx = require("onnx", "reading an ONNX model")
    model = onnx.load_from_string(data)
    graph = model.graph
    constants = {i.name for i in graph.initializer}

    def info(value: Any) -> dict[str, Any]:
        dims = value.type.tensor_type.shape.dim
        dtype = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type).name
        return {"name": value.name, "shape": [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in dims],
                "dtype": dtype}

    ops = collections.Counter(node.op_type for node in graph.node)
    routes = routes_for("onnx")
    # Say now what convert would say later: an operator the reader has no translation for
    # closes every route through it (torch is imported for the reader's table).
    # With onnx2tf installed the TFLite targets stay open: onnx2tf may take what the reader cannot.
    from edgeserve.routes import ONNX_READER, ONNX_TO_TFLITE, Route
    from edgeserve.sources.onnx import onnx2tf_lowering as onnx2tf_lowering
    from edgeserve.sources.onnx.reader import OPS

    untranslated = sorted(op for op in ops if op not in OPS)
    if untranslated:
        reason = f"edgeserve's ONNX reader has no translation for {', '.join(untranslated)}"
        closes = {ONNX_READER} | (set() if onnx2tf_lowering.installed() else {ONNX_TO_TFLITE})
        routes = [Route(r.target, (), reason) if closes & set(r.steps) else r for r in routes]
    return {
        "kind": "source",
        "path": str(path),
        "source_kind": "onnx",
        "framework": f"onnx opset {max((o.version for o in model.opset_import if o.domain in ('', 'ai.onnx')), default=0)}",
        "inputs": [info(v) for v in graph.input if v.name not in constants],
        "outputs": [info(v) for v in graph.output],
        "ops": dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
        "routes": [r.to_dict() for r in routes],
    }


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
    variables = model.resource_variables()
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
        "ops": model.op_counts_all() if len(model.subgraphs) > 1 else model.op_counts(),
        "op_versions": model.op_versions(),
        "subgraph_ops": [{"index": g.index, "name": g.name, "ops": dict(Counter(op.op_name for op in g.operators))}
                         for g in model.subgraphs],
        "resource_variables": variables,
        "state_bytes": sum(v["bytes"] for v in variables),
        "operators": len(sg.operators),
        "tensors": len(sg.tensors),
        "constant_bytes": weight_bytes,
        "integer_only": integer,
        "float_ops": problems[:20],
        "metadata": sorted(model.metadata),
        "edgeserve": provenance,
    }


def routes_for(kind: str, control_flow: bool = False) -> list[Route]:
    """The route of a source kind to every target, in the order the targets list their routes
    (``control_flow``: a .tflite with IF/WHILE or subgraphs that are not CALL_ONCE initialisers)."""
    if kind not in SOURCE_KINDS:
        raise ValueError(f"unknown source kind {kind!r}")
    from edgeserve.converters import get_converter, target_names

    converters = sorted((get_converter(name) for name in target_names()), key=lambda c: c.route_order)
    return [c.route_from(kind, control_flow) for c in converters]
