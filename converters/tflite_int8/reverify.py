"""Re-verification of a tflite-int8 artifact (`edgeserve verify`) on any machine, without the
source or the data: the hashes, the provenance stamped in the model, its integer-only operators
and the fixture's recorded outputs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from edgeserve.converters._base import Check, VerifyResult
from edgeserve.errors import ModelFileError
from edgeserve.quality.fixtures import load_arrays
from edgeserve.manifest.record import check_file
from edgeserve.quality.metrics import agreement
from edgeserve.tflite.model import TfliteModel

TARGET = "tflite-int8"
# Re-verification on another machine may use other kernels (XNNPACK vs ARM NEON vs
# reference): their int8 rounding differs by a step or two, never more on a sane model.
REVERIFY_MAX_STEPS = 2


def reverify_artifact(entry: Mapping[str, Any], root: Path) -> VerifyResult:
    """`edgeserve verify` of a tflite-int8 entry: hashes, provenance, integer-only operators, the
    recorded raw outputs within REVERIFY_MAX_STEPS and top-1 agreement on the fixture."""
    from edgeserve.runtime.backends.litert_run import TfliteRunner

    checks: list[Check] = []
    records = {"artifact": entry, "report": entry["report"], "fixture": entry["verification"]["fixture"]}
    for label, record in records.items():
        problem = check_file(root, record)
        checks.append(Check(f"{label} sha256", problem is None, problem or record["sha256"][:16]))
    if not all(c.ok for c in checks):
        return VerifyResult(TARGET, entry["path"], tuple(checks))

    model = (root / entry["path"]).read_bytes()
    problem = _unsound(model)
    if problem is not None:  # a file re-hashed after damage: say so before LiteRT loads it here
        return VerifyResult(TARGET, entry["path"], (*checks, Check("LiteRT loads and runs it", False, problem)))
    parsed = TfliteModel.from_bytes(model)
    checks.append(_provenance_check(parsed, root))
    checks.append(_tensors_check(parsed, entry))
    float_io = entry["quantization"]["io"] == "float32"
    problems = integer_problems(parsed, float_io)
    expect_integer = entry.get("integer_only", True)
    checks.append(Check("integer-only operators", not problems or not expect_integer,
                        "all integer" if not problems else f"{len(problems)} float op(s): {problems[0]}"))
    if entry.get("macs") is not None:  # manifests before 0.2.1 do not record it
        checks.append(_macs_check(parsed, entry["macs"]))
    fx = load_arrays(root / entry["verification"]["fixture"]["path"])
    inputs = [fx[f"inputs_{i}"] for i in range(len(entry["inputs"]))]
    recorded_raw = fx["raw_0"]
    reference = fx["reference_0"]
    runner = TfliteRunner(model)
    dequant, raw = runner.predict(inputs)
    steps = int(np.max(np.abs(raw[0].astype(np.int64) - recorded_raw.astype(np.int64)))) if raw[0].size else 0
    checks.append(Check("outputs equal the recorded ones", steps <= REVERIFY_MAX_STEPS,
                        f"max difference {steps} quantization step(s) over {len(inputs[0])} samples "
                        f"(allowed {REVERIFY_MAX_STEPS})"))
    reason = entry["verification"].get("degenerate")
    checks.append(Check("reference outputs vary", reason is None, reason or "the check can tell models apart"))
    first = (entry.get("source_output_order") or [0])[0]  # the artifact's output for source output 0
    agree = agreement(reference, dequant[first], classifier=entry["metrics"]["metric"] == "top1")
    recorded = entry.get("agreement") or {}
    if "top1_agreement" in agree and recorded.get("top1_agreement") is not None:
        ok = agree["top1_agreement"] >= min(recorded["top1_agreement"], 1.0) - 0.05
        checks.append(Check("top-1 agreement with the float source", ok,
                            f"{agree['top1_agreement']:.3f} on {len(inputs[0])} fixture samples"))
    return VerifyResult(TARGET, entry["path"], tuple(checks))


def _macs_check(parsed: TfliteModel, recorded: Mapping[str, Any]) -> Check:
    """The multiply-accumulates per activation type the manifest states, counted again in the file."""
    from edgeserve.mac_share import mac_share

    counted = mac_share(parsed)
    same = all(counted[kind] == recorded.get(kind) for kind in ("int8", "int16", "float"))
    said = f"{counted['int8_percent']} % int8 of {counted['total']:,}" if counted["total"] else "none to count"
    return Check("multiply-accumulates by type as recorded", same,
                 said if same else f"the file has {counted}, the manifest says {dict(recorded)}")


def _tensors_check(parsed: TfliteModel, entry: Mapping[str, Any]) -> Check:
    """The inputs and outputs as the manifest records them (the runtime reads their scale and zero
    point from it): shape, type, scale and zero point against the file's own tensors."""
    graph = parsed.subgraphs[0]
    for kind, indices in (("inputs", graph.inputs), ("outputs", graph.outputs)):
        recorded = list(entry.get(kind) or [])
        if len(recorded) != len(indices):
            return Check("inputs and outputs as recorded", False,
                         f"the manifest lists {len(recorded)} {kind}; the model has {len(indices)}")
        for i, (record, index) in enumerate(zip(recorded, indices)):
            tensor = graph.tensors[index]
            q = tensor.quantization
            scale = float(q.scale[0]) if q is not None and len(q.scale) else None
            zero = int(q.zero_point[0]) if q is not None and len(q.zero_point) else None
            file = {"shape": list(tensor.shape), "dtype": tensor.dtype_name}
            if record.get("scale") is not None or scale is not None:
                file |= {"scale": scale, "zero_point": zero}
            for key, value in file.items():
                said = record.get(key)
                same = (said is not None and value is not None and abs(float(said) - value) <= 1e-6 * abs(value)
                        if key == "scale" else said == value)
                if not same:
                    return Check("inputs and outputs as recorded", False,
                                 f"{kind[:-1]} {i} {key}: the manifest says {said!r}, the model has {value!r}")
    return Check("inputs and outputs as recorded", True, "shapes, types, scales and zero points")


