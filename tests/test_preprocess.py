"""PreprocessSpec: validation, binding to a model input, arithmetic, apply() and (de)serialisation.

apply() is checked against references written here with plain numpy (exact crops, block
means for factor-2/8 downscales, hand-placed letterbox pads), never against itself.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import cv2
import numpy as np
import pytest

from edgeserve.errors import PreprocessSpecError
from edgeserve.preprocess import PreprocessSpec

IMAGENET = dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
RAW = dict(scale=1.0, mean=(0.0,), std=(1.0,))  # apply() returns raw pixel values as float


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def image(rng: np.random.Generator, h: int, w: int, c: int = 3) -> np.ndarray:
    return rng.integers(0, 256, (h, w, c), dtype=np.uint8)


def block_mean(img: np.ndarray, f: int) -> np.ndarray:
    """Mean over f x f blocks: what a bilinear/area downscale by an exact factor f gives."""
    h, w, c = img.shape
    return img.reshape(h // f, f, w // f, f, c).astype(np.float64).mean(axis=(1, 3))


def re_escape(value: object) -> str:
    return re.escape(str(value))


def luma(rgb: np.ndarray) -> np.ndarray:
    """ITU-R BT.601 luma, the weights of OpenCV's RGB2GRAY, rounded to uint8."""
    y = rgb.astype(np.float64) @ np.array([0.299, 0.587, 0.114])
    return np.round(y)[:, :, None]


# ----- validation ------------------------------------------------------------------------

@pytest.mark.parametrize(
    "field, bad, suggestion, choices",
    [
        ("color", "rbg", "rgb", "rgb, bgr, gray"),
        ("color", "grey", "gray", "rgb, bgr, gray"),
        ("layout", "nhcw", "nhwc", "nhwc, nchw"),
        ("resize_mode", "letterbx", "letterbox", "stretch, letterbox"),
        ("crop", "centre", "center", "none, center"),
        ("interpolation", "bilinar", "bilinear", "bilinear, nearest, area, bicubic"),
    ],
)
def test_bad_choice_names_value_choices_and_suggestion(field: str, bad: str, suggestion: str, choices: str) -> None:
    with pytest.raises(PreprocessSpecError) as exc:
        PreprocessSpec(**{field: bad})
    msg = str(exc.value)
    assert f'"{bad}"' in msg
    assert f"{field} must be one of {choices}" in msg
    assert f'Did you mean "{suggestion}"?' in msg


def test_bad_choice_without_close_match_has_no_suggestion() -> None:
    with pytest.raises(PreprocessSpecError) as exc:
        PreprocessSpec(color="xyzzy")
    assert '"xyzzy"' in str(exc.value) and "Did you mean" not in str(exc.value)


@pytest.mark.parametrize("field", ["mean", "std"])
def test_mean_std_length_must_match_channels(field: str) -> None:
    with pytest.raises(PreprocessSpecError) as exc:
        PreprocessSpec(**{field: (0.5, 0.5)})
    assert f"{field} has 2 values but color 'rgb' has 3 channel(s); give 1 or 3" in str(exc.value)
    with pytest.raises(PreprocessSpecError, match=f"{field} has 3 values but color 'gray' has 1 channel"):
        PreprocessSpec(color="gray", **{field: (0.5, 0.5, 0.5)})
    # one shared value or one per channel are both fine
    assert getattr(PreprocessSpec(**{field: 0.5}), field) == (0.5,)
    assert getattr(PreprocessSpec(**{field: (1, 2, 3)}), field) == (1.0, 2.0, 3.0)


def test_std_zero_refused() -> None:
    with pytest.raises(PreprocessSpecError, match=r"std must not contain 0, got \(0.2, 0.0, 0.2\)"):
        PreprocessSpec(std=(0.2, 0.0, 0.2))


@pytest.mark.parametrize("values", [(), (float("nan"),), (1.0, float("inf"), 1.0)])
def test_mean_must_be_finite_and_non_empty(values: tuple[float, ...]) -> None:
    with pytest.raises(PreprocessSpecError, match="mean must be finite numbers"):
        PreprocessSpec(mean=values)


