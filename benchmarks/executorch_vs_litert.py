"""ExecuTorch INT8 against LiteRT INT8 on a MobileNet-sized model, side by side in one process.

(Not named executorch.py: run as a script, its folder comes first on sys.path and the file
would shadow the executorch package.)

    python benchmarks/executorch_vs_litert.py [--frames 300] [--json] [--keep DIR]

Model: MobileNetV3-Small as the paper specifies it (tests/mobilenet_v3.py; 2.5 M parameters,
hard-swish, squeeze-and-excite; torchvision does not import here), its BatchNorm statistics set
from photo crops so that its outputs depend on the image. One `edgeserve convert` of the
``nn.Module`` makes both artifacts from the same calibration crops: ``tflite-int8``
(ai-edge-quantizer, integer-only) and ``executorch-int8`` (PT2E, XNNPACKQuantizer, lowered to
the XNNPACK delegate). Each is then timed four ways, round-robin in blocks so that load on the
machine affects them alike:

- ``executorch_bare``: ``Method.execute`` on the program's own input tensor (ExecuTorch's
  XNNPACK threadpool: one thread per core, 2 here);
- ``executorch_session``: ``Session.run`` on the model tensor (what an application calls);
- ``executorch_session_frame``: ``Session.run`` on a 640x480 frame, preprocessed as recorded;
- ``litert_bare``: ``interpreter.invoke()`` on the Session's interpreter (XNNPACK, 2 threads);
- ``litert_session`` and ``litert_session_frame``: the same two through LiteRT's Session.

Ratios: ExecuTorch INT8 over LiteRT INT8 (bare), and each Session over its bare call (the
issue's bound for ExecuTorch: at most 1.10x).
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
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from runtime import measure  # noqa: E402  (benchmarks/runtime.py: round-robin blocks)


def photo_crops(count: int, seed: int = 0) -> np.ndarray:
    """Square crops of scikit-image's photos, 224x224, ImageNet-normalised, NCHW."""
    from skimage import data, transform

    rng = np.random.default_rng(seed)
    images = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket()]
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    crops = []
    for i in range(count):
        image = images[i % len(images)] / 255.0
        h, w = image.shape[:2]
        side = int(rng.integers(min(h, w) // 3, min(h, w)))
        y, x = int(rng.integers(0, h - side + 1)), int(rng.integers(0, w - side + 1))
        crops.append((transform.resize(image[y:y + side, x:x + side], (224, 224)) - mean) / std)
    return np.stack(crops).transpose(0, 3, 1, 2).astype(np.float32)


def build(out: Path) -> dict[str, Any]:
    """MobileNetV3-Small with photo BatchNorm statistics, converted to both INT8 artifacts."""
    import torch
    from mobilenet_v3 import MobileNetV3Small, with_photo_statistics

    from edgeserve.conversion.convert import convert

    torch.manual_seed(0)
    crops = photo_crops(132)
    module = with_photo_statistics(MobileNetV3Small(), torch.from_numpy(crops[:100]))
    np.savez(out / "calib.npz", x=crops[:100])
    result = convert(module, ["tflite-int8", "executorch-int8"], out / "out", calib=out / "calib.npz",
                     example_inputs=torch.zeros(1, 3, 224, 224), options={"max_drop": 100.0, "min_sqnr_db": 0.0})
    return {a["target"]: a for a in result.manifest["artifacts"]}


def run(frames: int, keep: Path | None) -> dict[str, Any]:
    from edgeserve.runtime import Session

    with tempfile.TemporaryDirectory(prefix="edgeserve-executorch-bench-") as temporary:
        root = keep or Path(temporary)
        root.mkdir(parents=True, exist_ok=True)
        entries = build(root)
        manifest = root / "out" / "manifest.json"
        pte = Session(manifest, target="executorch-int8", threads=2)
        tflite = Session(manifest, target="tflite-int8", backend="litert:xnnpack", threads=2)
        # The model tensor (no preprocessing: what the bare calls get), and a camera frame
        # through the recorded preprocessing (resize, normalise, NCHW) for the end-to-end figure.
        x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
        frame = pte.example_input()
        pte.run(x)
        tflite.run(x)
        method, tensors = pte._active._method, pte._active._in_tensors
        steps = {"executorch_bare": lambda: method.execute(tensors),
                 "executorch_session": lambda: pte.run(x),
                 "executorch_session_frame": lambda: pte.run(frame),
                 "litert_bare": tflite._active._interp.invoke,
                 "litert_session": lambda: tflite.run(x),
                 "litert_session_frame": lambda: tflite.run(frame)}
        times = measure(steps, frames)
        p50 = {name: float(np.median(t)) * 1e3 for name, t in times.items()}
        rows = [{"measurement": name, "p50_ms": round(p50[name], 3),
                 "p95_ms": round(float(np.percentile(t, 95)) * 1e3, 3),
                 "min_ms": round(float(t.min()) * 1e3, 3)} for name, t in times.items()]
        backends = {"executorch-int8": pte.backend, "tflite-int8": tflite.backend}
        pte.close()
        tflite.close()
        return {
            "model": "MobileNetV3-Small (tests/mobilenet_v3.py), 1x3x224x224",
            "frames": frames, "backends": backends,
            "bytes": {t: e.get("bytes") for t, e in entries.items()},
            "quality": {t: (e.get("quality") or {}).get("outputs", [{}])[0].get("sqnr_db") for t, e in entries.items()},
            "delegated": (entries["executorch-int8"].get("delegation") or {}).get("delegated_share"),
            "rows": rows,
            "ratios": {
                "executorch_int8_over_litert_int8": round(p50["executorch_bare"] / p50["litert_bare"], 2),
                "executorch_session_over_bare": round(p50["executorch_session"] / p50["executorch_bare"], 3),
                "litert_session_over_bare": round(p50["litert_session"] / p50["litert_bare"], 3),
            },
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep", type=Path, help="convert into this folder and keep it")
    args = parser.parse_args()
    result = run(args.frames, args.keep)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['model']}, {result['frames']} frames each; backends {result['backends']}")
    for row in result["rows"]:
        print(f"  {row['measurement']:20} p50 {row['p50_ms']:8.3f} ms  p95 {row['p95_ms']:8.3f}  min {row['min_ms']:8.3f}")
    for name, value in result["ratios"].items():
        print(f"  {name:36} {value}")
    print(f"  sizes {result['bytes']}; SQNR vs torch {result['quality']}; XNNPACK share {result['delegated']}")


if __name__ == "__main__":
    main()
