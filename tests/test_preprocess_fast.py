"""FramePreprocessor: the runtime's fused frame -> input tensor path.

Checked against ``plain_preprocess`` (``PreprocessSpec.apply`` then TFLite-style
quantization) on real photos, for exactness; under tracemalloc, for allocations; with
``np.shares_memory``, for where the write lands (a LiteRT interpreter's input tensor, an
ONNX Runtime IOBinding buffer).
"""

from __future__ import annotations

import itertools
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, load_script

from edgeserve.errors import InputError, PreprocessSpecError
from edgeserve.preprocess import PreprocessSpec
from edgeserve.runtime.backends.litert_run import TensorDetail
from edgeserve.runtime.io.preprocess_fast import FramePreprocessor, build_lut, plain_preprocess, round_half_away

IMAGENET = dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
GRAY_NORM = dict(mean=(0.45,), std=(0.226,))
MOBILENET = "tflm/mobilenet_v2_quantized_1x3x224x224.tflite"
# (dtype, scale, zero point): mobilenet_v2's int8 input, a [0, 1] uint8 input, float models.
DTYPES = [
    pytest.param(np.int8, 0.018631115555763245, -14, id="int8"),
    pytest.param(np.uint8, 1 / 255, 0, id="uint8"),
    pytest.param(np.float32, 0.0, 0, id="float32"),
    pytest.param(np.float16, 0.0, 0, id="float16"),
]
QUANT = [(p.values[0], p.values[1], p.values[2]) for p in DTYPES]
INTERPOLATIONS = ("bilinear", "nearest", "area", "bicubic")
GEOMETRIES = {
    "stretch": dict(resize_mode="stretch"),
    "letterbox": dict(resize_mode="letterbox", pad_value=114),
    "center": dict(crop="center", crop_fraction=0.875),
    "center-letterbox": dict(crop="center", crop_fraction=0.9, resize_mode="letterbox", pad_value=255),
}


@pytest.fixture(scope="module")
def photos() -> dict[str, np.ndarray]:
    """Five real photos of different sizes and aspect ratios (uint8 RGB)."""
    data = pytest.importorskip("skimage.data")
    datasets = pytest.importorskip("sklearn.datasets")
    china, flower = datasets.load_sample_images().images
    return {"astronaut": data.astronaut(), "chelsea": data.chelsea(), "coffee": data.coffee(),
            "china": china, "flower": flower}


def variant(photo: np.ndarray, kind: str) -> np.ndarray:
    """The photo as an RGB, RGBA, H x W gray or H x W x 1 gray frame."""
    if kind == "rgba":
        return np.dstack([photo, np.full(photo.shape[:2], 200, np.uint8)])
    if kind == "gray2d":
        return np.ascontiguousarray(photo[:, :, 1])
    if kind == "gray3d":
        return np.ascontiguousarray(photo[:, :, 1:2])
    return photo


def steps_apart(got: np.ndarray, want: np.ndarray, spec: PreprocessSpec) -> tuple[float, float]:
    """(max difference in quantisation steps, fraction of elements exactly equal).

    For a float model a "step" is one pixel level (the smallest |a| of ``x = pixel*a + b``).
    """
    assert got.shape == want.shape and got.dtype == want.dtype
    exact = float(np.mean(got == want))
    if got.dtype.kind == "f":
        level = float(np.min(np.abs(spec.channel_affine()[0])))
        return float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) / level, exact
    return float(np.max(np.abs(got.astype(np.int32) - want.astype(np.int32)))), exact


def check_against_reference(fp: FramePreprocessor, frame: np.ndarray) -> tuple[float, float]:
    out = np.full(fp.input_shape, 7, fp.dtype)  # garbage first: every element must be written
    assert fp(frame, out) is out
    steps, exact = steps_apart(out, plain_preprocess(fp.spec, frame, fp.dtype, fp.scale, fp.zero_point), fp.spec)
    # Within one step, and (the same OpenCV resize, the same float32 table arithmetic)
    # practically always bit-identical; measured 1.0 for every case here.
    assert steps <= 1 and exact >= 0.999, (fp.spec, frame.shape, steps, exact)
    return steps, exact


def litert(path: Path):
    interpreter_module = pytest.importorskip("ai_edge_litert.interpreter")
    interpreter = interpreter_module.Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    d = interpreter.get_input_details()[0]
    scale, zero_point = d["quantization"]
    return interpreter, int(d["index"]), tuple(int(v) for v in d["shape"]), np.dtype(d["dtype"]), scale, zero_point