@pytest.mark.parametrize("values", ["5", "0.5", ("a", "b", "c")])
def test_mean_must_be_numbers_not_text(values: object) -> None:
    with pytest.raises(PreprocessSpecError, match="mean must be numbers"):
        PreprocessSpec(mean=values)  # type: ignore[arg-type]


@pytest.mark.parametrize("fraction", [0.0, -0.1, 1.0001, 2, float("nan")])
def test_crop_fraction_out_of_bounds(fraction: float) -> None:
    with pytest.raises(PreprocessSpecError, match=r"crop_fraction must be in \(0, 1\]"):
        PreprocessSpec(crop_fraction=fraction)


@pytest.mark.parametrize("fraction", [1e-6, 0.875, 1.0, 1])
def test_crop_fraction_in_bounds(fraction: float) -> None:
    assert PreprocessSpec(crop_fraction=fraction).crop_fraction == float(fraction)


@pytest.mark.parametrize("scale", [0.0, float("inf"), float("nan")])
def test_scale_must_be_finite_non_zero(scale: float) -> None:
    with pytest.raises(PreprocessSpecError, match="scale must be a finite non-zero number"):
        PreprocessSpec(scale=scale)


@pytest.mark.parametrize("field, value", [("scale", "1/255"), ("crop_fraction", "0.875"), ("scale", True)])
def test_scalar_fields_of_wrong_type_are_named(field: str, value: object) -> None:
    with pytest.raises(PreprocessSpecError, match=f"{field} must be a number, got {value!r}"):
        PreprocessSpec(**{field: value})


@pytest.mark.parametrize("size", [(0, 4), (4, -1), (1, 2, 3), (4,), "22", "4x4", 224, (2.5, 3), (True, 3), ("a", "b")])
def test_bad_size_refused(size: object) -> None:
    with pytest.raises(PreprocessSpecError, match="size must be two positive integers"):
        PreprocessSpec(size=size)  # type: ignore[arg-type]


def test_size_normalised_to_int_tuple() -> None:
    spec = PreprocessSpec(size=[np.int64(8), 6])  # type: ignore[arg-type]
    assert spec.size == (8, 6) and all(type(v) is int for v in spec.size)


@pytest.mark.parametrize("pad", [-1, 256, 127.5, "0"])
def test_pad_value_must_be_integer_pixel(pad: object) -> None:
    with pytest.raises(PreprocessSpecError, match="pad_value must be an integer pixel value 0..255"):
        PreprocessSpec(pad_value=pad)  # type: ignore[arg-type]


def test_spec_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        PreprocessSpec().color = "bgr"  # type: ignore[misc]


# ----- bind_to_input / input_shape -------------------------------------------------------

def test_bind_fills_size_from_nhwc_shape() -> None:
    bound = PreprocessSpec().bind_to_input((None, 32, 48, 3))
    assert bound.size == (32, 48)
    assert bound.input_shape() == (1, 32, 48, 3)


def test_bind_fills_size_from_nchw_shape() -> None:
    bound = PreprocessSpec(layout="nchw", color="gray").bind_to_input([1, 1, 20, 10])
    assert bound.size == (20, 10)
    assert bound.input_shape() == (1, 1, 20, 10)


def test_bind_keeps_matching_size_and_other_fields() -> None:
    spec = PreprocessSpec(size=(8, 8), color="bgr", crop="center", **IMAGENET)
    assert spec.bind_to_input((None, 8, 8, 3)) == spec


def test_bind_refuses_channel_mismatch_naming_both() -> None:
    with pytest.raises(PreprocessSpecError) as exc:
        PreprocessSpec(color="rgb").bind_to_input((None, 28, 28, 1))
    msg = str(exc.value)
    assert "(None, 28, 28, 1) is not an image for color 'rgb' (3 channel(s))" in msg
    assert "as NHWC it has 1 channels, as NCHW 28" in msg and "--color" in msg and "--layout" in msg


