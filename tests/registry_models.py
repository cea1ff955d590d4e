"""Real models nobody here wrote, taken from packages on PyPI (never from elsewhere).

MediaPipe's wheels up to 0.10.14 ship the float .tflite files of its classic solutions
(BlazeFace short-range face detection with fp16 weights, palm detection with PRELU).
The wheel is fetched with pip into a cache outside the repository (``make test`` does it
first, so CI fails loudly when the registry is unreachable); only the .tflite members are
read from it, with zipfile: nothing from the wheel is installed or imported.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

MEDIAPIPE = "mediapipe==0.10.14"
# One platform's wheel, so every machine reads the same bytes (the .tflite members are identical).
PLATFORM = "manylinux2014_x86_64"
BLAZEFACE = "mediapipe/modules/face_detection/face_detection_short_range.tflite"
PALM = "mediapipe/modules/palm_detection/palm_detection_lite.tflite"
SKIP_PREFIX = "needs a registry download:"


def cache_dir() -> Path:
    base = os.environ.get("EDGESERVE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "edgeserve")
    return Path(base) / "registry"


def fetch_mediapipe_wheel() -> Path | None:
    """The cached wheel, downloading it with pip when missing; None when pip cannot get it."""
    directory = cache_dir()
    found = sorted(directory.glob("mediapipe-0.10.14-*.whl"))
    if found:
        return found[0]
    directory.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", MEDIAPIPE, "--no-deps", "--only-binary=:all:",
               "--python-version", "3.11", "--platform", PLATFORM, "--quiet", "-d", str(directory)]
    try:
        subprocess.run(command, check=True, timeout=600, capture_output=True)
    except (subprocess.SubprocessError, OSError):
        return None
    found = sorted(directory.glob("mediapipe-0.10.14-*.whl"))
    return found[0] if found else None


def mediapipe_model(member: str, into: Path) -> Path:
    """``member`` of the MediaPipe wheel written to ``into``; fails in CI, skips elsewhere, when absent."""
    wheel = fetch_mediapipe_wheel()
    if wheel is None:
        message = f"{SKIP_PREFIX} pip could not download {MEDIAPIPE} into {cache_dir()}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    path = into / Path(member).name
    with zipfile.ZipFile(wheel) as archive:
        path.write_bytes(archive.read(member))
    return path


if __name__ == "__main__":  # `make test` fetches the wheel before pytest starts
    wheel = fetch_mediapipe_wheel()
    if wheel is None:
        sys.exit(f"error: pip could not download {MEDIAPIPE} (--no-deps) into {cache_dir()}")
    print(f"registry models: {wheel}")
