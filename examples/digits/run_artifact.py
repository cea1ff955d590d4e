"""Run the converted digits model on raw uint8 frames, with the preprocessing from its manifest.

    python examples/digits/run_artifact.py build/digits build/example/frames.npz

The PreprocessSpec comes from manifest.json, i.e. it is the one the model was calibrated
with; nothing about preprocessing is restated here.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from edgeserve.manifest import load_manifest
from edgeserve.preprocess import PreprocessSpec
from edgeserve.runtime.litert import TfliteRunner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build", type=Path, help="conversion output directory (holds manifest.json)")
    parser.add_argument("frames", type=Path, help=".npz with uint8 'frames' and labels 'y'")
    args = parser.parse_args()

    manifest = load_manifest(args.build)
    spec = PreprocessSpec.from_dict(manifest["preprocess"])
    entry = next(a for a in manifest["artifacts"] if a["target"] == "tflite-int8")
    runner = TfliteRunner((args.build / entry["path"]).read_bytes())
    data = np.load(args.frames)
    frames, labels = data["frames"], data["y"]

    predictions, latencies = [], []
    for frame in frames:
        start = time.perf_counter()
        scores, _ = runner.predict([spec.apply(frame)])
        latencies.append(time.perf_counter() - start)
        predictions.append(int(scores[0].argmax()))
    predictions = np.asarray(predictions)
    accuracy = float(np.mean(predictions == labels))
    p50 = 1000 * float(np.median(latencies))
    print(f"ran {entry['path']} ({entry['bytes']:,} bytes, {entry['quantization']['io']} io) on {len(frames)} raw frames")
    print(f"  preprocessing from manifest: {spec.color}, size {spec.size}, scale {spec.scale:.5f}")
    print(f"  top-1 {accuracy:.4f} (manifest: float {entry['metrics']['float']:.4f}, "
          f"int8 {entry['metrics']['quantized']:.4f}); p50 {p50:.3f} ms per frame incl. preprocessing")
    print(f"  first predictions {predictions[:10].tolist()} labels {labels[:10].tolist()}")


if __name__ == "__main__":
    main()
