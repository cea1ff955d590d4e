"""WAV files whose headers lie (issue 28): each is one InputError naming what was expected
and what the file says, before anything is allocated for it; nothing hangs."""

from __future__ import annotations

import os
import struct
import wave
from pathlib import Path

import numpy as np
import pytest

from edgeserve.errors import InputError
from edgeserve.runtime.audio.pcm import SAMPLE_RATE, read_wav


def _wav(path: Path, rate: int = SAMPLE_RATE, channels: int = 1, seconds: float = 0.5) -> Path:
    samples = (np.sin(np.arange(int(rate * seconds) * channels) / 7) * 8000).astype("<i2")
    with wave.open(str(path), "wb") as out:
        out.setnchannels(channels)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(samples.tobytes())
    return path


def _patched(path: Path, offset: int, fmt: str, value: int) -> Path:
    data = bytearray(path.read_bytes())
    struct.pack_into(fmt, data, offset, value)
    path.write_bytes(bytes(data))
    return path


# Offsets in a canonical 44-byte header: 22 channels, 24 rate, 28 byte rate, 40 data size.
@pytest.mark.parametrize("offset, fmt, value, message", [
    (24, "<I", 0, "expected a sample rate of 1,000 to 384,000 Hz, the header says 0"),
    (24, "<I", 1, "the header says 1"),  # a 16,000-fold upsampling that used to eat gigabytes
    (24, "<I", 4_000_000_000, "the header says 4,000,000,000"),  # 128-320 GiB before
    (22, "<H", 0, "cannot be read as one"),  # wave itself refuses 0 channels
    (22, "<H", 999, "expected 1 to 32 channels, the header says 999"),
    (40, "<I", 0x7FFFFFF0, "it is truncated or its header is damaged"),
    (4, "<I", 7, "cannot be read as one"),  # a RIFF size smaller than its chunks
    (16, "<I", 0xFFFFFFF0, "cannot be read as one"),  # a fmt chunk size past the end
])
def test_a_lying_header_is_one_clear_error(tmp_path: Path, offset: int, fmt: str, value: int, message: str) -> None:
    path = _patched(_wav(tmp_path / "x.wav"), offset, fmt, value)
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_wav(path)


def test_odd_rates_resample_with_a_bounded_ratio(tmp_path: Path) -> None:
    audio = read_wav(_wav(tmp_path / "odd.wav", rate=16_001))
    (note,) = audio.notes
    assert note.startswith("resampled from 16001 Hz to 16000 Hz (by ") and "ppm off" in note
    assert abs(len(audio.samples) - SAMPLE_RATE // 2) <= 2
    plain = read_wav(_wav(tmp_path / "cd.wav", rate=44_100, channels=2))
    assert plain.notes == ("2 channels mixed down to mono", "resampled from 44100 Hz to 16000 Hz")


def test_what_is_not_a_regular_file_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.wav"
    os.mkfifo(fifo)  # reading it would block until a writer came
    with pytest.raises(InputError, match="not a regular file"):
        read_wav(fifo)
    with pytest.raises(InputError, match="a folder"):
        read_wav(tmp_path)
