"""Wake words end to end: a WAV in, detections out, against microWakeWord's own detector.

The reference is pymicro-wakeword's MicroWakeWord (a dev dependency): the same models, the
same TFLM audio frontend (pymicro-features), its own quantization, invoke and sliding
window. On the same audio (noise, a tone, and speech spoken by espeak-ng) edgeserve's
per-stride probabilities must equal the reference's within one quantization step (1/256).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import wave
from pathlib import Path

import numpy as np
import pytest
from speech import speak

from edgeserve.errors import InputError
from edgeserve.runtime.audio.pcm import Audio, from_pcm, read_wav

pymicro_wakeword = pytest.importorskip("pymicro_wakeword")
MODELS_DIR = Path(pymicro_wakeword.__file__).parent / "models"
NAMES = ("alexa", "hey_jarvis", "hey_mycroft", "okay_nabu")
SENTENCE = "Alexa. Hey Jarvis. Okay Nabu. Hey Mycroft."


def _write_wav(path: Path, samples: np.ndarray, rate: int = 16_000, channels: int = 1, width: int = 2) -> Path:
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(channels)
        wav.setsampwidth(width)
        wav.setframerate(rate)
        wav.writeframes(samples.tobytes())
    return path


@pytest.fixture(scope="module")
def speech(tmp_path_factory) -> Path:
    return speak(SENTENCE, tmp_path_factory.mktemp("speech") / "speech.wav")


def _clips(speech: Path) -> dict[str, Audio]:
    rng = np.random.default_rng(0)
    t = np.arange(3 * 16_000) / 16_000
    return {"noise": Audio((rng.standard_normal(len(t)) * 1500).astype(np.int16)),
            "tone": Audio((8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)),
            "speech": read_wav(speech)}


def _reference(name: str, audio: Audio) -> tuple[list[float], list[float]]:
    """(per-stride probability, the value process_streaming_prob returned) from MicroWakeWord."""
    from pymicro_wakeword import MicroWakeWord, MicroWakeWordFeatures

    detector = MicroWakeWord.from_config(MODELS_DIR / f"{name}.json")
    features = MicroWakeWordFeatures()
    raw, averaged = [], []
    for frame in features.process_streaming(audio.samples.tobytes()):
        value = detector.process_streaming_prob(frame)
        if not detector._features:  # a stride just ran (the reference clears its frames then)
            raw.append(detector._probabilities[-1])
            averaged.append(value)
    detector.close()
    return raw, averaged


def _ours(name: str, audio: Audio):
    from edgeserve.runtime import Session
    from edgeserve.runtime.audio.wakeword import WakeWordStream, detector_settings

    cutoff, window, _ = detector_settings(MODELS_DIR / f"{name}.tflite", None, None)
    with Session(MODELS_DIR / f"{name}.tflite", backend="litert:cpu", threads=1) as session:
        return WakeWordStream(session, cutoff, window).run(audio)


@pytest.mark.parametrize("name", NAMES)
def test_per_stride_probabilities_equal_the_reference_detector(speech, name):
    for clip, audio in _clips(speech).items():
        raw, averaged = _reference(name, audio)
        ours = _ours(name, audio)
        assert len(ours.probabilities) == len(raw) > 90, clip
        assert np.max(np.abs(np.array(ours.probabilities) - raw)) <= 1 / 256, (name, clip)
        assert np.max(np.abs(np.array(ours.averages) - averaged)) <= 1 / 256, (name, clip)


def test_spoken_wake_words_are_detected_where_the_reference_detects_them(speech):
    """espeak-ng's "Alexa" and "Okay Nabu" trigger their models (measured: at 0.77 s and 3.53 s)."""
    audio = read_wav(speech)
    found = {}
    for name in NAMES:
        _, averaged = _reference(name, audio)
        ours = _ours(name, audio)
        cutoff = ours.cutoff
        rising = [i for i, v in enumerate(averaged) if v > cutoff and (i == 0 or averaged[i - 1] <= cutoff)]
        assert len(ours.detections) == len(rising), name
        found[name] = [d.time_s for d in ours.detections]
    assert len(found["alexa"]) == 1 and 0.3 < found["alexa"][0] < 1.5
    assert len(found["okay_nabu"]) == 1 and found["okay_nabu"][0] > found["alexa"][0]