# ----- equality with the reference on real photos ------------------------------------------

@pytest.mark.parametrize("geometry", list(GEOMETRIES))
@pytest.mark.parametrize("color", ["rgb", "bgr", "gray"])
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
def test_matches_reference_on_photos(photos, layout: str, color: str, geometry: str) -> None:
    """Every dtype x interpolation, each on a different photo and frame kind (RGB/RGBA/gray)."""
    norm = GRAY_NORM if color == "gray" else IMAGENET
    cases = itertools.product(QUANT, INTERPOLATIONS)
    frames = itertools.cycle(itertools.product(photos.values(), ("rgb", "rgba", "gray2d", "gray3d")))
    for ((dtype, scale, zp), interpolation), (photo, kind) in zip(cases, frames):
        spec = PreprocessSpec(size=(96, 128), color=color, layout=layout, interpolation=interpolation,
                              **GEOMETRIES[geometry], **norm)
        fp = FramePreprocessor(spec, dtype=dtype, scale=scale, zero_point=zp)
        check_against_reference(fp, variant(photo, kind))


@pytest.mark.parametrize("kind", ["rgb", "rgba", "gray2d"])
def test_mobilenet_configuration_is_bit_exact_on_every_photo(photos, kind: str) -> None:
    """The benchmark's configuration: int8 NCHW 224x224, ImageNet, centre crop 0.875."""
    spec = PreprocessSpec(size=(224, 224), layout="nchw", crop="center", crop_fraction=0.875, **IMAGENET)
    fp = FramePreprocessor(spec, dtype=np.int8, scale=0.018631115555763245, zero_point=-14)
    for photo in photos.values():
        assert check_against_reference(fp, variant(photo, kind)) == (0.0, 1.0)


@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("color", ["rgb", "bgr"])
def test_one_shared_table_takes_the_flat_path_and_matches(photos, layout: str, color: str) -> None:
    """A scalar mean/std gives one table for all channels (NHWC then uses one flat lookup)."""
    spec = PreprocessSpec(size=(64, 80), color=color, layout=layout, mean=(0.5,), std=(0.25,))
    fp = FramePreprocessor(spec, dtype=np.int8, scale=0.03, zero_point=3)
    assert np.array_equal(fp.lut[0], fp.lut[1]) and np.array_equal(fp.lut[0], fp.lut[2])
    for kind in ("rgb", "rgba", "gray2d"):
        check_against_reference(fp, variant(photos["coffee"], kind))


@pytest.mark.parametrize("dtype, scale, zp", DTYPES)
def test_lut_is_the_reference_arithmetic_for_every_pixel_value(dtype, scale: float, zp: int) -> None:
    """A 256-value ramp at the model size (no resize): the table alone, bit for bit, in both layouts."""
    ramp = np.stack([np.arange(256), 255 - np.arange(256), (np.arange(256) * 7) % 256], -1).astype(np.uint8)
    for layout in ("nhwc", "nchw"):
        spec = PreprocessSpec(size=(1, 256), layout=layout, **IMAGENET)
        fp = FramePreprocessor(spec, dtype=dtype, scale=scale, zero_point=zp)
        out = fp(ramp[None], np.empty(fp.input_shape, dtype))
        assert fp.lut.shape == (3, 256) and fp.lut.dtype == np.dtype(dtype)
        want = plain_preprocess(spec, ramp[None], dtype, scale, zp)
        assert out.tobytes() == want.tobytes()
        # The same table applied with np.take (the formulation in the requirement).
        planes = np.stack([np.take(fp.lut[c], ramp[:, c]) for c in range(3)])
        assert np.array_equal(out.reshape(3, 256) if layout == "nchw" else out.reshape(256, 3).T, planes)


# ----- rounding -----------------------------------------------------------------------------

def test_round_half_away_from_zero_like_tflite() -> None:
    ties = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5], np.float32)
    assert round_half_away(ties).tolist() == [-3, -2, -1, 1, 2, 3]
    assert np.round(ties).tolist() == [-2, -2, -0, 0, 2, 2]  # what np.round would do
    near = np.nextafter(ties, np.float32(0))  # just inside each tie rounds towards zero
    assert round_half_away(near).tolist() == [-2, -1, -0, 0, 1, 2]


