"""Calibration / evaluation data: .npz and image folders read, checked against the model, hashed."""

from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from edgeserve.datasets import RECOMMENDED_CALIBRATION_SAMPLES, SampleSet, load_calibration, load_eval
from edgeserve.errors import CalibrationDataError, PreprocessSpecError
from edgeserve.preprocess import PreprocessSpec
from edgeserve.sources import TensorInfo

GRAY8 = TensorInfo("image", (None, 8, 8, 1), "float32")
RGB8 = TensorInfo("image", (None, 8, 8, 3), "float32")
META = TensorInfo("meta", (None, 3), "float32")
LOGGER = "edgeserve.datasets"


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(7)


def npz(path: Path, *args: np.ndarray, **arrays: np.ndarray) -> Path:
    np.savez(path, *args, **arrays)
    return path


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def x_gray(rng: np.random.Generator, n: int = 120) -> np.ndarray:
    return rng.random((n, 8, 8, 1), dtype=np.float32)


# ----- no data / random data -----------------------------------------------------------

def test_no_path_explains_why_random_is_wrong() -> None:
    with pytest.raises(CalibrationDataError) as exc:
        load_calibration(None, [GRAY8])
    msg = str(exc.value)
    assert "needs calibration data" in msg
    assert "Random data gives ranges unlike real inputs" in msg and "accuracy drops" in msg
    assert "--calib-random" in msg


