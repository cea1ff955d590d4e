"""Realistic calibration and evaluation inputs for the MLPerf Tiny models, built offline.

The MLPerf Tiny data sets (Visual Wake Words, CIFAR-10, ToyADMOS/MIMII, Speech Commands)
cannot be downloaded here, and random data gives int8 ranges unlike real inputs. What
ships offline instead:

* colour photos bundled in scikit-image (``skimage/data``) and scikit-learn
  (``sklearn/datasets/images``): people, animals, objects, scenes, micrographs;
* four 1 s, 16 kHz speech/noise clips from tflite-micro (``../shared/testdata/tflm``).

Random crops of the photos stand in for camera frames (vww_96, ResNet-8), and log-mel
features of the augmented clips stand in for the audio front ends (ad01, str_ww). The
point is plausible *value ranges and statistics* for calibration and a float-vs-INT8
comparison; none of this measures task accuracy.

Everything is seeded: the same arguments give the same bytes. Use one seed for the
calibration set and another for the evaluation set, so INT8 is judged on inputs its
scales were not fitted to::

    photo_folder("build/calib_photos", n=120, seed=0)          # calibrate through a PreprocessSpec
    x_eval = photo_batch(96, n=80, seed=1)                     # (80, 96, 96, 3) float32 in 0..1
    ad = log_mel_frames("ad01", n=120, seed=0)                 # (120, 640)
    ww = log_mel_frames("str_ww", n=120, seed=0)               # (120, 30, 1, 40)

Run it to write both calibration sets::

    python examples/mlperf_tiny/calibration_data.py build/mlperf_calib
"""

from __future__ import annotations

import argparse
import functools
import wave
from collections.abc import Sequence
from pathlib import Path

import numpy as np

SAMPLE_RATE = 16_000
CLIP_SAMPLES = SAMPLE_RATE  # every bundled clip is 1 s
# The largest side a stored crop keeps. The models take 96x96 and 32x32 inputs, so more
# pixels only make PNG writing and reading slower; area-downscaling first (as a camera
# ISP does) keeps the image statistics of the full crop.
MAX_CROP_SIDE = 192
# skimage.data names of the bundled *colour photographs* (not test charts or logos), and
# the two sklearn sample photos. chelsea and cat are the same picture: keep one.
SKIMAGE_PHOTOS = (
    "astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field",
    "immunohistochemistry", "retina",
)
SKLEARN_PHOTOS = ("china.jpg", "flower.jpg")
WAV_NAMES = ("yes", "no", "silence", "noise")
_TESTDATA_TFLM = Path(__file__).resolve().parents[3] / "shared" / "testdata" / "tflm"


# ----- photos -----------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def bundled_photos() -> tuple[np.ndarray, ...]:
    """The bundled colour photos as uint8 H x W x 3 RGB arrays (read once per process)."""
    import skimage.data
    from PIL import Image
    from sklearn.datasets import load_sample_image

    photos = [getattr(skimage.data, name)() for name in SKIMAGE_PHOTOS]
    # stereo_motorcycle() returns (left, right, disparity); the left view is a photo.
    photos.append(skimage.data.stereo_motorcycle()[0])
    photos += [load_sample_image(name) for name in SKLEARN_PHOTOS]
    out = []
    for p in photos:
        p = np.asarray(p)
        if p.ndim == 3 and p.shape[2] == 4:
            p = np.asarray(Image.fromarray(p).convert("RGB"))
        out.append(np.ascontiguousarray(p, dtype=np.uint8))
    return tuple(out)


def random_crops(n: int, seed: int) -> list[np.ndarray]:
    """n uint8 RGB crops of the bundled photos: random photo, size, aspect, position, flip.

    A crop side is 25-100 % of the photo's shorter side (framing varies as it does for a
    camera: a whole scene or a close-up), the aspect ratio 3:4-4:3, and half of the crops
    are mirrored. Photos are used round-robin in a seeded order per round, so every photo
    contributes about n / 10 crops (one large photo must not dominate the ranges). Crop i
    depends only on (seed, i): the first k crops are the same for any n >= k, so a larger
    set extends a smaller one instead of replacing it.
    """
    import cv2

    photos = bundled_photos()
    crops = []
    for i in range(n):
        k = np.random.default_rng([seed, i // len(photos)]).permutation(len(photos))[i % len(photos)]
        rng = np.random.default_rng([seed, i, 1])
        img = photos[int(k)]
        h, w = img.shape[:2]
        side = rng.uniform(0.25, 1.0) * min(h, w)
        aspect = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))  # height / width
        ch = int(np.clip(round(side * np.sqrt(aspect)), 8, h))
        cw = int(np.clip(round(side / np.sqrt(aspect)), 8, w))
        top, left = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
        crop = img[top : top + ch, left : left + cw]
        if rng.random() < 0.5:
            crop = crop[:, ::-1]
        shrink = MAX_CROP_SIDE / max(ch, cw)
        if shrink < 1:
            size = (max(1, round(cw * shrink)), max(1, round(ch * shrink)))
            crop = cv2.resize(crop, size, interpolation=cv2.INTER_AREA)
        crops.append(np.ascontiguousarray(crop))
    return crops