def test_lut_rounds_ties_away_from_zero_like_tensor_detail_quantize() -> None:
    """Raw pixels with input scale 2: odd pixels land exactly on .5 ties."""
    spec = PreprocessSpec(size=(4, 4), scale=1.0)
    lut = build_lut(spec, np.int8, scale=2.0, zero_point=0)[0]
    assert lut[1] == 1 and lut[3] == 2 and lut[5] == 3  # 0.5 -> 1, 1.5 -> 2, 2.5 -> 3
    assert lut[254] == 127 and lut[255] == 127  # 127 and 127.5 -> 128, clipped
    # The tensor path (.npy inputs, calibration checks) rounds the same way, ties included.
    detail = TensorDetail("x", 0, (1, 4, 4, 1), np.dtype(np.int8), 2.0, 0)
    assert np.array_equal(lut, detail.quantize(np.arange(256, dtype=np.float32)))


def test_mobilenet_input_quantization_has_no_ties() -> None:
    """For the benchmark model the rounding choice changes nothing: no x/scale is a .5 tie."""
    spec = PreprocessSpec(size=(224, 224), **IMAGENET)
    lut = build_lut(spec, np.int8, 0.018631115555763245, -14)
    detail = TensorDetail("x", 0, (1, 224, 224, 3), np.dtype(np.int8), 0.018631115555763245, -14)
    a, b = spec.channel_affine()
    x = np.arange(256, dtype=np.float32)[None, :] * a[:, None] + b[:, None]
    assert np.array_equal(lut, detail.quantize(x))


# ----- geometry: any frame size, pads, strides -----------------------------------------------

def test_frames_of_any_size_and_switching_sizes(photos) -> None:
    """One instance, frames of changing size (more than the kept plans), each against the reference."""
    spec = PreprocessSpec(size=(96, 128), layout="nchw", resize_mode="letterbox", pad_value=30, **IMAGENET)
    fp = FramePreprocessor(spec, dtype=np.int8, scale=0.02, zero_point=-5)
    photo = photos["chelsea"]
    shapes = [(300, 451), (451, 300), (96, 128), (1, 1), (3, 500), (500, 3), (48, 64), (300, 451), (451, 300)]
    for h, w in shapes:
        frame = np.ascontiguousarray(photo[:h, :w]) if h <= 300 else np.ascontiguousarray(
            np.resize(photo, (h, w, 3)))
        check_against_reference(fp, frame)


def test_letterbox_pad_is_right_every_frame(photos) -> None:
    """The pad is read from the canvas every frame: an out overwritten in between is repaired."""
    spec = PreprocessSpec(size=(64, 64), layout="nhwc", resize_mode="letterbox", pad_value=200, **IMAGENET)
    fp = FramePreprocessor(spec, dtype=np.int8, scale=0.02, zero_point=0)
    out = np.empty(fp.input_shape, np.int8)
    frame = photos["china"]  # 427 x 640: pads above and below
    want = plain_preprocess(spec, frame, np.int8, 0.02, 0)
    for _ in range(3):
        out[...] = -99
        assert np.array_equal(fp(frame, out), want)
    assert np.array_equal(out[0, 0, 0], fp.lut[:, 200])  # the top-left pixel is pad


@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
def test_strided_and_model_sized_frames(photos, layout: str) -> None:
    """Views (flipped, every other pixel, a crop) and frames needing no resize at all."""
    spec = PreprocessSpec(size=(120, 160), layout=layout, color="bgr", **IMAGENET)
    fp = FramePreprocessor(spec, dtype=np.uint8, scale=1 / 64, zero_point=128)
    photo = photos["coffee"]  # 400 x 600
    for frame in (photo[:, ::-1], photo[::2, ::3], photo[10:130, 20:180], np.ascontiguousarray(photo[:120, :160])):
        check_against_reference(fp, frame)
    crop_spec = PreprocessSpec(size=(224, 224), layout=layout, crop="center", crop_fraction=0.875, **IMAGENET)
    fp = FramePreprocessor(crop_spec, dtype=np.int8, scale=0.02, zero_point=0)
    check_against_reference(fp, photos["astronaut"][:256, :256])  # the crop is 224 x 224: no resize


# ----- zero copy, zero allocation ---------------------------------------------------------------

