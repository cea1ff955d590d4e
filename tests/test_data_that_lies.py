"""Calibration and evaluation data that lies (issue 47): a single value, labels that cannot score
the output, image headers claiming 10^10 pixels, an .npz with a huge unused member."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from edgeserve.datasets import load_calibration
from edgeserve.errors import CalibrationDataError
from edgeserve.preprocess import PreprocessSpec
from edgeserve.sources import TensorInfo

GRAY8 = TensorInfo("image", (None, 8, 8, 1), "float32")
META = TensorInfo("meta", (None, 3), "float32")


def test_calibration_that_holds_a_single_value_is_refused(tmp_path: Path) -> None:
    """One black image (or one constant sample) set an int8 input scale of 0.0, and the run was
    said ok at 8.3 % accuracy against 98.2 %: refused, naming the value. A constant input beside
    one that varies (a recurrent state at zero) is taken, and so is data nothing quantizes with."""
    black = tmp_path / "black.npz"
    np.savez(black, x=np.zeros((2, 8, 8, 1), np.float32))
    with pytest.raises(CalibrationDataError, match=r"holds a single value \('image' = 0\): int8 needs the range"):
        load_calibration(black, [GRAY8])
    one = tmp_path / "one.npz"
    np.savez(one, x=np.random.default_rng(1).random((1, 8, 8, 1), np.float32))
    with pytest.raises(CalibrationDataError, match=r"one.npz gives one calibration sample: int8 ranges taken"):
        load_calibration(one, [GRAY8])  # varied values, and still one input's ranges
    grey = tmp_path / "grey.npz"
    np.savez(grey, x=np.full((300, 8, 8, 1), 0.5, np.float32))  # many samples, still one value
    with pytest.raises(CalibrationDataError, match="'image' = 0.5"):
        load_calibration(grey, [GRAY8])
    assert len(load_calibration(black, [GRAY8], quantizes=False)) == 2
    assert len(load_calibration(one, [GRAY8], quantizes=False)) == 1  # nothing quantizes with it
    mixed = tmp_path / "mixed.npz"
    rng = np.random.default_rng(0)
    np.savez(mixed, image=rng.random((4, 8, 8, 1), np.float32), meta=np.zeros((4, 3), np.float32))
    assert len(load_calibration(mixed, [GRAY8, META])) == 4
    folder = tmp_path / "black_images"
    folder.mkdir()
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(folder / "black.png")
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(folder / "black2.png")
    with pytest.raises(CalibrationDataError, match="holds a single value"):
        load_calibration(folder, [GRAY8], PreprocessSpec(color="gray").bind_to_input((1, 8, 8, 1)))


def test_labels_that_cannot_score_the_output_are_refused_before_any_work() -> None:
    """--eval labels that were fractions or text ended after 27 s in "cannot reshape"; class
    indices past the output's classes scored top1 0.0 and passed without a word."""
    from edgeserve.errors import InputError
    from edgeserve.quality.metrics import check_labels

    ten = (None, 10)
    check_labels(np.arange(10), ten, "eval.npz")
    check_labels(np.arange(10).astype(np.float32), ten, "eval.npz")  # whole numbers stored as floats
    check_labels(np.eye(10, dtype=np.float32), ten, "eval.npz")  # one-hot rows
    check_labels(np.linspace(0, 1, 5, dtype=np.float32), (None, 1), "eval.npz")  # a regression target
    for labels, said in ((np.array([0.5, 1.0, 2.0]), "y holds fractions (0.5) for a model whose first output has 10"),
                         (np.array(["cat", "dog"]), "y holds str"),
                         (np.array([3, 10, -1]), "2 class index(es) outside 0..9 (e.g. 10, -1)"),
                         (np.zeros((3, 4)), "expected one class index per sample")):
        with pytest.raises(InputError, match=re.escape(said)):
            check_labels(labels, ten, "eval.npz")


def _png_claiming(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height pixels, with almost no data behind it."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 10)) + chunk(b"IEND", b""))


def test_an_image_claiming_ten_billion_pixels_is_one_error(tmp_path: Path) -> None:
    """Pillow's DecompressionBombError and OpenCV's size assertion were tracebacks, in calibration
    folders and in `run --input`; each is now an error naming the file."""
    from edgeserve.errors import InputError
    from edgeserve.runtime.io.inputs import read_image

    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "bomb.png").write_bytes(_png_claiming(100_000, 100_000))
    with pytest.raises(CalibrationDataError, match=r"bomb.png says it has more pixels than Pillow decodes"):
        load_calibration(folder, [GRAY8], PreprocessSpec(color="gray").bind_to_input((1, 8, 8, 1)))
    with pytest.raises(InputError, match=r"bomb.png is not an image OpenCV decodes: .*CV_IO_MAX_IMAGE_PIXELS"):
        read_image(folder / "bomb.png")


