"""onnx-int8 vs onnx vs tflite-int8: latency per frame at batch 1, 1 and 2 threads, for the README.

    python benchmarks/onnx_targets.py [--json] [--frames 200]

Model: Keras MobileNetV2 (random weights, 224x224x3, features up to global pooling) converted by edgeserve to
the three targets with the same 64 calibration frames (uniform noise: latency does not
depend on the weights' values). Frame: skimage's astronaut photo at 640x480.

For each artifact and thread count, round-robin in one process (so machine load affects
both alike): ``Session.run`` (frame in, dequantized outputs out) and the engine call alone on
the Session's own engine (``run_with_iobinding`` for ONNX Runtime, ``invoke`` for LiteRT),
and their ratio, the runtime's end-to-end overhead (goal: at most 1.10x). One target's
Session is open at a time: ONNX Runtime's worker threads spin-wait after each run, and with
another engine in the process that spinning lands on whichever step runs next, which is an
interference between engines, not a Session overhead. ``--together`` measures that case.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from runtime import measure, photo_frame  # noqa: E402  (benchmarks/ is a folder of scripts)

TARGETS = ("onnx", "onnx-int8", "tflite-int8")
BACKENDS = {"onnx": "onnxruntime:cpu", "onnx-int8": "onnxruntime:cpu", "tflite-int8": "litert:xnnpack"}


def build(work: Path) -> Path:
    import keras

    from edgeserve.conversion.convert import convert
    from edgeserve.preprocess import PreprocessSpec

    keras.utils.set_random_seed(0)
    # Without the classifier: an untrained head's softmax input spans ~1e-6, whose int8 scale
    # LiteRT's SOFTMAX kernel refuses (edgeserve's validator says so before LiteRT aborts).
    keras.applications.MobileNetV2(weights=None, include_top=False, pooling="avg", input_shape=(224, 224, 3)).save(
        work / "mobilenet_v2.keras")
    np.savez(work / "calib.npz", x=np.random.default_rng(0).uniform(-1, 1, (64, 224, 224, 3)).astype(np.float32))
    convert(work / "mobilenet_v2.keras", list(TARGETS), work / "out", calib=work / "calib.npz",
            preprocess=PreprocessSpec(scale=1 / 127.5, mean=(1.0, 1.0, 1.0)), options={"max_drop": 100.0})
    return work / "out"


def without_spinning() -> None:
    """Every ONNX Runtime session opened after this call has its workers sleep instead of
    spin-waiting between runs (``session.intra_op.allow_spinning`` = 0): an experiment for the
    README's figures, not something edgeserve sets."""
    import onnxruntime as ort

    options = ort.SessionOptions

    def sleeping_options() -> Any:
        so = options()
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return so

    ort.SessionOptions = sleeping_options


def run(frames: int, together: bool = False, spinning: bool = True) -> dict[str, Any]:
    from edgeserve.runtime import Session

    if not spinning:
        without_spinning()

    with tempfile.TemporaryDirectory() as tmp:
        out = build(Path(tmp))
        manifest = json.loads((out / "manifest.json").read_text())
        sizes = {a["target"]: a["bytes"] for a in manifest["artifacts"]}
        frame = photo_frame()
        rows = []
        for threads in (1, 2):
            # Alone (default): one target's Session at a time, so no other engine's threads share
            # the cores. Together: all three open and measured round-robin, as an application
            # holding several models would run them.
            groups = [list(TARGETS)] if together else [[t] for t in TARGETS]
            for group in groups:
                sessions = {t: Session(out, target=t, backend=BACKENDS[t], threads=threads) for t in group}
                steps = {}
                for target, s in sessions.items():
                    s.run(frame)
                    steps[f"{target} session"] = (lambda s=s: s.run(frame))
                    steps[f"{target} engine"] = s._active.invoke
                times = measure(steps, frames, block=20, warmup=10)
                for target in group:
                    session_p50 = float(np.median(times[f"{target} session"])) * 1e3
                    engine_p50 = float(np.median(times[f"{target} engine"])) * 1e3
                    rows.append({"target": target, "threads": threads, "bytes": sizes[target],
                                 "session_p50_ms": round(session_p50, 2), "engine_p50_ms": round(engine_p50, 2),
                                 "overhead": round(session_p50 / engine_p50, 3)})
                for s in sessions.values():
                    s.close()
    return {"model": "MobileNetV2 224x224 to pooled features (Keras, random weights)", "frames": frames,
            "measured": "all three targets open, round-robin" if together else "one target at a time",
            "ort_spinning": spinning, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--together", action="store_true",
                        help="open all three targets and measure them round-robin (engines share the cores)")
    parser.add_argument("--no-spin", action="store_true",
                        help="ONNX Runtime's workers sleep between runs instead of spin-waiting")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.frames, args.together, spinning=not args.no_spin)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['model']}, {result['frames']} frames per measurement, {result['measured']}"
          + ("" if result["ort_spinning"] else ", ONNX Runtime workers not spinning"))
    print("| target | threads | bytes | Session.run p50 ms | engine p50 ms | overhead |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in result["rows"]:
        print(f"| {r['target']} | {r['threads']} | {r['bytes']:,} | {r['session_p50_ms']} | {r['engine_p50_ms']} | "
              f"{r['overhead']}x |")


if __name__ == "__main__":
    main()