# Growth below one byte a frame is no leak: anything kept per frame is an object of 16 bytes
# or more, 16,000 B over these frames. Python's free lists (tuples, floats) can keep one or two
# objects made inside the window alive across it; a fresh process saw 72 B once.
FRAMES = 1000


def _traced_growth(step, frames: int, warmup: int = 50) -> tuple[int, int]:
    """(bytes still allocated after ``frames`` more steps, peak bytes above the start).

    Warm-up runs under tracing too, so allocator free lists and caches that fill on the first
    frames are already counted in the baseline. Growth counts only allocations made with this
    file on the stack (``step`` is defined here): threads other tests left running (samplers,
    coremltools) allocate too, and must not fail this test. The peak is process-wide.
    """
    mem = np.zeros(3, np.int64)
    tracemalloc.start(50)
    try:
        for _ in itertools.repeat(None, warmup):
            step()
        before = tracemalloc.take_snapshot()
        mem[0] = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        for _ in itertools.repeat(None, frames):
            step()
        mem[1], mem[2] = tracemalloc.get_traced_memory()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    ours = [tracemalloc.Filter(True, __file__, all_frames=True),
            tracemalloc.Filter(False, tracemalloc.__file__, all_frames=True)]
    growth = sum(d.size_diff for d in after.filter_traces(ours).compare_to(before.filter_traces(ours), "filename"))
    return int(growth), int(mem[2] - mem[0])


def _allocations_over_frames(model: Path, spec_args: dict, frame: np.ndarray, invoke: bool) -> tuple[int, int]:
    """(growth, peak) of ``_traced_growth`` over 1,000 frames written into the model's input
    tensor (and, with ``invoke``, the model run on each). Runs in ``quiet_process``."""
    interpreter, index, shape, dtype, scale, zp = litert(model)
    fp = FramePreprocessor(PreprocessSpec(**spec_args).bind_to_input(shape), dtype=dtype, scale=scale, zero_point=zp)
    tensor = interpreter.tensor(index)  # hold the function, never the array, across invoke()

    def step() -> None:
        fp(frame, tensor())
        if invoke:
            interpreter.invoke()

    return _traced_growth(step, frames=FRAMES)


@pytest.fixture(scope="module")
def quiet_process():
    """A process of its own, with no thread but its main one, for ``_allocations_over_frames``.

    tracemalloc's peak is process-wide: in the test process the corpus converts in the
    background (tests/corpus.py), and the threads that watch it allocate whenever they like
    (a CI run saw a 69,863-byte peak that no frame made). A spawned child has none of them.
    """
    import concurrent.futures
    import multiprocessing

    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


def test_the_allocation_check_catches_a_leak_and_a_frame_sized_temporary() -> None:
    kept: list[np.ndarray] = []
    growth, _ = _traced_growth(lambda: kept.append(np.empty(0, np.uint8)), frames=FRAMES)
    assert growth >= 16 * FRAMES
    _, peak = _traced_growth(lambda: np.ones((96, 96, 3), np.float32).sum(), frames=10)
    assert peak >= 96 * 96 * 3 * 4


def test_mobilenet_input_1000_frames_allocate_nothing(testdata: Path, photos, quiet_process) -> None:
    interpreter, index, shape, dtype, scale, zp = litert(testdata / MOBILENET)
    spec_args = dict(layout="nchw", crop="center", crop_fraction=0.875, **IMAGENET)
    spec = PreprocessSpec(**spec_args).bind_to_input(shape)
    fp = FramePreprocessor(spec, dtype=dtype, scale=scale, zero_point=zp)
    import cv2

    frame = cv2.resize(photos["astronaut"], (640, 480), interpolation=cv2.INTER_AREA)
    tensor = interpreter.tensor(index)  # hold the function, never the array, across invoke()
    buf = tensor()
    written = fp(frame, buf)
    assert written is buf and np.shares_memory(written, tensor())
    assert np.array_equal(buf, plain_preprocess(spec, frame, dtype, scale, zp))
    del buf, written

    growth, peak = quiet_process.submit(_allocations_over_frames, testdata / MOBILENET, spec_args, frame,
                                        False).result()
    assert growth < FRAMES
    assert peak < 4096  # a few view objects; no image-sized buffer (one plane is 50,176 bytes)

    # What invoke() sees is what the reference would have set: identical model outputs.
    interpreter.invoke()
    fused_out = interpreter.get_tensor(interpreter.get_output_details()[0]["index"]).copy()
    interpreter.set_tensor(index, plain_preprocess(spec, frame, dtype, scale, zp))
    interpreter.invoke()
    assert np.array_equal(fused_out, interpreter.get_tensor(interpreter.get_output_details()[0]["index"]))


