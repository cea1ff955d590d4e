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
            # What a user would otherwise write: LiteRT's own set_tensor / invoke / get_tensor,
            # on a second interpreter of the same model and delegate.
            from ai_edge_litert.interpreter import Interpreter

            plain = Interpreter(model_path=str(model), num_threads=1)
            plain.allocate_tensors()
            i, o = plain.get_input_details()[0]["index"], plain.get_output_details()[0]["index"]
            sessions[f"{name} plain"] = plain

            def loop(p=plain, i=i, o=o, f=frame):
                p.set_tensor(i, f)
                p.invoke()
                return p.get_tensor(o)

            steps[f"{name} plain"] = loop
        times = measure(steps, strides, block=100, warmup=50)
        for name in MODELS:
            session_us = float(np.median(times[f"{name} session"])) * 1e6
            invoke_us = float(np.median(times[f"{name} invoke"])) * 1e6
            plain_us = float(np.median(times[f"{name} plain"])) * 1e6
            rows.append({"model": name, "stride_ms": spans[name], "state_bytes": None,
                         "session_p50_us": round(session_us, 1), "invoke_p50_us": round(invoke_us, 1),
                         "plain_loop_p50_us": round(plain_us, 1),
                         "overhead": round(session_us / invoke_us, 3),
                         "plain_loop_overhead": round(plain_us / invoke_us, 3),
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
    print("| model | audio per invoke | state | Session.run µs | plain LiteRT loop µs | invoke µs | Session overhead "
          "| plain loop overhead | real-time factor |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in result["rows"]:
        print(f"| {r['model']} | {r['stride_ms']} ms | {r['state_bytes']:,} B | {r['session_p50_us']} | "
              f"{r['plain_loop_p50_us']} | {r['invoke_p50_us']} | {r['overhead']}x | {r['plain_loop_overhead']}x | "
              f"{r['real_time_factor']} |")


if __name__ == "__main__":
    main()
