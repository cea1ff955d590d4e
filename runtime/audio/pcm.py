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


# What a WAV header may say before anything is allocated: rates a recording is made at, and
# few enough channels to mix down.
MIN_RATE, MAX_RATE = 1_000, 384_000
MAX_CHANNELS = 32
# Polyphase resampling by up/down factors above this costs time out of proportion (a rate of
# 16,001 Hz is 16000/16001): such a ratio is approximated, and the note says by how much.
MAX_RESAMPLE_FACTOR = 1_000


def read_wav(path: str | Path) -> Audio:
    path = Path(path)
    try:
        if not path.is_file():  # a FIFO or a device would block or never end
            raise InputError(f"{path}: expected a WAV file, got " + ("a folder" if path.is_dir() else
                             "something that is not a regular file" if path.exists() else "no such file"))
        size = path.stat().st_size
        with wave.open(str(path), "rb") as wav:
            rate, width, channels, frames = wav.getframerate(), wav.getsampwidth(), wav.getnchannels(), wav.getnframes()
            _check_header(path, rate, width, channels)
            if frames * channels * width > size:
                raise InputError(f"{path}: the header promises {frames} frames ({frames * channels * width:,} bytes) "
                                 f"but the file is {size:,} bytes: it is truncated or its header is damaged")
            data = wav.readframes(frames)
    except (wave.Error, EOFError, RuntimeError, ValueError, OverflowError) as exc:
        # wave raises RuntimeError or ValueError for some damaged chunk headers.
        raise InputError(f"{path}: expected a 16-bit PCM WAV file, but it cannot be read as one ({exc})") from exc
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from exc
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
        from fractions import Fraction

        from scipy.signal import resample_poly

        ratio = Fraction(SAMPLE_RATE, rate)
        note = f"resampled from {rate} Hz to {SAMPLE_RATE} Hz"
        if max(ratio.numerator, ratio.denominator) > MAX_RESAMPLE_FACTOR:
            exact, ratio = ratio, ratio.limit_denominator(MAX_RESAMPLE_FACTOR)
            note += f" (by {ratio.numerator}/{ratio.denominator}, {abs(float(ratio / exact) - 1) * 1e6:.0f} ppm off)"
        samples = resample_poly(samples.astype(np.float64), ratio.numerator, ratio.denominator)
        notes.append(note)
    mono = np.clip(np.round(samples), -32768, 32767).astype(np.int16)
    return Audio(mono, tuple(notes))


def _check_header(path: Path, rate: int, width: int, channels: int) -> None:
    if width != 2:
        raise InputError(f"{path}: expected 16-bit PCM samples, got {8 * width}-bit")
    if not MIN_RATE <= rate <= MAX_RATE:
        raise InputError(f"{path}: expected a sample rate of {MIN_RATE:,} to {MAX_RATE:,} Hz, the header says {rate:,}")
    if not 1 <= channels <= MAX_CHANNELS:
        raise InputError(f"{path}: expected 1 to {MAX_CHANNELS} channels, the header says {channels}")


def from_pcm(data: bytes) -> Audio:
    """Raw 16 kHz mono little-endian 16-bit samples (an odd trailing byte is an error)."""
    if len(data) % 2:
        raise InputError(f"raw PCM on stdin must be 16-bit samples; got {len(data)} bytes, an odd count")
    return Audio(np.frombuffer(data, "<i2").copy())