@pytest.mark.parametrize("model, spec_args", [
    ("mlperf-tiny/pretrainedResnet_quant.tflite", dict(scale=1.0, resize_mode="letterbox", pad_value=128)),
    ("mlperf-tiny/vww_96_float.tflite", dict(color="bgr", crop="center", interpolation="area")),
])
def test_frames_and_invokes_allocate_nothing(testdata: Path, photos, quiet_process, model: str,
                                            spec_args: dict) -> None:
    """1,000 frames of preprocess + invoke() with the held tensor function (int8 and float32 inputs)."""
    interpreter, index, shape, dtype, scale, zp = litert(testdata / model)
    spec = PreprocessSpec(**spec_args).bind_to_input(shape)
    fp = FramePreprocessor(spec, dtype=dtype, scale=scale, zero_point=zp)
    frame = np.ascontiguousarray(photos["flower"][:360, :480])
    tensor = interpreter.tensor(index)
    buf = tensor()
    assert np.shares_memory(fp(frame, buf), tensor())
    steps, exact = steps_apart(buf, plain_preprocess(spec, frame, dtype, scale, zp), spec)
    assert (steps, exact) == (0.0, 1.0)
    del buf

    growth, peak = quiet_process.submit(_allocations_over_frames, testdata / model, spec_args, frame, True).result()
    assert growth < FRAMES
    assert peak < 4096


