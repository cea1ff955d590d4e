"""Wake-word detection on a stream: audio -> TFLM audio frontend -> streaming model -> detections.

Features come from the TFLM audio frontend as pymicro-features compiles it with
microWakeWord's settings (never a hand-written approximation): every 10 ms of 16 kHz audio
gives one frame of 40 channels over a 30 ms window, with the frontend's own noise
reduction and PCAN gain control. Every ``stride`` frames (the model input's second
dimension) the frames are quantized with the input's scale and zero point and the model
runs once, its state carried in the Session. The probability is averaged over the last
``window`` strides; a detection is the moment that average rises above ``cutoff``. The
cutoff and window come from the microWakeWord JSON beside the model when there is one.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from edgeserve.errors import InputError
from edgeserve.runtime.audio.pcm import SAMPLE_RATE, Audio

STEP_MS = 10  # the frontend's hop: one feature frame per 160 samples
WINDOW_MS = 30  # measured: the first frame comes after three hops
CHANNELS = 40
# Without a JSON: what the pymicro-wakeword models use for their window (all four: 5), and
# a middle cutoff (theirs range from 0.85 to 0.97).
DEFAULT_WINDOW = 5
DEFAULT_CUTOFF = 0.9


@dataclasses.dataclass(frozen=True)
class AudioSpec:
    """The audio side of the PreprocessSpec, recorded in the manifest and in `run --json`."""

    sample_rate: int = SAMPLE_RATE
    window_ms: int = WINDOW_MS
    step_ms: int = STEP_MS
    channels: int = CHANNELS
    stride_frames: int = 3
    frontend: str = "TFLM audio frontend (pymicro-features 2.x, microWakeWord settings: noise reduction and PCAN on)"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Detection:
    time_s: float
    probability: float

    def to_dict(self) -> dict[str, float]:
        return {"time_s": round(self.time_s, 3), "probability": round(self.probability, 4)}


def detector_settings(model_path: Path, cutoff: float | None, window: int | None) -> tuple[float, int, str]:
    """(cutoff, window, where they came from): flags win, then the microWakeWord JSON beside the model."""
    config = model_path.with_suffix(".json")
    micro: dict[str, Any] = {}
    if config.is_file():
        try:
            micro = json.loads(config.read_text()).get("micro", {})
        except (ValueError, AttributeError) as exc:
            raise InputError(f"{config}: expected microWakeWord's JSON, cannot parse it ({exc})") from exc
    source = config.name if micro else "defaults"
    return (float(cutoff if cutoff is not None else micro.get("probability_cutoff", DEFAULT_CUTOFF)),
            int(window if window is not None else micro.get("sliding_window_size", DEFAULT_WINDOW)),
            source if cutoff is None or window is None else "flags")


class WakeWordStream:
    """Feed PCM in any chunk sizes; collects per-stride probabilities and detections.

    ``history=False`` (a live source: a microphone or a pipe, listened to for hours) keeps
    counts and the highest average instead of two floats per stride, which grew 4 MB an hour."""

    def __init__(self, session: Any, cutoff: float, window: int, history: bool = True) -> None:
        from pymicro_features import MicroFrontend

        detail = session.inputs[0]
        if len(detail.shape) != 3 or detail.shape[2] != CHANNELS:
            raise InputError(f"a wake-word model takes [1, stride, {CHANNELS}] feature frames; this one takes "
                             f"{list(detail.shape)}")
        self.session = session
        self._step = session.stream_step()  # per-stride inference with the least Python around the invoke
        self.spec = AudioSpec(stride_frames=int(detail.shape[1]))
        self.cutoff, self.window = cutoff, window
        self._scale, self._zero = float(detail.scale), int(detail.zero_point)
        self._dtype = np.dtype(detail.dtype)
        self._frontend = MicroFrontend()
        self._pending = b""
        # One stride of feature frames, filled as the frontend gives them and quantized in place.
        self._features = np.zeros((self.spec.stride_frames, CHANNELS), np.float32)
        self._count = 0
        info = np.iinfo(self._dtype)
        self._range = (float(info.min), float(info.max))
        self._recent: collections.deque[float] = collections.deque(maxlen=window)
        self._samples = 0
        self.history = history
        self.probabilities: list[float] = []  # per stride, the model's own output (with history)
        self.averages: list[float] = []  # per stride, the sliding-window mean (0 until the window is full)
        self.strides = 0
        self.max_average = 0.0
        self.detections: list[Detection] = []
        self._above = False

    def push(self, pcm: bytes) -> None:
        pending = self._pending + pcm if self._pending else pcm
        chunk = STEP_MS * SAMPLE_RATE // 1000 * 2
        while len(pending) >= chunk:
            result = self._frontend.process_samples(pending[:chunk])
            used = result.samples_read * 2
            pending = pending[used:]
            self._samples += result.samples_read
            if result.features:
                self._features[self._count] = result.features
                self._count += 1
                if self._count == self.spec.stride_frames:
                    self._invoke()
            if used == 0:
                break
        self._pending = pending

    def _invoke(self) -> None:
        self._count = 0
        f = self._features
        # microWakeWord's quantization (round(x / scale + zero point)) in float32, in place, then
        # written straight into the model's input memory: no array is made per stride.
        np.divide(f, self._scale, out=f)
        np.add(f, self._zero, out=f)
        np.rint(f, out=f)
        np.clip(f, *self._range, out=f)
        self._step.input[...] = f  # exact: whole numbers within the dtype's range
        probability = self._step.value()
        recent = self._recent
        recent.append(probability)
        # Summed left to right, as numpy's mean sums fewer than eight values.
        average = sum(recent) / len(recent) if len(recent) == self.window else 0.0
        self.strides += 1
        self.max_average = max(self.max_average, average)
        if self.history:
            self.probabilities.append(probability)
            self.averages.append(average)
        above = average > self.cutoff
        if above and not self._above:
            self.detections.append(Detection(self._samples / SAMPLE_RATE, average))
        self._above = above

    def run(self, audio: Audio, chunk_ms: int = STEP_MS) -> "WakeWordStream":
        data = audio.samples.tobytes()
        step = chunk_ms * SAMPLE_RATE // 1000 * 2
        for start in range(0, len(data), step):
            self.push(data[start:start + step])
        return self


def stream_figures(input_shape: tuple[int, ...], seconds_per_inference: float | None,
                   energy_mj_per_inference: float | None = None) -> dict[str, Any] | None:
    """For a streaming audio model ([1, stride, 40] feature frames): what one invoke covers,
    the real-time factor (time per stride over the audio it covers; 0.01 = 100x faster than
    real time) and energy per second of audio. None for any other model."""
    if len(input_shape) != 3 or input_shape[0] != 1 or input_shape[2] != CHANNELS:
        return None
    audio_s = input_shape[1] * STEP_MS / 1000
    figures: dict[str, Any] = {"stride_frames": int(input_shape[1]), "audio_ms_per_stride": audio_s * 1000}
    if seconds_per_inference is not None:
        figures["ms_per_stride"] = round(seconds_per_inference * 1000, 6)
        figures["real_time_factor"] = float(f"{seconds_per_inference / audio_s:.4g}")  # 4 significant digits
    if energy_mj_per_inference is not None:
        figures["energy_mj_per_audio_second"] = round(energy_mj_per_inference / audio_s, 6)
    return figures


def audio_manifest(input_shape: tuple[int, ...], source: Path) -> dict[str, Any] | None:
    """The audio side of the preprocessing for the manifest, for a [1, stride, 40] int8 model:
    the frontend's settings and stride, and the detector's cutoff and window when the
    microWakeWord JSON sits beside the source. None for any other model."""
    if len(input_shape) != 3 or input_shape[0] != 1 or input_shape[2] != CHANNELS:
        return None
    cutoff, window, origin = detector_settings(source, None, None)
    return {**AudioSpec(stride_frames=int(input_shape[1])).to_dict(),
            "detector": {"cutoff": cutoff, "window": window, "from": origin}}
