"""The float-front remedy: what feeds an operator the quantizer has no int8 rule for stays float.

DNSMOS P.835 (the speechmos wheel's sig_bak_ovr.onnx) computes a log power spectrum of 9 s of
audio (an STFT as two convolutions, squares, LOG: no int8 rule in ai-edge-quantizer 0.10), then
scores it with a convolutional network. In the mixed all-int8 model the power reaches the LOG
through int8, which holds nothing under 1/255 of the loudest bin; kept float up to the LOG, the
network behind it int8, the model passes. Judged on speech espeak-ng says, against ONNX Runtime
on the file.
"""

from __future__ import annotations

import json
import wave
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgeserve.cli import cli

SENTENCES = ("The quick brown fox jumps over the lazy dog near the river bank.",
             "Please call Stella and ask her to bring these things with her from the store.",
             "When the sunlight strikes raindrops in the air, they act as a prism and form a rainbow.",
             "Six spoons of fresh snow peas, five thick slabs of blue cheese, and a snack for Bob.")
SAMPLES = 144160  # DNSMOS's 9.01 s at 16 kHz


def _speech_clips(tmp_path: Path) -> np.ndarray:
    """Each sentence at three speeds, 16 kHz in [-1, 1], repeated to 9.01 s: float32 [12, SAMPLES]."""
    from speech import speak

    clips = []
    for i, text in enumerate(SENTENCES):
        for speed in (120, 150, 180):
            with wave.open(str(speak(text, tmp_path / f"s{i}_{speed}.wav", ("-s", str(speed)))), "rb") as w:
                rate = w.getframerate()
                pcm = np.frombuffer(w.readframes(w.getnframes()), np.int16) / 32768.0
            at16k = np.interp(np.arange(0, len(pcm) / rate, 1 / 16000), np.arange(len(pcm)) / rate, pcm)
            clips.append(np.tile(at16k, SAMPLES // len(at16k) + 1)[:SAMPLES])
    return np.asarray(clips, np.float32)


def test_a_log_power_front_end_passes_with_what_feeds_its_log_in_float(tmp_path: Path) -> None:
    from registry_models import DNSMOS_P835, registry_model

    pytest.importorskip("litert_torch")
    model = registry_model(DNSMOS_P835, tmp_path)
    clips = _speech_clips(tmp_path)
    assert clips.std() > 0.01  # speech, not silence
    np.savez(tmp_path / "speech.npz", x=clips)
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["convert", str(model), "-t", "tflite-int8", "--calib",
                                      str(tmp_path / "speech.npz"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    entry = json.loads((out / "manifest.json").read_text())["artifacts"][0]
    attempts = {a["remedy"]: a for a in entry["attempts"]}
    # Measured: int8 8.0 dB, int16 refused (no int16 rule for LOG either), float front 26.7 dB.
    assert attempts["int8"]["status"] != "ok" and min(attempts["int8"]["output_sqnr_db"].values()) < 10
    assert attempts["float-front"]["status"] == "ok"
    sqnr = entry["quality"]["outputs"][0]["sqnr_db"]
    assert sqnr > 20, sqnr
    assert entry["quantization"]["scheme"] == "float-front" and not entry["integer_only"]
    assert list(entry["no_int8_rule"]) == ["LOG"]
    # The front is what computes the power (the STFT's two convolutions, their squares), and
    # the network behind the LOG stays int8: most of the model's convolutions.
    kept = [k.split(" ", 1)[0] for k in entry["quantization"]["float_layers"]]
    assert kept.count("CONV_2D") == 2 and "LOG" not in kept
    assert entry["ops"]["CONV_2D"] == 8  # 6 of them int8, with the 3 FULLY_CONNECTED and the pools
