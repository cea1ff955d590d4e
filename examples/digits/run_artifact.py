"""Serve the converted digits model on raw uint8 frames with edgeserve's runtime Session.

    python examples/digits/run_artifact.py build/digits build/example/frames.npz [-p raspberry-pi-5]

The PreprocessSpec comes from manifest.json, i.e. it is the one the model was calibrated
with; nothing about preprocessing is restated here. The Session says which backend runs
and why the others in the profile's chain did not.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from edgeserve.runtime import Session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build", type=Path, help="conversion output directory (holds manifest.json)")
    parser.add_argument("frames", type=Path, help=".npz with uint8 'frames' and labels 'y'")
    parser.add_argument("-p", "--profile", help="device profile (default: try every accelerator, then the CPU)")
    args = parser.parse_args()

    data = np.load(args.frames)
    frames, labels = data["frames"], data["y"]
    with Session(args.build, args.profile) as session:
        predictions = np.array([session.classify(frame, k=1)[0].index for frame in frames])
        stages = np.zeros(3)
        for frame in frames[:200]:
            session.run(frame)
            stages += session.stages_ns / 1e6
        print(f"ran {session.artifact.name} on {len(frames)} raw frames with {session.backend} ({session.placement})")
        for attempt in session.attempts:
            if not attempt.ok:
                print(f"  not used: {attempt.backend} [{attempt.stage}]: {attempt.reason}")
        spec = session.preprocess
        print(f"  preprocessing from the manifest: {spec.color}, size {spec.size}, scale {spec.scale:.5f}")
        mean = stages / min(200, len(frames))
        print(f"  top-1 {np.mean(predictions == labels):.4f}; mean ms per frame: preprocess {mean[0]:.3f}, "
              f"invoke {mean[1]:.3f}, postprocess {mean[2]:.3f}")
        print(f"  first predictions {predictions[:10].tolist()} labels {labels[:10].tolist()}")


if __name__ == "__main__":
    main()