def test_random_ok_gives_100_seeded_samples(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        s = load_calibration(None, [GRAY8, META], random_ok=True, seed=3)
    assert "calibrating on random data" in caplog.text
    assert len(s) == RECOMMENDED_CALIBRATION_SAMPLES == 100
    assert s.origin == "random" and s.path is None and s.labels is None
    assert [x.shape for x in s.inputs] == [(100, 8, 8, 1), (100, 3)]
    assert all(x.dtype == np.float32 and 0 <= x.min() and x.max() < 1 for x in s.inputs)
    again = load_calibration(None, [GRAY8, META], random_ok=True, seed=3)
    np.testing.assert_array_equal(again.inputs[0], s.inputs[0])
    assert again.sha256 == s.sha256
    other = load_calibration(None, [GRAY8, META], random_ok=True, seed=4)
    assert other.sha256 != s.sha256 and not np.array_equal(other.inputs[0], s.inputs[0])


def test_random_needs_fixed_shape() -> None:
    dynamic = TensorInfo("image", (None, None, None, 3), "float32")
    with pytest.raises(CalibrationDataError, match=r"input image with dynamic shape \(None, None, None, 3\)"):
        load_calibration(None, [dynamic], random_ok=True)


def test_path_wins_over_random_ok(tmp_path: Path, rng: np.random.Generator) -> None:
    s = load_calibration(npz(tmp_path / "c.npz", x=x_gray(rng)), [GRAY8], random_ok=True)
    assert s.origin == "npz"


# ----- .npz ----------------------------------------------------------------------------

def test_npz_under_x(tmp_path: Path, rng: np.random.Generator) -> None:
    x = x_gray(rng)
    f = npz(tmp_path / "c.npz", x=x, other=np.zeros(3))
    s = load_calibration(f, [GRAY8])
    assert s.origin == "npz" and s.path == str(f) and s.labels is None and len(s) == 120
    np.testing.assert_array_equal(s.inputs[0], x)
    assert s.inputs[0].dtype == np.float32 and s.inputs[0].flags.c_contiguous


def test_npz_under_input_name(tmp_path: Path, rng: np.random.Generator) -> None:
    x = x_gray(rng)
    s = load_calibration(npz(tmp_path / "c.npz", image=x, other=np.zeros(3)), [GRAY8])
    np.testing.assert_array_equal(s.inputs[0], x)


def test_npz_x_preferred_over_input_name(tmp_path: Path, rng: np.random.Generator) -> None:
    x, named = x_gray(rng), x_gray(rng)
    s = load_calibration(npz(tmp_path / "c.npz", image=named, x=x), [GRAY8])
    np.testing.assert_array_equal(s.inputs[0], x)


def test_npz_single_unnamed_array(tmp_path: Path, rng: np.random.Generator) -> None:
    x = x_gray(rng)
    s = load_calibration(npz(tmp_path / "c.npz", x), [GRAY8])  # saved as arr_0
    np.testing.assert_array_equal(s.inputs[0], x)


def test_npz_ambiguous_keys_listed(tmp_path: Path, rng: np.random.Generator) -> None:
    f = npz(tmp_path / "c.npz", a=x_gray(rng), b=x_gray(rng))
    with pytest.raises(CalibrationDataError, match=r"expected the input under 'x' or 'image', found keys \['a', 'b'\]"):
        load_calibration(f, [GRAY8])


def test_npz_only_labels_is_not_inputs(tmp_path: Path) -> None:
    f = npz(tmp_path / "c.npz", y=np.zeros(120))
    with pytest.raises(CalibrationDataError, match=r"found keys \[\]"):
        load_calibration(f, [GRAY8])


def test_npz_multi_input_by_name(tmp_path: Path, rng: np.random.Generator) -> None:
    image, meta = x_gray(rng), rng.random((120, 3))
    s = load_calibration(npz(tmp_path / "c.npz", meta=meta, image=image), [GRAY8, META])
    assert len(s.inputs) == 2
    np.testing.assert_array_equal(s.inputs[0], image)
    np.testing.assert_allclose(s.inputs[1], meta.astype(np.float32))
    assert s.inputs[1].dtype == np.float32  # float64 data for a float32 input


def test_npz_multi_input_missing_name_listed(tmp_path: Path, rng: np.random.Generator) -> None:
    f = npz(tmp_path / "c.npz", image=x_gray(rng), x=rng.random((120, 3)))
    with pytest.raises(CalibrationDataError) as exc:
        load_calibration(f, [GRAY8, META])
    msg = str(exc.value)
    assert "the model has inputs ['image', 'meta']; missing ['meta'] (found ['image', 'x'])" in msg
    assert str(f) in msg


def test_npz_multi_input_different_counts(tmp_path: Path, rng: np.random.Generator) -> None:
    f = npz(tmp_path / "c.npz", image=x_gray(rng, 120), meta=rng.random((119, 3)))
    with pytest.raises(CalibrationDataError, match=r"inputs have different sample counts \[120, 119\]"):
        load_calibration(f, [GRAY8, META])


@pytest.mark.parametrize("shape", [(10, 8, 8, 3), (10, 8, 8), (10, 1, 8, 8), (10, 64)])
def test_npz_shape_mismatch_names_both(tmp_path: Path, shape: tuple[int, ...]) -> None:
    f = npz(tmp_path / "c.npz", x=np.zeros(shape, np.float32))
    with pytest.raises(CalibrationDataError) as exc:
        load_calibration(f, [GRAY8])
    msg = str(exc.value)
    assert f"has shape {shape}" in msg
    assert "the model input 'image' expects (N, 8, 8, 1)" in msg


def test_npz_dynamic_dims_accept_any_size(tmp_path: Path, rng: np.random.Generator) -> None:
    dynamic = TensorInfo("image", (None, None, None, 1), "float32")
    s = load_calibration(npz(tmp_path / "c.npz", x=rng.random((120, 5, 7, 1))), [dynamic])
    assert s.inputs[0].shape == (120, 5, 7, 1)
    with pytest.raises(CalibrationDataError, match=r"expects \(N, \?, \?, 1\)"):
        load_calibration(npz(tmp_path / "d.npz", x=np.zeros((3, 5, 7, 2))), [dynamic])


def test_npz_nan_inf_counted(tmp_path: Path, rng: np.random.Generator) -> None:
    x = x_gray(rng)
    x[0, 0, 0, 0] = x[5, 1, 2, 0] = x[9, 7, 7, 0] = np.nan
    x[1, 0, 0, 0], x[2, 0, 0, 0] = np.inf, -np.inf
    with pytest.raises(CalibrationDataError, match=r"c.npz:x contains 5 NaN/Inf values; calibration needs finite"):
        load_calibration(npz(tmp_path / "c.npz", x=x), [GRAY8])


def test_npz_float64_overflowing_float32_is_inf(tmp_path: Path) -> None:
    x = np.zeros((120, 8, 8, 1))
    x[0, 0, 0, 0] = 1e300
    with pytest.raises(CalibrationDataError, match="contains 1 NaN/Inf"):
        load_calibration(npz(tmp_path / "c.npz", x=x), [GRAY8])


@pytest.mark.parametrize("arr", [np.full((3, 8, 8, 1), "abc"), np.zeros((3, 8, 8, 1), np.complex64)])
def test_npz_non_numeric_refused(tmp_path: Path, arr: np.ndarray) -> None:
    with pytest.raises(CalibrationDataError, match=f"c.npz:x has dtype {re.escape(str(arr.dtype))}; expected numbers"):
        load_calibration(npz(tmp_path / "c.npz", x=arr), [GRAY8])


def test_npz_object_array_refused_without_unpickling(tmp_path: Path) -> None:
    f = tmp_path / "c.npz"
    arr = np.empty(3, dtype=object)
    arr[:] = [1, "a", None]
    np.savez(f, x=arr)
    with pytest.raises(CalibrationDataError, match=f"cannot read {re.escape(str(f))} as .npz"):
        load_calibration(f, [GRAY8])


def test_npz_integer_and_bool_data_become_float32(tmp_path: Path, rng: np.random.Generator) -> None:
    x = rng.integers(0, 256, (120, 8, 8, 1), dtype=np.uint8)
    s = load_calibration(npz(tmp_path / "c.npz", x=x), [GRAY8])
    assert s.inputs[0].dtype == np.float32
    np.testing.assert_array_equal(s.inputs[0], x)
    b = load_calibration(npz(tmp_path / "b.npz", x=x > 127), [GRAY8])
    assert b.inputs[0].dtype == np.float32 and set(np.unique(b.inputs[0])) <= {0.0, 1.0}


def test_npz_integer_input_keeps_dtype(tmp_path: Path, rng: np.random.Generator) -> None:
    ids = TensorInfo("ids", (None, 4), "int32")
    x = rng.integers(0, 100, (120, 4), dtype=np.int32)
    s = load_calibration(npz(tmp_path / "c.npz", x=x), [ids])
    assert s.inputs[0].dtype == np.int32


def test_npz_empty_refused(tmp_path: Path) -> None:
    with pytest.raises(CalibrationDataError, match="c.npz:x holds no samples"):
        load_calibration(npz(tmp_path / "c.npz", x=np.zeros((0, 8, 8, 1), np.float32)), [GRAY8])


def test_npz_scalar_refused(tmp_path: Path) -> None:
    scalar_input = TensorInfo("t", (None,), "float32")
    with pytest.raises(CalibrationDataError, match="c.npz:x is a single value"):
        load_calibration(npz(tmp_path / "c.npz", x=np.float32(3)), [scalar_input])


def test_few_samples_warn(tmp_path: Path, rng: np.random.Generator, caplog: pytest.LogCaptureFixture) -> None:
    f = npz(tmp_path / "c.npz", x=x_gray(rng, 10))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        s = load_calibration(f, [GRAY8])
    assert len(s) == 10
    [record] = [r for r in caplog.records if r.name == LOGGER]
    assert record.levelno == logging.WARNING
    assert record.getMessage() == f"only 10 calibration samples in {f}; 100 or more give stable int8 ranges"


def test_enough_samples_do_not_warn(tmp_path: Path, rng: np.random.Generator, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        load_calibration(npz(tmp_path / "c.npz", x=x_gray(rng, 100)), [GRAY8])
    assert not [r for r in caplog.records if r.name == LOGGER]


def test_max_samples_truncates(tmp_path: Path, rng: np.random.Generator, caplog: pytest.LogCaptureFixture) -> None:
    x = x_gray(rng, 150)
    f = npz(tmp_path / "c.npz", x=x, y=np.arange(150))
    s = load_calibration(f, [GRAY8], max_samples=120)
    assert len(s) == 120 and len(s.labels) == 120  # type: ignore[arg-type]
    np.testing.assert_array_equal(s.inputs[0], x[:120])
    assert load_calibration(f, [GRAY8], max_samples=1000).inputs[0].shape[0] == 150
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert len(load_calibration(f, [GRAY8], max_samples=5)) == 5
    assert "only 5 calibration samples" in caplog.text


@pytest.mark.parametrize("bad", [0, -5])
def test_max_samples_must_be_positive(tmp_path: Path, rng: np.random.Generator, bad: int) -> None:
    f = npz(tmp_path / "c.npz", x=x_gray(rng))
    with pytest.raises(CalibrationDataError, match=f"max_samples must be at least 1, got {bad}"):
        load_calibration(f, [GRAY8], max_samples=bad)


def test_missing_file(tmp_path: Path) -> None:
    missing = re.escape(str(tmp_path / "no.npz"))
    with pytest.raises(CalibrationDataError, match=f"calibration data not found: {missing}"):
        load_calibration(tmp_path / "no.npz", [GRAY8])
    with pytest.raises(CalibrationDataError, match="evaluation data not found"):
        load_eval(tmp_path / "no.npz", [GRAY8])


def test_corrupt_npz(tmp_path: Path, rng: np.random.Generator) -> None:
    f = tmp_path / "c.npz"
    f.write_bytes(rng.integers(0, 256, 4096, dtype=np.uint8).tobytes())
    with pytest.raises(CalibrationDataError, match=f"cannot read {re.escape(str(f))} as .npz"):
        load_calibration(f, [GRAY8])
    with pytest.raises(CalibrationDataError, match="cannot read .* as .npz"):
        load_eval(f, [GRAY8])


def test_truncated_npz(tmp_path: Path, rng: np.random.Generator) -> None:
    f = npz(tmp_path / "c.npz", x=x_gray(rng))
    f.write_bytes(f.read_bytes()[:2000])
    with pytest.raises(CalibrationDataError, match="cannot read .* as .npz"):
        load_calibration(f, [GRAY8])


def test_input_file_not_modified(tmp_path: Path, rng: np.random.Generator) -> None:
    f = npz(tmp_path / "c.npz", x=x_gray(rng), y=np.arange(120))
    before, mtime = file_sha256(f), f.stat().st_mtime_ns
    s = load_calibration(f, [GRAY8])
    s.inputs[0][:] = 0  # the loaded arrays are the caller's, not views of the file
    load_eval(f, [GRAY8])
    assert file_sha256(f) == before and f.stat().st_mtime_ns == mtime
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.npz"]


def test_npz_sha256_is_the_file_hash_and_stable(tmp_path: Path, rng: np.random.Generator) -> None:
    x = x_gray(rng)
    f = npz(tmp_path / "c.npz", x=x)
    a, b = load_calibration(f, [GRAY8]), load_calibration(f, [GRAY8])
    assert a.sha256 == b.sha256 == file_sha256(f)
    x2 = x.copy()
    x2[0, 0, 0, 0] += 0.5
    g = npz(tmp_path / "d.npz", x=x2)
    assert load_calibration(g, [GRAY8]).sha256 != a.sha256


# ----- evaluation data ---------------------------------------------------------------

def test_eval_with_labels(tmp_path: Path, rng: np.random.Generator) -> None:
    x, y = x_gray(rng, 30), rng.integers(0, 10, 30)
    s = load_eval(npz(tmp_path / "e.npz", x=x, y=y), [GRAY8])
    np.testing.assert_array_equal(s.labels, y)  # type: ignore[arg-type]
    np.testing.assert_array_equal(s.inputs[0], x)
    assert s.origin == "npz"


def test_eval_without_y_refused(tmp_path: Path, rng: np.random.Generator) -> None:
    f = npz(tmp_path / "e.npz", x=x_gray(rng, 30))
    with pytest.raises(CalibrationDataError, match=r"evaluation data needs labels under the key 'y' \(found \['x'\]\)"):
        load_eval(f, [GRAY8])


def test_eval_label_count_mismatch(tmp_path: Path, rng: np.random.Generator) -> None:
    f = npz(tmp_path / "e.npz", x=x_gray(rng, 30), y=np.zeros(29))
    with pytest.raises(CalibrationDataError, match="y has 29 labels for 30 samples"):
        load_eval(f, [GRAY8])
    with pytest.raises(CalibrationDataError, match="y has 29 labels for 30 samples"):
        load_calibration(f, [GRAY8])  # labels in a calibration file are checked too


def test_eval_scalar_label_refused(tmp_path: Path, rng: np.random.Generator) -> None:
    f = npz(tmp_path / "e.npz", x=x_gray(rng, 30), y=np.int64(3))
    with pytest.raises(CalibrationDataError, match=r"y is a single value; expected one label per sample \(30\)"):
        load_eval(f, [GRAY8])


def test_eval_nan_labels_refused(tmp_path: Path, rng: np.random.Generator) -> None:
    y = np.zeros(30)
    y[4] = np.nan
    with pytest.raises(CalibrationDataError, match="y contains NaN or Inf"):
        load_eval(npz(tmp_path / "e.npz", x=x_gray(rng, 30), y=y), [GRAY8])


def test_eval_directory_refused(tmp_path: Path) -> None:
    with pytest.raises(CalibrationDataError, match="evaluation data must be an .npz file with x and y; got a dir"):
        load_eval(tmp_path, [GRAY8])


# ----- image folders ------------------------------------------------------------------

def write_png(path: Path, arr: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path)
    return path


@pytest.fixture
def image_folder(tmp_path: Path, rng: np.random.Generator) -> tuple[Path, dict[str, np.ndarray]]:
    """RGB PNGs of several sizes, some in subfolders, plus files that are not images."""
    root = tmp_path / "images"
    imgs = {
        "b.png": rng.integers(0, 256, (16, 16, 3), dtype=np.uint8),
        "a.png": rng.integers(0, 256, (20, 12, 3), dtype=np.uint8),
        "cats/c.png": rng.integers(0, 256, (9, 31, 3), dtype=np.uint8),
        "cats/deep/d.PNG": rng.integers(0, 256, (8, 8, 3), dtype=np.uint8),
        "dogs/e.png": rng.integers(0, 256, (40, 30, 3), dtype=np.uint8),
    }
    for rel, arr in imgs.items():
        write_png(root / rel, arr)
    (root / "notes.txt").write_text("not an image")
    (root / "labels.csv").write_text("a,1\n")
    (root / "folder.png").mkdir()  # a directory with an image suffix is not an image
    return root, imgs


@pytest.mark.parametrize(
    "info, spec",
    [
        (RGB8, None),
        (RGB8, PreprocessSpec(color="bgr", crop="center", crop_fraction=0.875, mean=(0.485, 0.456, 0.406),
                              std=(0.229, 0.224, 0.225))),
        (TensorInfo("image", (None, 3, 8, 8), "float32"), PreprocessSpec(layout="nchw", resize_mode="letterbox")),
        (GRAY8, PreprocessSpec(color="gray")),
    ],
)
def test_image_folder_equals_spec_apply(
    image_folder: tuple[Path, dict[str, np.ndarray]], info: TensorInfo, spec: PreprocessSpec | None
) -> None:
    root, imgs = image_folder
    s = load_calibration(root, [info], spec)
    assert s.origin == "images" and s.path == str(root) and s.labels is None
    bound = (spec or PreprocessSpec()).bind_to_input(info.shape)
    order = sorted(imgs, key=lambda rel: root / rel)  # files are read in sorted path order
    expected = np.stack([bound.apply(imgs[rel])[0] for rel in order])
    assert s.inputs[0].shape == (5, *info.shape[1:])
    # exact: for gray models the loader must not use PIL's own gray conversion (it rounds
    # differently from OpenCV's, which the runtime uses on camera frames)
    np.testing.assert_array_equal(s.inputs[0], expected)


def test_image_folder_gray_and_rgba_pngs(tmp_path: Path, rng: np.random.Generator) -> None:
    gray = rng.integers(0, 256, (8, 8), dtype=np.uint8)
    rgba = rng.integers(0, 256, (8, 8, 4), dtype=np.uint8)
    write_png(tmp_path / "1.png", gray)
    write_png(tmp_path / "2.png", rgba)
    s = load_calibration(tmp_path, [RGB8])
    np.testing.assert_array_equal(s.inputs[0][0], PreprocessSpec(size=(8, 8)).apply(gray)[0])
    np.testing.assert_array_equal(s.inputs[0][1], PreprocessSpec(size=(8, 8)).apply(rgba)[0])
    g = load_calibration(tmp_path, [GRAY8], PreprocessSpec(color="gray"))
    np.testing.assert_allclose(g.inputs[0][0, :, :, 0], gray / 255, rtol=1e-6)


def test_image_folder_gray_model_uses_the_runtime_gray_conversion(tmp_path: Path, rng: np.random.Generator) -> None:
    import cv2

    rgb = rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)
    pil_gray = np.asarray(Image.fromarray(rgb).convert("L"))
    # precondition: PIL rounds some pixels differently from OpenCV, so the check below has teeth
    assert np.count_nonzero(pil_gray != cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)) > 0
    write_png(tmp_path / "frame.png", rgb)
    info = TensorInfo("image", (None, 64, 64, 1), "float32")
    s = load_calibration(tmp_path, [info], PreprocessSpec(color="gray"), quantizes=False)  # one image: decoding only
    np.testing.assert_array_equal(s.inputs[0][0], PreprocessSpec(size=(64, 64), color="gray").apply(rgb)[0])


