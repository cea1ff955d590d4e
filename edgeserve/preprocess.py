"""PreprocessSpec: the one description of how a camera frame becomes a model input.

The same object is given to every converter (image calibration data is read through it),
recorded in the manifest, and used by the runtime, so a model is never served with
preprocessing that differs from the one it was calibrated with.

Pixel arithmetic, per channel ``c``::

    x[c] = (pixel[c] * scale - mean[c]) / std[c]

so the defaults (scale 1/255, mean 0, std 1) give inputs in [0, 1], and ImageNet-style
models use ``scale=1/255, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)``.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgeserve.atomic import read_settings
from edgeserve.errors import PreprocessSpecError, did_you_mean

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

COLORS = ("rgb", "bgr", "gray")
LAYOUTS = ("nhwc", "nchw")
RESIZE_MODES = ("stretch", "letterbox")
CROPS = ("none", "center")
INTERPOLATIONS = ("bilinear", "nearest", "area", "bicubic")


@dataclasses.dataclass(frozen=True)
class PreprocessSpec:
    """How a uint8 H x W x C frame (RGB order as decoded) becomes the model's float input.

    Attributes:
        size: (height, width) of the model input; None until known from the model.
        color: channel order the model expects: "rgb", "bgr" or "gray" (one channel).
        layout: "nhwc" or "nchw" for the model's input tensor.
        resize_mode: "stretch" (ignore aspect ratio) or "letterbox" (keep it, pad).
        crop: "center" crops the centred region with the input's aspect ratio before
            resizing (times ``crop_fraction``, e.g. 0.875 for ImageNet); "none" does not.
        crop_fraction: fraction of the aspect-matched region kept by a centre crop.
        interpolation: resize filter, as OpenCV names it.
        scale: multiplies the raw pixel value first (1/255 maps 0..255 to 0..1).
        mean, std: per-channel (or one shared) values subtracted / divided after scaling.
        pad_value: raw pixel value used for letterbox borders.
    """

    size: tuple[int, int] | None = None
    color: str = "rgb"
    layout: str = "nhwc"
    resize_mode: str = "stretch"
    crop: str = "none"
    crop_fraction: float = 1.0
    interpolation: str = "bilinear"
    scale: float = 1.0 / 255.0
    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)
    pad_value: int = 0

    def __post_init__(self) -> None:
        _check_choice("color", self.color, COLORS)
        _check_choice("layout", self.layout, LAYOUTS)
        _check_choice("resize_mode", self.resize_mode, RESIZE_MODES)
        _check_choice("crop", self.crop, CROPS)
        _check_choice("interpolation", self.interpolation, INTERPOLATIONS)
        if self.size is not None:
            object.__setattr__(self, "size", _as_size(self.size))
        object.__setattr__(self, "crop_fraction", _as_number("crop_fraction", self.crop_fraction))
        if not 0.0 < self.crop_fraction <= 1.0:
            raise PreprocessSpecError(f"crop_fraction must be in (0, 1], got {self.crop_fraction}")
        object.__setattr__(self, "scale", _as_number("scale", self.scale))
        if not math.isfinite(self.scale) or self.scale == 0:
            raise PreprocessSpecError(f"scale must be a finite non-zero number, got {self.scale}")
        object.__setattr__(self, "mean", _as_floats("mean", self.mean))
        object.__setattr__(self, "std", _as_floats("std", self.std))
        if any(s == 0 for s in self.std):
            raise PreprocessSpecError(f"std must not contain 0, got {self.std}")
        for name in ("mean", "std"):
            values = getattr(self, name)
            if len(values) not in (1, self.channels):
                raise PreprocessSpecError(
                    f"{name} has {len(values)} values but color {self.color!r} has "
                    f"{self.channels} channel(s); give 1 or {self.channels}"
                )
        # An integer, not merely a number in range: 127.5 would be truncated silently when
        # written into the uint8 letterbox canvas.
        if not _is_int(self.pad_value) or not 0 <= self.pad_value <= 255:
            raise PreprocessSpecError(f"pad_value must be an integer pixel value 0..255, got {self.pad_value!r}")
        object.__setattr__(self, "pad_value", int(self.pad_value))

    # ----- derived facts -------------------------------------------------------------
    @property
    def channels(self) -> int:
        return 1 if self.color == "gray" else 3

    def channel_affine(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-channel (a, b) such that ``x = pixel * a + b`` (float32, length ``channels``)."""
        mean = np.broadcast_to(np.asarray(self.mean, np.float64), (self.channels,))
        std = np.broadcast_to(np.asarray(self.std, np.float64), (self.channels,))
        a = self.scale / std
        b = -mean / std
        return a.astype(np.float32), b.astype(np.float32)

    @property
    def value_range(self) -> tuple[float, float]:
        """The (min, max) model input values that pixels 0..255 map to."""
        a, b = self.channel_affine()
        ends = np.concatenate([b, 255.0 * a + b])
        return float(ends.min()), float(ends.max())

    def input_shape(self) -> tuple[int, ...]:
        """The batch-1 model input shape this spec produces."""
        if self.size is None:
            raise PreprocessSpecError("size is not set; give --size HxW or take it from the model")
        h, w = self.size
        return (1, self.channels, h, w) if self.layout == "nchw" else (1, h, w, self.channels)

    def bind_to_input(self, shape: Sequence[int | None]) -> "PreprocessSpec":
        """Fill ``size``/``layout`` from a 4-D image input shape, or check they agree with it.

        Raises:
            PreprocessSpecError: the shape is not an image input this spec can produce.
        """
        shape = tuple(shape)
        if len(shape) != 4:
            raise PreprocessSpecError(
                f"image preprocessing needs a 4-D input (N,H,W,C or N,C,H,W); the model input is {shape}"
            )
        if self.layout == "nhwc" and shape[3] != self.channels and shape[1] == self.channels:
            # [1, 3, H, W] read as NHWC would be W channels: the model is NCHW (PyTorch and
            # ONNX models usually are). Only this direction is inferred, and only when the
            # NHWC reading cannot be right, so an explicit --layout is never overridden.
            return dataclasses.replace(self, layout="nchw").bind_to_input(shape)
        if self.layout == "nchw":
            c, h, w = shape[1], shape[2], shape[3]
        else:
            h, w, c = shape[1], shape[2], shape[3]
        if c != self.channels:
            raise PreprocessSpecError(
                f"the model input {shape} is not an image for color {self.color!r} ({self.channels} channel(s)): "
                f"read as NHWC it has {shape[3]} channels, as NCHW {shape[1]}; set --layout (nhwc or nchw) "
                "and --color to the model's"
            )
        if h is None or w is None:
            if self.size is None:
                raise PreprocessSpecError(f"the model input {shape} has no fixed size; give --size HxW")
        # A dynamic dimension accepts any size, but a fixed one must still match the spec
        # (e.g. (None, None, 224, 3) with size 100x100 would feed 100-wide images).
        if self.size is not None and any(m is not None and m != s for m, s in zip((h, w), self.size)):
            model_size = "x".join("?" if d is None else str(d) for d in (h, w))
            raise PreprocessSpecError(
                f"spec size {self.size[0]}x{self.size[1]} does not match the model input {model_size} ({shape})"
            )
        if h is None or w is None:
            return self
        return dataclasses.replace(self, size=(int(h), int(w)))

    # ----- the reference (plain) preprocessing ------------------------------------------
    def apply(self, image: np.ndarray) -> np.ndarray:
        """Preprocess one uint8 RGB (or gray) H x W [x C] image into a batch-1 float32 input.

        This is the reference path: readable, float64-free and used for calibration. The
        runtime's fused fast path is checked against it.
        """
        cv2 = _cv2()
        if self.size is None:
            raise PreprocessSpecError("size is not set; give --size HxW or take it from the model")
        img = np.asarray(image)
        given_shape = img.shape  # ``image`` may be a list, which has no .shape
        if img.dtype != np.uint8:
            raise PreprocessSpecError(f"expected a uint8 image, got dtype {img.dtype}")
        if img.ndim == 2:
            img = img[:, :, None]
        if img.ndim != 3 or img.shape[2] not in (1, 3, 4) or 0 in img.shape:
            raise PreprocessSpecError(f"expected an H x W x 1|3|4 image, got shape {given_shape}")
        img = _to_color(img[:, :, :3] if img.shape[2] == 4 else img, self.color, cv2)
        img = self._geometry(img, cv2)
        a, b = self.channel_affine()
        x = img.astype(np.float32) * a + b
        if self.layout == "nchw":
            x = np.transpose(x, (2, 0, 1))
        return np.ascontiguousarray(x[None])

    def _geometry(self, img: np.ndarray, cv2: Any) -> np.ndarray:
        assert self.size is not None
        th, tw = self.size
        if self.crop == "center":
            img = center_crop(img, th / tw, self.crop_fraction)
        interp = _cv2_interp(self.interpolation, cv2)
        h, w = img.shape[:2]
        if self.resize_mode == "letterbox" and (h, w) != (th, tw):
            ratio = min(th / h, tw / w)
            nh, nw = max(1, round(h * ratio)), max(1, round(w * ratio))
            resized = _resize(img, (nw, nh), interp, cv2)
            out = np.full((th, tw, img.shape[2]), self.pad_value, np.uint8)
            top, left = (th - nh) // 2, (tw - nw) // 2
            out[top : top + nh, left : left + nw] = resized
            return out
        if (h, w) == (th, tw):
            return img
        return _resize(img, (tw, th), interp, cv2)

    # ----- (de)serialisation ----------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["size"] = list(self.size) if self.size else None
        d["mean"], d["std"] = list(self.mean), list(self.std)
        d["value_range"] = list(self.value_range)
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "preprocess spec") -> "PreprocessSpec":
        fields = {f.name for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for key, value in data.items():
            if key == "value_range":  # derived; written by to_dict for readers, not an input
                continue
            if key not in fields:
                raise PreprocessSpecError(
                    f'unknown key "{key}" in {where}.{did_you_mean(key, fields)} '
                    f"Allowed keys: {', '.join(sorted(fields))}"
                )
            values[key] = tuple(value) if isinstance(value, list) else value
        try:
            return cls(**values)
        except TypeError as exc:
            raise PreprocessSpecError(f"bad value in {where}: {exc}") from exc

    @classmethod
    def from_toml(cls, path: str | Path) -> "PreprocessSpec":
        path = Path(path)
        try:
            data = tomllib.loads(read_settings(path).decode("utf-8"))
        except FileNotFoundError as exc:
            raise PreprocessSpecError(f"preprocess spec file not found: {path}") from exc
        except OSError as exc:  # a directory, no permission, ...
            raise PreprocessSpecError(f"cannot read preprocess spec file {path}: {exc}") from exc
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise PreprocessSpecError(f"{path} is not valid TOML: {exc}") from exc
        except RecursionError as exc:
            raise PreprocessSpecError(f"{path} nests tables or arrays too deeply to read") from exc
        table = data.get("preprocess", data)
        if not isinstance(table, Mapping):
            raise PreprocessSpecError(f"{path}: 'preprocess' must be a table ([preprocess]), got {table!r}")
        return cls.from_dict(table, where=str(path))


def center_crop(img: np.ndarray, aspect: float, fraction: float = 1.0) -> np.ndarray:
    """The centred region of ``img`` with height/width ratio ``aspect``, scaled by ``fraction``."""
    h, w = img.shape[:2]
    if h / w > aspect:
        ch, cw = w * aspect, float(w)
    else:
        ch, cw = float(h), h / aspect
    ch, cw = max(1, round(ch * fraction)), max(1, round(cw * fraction))
    top, left = (h - ch) // 2, (w - cw) // 2
    return img[top : top + ch, left : left + cw]


def _resize(img: np.ndarray, wh: tuple[int, int], interp: int, cv2: Any) -> np.ndarray:
    out = cv2.resize(img, wh, interpolation=interp)
    return out[:, :, None] if out.ndim == 2 else out


def _to_color(img: np.ndarray, color: str, cv2: Any) -> np.ndarray:
    channels = img.shape[2]
    if color == "gray":
        return img if channels == 1 else cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)[:, :, None]
    if channels == 1:
        img = np.repeat(img, 3, axis=2)
    return img[:, :, ::-1] if color == "bgr" else img


