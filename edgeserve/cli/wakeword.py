"""``edgeserve run MODEL --input speech.wav``: streaming wake-word detection from audio."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from edgeserve.cli.options import emit_json
from edgeserve.errors import InputError

AUDIO_SUFFIXES = (".wav",)
STDIN = "-"
SHOWN_AT_THE_END = 5  # detections repeated in a live source's summary (all were printed as they came)


def is_audio(inputs: Sequence[str]) -> bool:
    """All inputs are audio: WAV files, raw PCM on stdin ("-"), or a microphone ("mic", "mic:DEVICE")."""
    return bool(inputs) and all(i == STDIN or _mic_device(i) is not None or Path(i).suffix.lower() in AUDIO_SUFFIXES
                                for i in inputs)


def _mic_device(name: str) -> str | None:
    """The ALSA device of a "mic" or "mic:DEVICE" input, else None."""
    if name == "mic":
        return "default"
    return (name[4:] or "default") if name.startswith("mic:") else None


def run_audio(artifact: Path, inputs: Sequence[str], cutoff: float | None, window: int | None, backend: str,
              threads: int | None, json_out: bool, quiet: bool, duration: float | None = None) -> None:
    from edgeserve.runtime import Session
    from edgeserve.runtime.audio.pcm import read_wav
    from edgeserve.runtime.audio.wakeword import WakeWordStream, detector_settings

    if artifact.suffix != ".tflite":
        raise InputError(f"audio input needs a streaming .tflite model (microWakeWord); got {artifact}")
    cutoff, window, settings = detector_settings(artifact, cutoff, window)
    if not 0 < cutoff < 1 or window < 1:
        raise InputError(f"--cutoff must be in (0, 1) and --window at least 1; got {cutoff} and {window}")
    if duration is not None and not any(i == STDIN or _mic_device(i) for i in inputs):
        raise InputError("--duration limits a live source (--input mic or -); a WAV file is read whole")
    # Wake-word models are a few hundred thousand MACs: XNNPACK gains nothing there, and
    # LiteRT's builtin kernels give the probabilities microWakeWord's own detector gives
    # (measured: XNNPACK differs by up to 12/256 on a few strides).
    chosen = "litert:cpu" if backend == "auto" else backend
    results = []
    for name in inputs:
        with Session(artifact, backend=chosen, threads=threads or 1) as session:
            live = name == STDIN or _mic_device(name) is not None
            stream = WakeWordStream(session, cutoff, window, history=not live)
            if live:
                label = "stdin" if name == STDIN else name
                seconds = _listen(stream, name, label, duration, echo=not json_out)
                notes: tuple[str, ...] = ()
            else:
                label = name
                audio = read_wav(name)
                stream.run(audio)
                seconds, notes = audio.seconds, audio.notes
            backend_used = session.backend
        entry: dict[str, Any] = {
            "input": label, "seconds": round(seconds, 3),
            "notes": list(notes), "strides": stream.strides,
            "detections": [d.to_dict() for d in stream.detections],
            "max_average": round(stream.max_average, 4),
        }
        results.append(entry)
        if not json_out:
            for note in notes:
                click.echo(f"note: {label}: {note}", err=True)
            shown = entry["detections"] if not live else entry["detections"][-SHOWN_AT_THE_END:]
            found = ", ".join(f"{d['time_s']:.2f} s (p={d['probability']:.3f})" for d in shown)
            if live and len(entry["detections"]) > len(shown):  # each was printed when it happened
                found = f"... (each printed as it happened), the last {len(shown)} " + found
            click.echo(f"{label}: {len(entry['detections'])} detection(s)" + (f" at {found}" if found else "")
                       + f"; highest average {entry['max_average']:.3f} over {entry['strides']} strides")
    summary = {"backend": backend_used, "cutoff": cutoff, "window": window, "settings_from": settings,
               "audio": stream.spec.to_dict(), "results": results,
               # the single-input form the issue of record asks scripts to read
               "detections": results[0]["detections"] if len(results) == 1 else None}
    if json_out:
        emit_json(summary)
    elif not quiet:
        click.echo(f"backend: {backend_used}; cutoff {cutoff}, window {window} ({settings})", err=True)


@contextlib.contextmanager
def _sigterm_stops() -> Any:
    """SIGTERM ends a live source as Ctrl-C does: what was heard is summed up, and the exit is 0
    (it ended with status 1 and not a word)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt("SIGTERM")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _listen(stream: Any, name: str, label: str, duration: float | None, echo: bool) -> float:
    """Feed a live source to ``stream`` as it arrives, printing each detection when it happens;
    Ctrl-C ends the source and keeps what was heard. Returns the seconds of audio heard."""
    from edgeserve.runtime.audio.pcm import SAMPLE_RATE
    from edgeserve.runtime.audio.microphone import Microphone, pcm_chunks

    total = 0
    device = _mic_device(name)
    # A microphone stops itself after `duration` (Microphone); a pipe is cut here.
    limit = None if duration is None or device is not None else int(duration * SAMPLE_RATE) * 2
    seen = 0
    with contextlib.ExitStack() as stack:
        if device is not None:
            mic = stack.enter_context(Microphone(device, duration))
            chunks = mic.chunks()
            if echo:
                click.echo(f"listening on ALSA device '{device}'" + ("" if duration else "; Ctrl-C to stop"), err=True)
        else:
            chunks = pcm_chunks(sys.stdin.buffer)
        stack.enter_context(_sigterm_stops())
        try:
            for data in chunks:
                if limit is not None:
                    data = data[:limit - total]
                total += len(data)
                stream.push(data)
                for d in stream.detections[seen:]:
                    if echo:
                        click.echo(f"{label}: detection at {d.time_s:.2f} s (p={d.probability:.3f})")
                seen = len(stream.detections)
                if limit is not None and total >= limit:
                    break
        except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM (a service manager stopping it)
            click.echo(f"stopped ({stop.args[0] if stop.args else 'Ctrl-C'})", err=True)
        except BrokenPipeError as exc:  # whoever read the detections went away
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
            raise InputError("standard output was closed (the program reading the detections ended); stopped "
                             f"listening after {total / 2 / SAMPLE_RATE:.1f} s") from exc
    if total % 2:
        raise InputError(f"raw PCM on {label} must be 16-bit samples; got {total} bytes, an odd count")
    return total / 2 / SAMPLE_RATE