def test_noise_and_a_tone_detect_nothing(speech):
    for clip in ("noise", "tone"):
        audio = _clips(speech)[clip]
        for name in NAMES:
            assert _ours(name, audio).detections == []


def test_cli_json_gives_detections_with_settings_from_the_models_json(speech, tmp_path):
    from click.testing import CliRunner

    from edgeserve.cli import cli

    model = tmp_path / "alexa.tflite"
    shutil.copy(MODELS_DIR / "alexa.tflite", model)
    shutil.copy(MODELS_DIR / "alexa.json", tmp_path / "alexa.json")
    result = CliRunner().invoke(cli, ["run", str(model), "--input", str(speech), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["cutoff"] == 0.9 and data["window"] == 5 and data["settings_from"] == "alexa.json"
    assert data["audio"]["stride_frames"] == 3 and data["audio"]["channels"] == 40
    assert len(data["detections"]) == 1 and set(data["detections"][0]) == {"time_s", "probability"}
    assert data["results"][0]["notes"] == ["resampled from 22050 Hz to 16000 Hz"]  # espeak-ng speaks at 22.05 kHz
    # Without the JSON beside it, the flags decide; an unreachable cutoff finds nothing.
    (tmp_path / "alexa.json").unlink()
    result = CliRunner().invoke(cli, ["run", str(model), "--input", str(speech), "--json", "--cutoff", "0.999",
                                      "--window", "3"])
    data = json.loads(result.output)
    assert data["settings_from"] == "flags" and data["detections"] == []


def test_raw_pcm_on_stdin(speech, tmp_path):
    from click.testing import CliRunner

    from edgeserve.cli import cli

    pcm = read_wav(speech).samples.tobytes()
    result = CliRunner().invoke(cli, ["run", str(MODELS_DIR / "alexa.tflite"), "--input", "-", "--json"], input=pcm)
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.output)["detections"]) == 1
    # --duration cuts the pipe: half a second ends before "Alexa" is recognised (at 0.77 s).
    result = CliRunner().invoke(cli, ["run", str(MODELS_DIR / "alexa.tflite"), "--input", "-", "--duration", "0.5",
                                      "--json"], input=pcm)
    entry = json.loads(result.stdout)["results"][0]
    assert entry["seconds"] == 0.5 and entry["detections"] == []


def test_audio_input_errors_and_conversions(tmp_path):
    tone = (8000 * np.sin(np.arange(8000) / 5)).astype(np.int16)
    stereo = _write_wav(tmp_path / "stereo.wav", np.stack([tone, tone], axis=1), rate=44_100, channels=2)
    audio = read_wav(stereo)
    assert audio.notes == ("2 channels mixed down to mono", "resampled from 44100 Hz to 16000 Hz")
    assert abs(len(audio.samples) - round(8000 * 16_000 / 44_100)) <= 1
    eight_bit = _write_wav(tmp_path / "u8.wav", np.full(800, 128, np.uint8), width=1)
    with pytest.raises(InputError, match="expected 16-bit PCM samples, got 8-bit"):
        read_wav(eight_bit)
    whole = _write_wav(tmp_path / "whole.wav", tone).read_bytes()
    (tmp_path / "cut.wav").write_bytes(whole[:-1001])
    with pytest.raises(InputError, match="truncated"):
        read_wav(tmp_path / "cut.wav")
    # IEEE float WAV (format 3): not PCM
    data = np.zeros(100, "<f4").tobytes()
    header = b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVEfmt " + struct.pack(
        "<IHHIIHH", 16, 3, 1, 16_000, 64_000, 4, 32) + b"data" + struct.pack("<I", len(data))
    (tmp_path / "float.wav").write_bytes(header + data)
    with pytest.raises(InputError, match="expected a 16-bit PCM WAV file"):
        read_wav(tmp_path / "float.wav")
    with pytest.raises(InputError, match="odd count"):
        from_pcm(b"\x00\x01\x02")