def test_image_folder_jpeg_uppercase_suffix(tmp_path: Path, rng: np.random.Generator) -> None:
    f = tmp_path / "photo.JPG"
    Image.fromarray(rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)).save(f, format="JPEG")
    s = load_calibration(tmp_path, [RGB8], quantizes=False)  # one image: decoding only
    with Image.open(f) as im:
        decoded = np.asarray(im.convert("RGB"))
    np.testing.assert_array_equal(s.inputs[0][0], PreprocessSpec(size=(8, 8)).apply(decoded)[0])


def test_image_folder_max_samples_and_warning(
    image_folder: tuple[Path, dict[str, np.ndarray]], caplog: pytest.LogCaptureFixture
) -> None:
    root, _ = image_folder
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        s = load_calibration(root, [RGB8], max_samples=2)
    assert len(s) == 2
    assert f"only 2 calibration samples in {root}" in caplog.text


def test_image_folder_corrupt_png_named(
    image_folder: tuple[Path, dict[str, np.ndarray]], rng: np.random.Generator
) -> None:
    root, _ = image_folder
    bad = root / "dogs" / "broken.png"
    bad.write_bytes(rng.integers(0, 256, 300, dtype=np.uint8).tobytes())
    with pytest.raises(CalibrationDataError, match=f"cannot read image {re.escape(str(bad))}"):
        load_calibration(root, [RGB8])