def test_an_nchw_image_input_is_read_as_nchw_without_a_layout_flag() -> None:
    """[1, 3, 224, 224] is NCHW: with --mean/--std alone it used to say "224 channels"."""
    spec = PreprocessSpec(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)).bind_to_input((1, 3, 224, 224))
    assert spec.layout == "nchw" and spec.size == (224, 224)
    assert spec.input_shape() == (1, 3, 224, 224)
    # An explicit NCHW stays, and a real NHWC model stays NHWC.
    assert PreprocessSpec(layout="nchw").bind_to_input((1, 3, 32, 32)).layout == "nchw"
    assert PreprocessSpec().bind_to_input((1, 32, 32, 3)).layout == "nhwc"


def test_bind_refuses_size_mismatch_naming_both() -> None:
    with pytest.raises(PreprocessSpecError) as exc:
        PreprocessSpec(size=(32, 32)).bind_to_input((None, 8, 16, 3))
    assert "spec size 32x32 does not match the model input 8x16 ((None, 8, 16, 3))" in str(exc.value)


def test_bind_dynamic_size_needs_spec_size() -> None:
    with pytest.raises(PreprocessSpecError, match=r"\(None, None, None, 3\) has no fixed size; give --size HxW"):
        PreprocessSpec().bind_to_input((None, None, None, 3))
    spec = PreprocessSpec(size=(10, 12))
    assert spec.bind_to_input((None, None, None, 3)) is spec


def test_bind_partly_dynamic_size_still_checks_the_fixed_dimension() -> None:
    assert PreprocessSpec(size=(10, 224)).bind_to_input((None, None, 224, 3)).size == (10, 224)
    with pytest.raises(PreprocessSpecError, match=r"spec size 100x100 does not match the model input \?x224"):
        PreprocessSpec(size=(100, 100)).bind_to_input((None, None, 224, 3))


@pytest.mark.parametrize("shape", [(None, 8, 8), (8, 8, 3), (None, 1, 8, 8, 3)])
def test_bind_needs_4d(shape: tuple[int | None, ...]) -> None:
    with pytest.raises(PreprocessSpecError, match=f"needs a 4-D input .*the model input is {re_escape(shape)}"):
        PreprocessSpec().bind_to_input(shape)


def test_input_shape_needs_size() -> None:
    with pytest.raises(PreprocessSpecError, match="size is not set"):
        PreprocessSpec().input_shape()


# ----- arithmetic ------------------------------------------------------------------------

def test_channel_affine_default_is_unit_scale() -> None:
    a, b = PreprocessSpec().channel_affine()
    assert a.dtype == np.float32 and b.dtype == np.float32 and a.shape == (3,)
    np.testing.assert_allclose(a, [1 / 255] * 3, rtol=1e-7)
    np.testing.assert_array_equal(b, [0, 0, 0])
    assert PreprocessSpec().value_range == pytest.approx((0.0, 1.0))


def test_channel_affine_imagenet_by_hand() -> None:
    a, b = PreprocessSpec(**IMAGENET).channel_affine()
    np.testing.assert_allclose(a, [1 / (255 * 0.229), 1 / (255 * 0.224), 1 / (255 * 0.225)], rtol=1e-6)
    np.testing.assert_allclose(b, [-0.485 / 0.229, -0.456 / 0.224, -0.406 / 0.225], rtol=1e-6)


def test_value_range_imagenet() -> None:
    lo, hi = PreprocessSpec(**IMAGENET).value_range
    # min = -0.485/0.229 (R at 0), max = (1-0.406)/0.225 (B at 255)
    assert lo == pytest.approx(-2.1179, abs=1e-4)
    assert hi == pytest.approx(2.64, abs=1e-4)


def test_value_range_minus_one_to_one_and_negative_scale() -> None:
    assert PreprocessSpec(scale=1 / 127.5, mean=1.0).value_range == pytest.approx((-1.0, 1.0), abs=1e-6)
    # a negative scale flips the range; the ends are still ordered
    assert PreprocessSpec(scale=-1.0).value_range == pytest.approx((-255.0, 0.0))


def test_gray_affine_has_one_channel() -> None:
    a, b = PreprocessSpec(color="gray", scale=2.0, mean=4.0, std=2.0).channel_affine()
    assert a.tolist() == [1.0] and b.tolist() == [-2.0]


# ----- apply -----------------------------------------------------------------------------

