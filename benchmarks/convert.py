"""Conversion wall time and sizes per model, for the README.

    python benchmarks/convert.py [--json] [--out build/bench]

Runs `edgeserve convert -t tflite-int8` (the Python API, one process) on the bundled
digits example and the four MLPerf Tiny Keras sources in ../shared/testdata, with
offline calibration data (examples/mlperf_tiny/calibration_data.py). Reports, per model:
source and INT8 file sizes, the size ratio, total conversion wall time (export,
calibration, per-layer debugger, conversion, LiteRT verification) and the metric.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MLPERF = ROOT.parent / "shared" / "testdata" / "mlperf-tiny"


def _script(path: Path):  # examples are scripts, not package modules
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def cases(work: Path) -> list[dict]:
    from edgeserve.preprocess import PreprocessSpec

    data = _script(ROOT / "examples" / "mlperf_tiny" / "calibration_data.py")
    digits = _script(ROOT / "examples" / "digits" / "build_model.py")
    example = work / "digits_example"
    digits.build(example)
    photos = data.photo_folder(work / "photos", n=120, seed=0)
    for name in ("ad01", "str_ww"):
        np.savez(work / f"{name}.npz", x=data.log_mel_frames(name, n=120, seed=0))
    return [
        {"name": "digits_cnn (example)", "source": example / "digits_cnn.keras", "calib": example / "calib.npz",
         "eval": example / "eval.npz"},
        {"name": "vww_96 (MobileNetV1)", "source": MLPERF / "vww_96.h5", "calib": photos,
         "preprocess": PreprocessSpec()},
        {"name": "ResNet-8 (CIFAR-10)", "source": MLPERF / "pretrainedResnet.h5", "calib": photos,
         "preprocess": PreprocessSpec(scale=1.0)},
        {"name": "ad01 (FC autoencoder)", "source": MLPERF / "ad01.h5", "calib": work / "ad01.npz"},
        {"name": "str_ww (wake word)", "source": MLPERF / "str_ww_ref_model.h5", "calib": work / "str_ww.npz"},
    ]


def run(work: Path) -> list[dict]:
    from edgeserve.atomic import sha256_file  # noqa: F401  (warm the package import outside the timer)
    from edgeserve.errors import AccuracyError
    from edgeserve.pipeline import convert

    rows = []
    for case in cases(work):
        out = work / case["source"].stem
        start = time.perf_counter()
        try:
            result = convert(case["source"], ["tflite-int8"], out, calib=case["calib"], eval_data=case.get("eval"),
                             preprocess=case.get("preprocess"), options={"max_drop": 100.0})
            manifest = result.manifest
        except AccuracyError as exc:
            manifest = exc.result.manifest
        seconds = time.perf_counter() - start
        entry = manifest["artifacts"][0]
        m = entry["metrics"]
        rows.append({
            "model": case["name"],
            "source_bytes": case["source"].stat().st_size,
            "int8_bytes": entry["bytes"],
            "size_ratio": round(case["source"].stat().st_size / entry["bytes"], 2),
            "convert_seconds": round(seconds, 1),
            "metric": m["metric"] + ("" if m["labelled"] else " vs float"),
            "float": round(m["float"], 4),
            "int8": round(m["quantized"], 4),
            "drop": m["drop_points"],
            "top1_agreement": (entry.get("agreement") or {}).get("top1_agreement"),
        })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "bench")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not MLPERF.is_dir():
        sys.exit(f"needs ../shared/testdata beside the project: {MLPERF} not found")
    rows = run(args.out)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print("| model | source bytes | INT8 bytes | ratio | convert s | metric | float | INT8 | drop |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['source_bytes']:,} | {r['int8_bytes']:,} | {r['size_ratio']}x | "
              f"{r['convert_seconds']} | {r['metric']} | {r['float']} | {r['int8']} | {r['drop']} |")


if __name__ == "__main__":
    main()