def photo_folder(out_dir: str | Path, n: int = 120, seed: int = 0) -> Path:
    """Write n seeded photo crops as PNG files (crop_000.png ...) and return the folder.

    For calibrating through edgeserve's image-folder path: the folder is read with the
    model's PreprocessSpec, exactly as the runtime will preprocess camera frames. PNG is
    lossless, so what is calibrated on is what :func:`random_crops` made.
    """
    from PIL import Image

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for i, crop in enumerate(random_crops(n, seed)):
        Image.fromarray(crop).save(out / f"crop_{i:03d}.png", compress_level=1)
    return out


def photo_batch(size: int | Sequence[int], n: int, seed: int, scale: float = 1 / 255) -> np.ndarray:
    """n seeded photo crops preprocessed to a float32 (n, H, W, 3) array.

    Uses edgeserve's PreprocessSpec (stretch resize, bilinear, ``x = pixel * scale``), the
    same arithmetic the image-folder calibration path applies, so an eval set made here
    differs from the calibration folder only in its crops (pass another seed).
    """
    from edgeserve.preprocess import PreprocessSpec

    hw = (int(size), int(size)) if isinstance(size, (int, np.integer)) else (int(size[0]), int(size[1]))
    spec = PreprocessSpec(size=hw, scale=scale)
    return np.concatenate([spec.apply(c) for c in random_crops(n, seed)]).astype(np.float32)


# ----- audio ------------------------------------------------------------------------------
def read_wav(path: str | Path) -> np.ndarray:
    """A mono 16-bit PCM .wav as float32 in [-1, 1) (what tf.audio.decode_wav returns)."""
    with wave.open(str(path), "rb") as w:
        if w.getsampwidth() != 2 or w.getnchannels() != 1:
            raise ValueError(f"{path}: expected mono 16-bit PCM, got {w.getnchannels()} ch x {8 * w.getsampwidth()} bit")
        if w.getframerate() != SAMPLE_RATE:
            raise ValueError(f"{path}: expected {SAMPLE_RATE} Hz, got {w.getframerate()}")
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    return pcm.astype(np.float32) / 32768.0


def bundled_clips(wav_dir: str | Path | None = None) -> dict[str, np.ndarray]:
    """The four tflite-micro clips (yes, no, silence, noise), each 16,000 float samples."""
    folder = Path(wav_dir) if wav_dir is not None else _TESTDATA_TFLM
    clips = {}
    for name in WAV_NAMES:
        x = read_wav(folder / f"{name}_1000ms.wav")
        clips[name] = np.pad(x, (0, max(0, CLIP_SAMPLES - len(x))))[:CLIP_SAMPLES]
    return clips


def augmented_clips(n: int, seed: int, wav_dir: str | Path | None = None) -> np.ndarray:
    """n seeded 1 s variations of the bundled clips, float32 (n, 16000) in [-1, 1].

    Four clips are too few to calibrate on as they are. Each variation picks a clip and
    applies the augmentations the MLCommons audio pipelines use in training: a gain of
    -20..+6 dB (speakers and machines at different distances), a time shift of up to
    ±100 ms with zero fill (the reference's ``time_shift_ms``), with probability 0.5 a
    second clip mixed in at -20..0 dB (overlapping sources), and white noise at a random
    level (-70..-30 dBFS, microphone self-noise to a noisy room). Clipped to [-1, 1]
    like a real ADC. Sample i depends only on (seed, i), as for :func:`random_crops`.
    """
    clips = list(bundled_clips(wav_dir).values())
    out = np.empty((n, CLIP_SAMPLES), np.float32)
    max_shift = SAMPLE_RATE // 10
    for i in range(n):
        rng = np.random.default_rng([seed, i])
        x = clips[int(rng.integers(len(clips)))] * 10 ** (rng.uniform(-20, 6) / 20)
        x = _shift(x, int(rng.integers(-max_shift, max_shift + 1)))
        if rng.random() < 0.5:
            other = clips[int(rng.integers(len(clips)))]
            x = x + _shift(other, int(rng.integers(-max_shift, max_shift + 1))) * 10 ** (rng.uniform(-20, 0) / 20)
        x = x + rng.standard_normal(CLIP_SAMPLES) * 10 ** (rng.uniform(-70, -30) / 20)
        out[i] = np.clip(x, -1.0, 1.0)
    return out


