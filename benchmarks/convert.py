"""Conversion wall time and sizes per model, and per route, for the README.

    python benchmarks/convert.py [--json] [--out build/bench] [--only models|routes]

models: `edgeserve convert -t tflite-int8` (the Python API, one process) on the bundled
digits example and the four MLPerf Tiny Keras sources in ../shared/testdata, with
offline calibration data (examples/mlperf_tiny/calibration_data.py). Reports, per model:
source and INT8 file sizes, the size ratio, total conversion wall time (export,
calibration, per-layer debugger, conversion, LiteRT verification) and the metric.

routes: the same digits CNN trained in PyTorch (tests/torch_digits.py) from each source
kind (Keras, .pt2, TorchScript, nn.Module, ONNX, float .tflite) to tflite-int8 alone and
to every target (tflite-int8, mcu, coreml), and MobileNet-sized models: vww_96
(MobileNetV1, Keras .h5 and its float .tflite) and PaddleOCR's MobileNetV3 text-direction
classifier (ONNX, from the rapidocr-onnxruntime wheel; tests/registry_models.py).

demo: the digits example as `make demo` converts it (the CLI, cold, to tflite-int8, mcu, mcu-c
and coreml), with isolated steps forked from the warm server (edgeserve/isolation/warm.py) and,
side by side in the same run, each in a fresh Python (EDGESERVE_ISOLATION=cold); runs
alternate, median of three each. Per mode: wall time and the CLI's own step timings. Then the
same conversion into a fresh folder without coreml, and again into it with coreml added (the
targets of the first kept, edgeserve/conversion/reuse.py).

detector: a 320x320 detector as issue 24 asks, PaddleOCR's v4 text detector (DBNet, ONNX, from
the same wheel), `edgeserve convert` run as a user runs it (the CLI, one process per target)
for onnx-int8 and for tflite-int8, 100 calibration views of scikit-image's photos (the number
below which the quantizer warns). Per target: wall time, the figure the gate judged, and where
the time went, read from the CLI's own step timings on stderr. Then all eight targets in one
command (nothing reused or cached), each target's seconds read from the manifest's timing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np

from edgeserve.conversion.schedule import default_jobs

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
    from edgeserve.conversion.convert import convert

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


def _timed(source: object, targets: list[str], out: Path, **kwargs: object) -> tuple[float, dict]:
    from edgeserve.errors import AccuracyError
    from edgeserve.conversion.convert import convert

    start = time.perf_counter()
    try:
        manifest = convert(source, targets, out, **kwargs).manifest  # type: ignore[arg-type]
    except AccuracyError as exc:
        manifest = exc.result.manifest
    return time.perf_counter() - start, {a["target"]: a for a in manifest["artifacts"]}


def route_cases(work: Path) -> list[dict]:
    import torch

    sys.path.insert(0, str(ROOT / "tests"))
    import registry_models
    import torch_digits

    from edgeserve.preprocess import PreprocessSpec

    data = _script(ROOT / "examples" / "mlperf_tiny" / "calibration_data.py")
    digits = _script(ROOT / "examples" / "digits" / "build_model.py")
    keras_example = work / "digits_example"
    if not (keras_example / "digits_cnn.keras").exists():
        digits.build(keras_example)
    (work / "torch_digits").mkdir(parents=True, exist_ok=True)
    tex = torch_digits.build(work / "torch_digits", epochs=25)
    torch.onnx.export(tex.module, (torch.zeros(1, 3, 8, 8),), str(tex.root / "digits.onnx"), input_names=["image"],
                      dynamo=False)
    photos = data.photo_folder(work / "photos", n=120, seed=0)
    ocr = registry_models.registry_model(registry_models.OCR_CLS, work)
    ocr_calib = work / "ocr_calib.npz"
    np.savez(ocr_calib, x=np.random.default_rng(0).uniform(-1, 1, (64, 3, 48, 192)).astype(np.float32))
    t = {"calib": tex.root / "calib.npz", "eval_data": tex.root / "eval.npz", "preprocess": torch_digits.SPEC}
    k = {"calib": keras_example / "calib.npz", "eval_data": keras_example / "eval.npz"}
    return [
        {"model": "digits CNN", "kind": "Keras .keras", "source": keras_example / "digits_cnn.keras", "kw": k},
        {"model": "digits CNN", "kind": "PyTorch .pt2", "source": tex.root / "digits.pt2", "kw": t},
        {"model": "digits CNN", "kind": "TorchScript .pt", "source": tex.root / "digits.pt", "kw": t},
        {"model": "digits CNN", "kind": "nn.Module", "source": tex.module,
         "kw": t | {"example_inputs": torch.zeros(1, 3, 8, 8)}},
        {"model": "digits CNN", "kind": "ONNX", "source": tex.root / "digits.onnx", "kw": t},
        {"model": "vww_96 (MobileNetV1)", "kind": "Keras .h5", "source": MLPERF / "vww_96.h5",
         "kw": {"calib": photos, "preprocess": PreprocessSpec()}, "targets": ["tflite-int8", "mcu"]},
        {"model": "vww_96 (MobileNetV1)", "kind": "float .tflite", "source": MLPERF / "vww_96_float.tflite", "kw": {"calib": photos, "preprocess": PreprocessSpec()},
         "targets": ["tflite-int8", "mcu"]},
        {"model": "PP-OCR cls (MobileNetV3)", "kind": "ONNX", "source": ocr,
         "kw": {"calib": ocr_calib, "input_shapes": {"x": (1, 3, 48, 192)}}},
    ]


def run_routes(work: Path) -> list[dict]:
    rows = []
    for i, case in enumerate(route_cases(work)):
        if isinstance(case["source"], Path) and not case["source"].exists():
            continue
        kw = dict(case["kw"]) | {"options": {"max_drop": 100.0, "fit_check": False}}
        every = case.get("targets", ["tflite-int8", "mcu", "coreml"])
        int8_s, entries = _timed(case["source"], ["tflite-int8"], work / f"route{i}_int8", **kw)
        all_s, entries_all = _timed(case["source"], every, work / f"route{i}_all", **kw)
        int8 = entries["tflite-int8"]
        rows.append({
            "model": case["model"], "source": case["kind"],
            "route": (int8.get("route") or {}).get("float_model", "") + " -> " + (int8.get("route") or {}).get(
                "quantizer", ""),
            "tflite_int8_seconds": round(int8_s, 1),
            "targets": every, "all_targets_seconds": round(all_s, 1),
            "statuses": {t: e["status"] for t, e in entries_all.items()},
            "int8_drop": int8["metrics"]["drop_points"], "metric": int8["metrics"]["metric"],
            "int8_sqnr_db": next(iter((int8.get("output_sqnr_db") or {}).values()), None),
        })
    return rows


DETECTOR_TARGETS = ("onnx-int8", "tflite-int8")


def run_detector(work: Path, samples: int = 100) -> list[dict]:
    import re
    import subprocess

    sys.path.insert(0, str(ROOT / "tests"))
    from corpus import CORPUS, IMAGENET_MEAN, IMAGENET_STD, convert_command, measured, views

    model = next(m for m in CORPUS if m.name == "ocr_text_detector")
    work.mkdir(parents=True, exist_ok=True)
    source = model.fetch(work)
    calib = work / "detector_calib.npz"
    np.savez(calib, x=((views((320, 320), samples) - IMAGENET_MEAN) / IMAGENET_STD).transpose(0, 3, 1, 2))
    rows = []
    for target in DETECTOR_TARGETS:
        out = work / f"detector_{target}"
        command = convert_command(model, source, calib, out, (target,))
        command[command.index("--calib-samples") + 1] = str(samples)
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        steps = [(m.group(2), float(m.group(1))) for m in re.finditer(r"^\[\s*([\d.]+) s\] (.+)$", done.stderr, re.M)]
        manifest = json.loads((out / "manifest.json").read_text())
        entry = {a["target"]: a for a in manifest["artifacts"]}.get(target, {})
        cell = measured(entry) if entry else {}
        rows.append({"model": "PP-OCRv4 text detector (DBNet) 320x320", "target": target, "samples": samples,
                     "seconds": round(seconds, 1), "status": entry.get("status", "refused"),
                     "sqnr_db": cell.get("sqnr_db"), "activations": cell.get("activations"),
                     "attempts": len(entry.get("attempts") or []),
                     "steps": sorted(steps, key=lambda s: -s[1])})
    for jobs in (1, default_jobs()):  # one after another, then side by side on every core
        rows.append(_detector_all_targets(model, source, calib, work / f"detector_all_j{jobs}", samples, jobs))
    return rows


def _detector_all_targets(model, source: Path, calib: Path, out: Path, samples: int, jobs: int) -> dict:
    """Every target in one command, as a user asks for them (--no-reuse --no-cache: all built),
    ``jobs`` at once, with where the time went read from the manifest's own timing."""
    import subprocess

    from corpus import TARGETS, convert_command

    command = convert_command(model, source, calib, out, TARGETS) + ["--no-reuse", "--no-cache", "-j", str(jobs)]
    command[command.index("--calib-samples") + 1] = str(samples)
    start = time.perf_counter()
    subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    manifest = json.loads((out / "manifest.json").read_text())
    timing = manifest.get("timing") or {}
    status = {a["target"]: a["status"] for a in manifest["artifacts"]}
    status |= {r["target"]: "refused" for r in manifest.get("refused") or []}
    return {"model": "PP-OCRv4 text detector (DBNet) 320x320", "target": f"all eight, one command, --jobs {jobs}",
            "samples": samples, "seconds": round(seconds, 1), "status": status,
            "per_target_seconds": {t: v["seconds"] for t, v in (timing.get("targets") or {}).items()},
            "shared_steps": timing.get("shared_steps")}