def test_image_folder_truncated_png_named(tmp_path: Path, rng: np.random.Generator) -> None:
    f = write_png(tmp_path / "t.png", rng.integers(0, 256, (64, 64, 3), dtype=np.uint8))
    f.write_bytes(f.read_bytes()[:400])
    with pytest.raises(CalibrationDataError, match=f"cannot read image {re.escape(str(f))}"):
        load_calibration(tmp_path, [RGB8])


def test_image_folder_without_images(tmp_path: Path) -> None:
    (tmp_path / "readme.txt").write_text("x")
    where = re.escape(str(tmp_path))
    with pytest.raises(CalibrationDataError, match=f"no images \\(.png, .jpg.*\\) found under {where}"):
        load_calibration(tmp_path, [RGB8])


def test_image_folder_two_input_model_refused(image_folder: tuple[Path, dict[str, np.ndarray]]) -> None:
    root, _ = image_folder
    with pytest.raises(CalibrationDataError, match="image folder can calibrate a single-input model; this one has 2"):
        load_calibration(root, [RGB8, META])


def test_image_folder_spec_mismatch_is_spec_error(image_folder: tuple[Path, dict[str, np.ndarray]]) -> None:
    root, _ = image_folder
    with pytest.raises(PreprocessSpecError, match=r"not an image for color 'rgb' \(3 channel"):
        load_calibration(root, [GRAY8])  # default spec is RGB, the model wants one channel
    with pytest.raises(PreprocessSpecError, match="spec size 16x16 does not match the model input 8x8"):
        load_calibration(root, [RGB8], PreprocessSpec(size=(16, 16)))