def _unsound(model: bytes) -> str | None:
    """Why the .tflite cannot be loaded in this process, or None: the validator every command
    uses, then one load and invoke in a child, so a kernel that crashes costs a child."""
    from edgeserve.runtime.backends.probe import probe_in_subprocess
    from edgeserve.tflite.verify import validate_tflite

    try:
        validate_tflite(model)
        probe = probe_in_subprocess(model)
    except ModelFileError as exc:
        return str(exc)
    return None if probe.verdict == "ok" else f"LiteRT refused it: {probe.detail}"


def _provenance_check(model: TfliteModel, root: Path) -> Check:
    """The source and PreprocessSpec stamped into the model are the ones the manifest records.

    A device feeds the model what the manifest's ``preprocess`` says; a model calibrated with
    another spec (or made from another source) beside it is stale, whatever its hashes say.
    """
    import json

    from edgeserve.manifest.record import load_manifest

    name = "provenance in the model"
    raw = model.metadata.get("edgeserve")
    try:
        stamped = json.loads(bytes(raw).decode()) if raw else None
    except (ValueError, UnicodeDecodeError):
        stamped = None
    if not isinstance(stamped, dict):
        return Check(name, False, "the model carries no edgeserve provenance to compare with the manifest")
    manifest = load_manifest(root)
    source = (manifest.get("source") or {}).get("sha256")
    if stamped.get("source_sha256") != source:
        return Check(name, False, f"stale: made from source {str(stamped.get('source_sha256'))[:12]}…, the manifest's "
                                  f"source is {str(source)[:12]}…")
    if stamped.get("preprocess") != manifest.get("preprocess"):
        return Check(name, False, "stale: calibrated with another PreprocessSpec than the manifest's preprocess")
    return Check(name, True, f"source {str(source)[:12]}…, preprocess as recorded")


def integer_problems(model: TfliteModel, float_io: bool) -> list[str]:
    """Operators that read or write float tensors at run time.

    With float model I/O the QUANTIZE at an input and the DEQUANTIZE at an output are the
    only float-touching ops allowed.
    """
    ok, problems = model.is_full_integer()
    if ok or not float_io:
        return problems
    sg = model.subgraphs[0]
    boundary = {
        op.index for op in sg.operators
        if (op.op_name == "QUANTIZE" and set(op.inputs) <= set(sg.inputs))
        or (op.op_name == "DEQUANTIZE" and set(op.outputs) <= set(sg.outputs))
    }
    return [p for p in problems if not any(f" op {i}:" in p for i in boundary)]