def test_wake_word_flags_are_refused_for_image_inputs(tmp_path):
    from click.testing import CliRunner

    from edgeserve.cli import cli

    result = CliRunner().invoke(cli, ["run", str(MODELS_DIR / "alexa.tflite"), "--input", "x.jpg", "--cutoff", "0.5"])
    assert result.exit_code != 0 and "--cutoff, --window and --duration are for wake-word models" in result.output


def test_bench_and_profile_report_time_and_energy_per_second_of_audio():
    from click.testing import CliRunner

    from edgeserve.cli import cli
    from edgeserve.runtime.audio.wakeword import stream_figures

    result = CliRunner().invoke(cli, ["bench", str(MODELS_DIR / "alexa.tflite"), "--frames", "300", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    stream = data["stream"]
    assert stream["stride_frames"] == 3 and stream["audio_ms_per_stride"] == 30
    assert stream["real_time_factor"] == pytest.approx(stream["ms_per_stride"] / 30, rel=1e-3)
    assert stream["timed"].startswith("StreamStep.value")  # per stride as the detector runs it
    assert 0 < stream["real_time_factor"] < 0.1  # far faster than real time on this machine
    result = CliRunner().invoke(cli, ["profile", str(MODELS_DIR / "alexa.tflite"), "-p", "raspberry-pi-5",
                                      "--duration", "1", "--idle", "0", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    # 1/30 ms strides per second of audio, each costing the run's energy per inference.
    per_inference = data["energy_mj_per_inference"]["total"]
    assert data["stream"]["energy_mj_per_audio_second"] == pytest.approx(per_inference / 0.03, rel=1e-3)
    assert data["stream"]["timed"].startswith("StreamStep.value")  # strides, as the detector runs them
    assert stream_figures((1, 224, 224, 3), 0.01) is None  # not an audio model


# ----- live sources: a microphone through ALSA's arecord, and PCM piped to stdin -------------
def _need_arecord() -> None:
    if shutil.which("arecord") is None:
        message = "arecord is not installed (make setup installs alsa-utils)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def test_mic_records_through_arecord_from_an_alsa_device(speech, tmp_path, monkeypatch):
    """A real arecord, reading ALSA devices this machine has without a sound card: ALSA's
    ``null`` device (capture gives zeros) and a ``file`` device that plays the espeak speech
    as if spoken into a microphone. The speech gives the detection the WAV gives."""
    from click.testing import CliRunner

    from edgeserve.cli import cli

    _need_arecord()
    model = str(MODELS_DIR / "alexa.tflite")
    result = CliRunner().invoke(cli, ["run", model, "--input", "mic:null", "--duration", "1", "--json"])
    assert result.exit_code == 0, result.output
    entry = json.loads(result.stdout)["results"][0]
    assert entry["input"] == "mic:null" and entry["seconds"] == 1.0
    # The frontend gives its first frame after 30 ms, then one every 10 ms: 98 frames, 32 strides of 3.
    assert entry["strides"] == 32 and entry["detections"] == []

    audio = read_wav(speech)
    raw = tmp_path / "speech.raw"
    raw.write_bytes(audio.samples.tobytes())
    # ALSA reads ~/.asoundrc: a capture device whose samples come from the file.
    (tmp_path / ".asoundrc").write_text(
        f'pcm.speech {{ type file; slave.pcm "null"; file "/dev/null"; infile "{raw}"; format "raw" }}\n')
    monkeypatch.setenv("HOME", str(tmp_path))
    result = CliRunner().invoke(cli, ["run", model, "--input", "mic:speech", "--duration", str(audio.seconds),
                                      "--json"])
    assert result.exit_code == 0, result.output
    from_mic = json.loads(result.stdout)["results"][0]
    from_file = json.loads(CliRunner().invoke(cli, ["run", model, "--input", str(speech), "--json"]).stdout)["results"][0]
    assert from_mic["detections"] == from_file["detections"] and len(from_mic["detections"]) == 1
    assert from_mic["strides"] == from_file["strides"]


def test_mic_errors_name_the_device_or_the_missing_tool(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from edgeserve.cli import cli

    _need_arecord()
    model = str(MODELS_DIR / "alexa.tflite")
    result = CliRunner().invoke(cli, ["run", model, "--input", "mic:nosuchdevice"])
    assert result.exit_code == 1
    assert ("error: --input mic: arecord could not record from ALSA device 'nosuchdevice': audio open error: "
            "No such file or directory") in result.output
    assert "ALSA lib" not in result.output  # the library's chatter stays out of the one error line
    monkeypatch.setenv("PATH", str(tmp_path))  # no arecord on it
    result = CliRunner().invoke(cli, ["run", model, "--input", "mic"])
    assert result.exit_code == 1 and "apt install alsa-utils" in result.output
    result = CliRunner().invoke(cli, ["run", model, "--input", str(tmp_path / "a.wav"), "--duration", "1"])
    assert result.exit_code == 1 and "--duration limits a live source" in result.output


def test_stdin_is_processed_as_it_arrives(speech):
    """A detection is printed while stdin is still open: the pipe is read as it arrives, not
    at its end (what `arecord | edgeserve run ... --input -` needs)."""
    import select
    import sys

    pcm = read_wav(speech).samples.tobytes()
    first_second = pcm[: 2 * 16_000 * 3 // 2]  # 1.5 s: "Alexa" is detected at 0.77 s
    proc = subprocess.Popen([sys.executable, "-m", "edgeserve", "run", str(MODELS_DIR / "alexa.tflite"),
                             "--input", "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        proc.stdin.write(first_second)
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "no detection printed while stdin stayed open"
        line = proc.stdout.readline().decode()
        assert line.startswith("stdin: detection at 0.") and "(p=0.9" in line, line
        proc.stdin.write(pcm[len(first_second):])
        proc.stdin.close()
        rest = proc.stdout.read().decode()
        assert proc.wait(timeout=60) == 0
        assert rest.startswith("stdin: 1 detection(s) at 0."), rest
    finally:
        if proc.poll() is None:
            proc.kill()


def _listening(speech: Path) -> tuple[subprocess.Popen, bytes]:
    """`run alexa.tflite --input -` after its first detection, stdin still open."""
    import select
    import sys

    pcm = read_wav(speech).samples.tobytes()
    proc = subprocess.Popen([sys.executable, "-m", "edgeserve", "run", str(MODELS_DIR / "alexa.tflite"),
                             "--input", "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdin.write(pcm[: 2 * 16_000 * 3 // 2])
    proc.stdin.flush()
    assert select.select([proc.stdout], [], [], 60)[0], "no detection printed"
    return proc, pcm


def test_sigterm_ends_a_live_source_with_its_summary(speech):
    """SIGTERM (how a service manager stops a listener) ended with status 1 and not a word: it
    stops the source as Ctrl-C does, sums up what was heard, and exits 0."""
    import signal

    proc, _ = _listening(speech)
    try:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()
        assert "stopped (SIGTERM)" in err.decode()
        assert "stdin: 1 detection(s) at 0." in out.decode()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_closed_stdout_stops_listening_with_one_error_line(speech):
    """The program reading the detections went away: one error line, exit 1 (was: exit 1, silent)."""
    proc, pcm = _listening(speech)
    try:
        proc.stdout.close()
        try:
            for _ in range(3):  # more "Alexa"s: a detection line meets the closed pipe
                proc.stdin.write(pcm)
            proc.stdin.close()
        except BrokenPipeError:
            pass  # it stopped reading: what this test expects
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=60) == 1
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "standard output was closed" in errors[0], err
        assert "Traceback" not in err and "Exception ignored" not in err, err
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_live_source_keeps_counts_not_a_float_per_stride(speech):
    """Two floats per stride for ever grew a listener by 4 MB an hour: a live stream keeps the
    count and the highest average; the detections are the same as with the full history."""
    from edgeserve.runtime import Session
    from edgeserve.runtime.audio.wakeword import WakeWordStream

    audio = read_wav(speech)
    with Session(MODELS_DIR / "alexa.tflite", backend="litert:cpu", threads=1) as session:
        full = WakeWordStream(session, 0.9, 5).run(audio)
        session.reset()
        live = WakeWordStream(session, 0.9, 5, history=False).run(audio)
    assert live.probabilities == [] and live.averages == [] and live.strides == len(full.probabilities) > 90
    assert live.max_average == max(full.averages)
    assert [d.to_dict() for d in live.detections] == [d.to_dict() for d in full.detections]