def test_apply_formula_per_channel_on_a_constant_image() -> None:
    img = np.zeros((4, 4, 3), np.uint8)
    img[..., 0], img[..., 1], img[..., 2] = 10, 128, 255
    x = PreprocessSpec(size=(4, 4), **IMAGENET).apply(img)
    assert x.dtype == np.float32 and x.shape == (1, 4, 4, 3) and x.flags.c_contiguous
    expected = [(10 / 255 - 0.485) / 0.229, (128 / 255 - 0.456) / 0.224, (255 / 255 - 0.406) / 0.225]
    np.testing.assert_allclose(x[0, 2, 3], expected, rtol=1e-5)
    np.testing.assert_allclose(x, np.broadcast_to(expected, x.shape), rtol=1e-5)


def test_apply_same_size_is_identity_geometry(rng: np.random.Generator) -> None:
    img = image(rng, 5, 7)
    np.testing.assert_array_equal(PreprocessSpec(size=(5, 7), **RAW).apply(img)[0], img)


@pytest.mark.parametrize("interpolation", ["bilinear", "area"])
def test_apply_stretch_downscale_by_two_is_block_mean(rng: np.random.Generator, interpolation: str) -> None:
    img = image(rng, 24, 40)
    x = PreprocessSpec(size=(12, 20), interpolation=interpolation, **RAW).apply(img)
    assert x.shape == (1, 12, 20, 3)
    np.testing.assert_allclose(x[0], block_mean(img, 2), atol=0.51)


def test_apply_stretch_ignores_aspect_ratio(rng: np.random.Generator) -> None:
    img = image(rng, 16, 48)  # 1:3, stretched to 1:1 by factors 2 (rows) and 6 (columns)
    x = PreprocessSpec(size=(8, 8), interpolation="area", **RAW).apply(img)
    expected = img.reshape(8, 2, 8, 6, 3).astype(np.float64).mean(axis=(1, 3))
    np.testing.assert_allclose(x[0], expected, atol=0.51)


def test_apply_nearest_downscale_picks_pixels(rng: np.random.Generator) -> None:
    img = image(rng, 12, 18)
    x = PreprocessSpec(size=(4, 6), interpolation="nearest", **RAW).apply(img)
    np.testing.assert_array_equal(x[0], img[::3, ::3])


def test_apply_upscale_nearest_repeats_pixels(rng: np.random.Generator) -> None:
    img = image(rng, 3, 4)
    x = PreprocessSpec(size=(6, 12), interpolation="nearest", **RAW).apply(img)
    np.testing.assert_array_equal(x[0], np.repeat(np.repeat(img, 2, axis=0), 3, axis=1))


def test_apply_gray_conversion(rng: np.random.Generator) -> None:
    img = image(rng, 20, 30)
    x = PreprocessSpec(size=(20, 30), color="gray", **RAW).apply(img)
    assert x.shape == (1, 20, 30, 1)
    np.testing.assert_allclose(x[0], luma(img), atol=1.0)
    # OpenCV's fixed-point weights sum to exactly 1: a gray pixel stays its own value
    grey = np.repeat(img[:, :, :1], 3, axis=2)
    np.testing.assert_array_equal(PreprocessSpec(size=(20, 30), color="gray", **RAW).apply(grey)[0], grey[:, :, :1])


def test_apply_bgr_reverses_channels(rng: np.random.Generator) -> None:
    img = image(rng, 8, 8)
    spec = PreprocessSpec(size=(8, 8), color="bgr", scale=1 / 255, mean=(0.1, 0.2, 0.3), std=(0.5, 0.25, 0.125))
    x = spec.apply(img)[0]
    bgr = img[:, :, ::-1].astype(np.float64)
    expected = (bgr / 255 - np.array([0.1, 0.2, 0.3])) / np.array([0.5, 0.25, 0.125])
    np.testing.assert_allclose(x, expected, rtol=1e-5, atol=1e-5)


def test_apply_bgr_with_resize(rng: np.random.Generator) -> None:
    img = image(rng, 16, 16)
    x = PreprocessSpec(size=(8, 8), color="bgr", interpolation="area", **RAW).apply(img)
    np.testing.assert_allclose(x[0], block_mean(img, 2)[:, :, ::-1], atol=0.51)