def test_image_folder_sha256(image_folder: tuple[Path, dict[str, np.ndarray]]) -> None:
    root, imgs = image_folder
    first = load_calibration(root, [RGB8]).sha256
    assert first is not None and len(first) == 64
    assert load_calibration(root, [RGB8]).sha256 == first
    (root / "notes.txt").write_text("changed")  # non-image files are not data
    assert load_calibration(root, [RGB8]).sha256 == first
    changed = imgs["a.png"].copy()
    changed[0, 0, 0] ^= 1
    write_png(root / "a.png", changed)
    assert load_calibration(root, [RGB8]).sha256 != first


def test_image_folder_not_modified(image_folder: tuple[Path, dict[str, np.ndarray]]) -> None:
    root, _ = image_folder
    before = {p: file_sha256(p) for p in root.rglob("*") if p.is_file()}
    load_calibration(root, [RGB8], PreprocessSpec(color="bgr"))
    assert {p: file_sha256(p) for p in root.rglob("*") if p.is_file()} == before


# ----- SampleSet ----------------------------------------------------------------------

def sample_set(rng: np.random.Generator, n: int = 5, labels: bool = True) -> SampleSet:
    return SampleSet(
        (x_gray(rng, n), rng.random((n, 3), dtype=np.float32)),
        np.arange(n) if labels else None, "npz", "data.npz", "ab" * 32,
    )