def log_mel_frames(model: str, n: int, seed: int, wav_dir: str | Path | None = None) -> np.ndarray:
    """n seeded log-mel feature samples for ``model`` "ad01" or "str_ww", float32.

    ``ad01``: (n, 640) = 5 consecutive frames x 128 mel bins, the MLCommons anomaly
    detection front end (DCASE 2020 task 2 baseline): |STFT|² with a 1024-point Hann
    window and hop 512 (centred, reflect padding, as librosa's ``melspectrogram`` did),
    128 Slaney mel bands 0-8 kHz with Slaney area normalisation, ``10*log10(mel + eps)``
    dB, and frames t..t+4 concatenated frame-major. A 1 s clip gives 32 frames, i.e. 28
    vectors; each sample here is one vector at a random start from a fresh augmented clip.
    Values are dB, about -70..+25 (1st-99th percentile -57..0); the reference INT8
    model's input range is -85..+15.

    ``str_ww``: (n, 30, 1, 40), the streaming wake word "lfbe" front end: pre-emphasis
    (1 - 2**-5), 64 ms symmetric Hamming frames every 32 ms without end padding (30
    frames in 1 s), power ``|STFT|² / 1024``, 40 HTK mel bands 0-8 kHz as
    ``tf.signal.linear_to_mel_weight_matrix`` builds them, ``10*log10``, then
    ``(dB + 52) / 64`` clipped to [0, 1]. Clips are peak-normalised first, as the
    reference does (near-silent ones excepted, see ``_str_ww_lfbe``). Values 0..0.93,
    median 0.36; the reference INT8 model's input range is 0..0.94.

    This is an approximation of the MLCommons front ends, not a replica: no librosa or
    TensorFlow here (numpy only), speech and noise stand in for machine sounds (ad01), and
    the augmentation is ours (see :func:`augmented_clips`). The str_ww path matches
    TensorFlow's ``tf.signal`` computation to 1e-6 on peak-normalised clips.

    Sanity check against the models' own weights: feed 120 samples through the layers
    before the first BatchNormalization and compare with its stored moving statistics
    (|batch mean - moving mean| / moving std, median over channels; batch std / moving std):

    ========  ===================  ==================  ==========================
    model     these features       uniform random      note
    ========  ===================  ==================  ==========================
    str_ww    0.30, std x0.59      0.34, std x2.5      close to training data
    ad01      1.5, std x2.1        2.2, std x2.3       right order; speech and
                                                       noise vary more than
                                                       steady machine sounds
    ========  ===================  ==================  ==========================

    (The same check on the photo crops: vww_96 at scale 1/255 gives 0.34, std x1.1, but
    0..255 pixels give std x285; ResNet-8 at scale 1.0 gives 0.12, std x1.2, but std x0.00
    at 1/255, which confirms that ResNet-8 takes raw 0..255 pixels.)
    """
    if model == "ad01":
        waves = augmented_clips(n, seed, wav_dir)
        logmel = _ad_log_mel(waves)  # (n, frames, 128)
        starts = [np.random.default_rng([seed, i, 2]).integers(0, logmel.shape[1] - 5 + 1) for i in range(n)]
        return np.stack([logmel[i, s : s + 5].reshape(-1) for i, s in enumerate(starts)]).astype(np.float32)
    if model == "str_ww":
        waves = augmented_clips(n, seed, wav_dir)
        return _str_ww_lfbe(waves)[:, :, None, :].astype(np.float32)
    raise ValueError(f'model must be "ad01" or "str_ww"; got {model!r}')


# ----- front ends (numpy) -----------------------------------------------------------------
def _shift(x: np.ndarray, samples: int) -> np.ndarray:
    """Delay (positive) or advance (negative) by ``samples``, filling with zeros."""
    out = np.zeros_like(x)
    if samples >= 0:
        out[samples:] = x[: len(x) - samples]
    else:
        out[:samples] = x[-samples:]
    return out