def test_apply_nchw_layout(rng: np.random.Generator) -> None:
    img = image(rng, 6, 10)
    x = PreprocessSpec(size=(6, 10), layout="nchw", **RAW).apply(img)
    assert x.shape == (1, 3, 6, 10) and x.flags.c_contiguous
    for c in range(3):
        np.testing.assert_array_equal(x[0, c], img[:, :, c])


def test_apply_center_crop_box_without_resize(rng: np.random.Generator) -> None:
    # 200x320 image, square input, fraction 0.875: the aspect-matched region is 200x200,
    # kept 175x175 (200*0.875), top (200-175)//2 = 12, left (320-175)//2 = 72.
    img = image(rng, 200, 320)
    x = PreprocessSpec(size=(175, 175), crop="center", crop_fraction=0.875, **RAW).apply(img)
    np.testing.assert_array_equal(x[0], img[12:187, 72:247])


def test_apply_center_crop_non_square_target(rng: np.random.Generator) -> None:
    # 240x320 image, input 60x40 (h/w 1.5, taller than the image): region 240 x 160,
    # times 0.875 -> 210 x 140; top (240-210)//2 = 15, left (320-140)//2 = 90.
    # 210x140 -> 60x40 is not an integer factor, so compare against OpenCV on the hand box.
    img = image(rng, 240, 320)
    x = PreprocessSpec(size=(60, 40), crop="center", crop_fraction=0.875, **RAW).apply(img)
    expected = cv2.resize(np.ascontiguousarray(img[15:225, 90:230]), (40, 60), interpolation=cv2.INTER_LINEAR)
    np.testing.assert_array_equal(x[0], expected)


def test_apply_center_crop_tall_image(rng: np.random.Generator) -> None:
    # 90x30 image, input 10x10: region 30x30 at top (90-30)//2 = 30, fraction 1
    img = image(rng, 90, 30)
    x = PreprocessSpec(size=(30, 30), crop="center", **RAW).apply(img)
    np.testing.assert_array_equal(x[0], img[30:60])


def test_apply_letterbox_pads_top_and_bottom(rng: np.random.Generator) -> None:
    # 20x40 into 16x16: ratio min(16/20, 16/40) = 0.4 -> 8x16 content, 4 rows of pad above and below
    img = image(rng, 20, 40)
    img[:] = 200
    x = PreprocessSpec(size=(16, 16), resize_mode="letterbox", pad_value=7, **RAW).apply(img)[0]
    assert x.shape == (16, 16, 3)
    np.testing.assert_array_equal(x[:4], 7)
    np.testing.assert_array_equal(x[12:], 7)
    np.testing.assert_array_equal(x[4:12], 200)


def test_apply_letterbox_pads_left_and_right_odd_split(rng: np.random.Generator) -> None:
    # 40x20 into 16x15: ratio min(16/40, 15/20) = 0.4 -> 16x8 content, left (15-8)//2 = 3, right 4
    img = image(rng, 40, 20)
    x = PreprocessSpec(size=(16, 15), resize_mode="letterbox", interpolation="area", pad_value=0, **RAW).apply(img)[0]
    np.testing.assert_array_equal(x[:, :3], 0)
    np.testing.assert_array_equal(x[:, 11:], 0)
    # 40x20 -> 16x8 is a factor of 2.5, so the content is compared with OpenCV at the hand-placed box
    expected = cv2.resize(img, (8, 16), interpolation=cv2.INTER_AREA)
    np.testing.assert_array_equal(x[:, 3:11], expected)


def test_apply_letterbox_pad_value_is_raw_pixel_before_normalisation() -> None:
    img = np.full((10, 20, 3), 255, np.uint8)
    x = PreprocessSpec(size=(20, 20), resize_mode="letterbox", pad_value=114, **IMAGENET).apply(img)[0]
    pad = (114 / 255 - np.array(IMAGENET["mean"])) / np.array(IMAGENET["std"])
    np.testing.assert_allclose(x[0, 0], pad, rtol=1e-5)  # 10x20 -> 10x20 content at rows 5..14
    np.testing.assert_allclose(x[19, 19], pad, rtol=1e-5)
    np.testing.assert_allclose(x[10, 10], (1 - np.array(IMAGENET["mean"])) / np.array(IMAGENET["std"]), rtol=1e-5)


