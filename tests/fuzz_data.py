"""Calibration and evaluation data that lies, for the CLI fuzz: each case one `convert` of a
float model with its --calib and --eval, then `verify` of what it wrote.

The models are MLPerf Tiny's keyword spotter (float .tflite, [1, 49, 10, 1] -> 12 classes) for
arrays and its visual wake words network ([1, 96, 96, 3]) for image folders: no TensorFlow,
about a second a case. The accuracy gates are opened wide (random data scores nothing): what
is judged is how the data is taken, not the model. A strategy says what must happen: "ok" (the conversion passes and
verify agrees), "refused" (exit 1 or 2, one line), or None (either, as long as it is clean).
Data a careful user could mean (whole-number labels stored as floats, one-hot rows, integer
samples) may pass; data that cannot set an int8 range or score the output must not.
"""

from __future__ import annotations

import collections
import io
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np
from cli_fuzz import Plan

KWS, VWW = "mlperf-tiny/kws_ref_model_float32.tflite", "mlperf-tiny/vww_96_float.tflite"
KWS_SHAPE, CLASSES = (49, 10, 1), 12

# strategy -> what must happen
CALIBRATION = {
    "sound": "ok", "constant": "refused", "zeros": "refused", "single-sample": "refused", "nan": "refused",
    "inf": "refused", "huge": None, "wrong-shape": "refused", "object-array": "refused", "complex": "refused",
    "strings": "refused", "no-samples": "refused", "other-name": None, "truncated-npz": "refused",
    "not-an-npz": "refused", "integers": None, "unused-big-array": "ok", "zero-dimensional": "refused",
}
EVALUATION = {
    "labels-fractions": "refused", "labels-strings": "refused", "labels-past-the-classes": "refused",
    "labels-negative": "refused", "labels-nan": "refused", "labels-too-few": "refused", "no-labels": "refused",
    "one-hot": "ok", "whole-floats": "ok", "eval-x-nan": "refused", "eval-wrong-shape": "refused",
}
IMAGES = {
    "photos": "ok", "one-black-image": "refused", "bomb-png": "refused", "bomb-gif": "refused",
    "empty-folder": "refused", "truncated-png": "refused", "text-named-png": "refused",
}


def _png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    body = zlib.compress(b"\0" * 10)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", body) + chunk(b"IEND", b""))


def _photos(folder: Path, rng: np.random.Generator, n: int) -> None:
    from PIL import Image

    folder.mkdir(parents=True)
    for k in range(n):
        Image.fromarray(rng.integers(0, 256, (120, 160, 3), dtype=np.uint8)).save(folder / f"p{k}.png")