def test_an_unused_array_in_the_npz_is_never_decompressed(tmp_path: Path) -> None:
    """An .npz holding an unused 1.5 GB array in 6.5 MB was decompressed whole (2.2 GB at its
    peak). Only the arrays the model takes are read now: here 300 MB of zeros beside the 2.5 kB
    of samples, and the loading process stays far under the size of the unused array."""
    import subprocess
    import sys

    path = tmp_path / "calib.npz"
    rng = np.random.default_rng(0)
    np.savez_compressed(path, x=rng.random((10, 8, 8, 1), np.float32), unused=np.zeros((300, 1024, 256), np.float32))
    assert path.stat().st_size < 2_000_000
    # VmHWM, not ru_maxrss: the latter keeps the high-water mark of the process before its exec,
    # which is the test process's own size (2 GB in a full run).
    probe = ("from edgeserve.datasets import load_calibration\nfrom edgeserve.sources import TensorInfo\n"
             f"s = load_calibration({str(path)!r}, [TensorInfo('image', (None, 8, 8, 1), 'float32')])\n"
             "hwm = next(l for l in open('/proc/self/status') if l.startswith('VmHWM:')).split()[1]\n"
             "print(len(s), hwm)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    samples, peak_kb = map(int, done.stdout.split())
    assert samples == 10 and peak_kb < 200_000, peak_kb  # measured 41 MB; the unused array is 300 MB


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("batched", [True, False])
def test_a_float_model_refuses_nan_and_infinity_with_or_without_the_batch_dimension(
        testdata: Path, bad: float, batched: bool) -> None:
    """A frame shaped exactly like a float model's input takes the Session's direct path (the
    engine copies it); it used to skip the finiteness check the reshaped path makes."""
    from edgeserve.errors import InputError
    from edgeserve.runtime import Session

    s = Session(testdata / "mlperf-tiny/ad01_fp32.tflite")
    d = s.inputs[0]
    assert d.dtype == np.float32 and not d.quantized
    x = np.random.default_rng(1).normal(0, 1, d.shape).astype(np.float32)
    good = s.run(x if batched else x[0])[0].copy()
    assert np.all(np.isfinite(good))
    x[0, 17] = bad
    with pytest.raises(InputError, match="NaN or infinity"):
        s.run(x if batched else x[0])
    x[0, 17] = 0.5
    assert np.all(np.isfinite(s.run(x)[0]))  # the refusal left the Session usable


class _FloatViews:
    """A CPU engine with memory of its own that it lends, as LiteRT lends an int8 model's: LiteRT
    itself never lends a float model's views (its buffers move), so this reaches the fast path."""

    def __new__(cls, name, kind, data, options):
        from edgeserve.runtime.backends.base import Backend, LentViews
        from edgeserve.runtime.backends.litert import LiteRTBackend

        class FloatViews(Backend):
            def __init__(self) -> None:
                self._inner = LiteRTBackend("litert:xnnpack", "cpu", data, options)
                self.name, self.kind, self.placement = name, kind, self._inner.placement
                self.inputs, self.outputs = self._inner.inputs, self._inner.outputs
                self._in = np.zeros(self.inputs[0].shape, self.inputs[0].dtype)
                self._out = np.zeros(self.outputs[0].shape, self.outputs[0].dtype)
                self.invokes = 0

            def input_buffer(self, i: int) -> np.ndarray:
                return self._in

            def invoke(self) -> None:
                self.invokes += 1
                buf = self._inner.input_buffer(0)
                np.copyto(buf, self._in)
                del buf
                self._inner.invoke()
                np.copyto(self._out, self._inner.read_output(0))

            def output_buffer(self, i: int) -> np.ndarray:
                return self._out

            def lend_views(self) -> LentViews:
                def copy(a: np.ndarray) -> None:
                    if a.dtype != self._in.dtype or a.shape != self._in.shape:
                        raise ValueError("another dtype or shape")
                    np.copyto(self._in, a)
                return LentViews([self._in], [self._out], self.invoke, [copy])

            def close(self) -> None:
                self._inner.close()

        return FloatViews()


def test_a_stream_step_on_a_float_model_refuses_nan_on_lent_views(testdata: Path) -> None:
    from edgeserve.errors import InputError
    from edgeserve.runtime import Session
    from edgeserve.runtime.backends.registry import register_backend, unregister_backend

    register_backend("fake:float-views", engine="litert", kind="cpu",
                     factory=lambda path, data, options: _FloatViews("fake:float-views", "cpu", data, options))
    try:
        s = Session(testdata / "mlperf-tiny/ad01_fp32.tflite", backend="fake:float-views")
        step = s.stream_step()
        x = np.random.default_rng(2).normal(0, 1, s.inputs[0].shape).astype(np.float32)
        for _ in range(3):
            want = step(x)[0].copy()
        assert step.fast  # on the lent views, where the engine's copy takes any float
        invokes = s._active.invokes
        kept = x[0, 3]
        x[0, 3] = np.nan
        with pytest.raises(InputError, match="NaN or infinity"):
            step(x)
        step.input[...] = np.inf  # written in place, no frames given
        with pytest.raises(InputError, match="NaN or infinity"):
            step()
        assert s._active.invokes == invokes  # refused before the engine ran
        x[0, 3] = kept
        assert np.array_equal(step(x)[0], want)  # and the stream goes on as before
    finally:
        unregister_backend("fake:float-views")


def test_whole_number_labels_stored_as_floats_score_as_classes() -> None:
    """check_labels lets class indices stored as floats through; the metric then took them for
    regression targets and ended in "cannot reshape array of size 16 into shape (16,12)"."""
    from edgeserve.quality.metrics import choose_metric, evaluate

    out = np.random.default_rng(3).random((16, 12)).astype(np.float32)
    labels = out.argmax(axis=1).astype(np.float32)
    assert choose_metric(None, labels, out) == "top1"
    assert evaluate("top1", out, out, labels).float == 1.0
    labels[0] = 0.5  # a fraction is no class index: a regression target (check_labels refuses it first)
    assert choose_metric(None, labels, out) == "mae"