def test_apply_letterbox_same_aspect_has_no_pad(rng: np.random.Generator) -> None:
    img = image(rng, 16, 32)
    x = PreprocessSpec(size=(8, 16), resize_mode="letterbox", interpolation="area", pad_value=99, **RAW).apply(img)
    np.testing.assert_allclose(x[0], block_mean(img, 2), atol=0.51)


def test_apply_rgba_drops_alpha(rng: np.random.Generator) -> None:
    rgba = image(rng, 8, 8, 4)
    spec = PreprocessSpec(size=(4, 4), interpolation="area", **IMAGENET)
    np.testing.assert_array_equal(spec.apply(rgba), spec.apply(np.ascontiguousarray(rgba[:, :, :3])))
    gray = PreprocessSpec(size=(8, 8), color="gray", **RAW).apply(rgba)
    np.testing.assert_allclose(gray[0], luma(rgba[:, :, :3]), atol=1.0)


def test_apply_2d_gray_input(rng: np.random.Generator) -> None:
    img = rng.integers(0, 256, (6, 9), dtype=np.uint8)
    g = PreprocessSpec(size=(6, 9), color="gray").apply(img)
    assert g.shape == (1, 6, 9, 1)
    np.testing.assert_allclose(g[0, :, :, 0], img / 255, rtol=1e-6)
    rgb = PreprocessSpec(size=(6, 9), **RAW).apply(img)  # an RGB model gets the gray value thrice
    np.testing.assert_array_equal(rgb[0], np.repeat(img[:, :, None], 3, axis=2))
    one = PreprocessSpec(size=(6, 9), color="bgr", **RAW).apply(img[:, :, None])
    np.testing.assert_array_equal(one, rgb)


def test_apply_accepts_list_input() -> None:
    rows = [[np.uint8(v) for v in range(4)] for _ in range(2)]
    assert PreprocessSpec(size=(2, 4), color="gray", **RAW).apply(np.asarray(rows)).shape == (1, 2, 4, 1)
    with pytest.raises(PreprocessSpecError, match=r"got shape \(4,\)"):
        PreprocessSpec(size=(2, 4)).apply([np.uint8(v) for v in range(4)])  # type: ignore[arg-type]


def test_apply_does_not_modify_input(rng: np.random.Generator) -> None:
    img = image(rng, 12, 12)
    before = img.copy()
    PreprocessSpec(size=(6, 6), color="bgr", crop="center", resize_mode="letterbox").apply(img)
    np.testing.assert_array_equal(img, before)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.uint16, np.int8])
def test_apply_refuses_non_uint8(dtype: type) -> None:
    with pytest.raises(PreprocessSpecError, match=f"expected a uint8 image, got dtype {np.dtype(dtype)}"):
        PreprocessSpec(size=(2, 2)).apply(np.zeros((2, 2, 3), dtype))


@pytest.mark.parametrize("shape", [(0, 0, 3), (0, 5, 3), (5, 0), (4, 4, 0)])
def test_apply_refuses_empty(shape: tuple[int, ...]) -> None:
    with pytest.raises(PreprocessSpecError, match=f"expected an H x W x 1\\|3\\|4 image, got shape {re_escape(shape)}"):
        PreprocessSpec(size=(2, 2)).apply(np.zeros(shape, np.uint8))


@pytest.mark.parametrize("shape", [(), (5,), (1, 4, 4, 3), (4, 4, 2), (4, 4, 5)])
def test_apply_refuses_wrong_rank_or_channels(shape: tuple[int, ...]) -> None:
    with pytest.raises(PreprocessSpecError, match=f"got shape {re_escape(shape)}"):
        PreprocessSpec(size=(2, 2)).apply(np.zeros(shape, np.uint8))