def _calibration(strategy: str, path: Path, rng: np.random.Generator) -> Path:
    x = rng.normal(0, 20, (24, *KWS_SHAPE)).astype(np.float32)
    arrays: dict[str, Any] = {"x": x}
    if strategy == "constant":
        arrays = {"x": np.full_like(x, float(rng.normal(0, 5)))}
    elif strategy == "zeros":
        arrays = {"x": np.zeros_like(x)}
    elif strategy == "single-sample":
        arrays = {"x": x[:1]}
    elif strategy in ("nan", "inf"):
        x.flat[int(rng.integers(x.size))] = np.nan if strategy == "nan" else -np.inf
    elif strategy == "huge":
        arrays = {"x": x * np.float32(1e36)}
    elif strategy == "wrong-shape":
        arrays = {"x": x.reshape(24, 10, 49, 1)}
    elif strategy == "object-array":
        arrays = {"x": np.array([x[0], "text"], dtype=object)}
    elif strategy == "complex":
        arrays = {"x": x.astype(np.complex64)}
    elif strategy == "strings":
        arrays = {"x": np.array(["a", "b"])}
    elif strategy == "no-samples":
        arrays = {"x": x[:0]}
    elif strategy == "other-name":
        arrays = {"features": x}
    elif strategy == "integers":
        arrays = {"x": np.round(x).astype(np.int32)}
    elif strategy == "unused-big-array":
        arrays = {"x": x, "unused": np.zeros((1 << 28,), np.float32)}  # 1 GiB, a few MB compressed
    elif strategy == "zero-dimensional":
        arrays = {"x": np.float32(3.0)}
    if strategy in ("truncated-npz", "not-an-npz"):
        buffer = io.BytesIO()
        np.savez_compressed(buffer, x=x)
        data = buffer.getvalue()
        path.write_bytes(data[: len(data) // 2] if strategy == "truncated-npz" else b"x,y\n1,2\n" * 50)
        return path
    with open(path, "wb") as f:
        np.savez_compressed(f, **arrays, allow_pickle=True) if strategy == "object-array" else \
            np.savez_compressed(f, **arrays)
    return path


def _evaluation(strategy: str, path: Path, rng: np.random.Generator) -> Path:
    x = rng.normal(0, 20, (16, *KWS_SHAPE)).astype(np.float32)
    y: Any = rng.integers(0, CLASSES, 16)
    if strategy == "labels-fractions":
        y = y + 0.5
    elif strategy == "labels-strings":
        y = np.array([f"class{v}" for v in y])
    elif strategy == "labels-past-the-classes":
        y[int(rng.integers(16))] = CLASSES + int(rng.integers(0, 100))
    elif strategy == "labels-negative":
        y[int(rng.integers(16))] = -1
    elif strategy == "labels-nan":
        y = y.astype(np.float32)
        y[3] = np.nan
    elif strategy == "labels-too-few":
        y = y[:5]
    elif strategy == "one-hot":
        y = np.eye(CLASSES, dtype=np.float32)[y]
    elif strategy == "whole-floats":
        y = y.astype(np.float32)
    elif strategy == "eval-x-nan":
        x[2, 0, 0, 0] = np.nan
    elif strategy == "eval-wrong-shape":
        x = x.reshape(16, 10, 49, 1)
    arrays = {"x": x} if strategy == "no-labels" else {"x": x, "y": y}
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return path


def _images(strategy: str, folder: Path, rng: np.random.Generator) -> Path:
    if strategy == "photos":
        _photos(folder, rng, 12)
        return folder
    folder.mkdir(parents=True)
    if strategy == "one-black-image":
        from PIL import Image

        Image.fromarray(np.zeros((96, 96, 3), np.uint8)).save(folder / "black.png")
        return folder
    if strategy == "bomb-png":
        (folder / "bomb.png").write_bytes(_png(100_000, 100_000))
    elif strategy == "bomb-gif":
        (folder / "bomb.gif").write_bytes(b"GIF89a" + struct.pack("<HH", 65535, 65535) + b"\0\0\0" + b";")
    elif strategy == "truncated-png":  # among sound photos, one cut in half (a copy that did not finish)
        folder.rmdir()
        _photos(folder, rng, 12)
        cut = folder / "p5.png"
        cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    elif strategy == "text-named-png":
        (folder / "notes.png").write_text("not an image\n")
    return folder


def write_data_cases(testdata: Path, folder: Path, count: int,
                     seed: int = 0) -> tuple[Plan, collections.Counter[str], dict[str, tuple[str | None, Path]]]:
    """`count` cases, every strategy once before any repeats (with other random values).

    Returns the plan, the strategies used, and per case label what must happen and its OUT."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    sound_calib = _calibration("sound", folder / "sound-calib.npz", rng)
    kinds = ([("calib", s) for s in CALIBRATION] + [("eval", s) for s in EVALUATION]
             + [("images", s) for s in IMAGES])
    order = kinds + [kinds[int(i)] for i in rng.integers(len(kinds), size=max(0, count - len(kinds)))]
    plan: Plan = []
    expect: dict[str, tuple[str | None, Path]] = {}
    strategies: collections.Counter[str] = collections.Counter()
    for k, (what, strategy) in enumerate(order[:count]):
        case = folder / f"case-{k:03d}"
        case.mkdir()
        out = case / "out"
        if what == "calib":
            data = ["--calib", str(_calibration(strategy, case / "calib.npz", rng))]
            model, must = KWS, CALIBRATION[strategy]
        elif what == "eval":
            data = ["--calib", str(sound_calib), "--eval", str(_evaluation(strategy, case / "eval.npz", rng))]
            model, must = KWS, EVALUATION[strategy]
        else:
            data = ["--calib", str(_images(strategy, case / "photos", rng))]
            model, must = VWW, IMAGES[strategy]
        label = f"{case.name} {what} {strategy}"
        strategies[f"{what} {strategy}"] += 1
        argv = ["convert", str(testdata / model), "-t", "tflite-int8", *data, "--min-agreement", "0",
                "--min-sqnr", "0", "--max-drop", "100", "-o", str(out), "-q"]
        plan.append({"file": label, "commands": [["convert", argv, None],
                                                 ["verify", ["verify", str(out)], str(out / "manifest.json")]]})
        expect[label] = (must, out)
    return plan, strategies, expect


def judge(rows: list[dict[str, Any]], expect: dict[str, tuple[str | None, Path]]) -> list[tuple[str, dict[str, str]]]:
    """Cases whose outcome is not what their strategy says: a refusal that passed, a sound case
    refused, or a conversion called ok that verify does not confirm (a silently wrong answer).
    A conversion that said NOT VERIFIED (its reference outputs do not vary: random photos give
    the visual wake words network one answer) is the one ok that verify fails, by design."""
    import json

    wrong = []
    for row in rows:
        convert, verify = row["outcomes"].get("convert"), row["outcomes"].get("verify")
        got = "ok" if convert == "exit 0" else "refused"
        must, out = expect[row["file"]]
        if must not in (None, got):
            wrong.append((row["file"], row["outcomes"]))
        elif got == "ok" and verify != "exit 0":
            entries = json.loads((out / "manifest.json").read_text())["artifacts"]
            if not all(e.get("verification", {}).get("degenerate") for e in entries):
                wrong.append((row["file"], row["outcomes"]))
    return wrong