DEMO_TARGETS = ("tflite-int8", "mcu", "mcu-c", "coreml")


def run_demo(work: Path, repeats: int = 3) -> list[dict]:
    import os
    import re
    import statistics
    import subprocess

    digits = _script(ROOT / "examples" / "digits" / "build_model.py")
    example = work / "digits_example"
    if not (example / "digits_cnn.keras").exists():
        digits.build(example)
    times: dict[str, list[float]] = {"warm": [], "cold": []}
    steps: dict[str, list[list[tuple[str, float]]]] = {"warm": [], "cold": []}
    for _ in range(repeats):
        for mode in ("warm", "cold"):
            out = work / f"digits_{mode}"
            command = [sys.executable, "-m", "edgeserve", "convert", str(example / "digits_cnn.keras"),
                       *[a for t in DEMO_TARGETS for a in ("-t", t)], "-p", "arduino-nano-33-ble", "--name", "digits",
                       "--calib", str(example / "calib.npz"), "--eval", str(example / "eval.npz"), "-o", str(out),
                       "--no-reuse"]  # every run builds every target: the folder of the run before is not kept
            start = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True,
                                  env={**os.environ, "EDGESERVE_ISOLATION": mode})
            times[mode].append(time.perf_counter() - start)
            if done.returncode != 0:
                raise SystemExit(f"the digits conversion failed ({mode}):\n{done.stderr}")
            steps[mode].append([(m.group(2), float(m.group(1)))
                                for m in re.finditer(r"^\[\s*([\d.]+) s\] (.+)$", done.stderr, re.M)])
    rows = []
    for mode in ("warm", "cold"):
        middle = times[mode].index(statistics.median(times[mode]))
        rows.append({"mode": mode, "seconds": round(times[mode][middle], 1),
                     "all_seconds": [round(t, 1) for t in times[mode]],
                     "steps": sorted(steps[mode][middle], key=lambda s: -s[1])})
    import shutil

    again = work / "digits_again"
    shutil.rmtree(again, ignore_errors=True)
    for mode, targets in (("without coreml", DEMO_TARGETS[:3]), ("again, coreml added", DEMO_TARGETS)):
        command = [sys.executable, "-m", "edgeserve", "convert", str(example / "digits_cnn.keras"),
                   *[a for t in targets for a in ("-t", t)], "-p", "arduino-nano-33-ble", "--name", "digits",
                   "--calib", str(example / "calib.npz"), "--eval", str(example / "eval.npz"), "-o", str(again)]
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"the digits conversion failed ({mode}):\n{done.stderr}")
        found = [(m.group(2), float(m.group(1))) for m in re.finditer(r"^\[\s*([\d.]+) s\] (.+)$", done.stderr, re.M)]
        rows.append({"mode": mode, "seconds": round(seconds, 1), "all_seconds": [round(seconds, 1)],
                     "steps": sorted(found, key=lambda s: -s[1])})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "bench")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--only", choices=["demo", "models", "routes", "detector"])
    args = parser.parse_args()
    demo = run_demo(args.out / "demo") if args.only in (None, "demo") else []
    if args.only == "demo":
        if args.json:
            print(json.dumps({"demo": demo}, indent=2))
            return
        _print_demo(demo)
        return
    if not MLPERF.is_dir():
        sys.exit(f"needs ../shared/testdata beside the project: {MLPERF} not found")
    routes = run_routes(args.out / "routes") if args.only in (None, "routes") else []
    rows = run(args.out) if args.only in (None, "models") else []
    detector = run_detector(args.out / "detector") if args.only in (None, "detector") else []
    if args.json:
        print(json.dumps({"demo": demo, "models": rows, "routes": routes, "detector": detector}, indent=2))
        return
    _print_demo(demo)
    if detector:
        print("| model | target | calibration | wall s | status | SQNR dB | activations | attempts | longest steps (s) |")
        print("|---|---|---:|---:|---|---:|---|---:|---|")
        for r in detector:
            if "per_target_seconds" in r:  # the one-command row: per target seconds, from the manifest
                per = "; ".join(f"{t} {sec:.1f} ({r['status'].get(t, '?')})" for t, sec in r["per_target_seconds"].items())
                print(f"| {r['model']} | {r['target']} | {r['samples']} | {r['seconds']} | - | - | - | - | {per} |")
                continue
            top = "; ".join(f"{name} {sec:.1f}" for name, sec in r["steps"][:4])
            print(f"| {r['model']} | {r['target']} | {r['samples']} | {r['seconds']} | {r['status']} | "
                  f"{r['sqnr_db']} | {r['activations']} | {r['attempts']} | {top} |")
    if routes:
        print("| model | source | route | tflite-int8 s | all targets s | targets | int8 drop | int8 SQNR dB |")
        print("|---|---|---|---:|---:|---|---:|---:|")
        for r in routes:
            print(f"| {r['model']} | {r['source']} | {r['route']} | {r['tflite_int8_seconds']} | "
                  f"{r['all_targets_seconds']} | {', '.join(r['targets'])} | {r['int8_drop']} ({r['metric']}) | "
                  f"{r['int8_sqnr_db']} |")
    if not rows:
        return
    print("| model | source bytes | INT8 bytes | ratio | convert s | metric | float | INT8 | drop |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['source_bytes']:,} | {r['int8_bytes']:,} | {r['size_ratio']}x | "
              f"{r['convert_seconds']} | {r['metric']} | {r['float']} | {r['int8']} | {r['drop']} |")


def _print_demo(demo: list[dict]) -> None:
    if not demo:
        return
    print(f"| digits CNN to {', '.join(DEMO_TARGETS)} (cold CLI) | wall s (median) | runs | longest steps (s) |")
    print("|---|---:|---|---|")
    for r in demo:
        how = {"warm": "steps forked from the warm server", "cold": "a fresh Python per step"}.get(
            r["mode"], f"{r['mode']} (into one folder)")
        top = "; ".join(f"{name} {sec:.1f}" for name, sec in r["steps"][:4])
        print(f"| {how} | {r['seconds']} | {', '.join(map(str, r['all_seconds']))} | {top} |")


if __name__ == "__main__":
    main()
