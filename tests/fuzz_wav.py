"""WAV files with lying headers, odd layouts and damage, for the CLI fuzz: each through
`run WAKEWORD.tflite --input x.wav` (a microWakeWord model from pymicro-wakeword's wheel).

The base files are sound (16 kHz mono, 44.1 kHz stereo, 8 kHz, and one with a LIST chunk
before the data); each mutant changes what a damaged recorder or a hostile file would:
one header field to an edge value, the rate with a consistent byte rate (so Python's wave
module accepts it and only our bounds stand in the way), the sample width, extra or lying
chunks, truncation, flipped header bytes, or bytes that are no WAV at all.
"""

from __future__ import annotations

import collections
import struct
from pathlib import Path

import numpy as np
from cli_fuzz import Plan

# Offsets in the canonical 44-byte header.
FIELDS = {"riff_size": (4, "<I"), "fmt_size": (16, "<I"), "format": (20, "<H"), "channels": (22, "<H"),
          "rate": (24, "<I"), "byte_rate": (28, "<I"), "block_align": (32, "<H"), "bits": (34, "<H"),
          "data_size": (40, "<I")}
EDGES = (0, 1, 2, 3, 7, 255, 256, 0x7FFF, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF)
RATES = (0, 1, 2, 999, 1000, 4000, 7999, 8000, 11025, 16001, 22050, 44100, 48000, 96000, 192000, 384000,
         384001, 1_000_000, 1 << 31, 0xFFFFFFFF)
STRATEGIES = ("field", "rate", "width", "chunk", "truncate", "bytes", "noise", "empty")


def _wav(samples: np.ndarray, rate: int, channels: int, extra: bytes = b"") -> bytes:
    data = samples.astype("<i2").tobytes()
    fmt = struct.pack("<HHIIHH", 1, channels, rate, rate * channels * 2, channels * 2, 16)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + extra + b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


def bases(seconds: float = 0.5) -> list[bytes]:
    rng = np.random.default_rng(0)

    def tone(rate: int, channels: int) -> np.ndarray:
        t = np.arange(int(rate * seconds)) / rate
        mono = 6000 * np.sin(2 * np.pi * 440 * t) + rng.normal(0, 500, t.size)
        return np.repeat(mono[:, None], channels, axis=1).reshape(-1)

    info = b"LIST" + struct.pack("<I", 12) + b"INFOISFT" + struct.pack("<I", 0)
    return [_wav(tone(16_000, 1), 16_000, 1), _wav(tone(44_100, 2), 44_100, 2), _wav(tone(8_000, 1), 8_000, 1),
            _wav(tone(16_000, 1), 16_000, 1, extra=info)]


def mutant(base: bytes, seed: int) -> tuple[str, bytes]:
    """One deterministic mutant of a canonical-header WAV (the LIST base is only truncated or flipped)."""
    rng = np.random.default_rng(seed)
    strategy = STRATEGIES[int(rng.integers(len(STRATEGIES)))]
    out = bytearray(base)
    canonical = base[36:40] == b"data"
    if strategy in ("field", "rate", "width", "chunk") and not canonical:
        strategy = "bytes"
    if strategy == "field":
        for _ in range(int(rng.integers(1, 3))):
            offset, fmt = FIELDS[list(FIELDS)[int(rng.integers(len(FIELDS)))]]
            limit = (1 << (8 * struct.calcsize(fmt))) - 1
            value = int(rng.choice(EDGES)) if rng.random() < 0.8 else int(rng.integers(limit + 1))
            struct.pack_into(fmt, out, offset, min(value, limit))
    elif strategy == "rate":
        rate, channels = int(rng.choice(RATES)), struct.unpack_from("<H", out, 22)[0]
        struct.pack_into("<I", out, 24, rate)
        struct.pack_into("<I", out, 28, (rate * channels * 2) & 0xFFFFFFFF)
    elif strategy == "width":
        bits, channels = int(rng.choice([0, 1, 8, 12, 16, 24, 32, 64])), struct.unpack_from("<H", out, 22)[0]
        width = max(1, bits // 8)
        struct.pack_into("<H", out, 34, bits)
        struct.pack_into("<H", out, 32, (width * channels) & 0xFFFF)
        struct.pack_into("<I", out, 28, (width * channels * struct.unpack_from("<I", out, 24)[0]) & 0xFFFFFFFF)
    elif strategy == "chunk":  # an extra chunk before the data, its size sometimes a lie
        name = [b"LIST", b"fact", b"fmt ", b"data", b"JUNK", b"\x00\x00\x00\x00"][int(rng.integers(6))]
        payload = rng.integers(0, 256, int(rng.integers(0, 40))).astype(np.uint8).tobytes()
        size = len(payload) if rng.random() < 0.5 else int(rng.choice(EDGES))
        out[36:36] = name + struct.pack("<I", size) + payload
        struct.pack_into("<I", out, 4, len(out) - 8)
    elif strategy == "truncate":
        return strategy, bytes(out[: int(rng.integers(0, min(len(out), 200)))]) if rng.random() < 0.6 else \
            bytes(out[: int(rng.integers(0, len(out)))])
    elif strategy == "bytes":
        for _ in range(int(rng.integers(1, 6))):
            out[int(rng.integers(0, 64))] = int(rng.integers(256))
    elif strategy == "noise":
        head = b"RIFF" if rng.random() < 0.5 else b""
        return strategy, head + rng.integers(0, 256, int(rng.integers(0, 4096))).astype(np.uint8).tobytes()
    elif strategy == "empty":
        del out[44:]
        struct.pack_into("<I", out, 40, 0 if rng.random() < 0.5 else int(rng.choice(EDGES)))
        struct.pack_into("<I", out, 4, len(out) - 8)
    return strategy, bytes(out)


def write_wav_mutants(model: Path, folder: Path, count: int, seed0: int = 0) -> tuple[Plan, collections.Counter[str]]:
    """``count`` WAV mutants, each run through the wake-word model; the plan and strategy counts."""
    folder.mkdir(parents=True, exist_ok=True)
    sound = bases()
    plan: Plan = []
    strategies: collections.Counter[str] = collections.Counter()
    for seed in range(seed0, seed0 + count):
        strategy, data = mutant(sound[seed % len(sound)], seed)
        strategies[strategy] += 1
        path = folder / f"w_{seed:07d}.wav"
        path.write_bytes(data)
        plan.append({"file": path.name, "strategy": strategy, "commands": [
            ["run", ["run", str(model), "--input", str(path), "--json", "-q"], None]]})
    return plan, strategies
