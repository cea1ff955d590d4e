"""Calibration and evaluation samples: read, checked against the model signature, hashed.

Calibration data decides every int8 scale in the converted model, so it is checked
strictly: shapes must match the model, values must be finite, and there must be some.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from edgeserve.atomic import NOT_REGULAR, sha256_file, special_file
from edgeserve.errors import CalibrationDataError
from edgeserve.quality.fixtures import ArraysOnDemand
from edgeserve.preprocess import PreprocessSpec
from edgeserve.sources import TensorInfo
from edgeserve.sources.base import random_samples

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
RECOMMENDED_CALIBRATION_SAMPLES = 100

NO_CALIBRATION_HELP = (
    "full-integer quantization needs calibration data (--calib DATA.npz or an image folder): "
    "the int8 scale of every activation is set from the value ranges real inputs produce. "
    "Random data gives ranges unlike real inputs, so scales are wrong and accuracy drops "
    "without any error. Use a few hundred real samples; for a smoke test only, pass "
    "--calib-random (the manifest then marks the model as calibrated on random data)"
)


@dataclasses.dataclass(frozen=True)
class SampleSet:
    """N samples for a model: one array per input (N first), optional labels ``y``."""

    inputs: tuple[np.ndarray, ...]
    labels: np.ndarray | None
    origin: str  # "npz", "images" or "random"
    path: str | None
    sha256: str | None

    def __len__(self) -> int:
        return int(self.inputs[0].shape[0])

    def batch1(self) -> Iterator[list[np.ndarray]]:
        """Yield each sample as a list of batch-1 arrays (the TFLite representative dataset form)."""
        for i in range(len(self)):
            yield [x[i : i + 1] for x in self.inputs]

    def head(self, n: int) -> "SampleSet":
        labels = None if self.labels is None else self.labels[:n]
        return dataclasses.replace(self, inputs=tuple(x[:n] for x in self.inputs), labels=labels)

    def take(self, indices: np.ndarray) -> "SampleSet":
        labels = None if self.labels is None else self.labels[indices]
        return dataclasses.replace(self, inputs=tuple(x[indices] for x in self.inputs), labels=labels)

    def describe(self) -> dict[str, object]:
        return {"origin": self.origin, "path": self.path, "sha256": self.sha256, "samples": len(self),
                "value_ranges": self.value_ranges()}

    def value_ranges(self) -> list[list[float] | None]:
        """Per input, the (min, max) its samples hold (None for an input without values)."""
        return [[float(x.min()), float(x.max())] if x.size and x.dtype.kind in "iuf" else None for x in self.inputs]


def load_calibration(
    path: str | Path | None,
    inputs: Sequence[TensorInfo],
    spec: PreprocessSpec | None = None,
    *,
    random_ok: bool = False,
    seed: int = 0,
    max_samples: int | None = None,
    quantizes: bool = True,
) -> SampleSet:
    """Read calibration samples from an .npz file or an image folder.

    Raises:
        CalibrationDataError: no data (and not ``random_ok``), a shape that does not match
            the model, NaN/Inf values, or an unreadable file.
    """
    if path is None:
        if not random_ok:
            raise CalibrationDataError(NO_CALIBRATION_HELP)
        if quantizes:  # random samples only hurt where they set int8 ranges
            log.warning("calibrating on random data: the int8 scales will not match real inputs")
        rng = np.random.default_rng(seed)
        for t in inputs:
            _fixed(t)  # refuses a dynamic dimension, naming the input
        arrays = tuple(random_samples(t, rng, RECOMMENDED_CALIBRATION_SAMPLES) for t in inputs)
        digest = hashlib.sha256(f"random:{seed}".encode()).hexdigest()
        return SampleSet(arrays, None, "random", None, digest)

    if max_samples is not None and max_samples < 1:
        # x[:-5] would silently drop the last samples and x[:0] leave none.
        raise CalibrationDataError(f"max_samples must be at least 1, got {max_samples}")
    path = Path(path)
    check_data_paths(path, None)
    if path.is_dir():
        samples = _load_image_folder(path, inputs, spec)
    else:
        samples = _load_npz(path, inputs, want_labels=False)
    if max_samples is not None and len(samples) > max_samples:
        samples = samples.head(max_samples)
    if quantizes:
        if len(samples) < 2:
            cut = f" (--calib-samples {max_samples} kept it)" if max_samples is not None and max_samples < 2 else ""
            raise CalibrationDataError(
                f"{path} gives one calibration sample{cut}: int8 ranges taken from one input fit that input "
                f"alone; give {RECOMMENDED_CALIBRATION_SAMPLES} or more samples of real inputs")
        _refuse_a_single_value(samples, inputs, path)
    if len(samples) < RECOMMENDED_CALIBRATION_SAMPLES:
        log.warning(
            "only %d calibration samples in %s; %d or more give stable int8 ranges",
            len(samples), path, RECOMMENDED_CALIBRATION_SAMPLES,
        )
    return samples


def _refuse_a_single_value(samples: SampleSet, inputs: Sequence[TensorInfo], path: Path) -> None:
    """Calibration whose every float input holds one value (one black image, one constant
    sample) sets no range: the int8 input scale came out 0.0, every real input then quantized to
    the zero point, and the INT8 model scored 8.3 % against the float model's 98.2 % while its
    check passed on the same constant data. An input held constant beside others that vary (a
    recurrent state starting at zero) is fine: only all of them at once is refused."""
    floats = [(info, values) for info, values in zip(inputs, samples.inputs)
              if values.dtype.kind == "f" and not info.takes_integers and values.size]
    if not floats or any(float(values.max()) != float(values.min()) for _, values in floats):
        return
    held = ", ".join(f"'{info.name}' = {float(values.flat[0]):g}" for info, values in floats)
    raise CalibrationDataError(
        f"every calibration sample in {path} holds a single value ({held}): int8 needs the range of real "
        f"inputs to set its scales, and these give it none; give {RECOMMENDED_CALIBRATION_SAMPLES} or more "
        "samples of real inputs (images or an .npz)")


def load_eval(path: str | Path, inputs: Sequence[TensorInfo]) -> SampleSet:
    """Read an evaluation .npz (inputs as for calibration, labels under ``y``)."""
    path = Path(path)
    check_data_paths(None, path)
    return _load_npz(path, inputs, want_labels=True)


def check_data_paths(calib: str | Path | None, eval_data: str | Path | None) -> None:
    """What can be said of the --calib and --eval paths without reading them (and so before
    the model is loaded): that they are there, and that the evaluation set is a file."""
    if calib is not None and not Path(calib).exists():
        raise CalibrationDataError(f"calibration data not found: {calib}")
    for what, given in (("calibration", calib), ("evaluation", eval_data)):
        if given is not None and special_file(given):  # a FIFO with no writer would block for ever
            raise CalibrationDataError(f"{what} data {given} {NOT_REGULAR}")
    if eval_data is not None:
        if not Path(eval_data).exists():
            raise CalibrationDataError(f"evaluation data not found: {eval_data}")
        if Path(eval_data).is_dir():
            raise CalibrationDataError(
                f"evaluation data must be an .npz file with x and y; got a directory {eval_data}")


def check_shape_early(path: str | Path, name: str, shape: tuple[int | None, ...]) -> None:
    """Refuse a .npz whose samples plainly do not fit a one-input model's ``shape``, with the
    words the full check uses, before the model (and its framework) is loaded. Anything this
    cannot tell (several arrays and none named 'x', an unreadable file) is left to that check."""
    path = Path(path)
    if path.suffix.lower() != ".npz" or not path.is_file():
        return
    try:
        with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as npz:
            keys = [k for k in npz.files if k != "y"]
            key = "x" if "x" in keys else name if name in keys else keys[0] if len(keys) == 1 else None
            if key is None:
                return
            arr = npz[key]
    except Exception:  # the full check says what is wrong with the file
        return
    _check_array(path, key, arr, TensorInfo(name, tuple(shape), "float32"))


def _load_npz(path: Path, inputs: Sequence[TensorInfo], *, want_labels: bool) -> SampleSet:
    try:
        arrays = ArraysOnDemand(path)  # only the arrays the model takes are decompressed
        labels = arrays.pop("y", None)
        chosen = _pick_input_arrays(path, arrays, inputs)
    except ValueError as exc:  # zipfile/pickle/format errors all mean "not a usable .npz"
        raise CalibrationDataError(f"cannot read {path} as .npz: {exc}") from exc
    checked = tuple(_check_array(path, key, arr, info) for (key, arr), info in zip(chosen, inputs))
    n = checked[0].shape[0]
    if any(a.shape[0] != n for a in checked):
        raise CalibrationDataError(f"{path}: inputs have different sample counts {[a.shape[0] for a in checked]}")
    if labels is not None:
        if labels.ndim == 0:
            raise CalibrationDataError(f"{path}: y is a single value; expected one label per sample ({n})")
        if labels.shape[0] != n:
            raise CalibrationDataError(f"{path}: y has {labels.shape[0]} labels for {n} samples")
        if labels.dtype.kind == "f" and not np.all(np.isfinite(labels)):
            raise CalibrationDataError(f"{path}: y contains NaN or Inf")
    elif want_labels:
        raise CalibrationDataError(f"{path}: evaluation data needs labels under the key 'y' (found {sorted(arrays)})")
    return SampleSet(checked, labels, "npz", str(path), sha256_file(path))


def _pick_input_arrays(
    path: Path, arrays: Mapping[str, np.ndarray], inputs: Sequence[TensorInfo]
) -> list[tuple[str, np.ndarray]]:
    if len(inputs) == 1:
        for key in ("x", inputs[0].name):
            if key in arrays:
                return [(key, arrays[key])]
        if len(arrays) == 1:
            return [next(iter(arrays.items()))]
        raise CalibrationDataError(
            f"{path}: expected the input under 'x' or '{inputs[0].name}', found keys {sorted(arrays)}"
        )
    missing = [t.name for t in inputs if t.name not in arrays]
    if missing:
        raise CalibrationDataError(
            f"{path}: the model has inputs {[t.name for t in inputs]}; missing {missing} (found {sorted(arrays)})"
        )
    return [(t.name, arrays[t.name]) for t in inputs]


def _check_array(path: Path, key: str, arr: np.ndarray, info: TensorInfo) -> np.ndarray:
    expected = info.sample_shape
    if arr.dtype.kind not in "fiub":
        raise CalibrationDataError(f"{path}:{key} has dtype {arr.dtype}; expected numbers")
    if arr.ndim == 0:
        raise CalibrationDataError(f"{path}:{key} is a single value; expected an array of samples (N first)")
    got = arr.shape[1:]
    if len(got) != len(expected) or any(e is not None and e != g for e, g in zip(expected, got)):
        raise CalibrationDataError(
            f"{path}:{key} has shape {arr.shape}, i.e. samples of shape {tuple(got)}; the model input "
            f"'{info.name}' expects (N, {', '.join('?' if d is None else str(d) for d in expected)})"
        )
    if arr.shape[0] == 0:
        raise CalibrationDataError(f"{path}:{key} holds no samples")
    if info.takes_integers:
        return np.ascontiguousarray(_integer_values(path, key, arr, info))
    with np.errstate(over="ignore"):  # values beyond float32 become Inf and are reported below
        data = arr.astype(np.float32) if info.dtype.startswith("float") else arr
    if data.dtype.kind == "f" and not np.all(np.isfinite(data)):
        bad = int(np.count_nonzero(~np.isfinite(data)))
        raise CalibrationDataError(f"{path}:{key} contains {bad} NaN/Inf values; calibration needs finite inputs")
    return np.ascontiguousarray(data)


def _integer_values(path: Path, key: str, arr: np.ndarray, info: TensorInfo) -> np.ndarray:
    """``arr`` as the integer (or bool) input ``info`` takes it: whole numbers that fit its type.
    (Not checked against ``info.values``: that range is where random ids are drawn, and a value
    outside it can be meant, as a padding id that a one-hot matches nowhere.)"""
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr) & (arr == np.round(arr))):
        raise CalibrationDataError(f"{path}:{key} holds fractions; input '{info.name}' is {info.dtype} and takes "
                                   "whole numbers")
    if arr.size:
        low, high = _type_range(np.dtype(info.dtype))
        least, most = arr.min(), arr.max()
        if least < low or most >= high:
            raise CalibrationDataError(f"{path}:{key} holds values {least:g}..{most:g}; input '{info.name}' "
                                       f"({info.dtype}) takes {low}..{high - 1}")
    return arr.astype(info.dtype)


def _type_range(dtype: np.dtype) -> tuple[int, int]:
    if dtype.kind == "b":
        return (0, 2)
    bounds = np.iinfo(dtype)
    return (int(bounds.min), int(bounds.max) + 1)


def _load_image_folder(path: Path, inputs: Sequence[TensorInfo], spec: PreprocessSpec | None) -> SampleSet:
    from PIL import Image, UnidentifiedImageError

    if len(inputs) != 1:
        raise CalibrationDataError(f"an image folder can calibrate a single-input model; this one has {len(inputs)}")
    if inputs[0].takes_integers:
        raise CalibrationDataError(f"an image folder cannot calibrate input '{inputs[0].name}', which takes "
                                   f"{inputs[0].dtype} values, not pixels; give an .npz of them")
    spec = (spec or PreprocessSpec()).bind_to_input(inputs[0].shape)
    files = sorted(p for p in path.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
    if not files:
        raise CalibrationDataError(f"no images ({', '.join(IMAGE_SUFFIXES)}) found under {path}")
    digest = hashlib.sha256()
    batch = []
    for f in files:
        try:
            # Always decode to RGB and let spec.apply do any gray conversion, as the runtime
            # does with camera frames: PIL's "L" rounds differently from OpenCV's RGB2GRAY,
            # so calibration inputs would differ from served ones.
            with Image.open(f) as im:
                rgb = np.asarray(im.convert("RGB"))
        except Image.DecompressionBombError as exc:  # a header claiming 10^10 pixels
            raise CalibrationDataError(f"image {f} says it has more pixels than Pillow decodes ({exc}); calibration "
                                       "images are the model's input size or a camera frame") from exc
        except (UnidentifiedImageError, OSError) as exc:
            raise CalibrationDataError(f"cannot read image {f}: {exc}") from exc
        digest.update(f.relative_to(path).as_posix().encode())
        digest.update(rgb.tobytes())
        batch.append(spec.apply(rgb)[0])
    return SampleSet((np.stack(batch),), None, "images", str(path), digest.hexdigest())


def _fixed(info: TensorInfo) -> tuple[int, ...]:
    dims = info.sample_shape
    if any(d is None for d in dims):
        dims = "x".join(str(d or 64) for d in (1, *info.shape[1:]))
        raise CalibrationDataError(f"cannot make random data for input {info.name} with dynamic shape {info.shape}: "
                                   f"fix its free dimensions with --input-shape {info.name}={dims} (your sizes)")
    return tuple(int(d) for d in dims)  # type: ignore[arg-type]


# Without --eval, one calibration sample in HOLD_OUT_EVERY is held back to judge every target:
# a segmentation model passed at 10.5 dB on its own calibration samples and measured 6.4 dB on
# views it had not seen. Held back only when that leaves HOLD_OUT_MIN samples to judge on:
# fewer would make the gate a coin toss, and the report says the samples were not held back.
HOLD_OUT_EVERY = 4
HOLD_OUT_MIN = 8


def hold_out(calibration: SampleSet) -> tuple[SampleSet, SampleSet, dict[str, object]]:
    """(the samples to calibrate on, the samples to judge on, what the manifest says of it)."""
    n = len(calibration)
    held = np.arange(HOLD_OUT_EVERY - 1, n, HOLD_OUT_EVERY)
    if len(held) < HOLD_OUT_MIN:
        return calibration, calibration, {
            "judged_on": "the calibration samples themselves",
            "why": f"{n} calibration samples; holding one in {HOLD_OUT_EVERY} back needs "
                   f"{HOLD_OUT_EVERY * HOLD_OUT_MIN} or more (or give --eval)"}
    kept = np.setdiff1d(np.arange(n), held)
    return calibration.take(kept), calibration.take(held), {
        "judged_on": "held-out calibration samples", "samples": int(len(held)),
        "which": f"every {HOLD_OUT_EVERY}th sample (indices {HOLD_OUT_EVERY - 1}, {2 * HOLD_OUT_EVERY - 1}, ...), "
                 f"not calibrated on"}