def test_apply_needs_size() -> None:
    with pytest.raises(PreprocessSpecError, match="size is not set"):
        PreprocessSpec().apply(np.zeros((2, 2, 3), np.uint8))


def test_apply_real_photo_imagenet_area() -> None:
    data = pytest.importorskip("skimage.data")
    photo = data.astronaut()  # 512 x 512 RGB
    assert photo.shape == (512, 512, 3)
    x = PreprocessSpec(size=(64, 64), interpolation="area", **IMAGENET).apply(photo)
    expected = (block_mean(photo, 8) / 255 - np.array(IMAGENET["mean"])) / np.array(IMAGENET["std"])
    # one uint8 step after normalisation is 1/(255*0.224) ~ 0.0175
    np.testing.assert_allclose(x[0], expected, atol=0.5 / (255 * 0.224) + 1e-5)
    lo, hi = PreprocessSpec(**IMAGENET).value_range
    assert lo <= x.min() and x.max() <= hi


def test_apply_real_photo_crop_bgr_nchw() -> None:
    data = pytest.importorskip("skimage.data")
    photo = data.chelsea()  # 300 x 451 RGB
    assert photo.shape == (300, 451, 3)
    # square input: the region is 300x300 at left (451-300)//2 = 75, then halved to 150x150
    x = PreprocessSpec(size=(150, 150), crop="center", color="bgr", layout="nchw", interpolation="area").apply(photo)
    assert x.shape == (1, 3, 150, 150)
    expected = block_mean(photo[:, 75:375], 2)[:, :, ::-1].transpose(2, 0, 1) / 255
    np.testing.assert_allclose(x[0], expected, atol=0.51 / 255)


# ----- (de)serialisation ---------------------------------------------------------------

def test_to_dict_contents() -> None:
    d = PreprocessSpec(size=(224, 224), crop="center", crop_fraction=0.875, **IMAGENET).to_dict()
    assert d["size"] == [224, 224]
    assert d["mean"] == [0.485, 0.456, 0.406] and d["std"] == [0.229, 0.224, 0.225]
    assert d["value_range"] == pytest.approx([-2.1179, 2.64], abs=1e-4)
    assert set(d) == {f.name for f in dataclasses.fields(PreprocessSpec)} | {"value_range"}
    assert PreprocessSpec().to_dict()["size"] is None


@pytest.mark.parametrize(
    "spec",
    [
        PreprocessSpec(),
        PreprocessSpec(size=(32, 48), color="bgr", layout="nchw", resize_mode="letterbox", crop="center",
                       crop_fraction=0.875, interpolation="area", scale=1 / 127.5, mean=1.0, std=1.0, pad_value=114),
        PreprocessSpec(size=(28, 28), color="gray", **{"mean": 0.1307, "std": 0.3081}),
    ],
)
def test_dict_round_trip(spec: PreprocessSpec) -> None:
    d = spec.to_dict()
    assert PreprocessSpec.from_dict(d) == spec
    assert PreprocessSpec.from_dict(json.loads(json.dumps(d))) == spec  # as stored in a manifest


def test_from_dict_ignores_value_range() -> None:
    spec = PreprocessSpec.from_dict({"size": [8, 8], "value_range": [-100.0, 100.0]})
    assert spec.size == (8, 8) and spec.value_range == pytest.approx((0.0, 1.0))


def test_from_dict_unknown_key_with_suggestion() -> None:
    with pytest.raises(PreprocessSpecError) as exc:
        PreprocessSpec.from_dict({"colour": "rgb"}, where="my.toml")
    msg = str(exc.value)
    assert 'unknown key "colour" in my.toml.' in msg
    assert 'Did you mean "color"?' in msg
    allowed = "color, crop, crop_fraction, interpolation, layout, mean, pad_value, resize_mode, scale, size, std"
    assert f"Allowed keys: {allowed}" in msg


def test_from_dict_bad_value_is_spec_error() -> None:
    with pytest.raises(PreprocessSpecError, match='color must be one of rgb, bgr, gray; got "rbg". Did you mean "rgb"'):
        PreprocessSpec.from_dict({"color": "rbg"})
    with pytest.raises(PreprocessSpecError, match="size must be two positive integers"):
        PreprocessSpec.from_dict({"size": ["a", "b"]})


