"""Speech for the streaming tests and benchmarks: espeak-ng says the words, the TFLM audio
frontend (pymicro-features, as microWakeWord trains with it) turns them into feature frames.

espeak-ng is a Debian package that `make setup` installs: without it the tests skip, and
fail in CI (`CI=true`), where a missing install step must not pass unnoticed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np


#: Speech every one of the four microWakeWord detectors reacts to, with VOICE: 16 to 26 distinct
#: outputs each over its 235 strides (measured). espeak-ng's default voice saying "Hey Jarvis"
#: leaves hey_jarvis at 0 throughout, which would make a comparison of its outputs unable to fail.
FOUR_WAKE_WORDS = "Alexa. Hay Jarvis. Hey Jarvis. Okay Nabu. Hey Mycroft."
VOICE = ("-v", "en-us+f3", "-s", "130")


def speak(text: str, wav: Path, voice: tuple[str, ...] = ("-s", "140")) -> Path:
    """``text`` spoken by espeak-ng into ``wav`` (22.05 kHz mono 16-bit); skips the test (fails
    in CI) when espeak-ng is not installed."""
    if shutil.which("espeak-ng") is None:
        import pytest

        message = "espeak-ng is not installed (make setup installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    subprocess.run(["espeak-ng", "-w", str(wav), *voice, text], check=True, capture_output=True)
    return wav


def features(pcm: bytes) -> np.ndarray:
    """16 kHz 16-bit PCM through the TFLM audio frontend, 10 ms at a time: float32 [frames, 40]."""
    from pymicro_features import MicroFrontend

    frontend, frames = MicroFrontend(), []
    for start in range(0, len(pcm) - 319, 320):
        result = frontend.process_samples(pcm[start:start + 320])
        if result.features:
            frames.append(result.features)
    return np.asarray(frames, np.float32)


def quantized_strides(frames: np.ndarray, scale: float, zero_point: int, stride: int = 3) -> np.ndarray:
    """Feature frames quantized as microWakeWord does (round(x / scale + zero point), int8) and
    grouped into strides: [n, 1, stride, 40], a trailing partial stride dropped."""
    whole = frames[: len(frames) // stride * stride]
    q = np.clip(np.round(whole / scale + zero_point), -128, 127).astype(np.int8)
    return q.reshape(-1, 1, stride, frames.shape[1])
