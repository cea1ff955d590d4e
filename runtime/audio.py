"""Audio in for streaming models: 16 kHz mono 16-bit PCM from a WAV file or raw bytes.

A WAV at another rate is resampled (polyphase, scipy) and a stereo one mixed down, each
with a note for the user; a file that is not 16-bit PCM, or is cut short, is an error
naming what was expected and what was found.
"""

from __future__ import annotations

import dataclasses
import wave
from pathlib import Path

import numpy as np

from edgeserve.errors import InputError

SAMPLE_RATE = 16_000


@dataclasses.dataclass(frozen=True)
class Audio:
    samples: np.ndarray  # int16, mono, SAMPLE_RATE
    notes: tuple[str, ...] = ()

    @property
    def seconds(self) -> float:
        return len(self.samples) / SAMPLE_RATE


def read_wav(path: str | Path) -> Audio:
    path = Path(path)
    try:
        with wave.open(str(path), "rb") as wav:
            rate, width, channels, frames = wav.getframerate(), wav.getsampwidth(), wav.getnchannels(), wav.getnframes()
            data = wav.readframes(frames)
    except (wave.Error, EOFError) as exc:
        raise InputError(f"{path}: expected a 16-bit PCM WAV file, but it cannot be read as one ({exc})") from exc
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if width != 2:
        raise InputError(f"{path}: expected 16-bit PCM samples, got {8 * width}-bit")
    expected = frames * channels * width
    if len(data) < expected or len(data) % (channels * width):
        raise InputError(f"{path}: the header promises {frames} frames but the file holds "
                         f"{len(data) // (channels * width)}: it is truncated")
    samples = np.frombuffer(data, "<i2").reshape(-1, channels)
    notes = []
    if channels > 1:
        samples = samples.astype(np.int32).mean(axis=1)
        notes.append(f"{channels} channels mixed down to mono")
    else:
        samples = samples[:, 0]
    if rate != SAMPLE_RATE:
        from math import gcd

        from scipy.signal import resample_poly

        g = gcd(rate, SAMPLE_RATE)
        samples = resample_poly(samples.astype(np.float64), SAMPLE_RATE // g, rate // g)
        notes.append(f"resampled from {rate} Hz to {SAMPLE_RATE} Hz")
    mono = np.clip(np.round(samples), -32768, 32767).astype(np.int16)
    return Audio(mono, tuple(notes))


def from_pcm(data: bytes) -> Audio:
    """Raw 16 kHz mono little-endian 16-bit samples (an odd trailing byte is an error)."""
    if len(data) % 2:
        raise InputError(f"raw PCM on stdin must be 16-bit samples; got {len(data)} bytes, an odd count")
    return Audio(np.frombuffer(data, "<i2").copy())