def test_onnxruntime_iobinding_reads_the_written_buffer(photos) -> None:
    """ORT reads the preallocated array bound once; each frame is written into it in place."""
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    shape = [1, 3, 32, 48]
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)], "cast",
        [helper.make_tensor_value_info("x", TensorProto.INT8, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x, y = np.zeros(shape, np.int8), np.zeros(shape, np.float32)
    binding = session.io_binding()
    # ORT holds only the pointer: x and y must outlive the binding (they are locals here).
    binding.bind_input("x", "cpu", 0, x.dtype, shape, x.ctypes.data)
    binding.bind_output("y", "cpu", 0, y.dtype, shape, y.ctypes.data)
    spec = PreprocessSpec(size=(32, 48), layout="nchw", **IMAGENET)
    fp = FramePreprocessor(spec, dtype=np.int8, scale=0.02, zero_point=1)
    for photo in (photos["china"], photos["chelsea"]):
        assert fp(photo, x) is x
        session.run_with_iobinding(binding)
        assert np.array_equal(y, plain_preprocess(spec, photo, np.int8, 0.02, 1).astype(np.float32))


def test_benchmark_measures_both_paths_side_by_side(testdata: Path) -> None:
    """benchmarks/runtime.py: one row per measurement and both ratios (README: >= 8x, <= 1.15x).

    Only the shape of the result is asserted: timings on a shared machine are for the README.
    """
    bench = load_script(ROOT / "benchmarks" / "runtime.py")
    result = bench.run(frames=20)
    rows = {r["measurement"]: r for r in result["rows"]}
    assert set(rows) == {"straightforward", "fused", "session", "bare_invoke", "pipelined"}
    assert all(r["p50_ms"] > 0 for r in rows.values())
    assert [r["ratio"] for r in result["ratios"]] == ["straightforward / fused", "session / bare_invoke",
                                                      "pipelined fps / (1 / bare invoke)"]


# ----- errors -----------------------------------------------------------------------------------

@pytest.fixture
def small_fp() -> FramePreprocessor:
    return FramePreprocessor(PreprocessSpec(size=(8, 8), layout="nchw"), dtype=np.int8, scale=0.01, zero_point=0)


@pytest.mark.parametrize("frame, expected, given", [
    (np.zeros((8, 8, 3), np.float32), "expected dtype uint8", "got float32"),
    (np.zeros((8, 8, 3), np.uint16), "expected dtype uint8", "got uint16"),
    (np.zeros(8, np.uint8), "expected H x W or H x W x C", "got shape (8,)"),
    (np.zeros((1, 8, 8, 3), np.uint8), "expected H x W or H x W x C", "got shape (1, 8, 8, 3)"),
    (np.zeros((8, 8, 2), np.uint8), "expected 1 (gray), 3 (RGB) or 4 (RGBA) channels", "got 2"),
    (np.zeros((8, 8, 5), np.uint8), "expected 1 (gray), 3 (RGB) or 4 (RGBA) channels", "got 5"),
    (np.zeros((0, 8, 3), np.uint8), "expected a non-empty image", "got shape (0, 8, 3)"),
    (np.zeros((8, 0), np.uint8), "expected a non-empty image", "got shape (8, 0)"),
    ([[0, 1], [2, 3]], "expected a uint8 numpy array", "got list"),
])
def test_bad_frames_name_expected_and_given(small_fp, frame, expected: str, given: str) -> None:
    out = np.zeros(small_fp.input_shape, np.int8)
    with pytest.raises(InputError, match="frame") as info:
        small_fp(frame, out)
    assert expected in str(info.value) and given in str(info.value)
    assert not out.any()  # nothing written


@pytest.mark.parametrize("out, given", [
    (np.zeros((1, 3, 8, 8), np.uint8), "got uint8 (1, 3, 8, 8)"),
    (np.zeros((1, 8, 8, 3), np.int8), "got int8 (1, 8, 8, 3)"),
    (np.zeros((1, 3, 8, 16), np.int8)[..., ::2], "(not C-contiguous)"),
    (np.frombuffer(bytes(192), np.int8).reshape(1, 3, 8, 8), "(read-only)"),
    (None, "got NoneType"),
])
def test_bad_output_buffers_name_expected_and_given(small_fp, out, given: str) -> None:
    expected = r"expected a writeable C-contiguous int8 array of shape \(1, 3, 8, 8\)"
    with pytest.raises(InputError, match=expected) as info:
        small_fp(np.zeros((8, 8, 3), np.uint8), out)
    assert given in str(info.value)


def test_constructor_refuses_what_it_cannot_serve() -> None:
    with pytest.raises(PreprocessSpecError, match="size is not set"):
        FramePreprocessor(PreprocessSpec(), dtype=np.int8, scale=0.1)
    spec = PreprocessSpec(size=(8, 8))
    with pytest.raises(InputError, match="int8 model input needs its quantization scale > 0, got 0.0"):
        FramePreprocessor(spec, dtype=np.int8)
    with pytest.raises(InputError, match="float32 model input is not quantized; expected scale 0 and zero_point 0"):
        FramePreprocessor(spec, dtype=np.float32, scale=0.5)
    with pytest.raises(InputError, match="int16 is not supported.*supported: int8, uint8 .*float32, float16"):
        FramePreprocessor(spec, dtype=np.int16, scale=0.1)
    with pytest.raises(InputError, match="zero_point 300 is outside the int8 range"):
        FramePreprocessor(spec, dtype=np.int8, scale=0.1, zero_point=300)
    fp = FramePreprocessor(spec, dtype=np.uint8, scale=1 / 255)
    assert fp.input_shape == (1, 8, 8, 3)
    with pytest.raises(ValueError):
        fp.lut[0, 0] = 1  # the table is read-only


def test_import_edgeserve_runtime_preprocess_fast_does_not_import_cv2() -> None:
    import subprocess
    import sys

    code = ("import sys, edgeserve.runtime.io.preprocess_fast; "
            "print('cv2' in sys.modules, 'ai_edge_litert' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "False"]


def test_finite_values_past_the_range_saturate_like_tflite_quantize() -> None:
    """1e37 / 0.1 is inf in float32, and inf - inf inside the rounding was NaN, cast to 0: a huge
    input became the zero point. TFLite's Quantize clamps to the type's range (reference_ops'
    AffineQuantize: min(max(round(x / scale) + zp, qmin), qmax)); so does this, for every width."""
    from edgeserve.runtime.io.preprocess_fast import quantize

    big = np.array([1e37, -1e37, 3e38, -3e38, np.inf, -np.inf], np.float32)
    for dtype, zp in ((np.int8, 0), (np.int8, -5), (np.uint8, 128), (np.int16, 0)):
        info = np.iinfo(dtype)
        assert quantize(big, dtype, 0.1, zp).tolist() == [info.max, info.min] * 3
    inside = np.linspace(-12.8, 12.7, 1001, dtype=np.float32)
    expect = np.clip(round_half_away(inside / np.float32(0.1)), -128, 127).astype(np.int8)
    assert np.array_equal(quantize(inside, np.int8, 0.1, 0), expect)