# ----- from_toml -----------------------------------------------------------------------

def test_from_toml_preprocess_table(tmp_path: Path) -> None:
    f = tmp_path / "spec.toml"
    f.write_text(
        'name = "ignored: not in the [preprocess] table"\n'
        "[preprocess]\n"
        "size = [224, 224]\ncolor = \"bgr\"\ncrop = \"center\"\ncrop_fraction = 0.875\n"
        "mean = [0.485, 0.456, 0.406]\nstd = [0.229, 0.224, 0.225]\n",
        encoding="utf-8",
    )
    spec = PreprocessSpec.from_toml(f)
    assert spec == PreprocessSpec(size=(224, 224), color="bgr", crop="center", crop_fraction=0.875, **IMAGENET)


def test_from_toml_top_level_keys(tmp_path: Path) -> None:
    f = tmp_path / "spec.toml"
    f.write_text('color = "gray"\nscale = 1.0\nmean = 127.5\nstd = 127.5\nlayout = "nchw"\n', encoding="utf-8")
    spec = PreprocessSpec.from_toml(str(f))
    assert spec == PreprocessSpec(color="gray", layout="nchw", scale=1.0, mean=127.5, std=127.5)
    assert spec.value_range == pytest.approx((-1.0, 1.0))


def test_from_toml_round_trip_of_to_dict(tmp_path: Path) -> None:
    spec = PreprocessSpec(size=(10, 20), resize_mode="letterbox", pad_value=3)
    lines = [f"{k} = {v!r}".replace("'", '"') for k, v in spec.to_dict().items() if v is not None]
    f = tmp_path / "spec.toml"
    f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert PreprocessSpec.from_toml(f) == spec  # value_range is in the file and ignored


def test_from_toml_unknown_key_names_file(tmp_path: Path) -> None:
    f = tmp_path / "spec.toml"
    f.write_text("[preprocess]\nresize = \"stretch\"\n", encoding="utf-8")
    with pytest.raises(PreprocessSpecError, match=f'unknown key "resize" in {re_escape(f)}. Did you mean "size"?'):
        PreprocessSpec.from_toml(f)


def test_from_toml_malformed(tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text("[preprocess\nsize = [1, 2\n", encoding="utf-8")
    with pytest.raises(PreprocessSpecError, match=f"{re_escape(f)} is not valid TOML"):
        PreprocessSpec.from_toml(f)


def test_from_toml_not_utf8(tmp_path: Path) -> None:
    f = tmp_path / "latin1.toml"
    f.write_bytes(b'color = "\xe9"\n')
    with pytest.raises(PreprocessSpecError, match=f"{re_escape(f)} is not valid TOML"):
        PreprocessSpec.from_toml(f)


def test_from_toml_missing_file(tmp_path: Path) -> None:
    f = tmp_path / "nope.toml"
    with pytest.raises(PreprocessSpecError, match=f"preprocess spec file not found: {re_escape(f)}"):
        PreprocessSpec.from_toml(f)


def test_from_toml_directory(tmp_path: Path) -> None:
    with pytest.raises(PreprocessSpecError, match=f"cannot read preprocess spec file {re_escape(tmp_path)}"):
        PreprocessSpec.from_toml(tmp_path)


def test_from_toml_preprocess_not_a_table(tmp_path: Path) -> None:
    f = tmp_path / "spec.toml"
    f.write_text("preprocess = 3\n", encoding="utf-8")
    with pytest.raises(PreprocessSpecError, match=r"'preprocess' must be a table"):
        PreprocessSpec.from_toml(f)


def test_value_range_is_consistent_with_apply_extremes() -> None:
    spec = PreprocessSpec(size=(1, 2), scale=1 / 255, mean=(0.5, 0.4, 0.3), std=(0.2, 0.3, 0.4))
    img = np.array([[[0, 0, 0], [255, 255, 255]]], np.uint8)
    x = spec.apply(img)
    lo, hi = spec.value_range
    assert math.isclose(float(x.min()), lo, rel_tol=1e-6) and math.isclose(float(x.max()), hi, rel_tol=1e-6)
