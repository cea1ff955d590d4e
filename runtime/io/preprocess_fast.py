"""The runtime's zero-copy batch-1 preprocessing: a camera frame straight into the input tensor.

:class:`FramePreprocessor` does what :meth:`PreprocessSpec.apply` followed by the input's
quantization does, but without a float image and without allocating per frame:

1. centre crop as a view of the frame (no copy);
2. only when the channel count changes (RGB->gray for gray models, RGBA->RGB), a colour
   conversion of the cropped region into a buffer of that size: before the resize, as the
   reference does, so the rounding is the same (cv2's bicubic resize of 4 channels differs
   from that of 3 in the odd last bit);
3. ``cv2.resize(..., dst=)`` into a buffer allocated once per frame size (for letterbox,
   into the inner region of a canvas whose border was filled with ``pad_value`` once);
4. colour order and layout, then normalisation and quantisation in one pass: a per-channel
   256-entry lookup table, ``lut[c, pixel]``, written by ``cv2.LUT(..., dst=)`` straight into
   the caller's ``out`` (the interpreter's input tensor). NCHW splits the resized image
   into planes (``cv2.split`` into preallocated planes) and looks each plane up into
   ``out[0, c]``; the channel order is free there (the planes are read in model order).

Why ``cv2.LUT`` and not ``np.take(lut, img, out=...)``: ``np.take`` first converts the uint8
indices to a new intp array (8 bytes a pixel: 402 KB for 224x224x3, every frame), and for
layout + lookup at 224x224x3 it measured 0.20 ms (min; p50 0.23-0.39) against 0.08 ms
(p50 0.12-0.18) for ``cv2.split`` + three ``cv2.LUT`` (``benchmarks/runtime.py
--alternatives`` times all seven variants considered). Both give the same values from the
same table; a test checks it.

Ownership: the plan buffers (colour conversion, resize, letterbox canvas, planes) belong to
the FramePreprocessor and are reused every frame, so one instance serves one stream at a time
(not thread-safe). ``out`` belongs to the caller: for LiteRT it is ``interpreter.tensor(i)()``
taken just before the call and dropped before ``invoke()``; for ONNX Runtime, the array
bound with IOBinding. Nothing of ``out`` is kept after the call.

Steady state allocates no image-sized memory: only the few small Python objects each call
makes (views such as ``out[0, c]``), all freed before it returns. A new frame size
allocates its buffers once; the buffers of the four most recent new sizes are kept.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import numpy as np
import numpy.typing as npt

from edgeserve.errors import InputError
from edgeserve.preprocess import PreprocessSpec, center_crop

QUANTIZED_DTYPES = (np.dtype(np.int8), np.dtype(np.uint8))
FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))
_PLANS_KEPT = 4  # frame sizes whose buffers are kept (e.g. two cameras of different sizes)


def round_half_away(v: np.ndarray) -> np.ndarray:
    """Round to nearest, ties away from zero (TFLite's ``TfLiteRound`` / C ``round``).

    ``np.round`` rounds ties to even (2.5 -> 2); TFLite's Quantize kernel gives 3. Every
    step is exact in floating point: ``v - trunc(v)`` is exact, and doubling it is too.
    """
    t = np.trunc(v)
    return t + np.trunc(2 * (v - t))


def quantize(x: np.ndarray, dtype: npt.DTypeLike, scale: float, zero_point: int) -> np.ndarray:
    """``clip(round(x / scale) + zero_point)`` in ``dtype``, as TFLite quantizes a float input.

    The arithmetic is float32 like the reference path (``x / scale`` with a float32 ``x``),
    and the rounding is half away from zero (see :func:`round_half_away`). For a float
    ``dtype`` this is only the cast.
    """
    dtype = np.dtype(dtype)
    x = np.asarray(x, np.float32)
    if dtype.kind == "f":
        return x.astype(dtype)
    info = np.iinfo(dtype)
    # Clipped before rounding: a finite value past float32's range over the scale (1e37 / 0.1)
    # is inf there, and inf - inf in the rounding is NaN, which became 0 instead of saturating.
    with np.errstate(over="ignore"):
        v = np.clip(x / np.float32(scale), np.float32(info.min - zero_point - 1), np.float32(info.max - zero_point + 1))
    q = round_half_away(v) + np.float32(zero_point)
    return np.clip(q, info.min, info.max).astype(dtype)


def plain_preprocess(spec: PreprocessSpec, frame: np.ndarray, dtype: npt.DTypeLike, scale: float = 0.0,
                     zp: int = 0) -> np.ndarray:
    """The reference the fast path is checked against: ``spec.apply(frame)``, then :func:`quantize`."""
    return quantize(spec.apply(frame), np.dtype(dtype), scale, zp)


def build_lut(spec: PreprocessSpec, dtype: npt.DTypeLike, scale: float = 0.0, zero_point: int = 0) -> np.ndarray:
    """The (channels, 256) table ``lut[c, p] = quantize(p * a[c] + b[c])`` in ``dtype``.

    ``p * a + b`` is computed in float32 with the same two operations as
    :meth:`PreprocessSpec.apply`, so each entry is bit-identical to what the reference
    computes for that pixel value.
    """
    a, b = spec.channel_affine()
    pixels = np.arange(256, dtype=np.float32)
    x = pixels[None, :] * a[:, None] + b[:, None]
    return quantize(x, np.dtype(dtype), scale, zero_point)


@dataclasses.dataclass
class _Plan:
    """The geometry and buffers for one frame size (h, w, channels); built once per size."""

    crop: tuple[slice, slice] | None  # the centre-crop view of the frame, or None
    squeeze: bool  # an H x W x 1 frame is read as its H x W plane
    pre_code: int | None  # cv2 RGB(A)->GRAY or RGBA->RGB/BGR on the cropped region
    pre: np.ndarray | None  # its destination (crop size)
    resize_dst: np.ndarray | None  # where cv2.resize writes (a buffer or a canvas' inner view)
    dsize: tuple[int, int]  # (width, height) of resize_dst
    image: np.ndarray | None  # model-size H x W [x C] uint8 after resize (None: the frame view is)
    color_code: int | None  # NHWC: cv2 conversion into ``hwc`` (RGB->BGR, RGBA->RGB, GRAY->RGB, ...)
    hwc: np.ndarray | None
    planes: list[np.ndarray] | None  # NCHW: cv2.split destination, one plane per image channel
    order: tuple[int, ...]  # NCHW: which plane feeds model channel c
    flat: bool  # NHWC with one shared table: one 1-channel LUT over the (H, W*C) view


class FramePreprocessor:
    """Writes a uint8 camera frame into a batch-1 model input buffer, fused and allocation-free.

    Args:
        spec: the model's PreprocessSpec; ``size`` must be set (``spec.bind_to_input(shape)``).
        dtype: the input tensor's dtype: int8/uint8 (quantized, ``scale > 0``) or
            float32/float16 (a float model; ``scale`` 0).
        scale, zero_point: the input tensor's affine quantization.

    Example:
        >>> fp = FramePreprocessor(spec, dtype=np.int8, scale=0.0186, zero_point=-14)  # doctest: +SKIP
        >>> tensor = interpreter.tensor(index)   # hold the function, not the array
        >>> fp(frame, tensor())                  # the array is dropped right away
        >>> interpreter.invoke()
    """

    def __init__(self, spec: PreprocessSpec, *, dtype: npt.DTypeLike, scale: float = 0.0, zero_point: int = 0) -> None:
        from edgeserve._deps import require

        self._cv2 = require("cv2", "the runtime's frame preprocessing")
        self.spec = spec
        self.input_shape: tuple[int, ...] = spec.input_shape()  # PreprocessSpecError if size is unset
        self.dtype = np.dtype(dtype)
        scale = float(scale)
        if self.dtype in QUANTIZED_DTYPES:
            if not (np.isfinite(scale) and scale > 0):
                raise InputError(
                    f"a {self.dtype.name} model input needs its quantization scale > 0, got {scale}; "
                    "a quantized input without parameters cannot take normalised pixel values"
                )
            info = np.iinfo(self.dtype)
            if not info.min <= zero_point <= info.max:
                raise InputError(f"zero_point {zero_point} is outside the {self.dtype.name} range")
        elif self.dtype in FLOAT_DTYPES:
            if scale != 0.0 or zero_point != 0:
                raise InputError(
                    f"a {self.dtype.name} model input is not quantized; expected scale 0 and zero_point 0, "
                    f"got {scale} and {zero_point}"
                )
        else:
            raise InputError(
                f"model input dtype {self.dtype.name} is not supported by the frame preprocessor; "
                "supported: int8, uint8 (quantized), float32, float16"
            )
        self.scale, self.zero_point = scale, int(zero_point)
        table = build_lut(spec, self.dtype, scale, self.zero_point)
        table.flags.writeable = False
        self._lut = table
        # cv2.LUT wants a contiguous 256-entry table per plane, or (1, 256, C) for C channels.
        self._tables = [np.ascontiguousarray(row) for row in table]
        self._table_hwc = np.ascontiguousarray(table.T).reshape(1, 256, len(table))
        self._shared_table = bool(np.all(table == table[:1]))
        cv2 = self._cv2
        self._interp = {"bilinear": cv2.INTER_LINEAR, "nearest": cv2.INTER_NEAREST,
                        "area": cv2.INTER_AREA, "bicubic": cv2.INTER_CUBIC}[spec.interpolation]
        self._plans: collections.OrderedDict[tuple[int, ...], _Plan] = collections.OrderedDict()
        if spec.layout == "nchw":
            _, c, h, w = self.input_shape
        else:
            _, h, w, c = self.input_shape
        self._hw, self._channels, self._nchw = (h, w), c, spec.layout == "nchw"

    @property
    def lut(self) -> np.ndarray:
        """The fused normalise+quantise table, (channels, 256), read-only, in the input dtype."""
        return self._lut

    # ----- per frame ---------------------------------------------------------------------
    def __call__(self, frame: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Preprocess ``frame`` (uint8 RGB H x W x 3, RGBA x 4, or gray H x W [x 1]) into ``out``.

        ``out`` must be a writeable C-contiguous array of exactly :attr:`input_shape` and the
        input dtype; it is returned.

        Raises:
            InputError: the frame or ``out`` is not what this model takes (both named).
        """
        self._check_out(out)
        plan = self._plans.get(frame.shape) if isinstance(frame, np.ndarray) and frame.dtype == np.uint8 else None
        if plan is None:
            plan = self._new_plan(frame)
        cv2 = self._cv2
        img = frame[:, :, 0] if plan.squeeze else frame
        if plan.crop is not None:
            img = img[plan.crop]
        if plan.pre is not None:
            cv2.cvtColor(img, plan.pre_code, dst=plan.pre)
            img = plan.pre
        if plan.resize_dst is not None:
            cv2.resize(img, plan.dsize, dst=plan.resize_dst, interpolation=self._interp)
        if plan.image is not None:
            img = plan.image
        if self._nchw:
            dst = out[0]
            if plan.planes is None:  # one plane feeds every model channel
                for c, table in enumerate(self._tables):
                    cv2.LUT(img, table, dst=dst[c])
            else:
                cv2.split(img, plan.planes)
                for c, (table, src) in enumerate(zip(self._tables, plan.order)):
                    cv2.LUT(plan.planes[src], table, dst=dst[c])
            return out
        if plan.hwc is not None:
            cv2.cvtColor(img, plan.color_code, dst=plan.hwc)
            img = plan.hwc
        h, w = self._hw
        if plan.flat:
            cv2.LUT(img.reshape(h, w * self._channels), self._tables[0], dst=out.reshape(h, w * self._channels))
        elif self._channels == 1:
            cv2.LUT(img, self._tables[0], dst=out.reshape(h, w))
        else:
            cv2.LUT(img, self._table_hwc, dst=out[0])
        return out

    def _check_out(self, out: Any) -> None:
        if (
            not isinstance(out, np.ndarray)
            or out.shape != self.input_shape
            or out.dtype != self.dtype
            or not out.flags.c_contiguous
            or not out.flags.writeable
        ):
            if not isinstance(out, np.ndarray):
                given = type(out).__name__
            else:
                flags = [f for f, ok in (("not C-contiguous", out.flags.c_contiguous),
                                         ("read-only", out.flags.writeable)) if not ok]
                given = f"{out.dtype.name} {tuple(out.shape)}" + (f" ({', '.join(flags)})" if flags else "")
            raise InputError(
                f"output buffer: expected a writeable C-contiguous {self.dtype.name} array of shape "
                f"{self.input_shape}, got {given}"
            )

    # ----- once per frame size -----------------------------------------------------------
    def _new_plan(self, frame: Any) -> _Plan:
        _check_frame(frame)
        squeeze = frame.ndim == 3 and frame.shape[2] == 1
        plan = self._plan(frame.shape[0], frame.shape[1], 1 if frame.ndim == 2 else frame.shape[2], squeeze)
        self._plans[frame.shape] = plan
        if len(self._plans) > _PLANS_KEPT:
            self._plans.popitem(last=False)
        return plan

    def _plan(self, h: int, w: int, cin: int, squeeze: bool) -> _Plan:
        cv2, spec = self._cv2, self.spec
        th, tw = self._hw
        crop = None
        if spec.crop == "center":
            # Ask the reference function itself where it crops (index grids, no pixel data).
            rows = center_crop(np.broadcast_to(np.arange(h)[:, None], (h, w)), th / tw, spec.crop_fraction)
            cols = center_crop(np.broadcast_to(np.arange(w)[None, :], (h, w)), th / tw, spec.crop_fraction)
            top, left = int(rows[0, 0]), int(cols[0, 0])
            crop = (slice(top, top + rows.shape[0]), slice(left, left + rows.shape[1]))
            h, w = rows.shape
        # Conversions that change the channel count run before the resize, as apply() does.
        pre_code = pre = None
        bgr_done = False
        if spec.color == "gray" and cin > 1:
            pre_code = cv2.COLOR_RGBA2GRAY if cin == 4 else cv2.COLOR_RGB2GRAY
            pre, cin = np.empty((h, w), np.uint8), 1
        elif cin == 4:
            bgr_done = spec.color == "bgr" and spec.layout == "nhwc"  # NCHW reorders planes for free
            pre_code = cv2.COLOR_RGBA2BGR if bgr_done else cv2.COLOR_RGBA2RGB
            pre, cin = np.empty((h, w, 3), np.uint8), 3
        shape = (th, tw) if cin == 1 else (th, tw, cin)
        resize_dst = image = None
        dsize = (tw, th)
        if spec.resize_mode == "letterbox" and (h, w) != (th, tw):
            # Mirrors PreprocessSpec._geometry; the border is never written again, so it
            # holds pad_value every frame, and the lookup maps it with each channel's table.
            ratio = min(th / h, tw / w)
            nh, nw = max(1, round(h * ratio)), max(1, round(w * ratio))
            image = np.full(shape, spec.pad_value, np.uint8)
            top, left = (th - nh) // 2, (tw - nw) // 2
            resize_dst, dsize = image[top : top + nh, left : left + nw], (nw, nh)
        elif (h, w) != (th, tw):
            image = resize_dst = np.empty(shape, np.uint8)
        # else: the (cropped) frame already has the model size and is read in place.
        rgb_in = cin == 3 and self._channels == 3
        color_code = hwc = planes = None
        order: tuple[int, ...] = ()
        flat = False
        if spec.layout == "nchw":
            if rgb_in:
                planes = [np.empty((th, tw), np.uint8) for _ in range(3)]
                order = (2, 1, 0) if spec.color == "bgr" else (0, 1, 2)
        elif self._channels == 3:
            if cin == 1:
                color_code = cv2.COLOR_GRAY2RGB  # gray frame, colour model: the same plane thrice
            elif spec.color == "bgr" and not bgr_done:
                color_code = cv2.COLOR_RGB2BGR
            if color_code is not None:
                hwc = np.empty((th, tw, 3), np.uint8)
            # One shared table: a 1-channel LUT over the (H, W*3) view is faster than the
            # 3-channel one; it needs a contiguous source (one of our buffers).
            flat = self._shared_table and (hwc is not None or image is not None)
        return _Plan(crop=crop, squeeze=squeeze, pre_code=pre_code, pre=pre, resize_dst=resize_dst,
                     dsize=dsize, image=image, color_code=color_code, hwc=hwc, planes=planes, order=order,
                     flat=flat)


def _check_frame(frame: Any) -> None:
    """InputError naming what a frame should be and what it is."""
    if not isinstance(frame, np.ndarray):
        raise InputError(f"frame: expected a uint8 numpy array H x W x C (C = 1, 3 or 4), got {type(frame).__name__}")
    if frame.dtype != np.uint8:
        raise InputError(f"frame: expected dtype uint8 (camera pixels 0..255), got {frame.dtype}")
    if frame.ndim not in (2, 3):
        raise InputError(f"frame: expected H x W or H x W x C (C = 1, 3 or 4), got shape {frame.shape}")
    if frame.ndim == 3 and frame.shape[2] not in (1, 3, 4):
        raise InputError(
            f"frame: expected 1 (gray), 3 (RGB) or 4 (RGBA) channels, got {frame.shape[2]} (shape {frame.shape})"
        )
    if 0 in frame.shape:
        raise InputError(f"frame: expected a non-empty image, got shape {frame.shape}")
