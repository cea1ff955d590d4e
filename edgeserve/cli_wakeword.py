"""``edgeserve run MODEL --input speech.wav``: streaming wake-word detection from audio."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from edgeserve.cli_common import emit_json
from edgeserve.errors import InputError

AUDIO_SUFFIXES = (".wav",)
STDIN = "-"


def is_audio(inputs: Sequence[str]) -> bool:
    """All inputs are audio: WAV files, raw PCM on stdin ("-"), or "mic"."""
    return bool(inputs) and all(i in (STDIN, "mic") or Path(i).suffix.lower() in AUDIO_SUFFIXES for i in inputs)


def run_audio(artifact: Path, inputs: Sequence[str], cutoff: float | None, window: int | None, backend: str,
              threads: int | None, json_out: bool, quiet: bool) -> None:
    from edgeserve.runtime import Session
    from edgeserve.runtime.audio import from_pcm, read_wav
    from edgeserve.runtime.wakeword import WakeWordStream, detector_settings

    if artifact.suffix != ".tflite":
        raise InputError(f"audio input needs a streaming .tflite model (microWakeWord); got {artifact}")
    cutoff, window, settings = detector_settings(artifact, cutoff, window)
    if not 0 < cutoff < 1 or window < 1:
        raise InputError(f"--cutoff must be in (0, 1) and --window at least 1; got {cutoff} and {window}")
    # Wake-word models are a few hundred thousand MACs: XNNPACK gains nothing there, and
    # LiteRT's builtin kernels give the probabilities microWakeWord's own detector gives
    # (measured: XNNPACK differs by up to 12/256 on a few strides).
    chosen = "litert:cpu" if backend == "auto" else backend
    results = []
    for name in inputs:
        if name == "mic":
            raise InputError("--input mic needs a microphone and the sounddevice package; none is available here. "
                             "Record a 16 kHz WAV, or pipe raw 16-bit PCM to --input -")
        audio = from_pcm(sys.stdin.buffer.read()) if name == STDIN else read_wav(name)
        with Session(artifact, backend=chosen, threads=threads or 1) as session:
            stream = WakeWordStream(session, cutoff, window).run(audio)
            backend_used = session.backend
        entry: dict[str, Any] = {
            "input": "stdin" if name == STDIN else name, "seconds": round(audio.seconds, 3),
            "notes": list(audio.notes), "strides": len(stream.probabilities),
            "detections": [d.to_dict() for d in stream.detections],
            "max_average": round(max(stream.averages, default=0.0), 4),
        }
        results.append(entry)
        if not json_out:
            for note in audio.notes:
                click.echo(f"note: {entry['input']}: {note}", err=True)
            found = ", ".join(f"{d['time_s']:.2f} s (p={d['probability']:.3f})" for d in entry["detections"])
            click.echo(f"{entry['input']}: {len(entry['detections'])} detection(s)" + (f" at {found}" if found else "")
                       + f"; highest average {entry['max_average']:.3f} over {entry['strides']} strides")
    summary = {"backend": backend_used, "cutoff": cutoff, "window": window, "settings_from": settings,
               "audio": stream.spec.to_dict(), "results": results,
               # the single-input form the issue of record asks scripts to read
               "detections": results[0]["detections"] if len(results) == 1 else None}
    if json_out:
        emit_json(summary)
    elif not quiet:
        click.echo(f"backend: {backend_used}; cutoff {cutoff}, window {window} ({settings})", err=True)