def test_batch1_yields_batch1_lists(rng: np.random.Generator) -> None:
    s = sample_set(rng)
    batches = list(s.batch1())
    assert len(batches) == len(s) == 5
    for i, batch in enumerate(batches):
        assert isinstance(batch, list) and len(batch) == 2
        assert batch[0].shape == (1, 8, 8, 1) and batch[1].shape == (1, 3)
        np.testing.assert_array_equal(batch[0][0], s.inputs[0][i])
        np.testing.assert_array_equal(batch[1][0], s.inputs[1][i])


def test_batch1_from_loaded_npz(tmp_path: Path, rng: np.random.Generator) -> None:
    x = x_gray(rng, 3)
    s = load_calibration(npz(tmp_path / "c.npz", x=x), [GRAY8])
    got = [b[0] for b in s.batch1()]
    assert [len(b) for b in s.batch1()] == [1, 1, 1]
    np.testing.assert_array_equal(np.concatenate(got), x)


def test_head(rng: np.random.Generator) -> None:
    s = sample_set(rng)
    h = s.head(2)
    assert len(h) == 2 and [x.shape[0] for x in h.inputs] == [2, 2]
    np.testing.assert_array_equal(h.labels, [0, 1])  # type: ignore[arg-type]
    np.testing.assert_array_equal(h.inputs[0], s.inputs[0][:2])
    assert (h.origin, h.path, h.sha256) == (s.origin, s.path, s.sha256)
    assert len(s) == 5  # the original is unchanged
    assert len(s.head(50)) == 5
    assert sample_set(rng, labels=False).head(3).labels is None


def test_describe(rng: np.random.Generator) -> None:
    samples = sample_set(rng, n=4)
    ranges = [[float(x.min()), float(x.max())] for x in samples.inputs]
    assert samples.describe() == {"origin": "npz", "path": "data.npz", "sha256": "ab" * 32, "samples": 4,
                                  "value_ranges": ranges}


def test_random_data_warns_only_where_it_sets_int8_ranges(caplog: pytest.LogCaptureFixture) -> None:
    """An fp16 Core ML conversion scores on the samples but quantizes nothing with them."""
    from edgeserve.converters import get_converter

    coreml, tflite = get_converter("coreml"), get_converter("tflite-int8")
    assert not coreml.uses_calibration({"coreml_precision": "fp16"})
    assert not coreml.uses_calibration({})
    assert coreml.uses_calibration({"coreml_precision": "w8a8"}) and tflite.uses_calibration({})
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        load_calibration(None, [GRAY8], random_ok=True, quantizes=False)
    assert "calibrating on random data" not in caplog.text