def _cv2_interp(name: str, cv2: Any) -> int:
    return {
        "bilinear": cv2.INTER_LINEAR,
        "nearest": cv2.INTER_NEAREST,
        "area": cv2.INTER_AREA,
        "bicubic": cv2.INTER_CUBIC,
    }[name]


def _cv2() -> Any:
    from edgeserve._deps import require

    return require("cv2", "image preprocessing")


def _check_choice(name: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise PreprocessSpecError(
            f'{name} must be one of {", ".join(choices)}; got "{value}".{did_you_mean(str(value), choices)}'
        )


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _as_size(value: Any) -> tuple[int, int]:
    # A string is a sequence too: "22" must not become (2, 2), nor ("a", "b") a ValueError.
    items: tuple[Any, ...] = ()
    if isinstance(value, (Sequence, np.ndarray)) and not isinstance(value, (str, bytes)):
        items = tuple(value)
    if len(items) != 2 or not all(_is_int(v) and v > 0 for v in items):
        raise PreprocessSpecError(f"size must be two positive integers (height, width), got {value!r}")
    return int(items[0]), int(items[1])


def _as_number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise PreprocessSpecError(f"{name} must be a number, got {value!r}")
    return float(value)


def _as_floats(name: str, values: Any) -> tuple[float, ...]:
    if isinstance(values, (str, bytes)):  # "5" would otherwise pass as (5.0,) and "0.5" fail oddly
        raise PreprocessSpecError(f"{name} must be numbers, got {values!r}")
    if isinstance(values, (int, float)):
        values = (values,)
    try:
        out = tuple(float(v) for v in values)
    except (TypeError, ValueError) as exc:
        raise PreprocessSpecError(f"{name} must be numbers, got {values!r}") from exc
    if not out or not all(math.isfinite(v) for v in out):
        raise PreprocessSpecError(f"{name} must be finite numbers, got {values!r}")
    return out