def _frames(x: np.ndarray, length: int, hop: int) -> np.ndarray:
    """(N, T) signals to (N, frames, length) overlapping frames (a strided view)."""
    count = 1 + (x.shape[-1] - length) // hop
    view = np.lib.stride_tricks.sliding_window_view(x, length, axis=-1)
    return view[..., : (count - 1) * hop + 1 : hop, :]


def _ad_log_mel(waves: np.ndarray, n_fft: int = 1024, hop: int = 512, n_mels: int = 128) -> np.ndarray:
    padded = np.pad(waves, ((0, 0), (n_fft // 2, n_fft // 2)), mode="reflect")  # librosa center=True
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)  # periodic Hann
    power = np.abs(np.fft.rfft(_frames(padded, n_fft, hop) * window, axis=-1)) ** 2
    mel = power @ _slaney_mel_matrix(SAMPLE_RATE, n_fft, n_mels).T
    return 10.0 * np.log10(mel + np.finfo(np.float64).eps)


def _str_ww_lfbe(waves: np.ndarray, length: int = 1024, hop: int = 512, n_mels: int = 40) -> np.ndarray:
    peak = np.max(waves, axis=1, keepdims=True)
    # The reference divides by the clip's maximum; a near-silent clip would blow up, so
    # only clips with a real signal are normalised (silence stays silence).
    waves = np.where(peak > 0.05, waves / np.maximum(peak, 1e-9), waves)
    emphasised = waves - (1 - 2**-5) * np.pad(waves, ((0, 0), (1, 0)))[:, :-1]
    window = 0.54 - 0.46 * np.cos(2 * np.pi * np.arange(length) / (length - 1))  # symmetric Hamming
    power = np.abs(np.fft.rfft(_frames(emphasised, length, hop) * window, axis=-1)) ** 2 / length
    power = np.maximum(power, 1e-30)
    mel = power @ _htk_mel_matrix(SAMPLE_RATE, length // 2 + 1, n_mels)
    db = 10.0 * np.log10(np.maximum(mel, 1e-30))
    return np.clip((db + 52.0) / 64.0, 0.0, 1.0)


def _slaney_mel_matrix(sr: int, n_fft: int, n_mels: int) -> np.ndarray:
    """(n_mels, n_fft//2+1) triangular filters on the Slaney mel scale, area-normalised (librosa's default)."""

    def hz_to_mel(f: np.ndarray) -> np.ndarray:
        f = np.asarray(f, np.float64)
        lin = f / (200.0 / 3)
        return np.where(f >= 1000.0, 15.0 + np.log(np.maximum(f, 1e-9) / 1000.0) / (np.log(6.4) / 27.0), lin)

    def mel_to_hz(m: np.ndarray) -> np.ndarray:
        return np.where(m >= 15.0, 1000.0 * np.exp((np.log(6.4) / 27.0) * (m - 15.0)), m * (200.0 / 3))

    fft_freqs = np.linspace(0, sr / 2, n_fft // 2 + 1)
    edges = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2), n_mels + 2))
    ramps = edges[:, None] - fft_freqs[None, :]
    fdiff = np.diff(edges)
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    return weights * (2.0 / (edges[2:] - edges[:-2]))[:, None]


def _htk_mel_matrix(sr: int, n_bins: int, n_mels: int) -> np.ndarray:
    """(n_bins, n_mels) as tf.signal.linear_to_mel_weight_matrix(lower 0, upper sr/2) builds it."""

    def hz_to_mel(f: np.ndarray) -> np.ndarray:
        return 1127.0 * np.log1p(np.asarray(f, np.float64) / 700.0)

    bin_mel = hz_to_mel(np.linspace(0.0, sr / 2, n_bins)[1:])  # the DC bin gets no weight
    edges = np.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2), n_mels + 2)
    lower, center, upper = edges[:-2], edges[1:-1], edges[2:]
    up = (bin_mel[:, None] - lower) / (center - lower)
    down = (upper - bin_mel[:, None]) / (upper - center)
    weights = np.maximum(0.0, np.minimum(up, down))
    return np.vstack([np.zeros((1, n_mels)), weights])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="output folder")
    parser.add_argument("-n", type=int, default=120, help="samples per set (default 120)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    photo_folder(args.out / "photos", args.n, args.seed)
    for model in ("ad01", "str_ww"):
        np.savez(args.out / f"{model}_calib.npz", x=log_mel_frames(model, args.n, args.seed))
    print(f"wrote {args.out}/photos/ ({args.n} PNG), ad01_calib.npz, str_ww_calib.npz")


if __name__ == "__main__":
    main()
