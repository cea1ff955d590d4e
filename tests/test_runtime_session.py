"""Session: backend fallback with reasons, zero-copy frames, outputs, bad input, manifests."""

from __future__ import annotations

import hashlib
import json
import shutil
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from edgeserve.runtime import Session
from edgeserve.runtime.backends.litert import litert_placement
from edgeserve.runtime.io.preprocess_fast import plain_preprocess
from runtime_fakes import fake_backends

from edgeserve.errors import BackendError, EdgeServeError, InputError, ManifestError
from edgeserve.manifest.record import stamp
from edgeserve.preprocess import PreprocessSpec

MOBILENET = "tflm/mobilenet_v2_quantized_1x3x224x224.tflite"
IMAGENET = PreprocessSpec(layout="nchw", crop="center", crop_fraction=0.875,
                          mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))


@pytest.fixture(scope="module")
def frames(digits_example: Path) -> tuple[np.ndarray, np.ndarray]:
    data = np.load(digits_example / "frames.npz")
    return data["frames"], data["y"]


def chain_session(manifest: Path, chain: list[str], **kwargs: object) -> Session:
    """A Session whose profile lists ``chain`` (the host profile with its backends replaced)."""
    import dataclasses

    from edgeserve.device_profiles import load_profile

    host = load_profile("host")
    profile = dataclasses.replace(host, runtime=dataclasses.replace(host.runtime, backends=tuple(chain)))
    return Session(manifest, profile, **kwargs)


def attempts(s: Session) -> list[tuple[str, str, bool]]:
    return [(a.backend, a.stage, a.ok) for a in s.attempts]


# ----- fallback ---------------------------------------------------------------------------
def test_real_missing_delegates_fall_back_to_xnnpack_with_reasons(digits_conversion: Path) -> None:
    s = Session(digits_conversion / "manifest.json", "coral-dev-board")
    assert s.backend == "litert:xnnpack" and s.kind == "cpu"
    assert attempts(s) == [("litert:edgetpu", "open", False), ("litert:xnnpack", "open", True)]
    assert "libedgetpu.so.1" in s.attempts[0].reason and "cannot open" in s.attempts[0].reason
    # The digits CNN has 7 operators; XNNPACK takes all but the int8 SOFTMAX... whatever it
    # takes, the counts must add up and name the ops left to the builtin kernels.
    p = s.placement
    assert p.total == 7 and p.taken_by == "XNNPACK"
    assert p.accelerated + len(p.on_cpu) == p.total and p.accelerated >= 1


def test_every_failure_stage_is_walked_and_recorded(digits_conversion: Path, frames: tuple) -> None:
    chain = ["litert:edgetpu", "fake:npu-no-driver", "fake:npu-crashes", "fake:npu-wrong", "litert:gpu",
             "fake:gpu-good"]
    with fake_backends() as opened:
        s = chain_session(digits_conversion / "manifest.json", chain, parity_frames=2)
        # Open-time failures are known before the first frame.
        assert attempts(s) == [("litert:edgetpu", "open", False), ("fake:npu-no-driver", "open", False),
                               ("fake:npu-crashes", "open", True)]
        s.run(frames[0][0])
        assert s.backend == "fake:gpu-good"
        assert attempts(s)[3:] == [
            ("fake:npu-crashes", "invoke", False),
            ("fake:npu-wrong", "open", True), ("fake:npu-wrong", "parity", False),
            ("litert:gpu", "open", False),
            ("fake:gpu-good", "open", True),
        ]
        by_stage = {(a.backend, a.stage): a.reason for a in s.attempts}
        assert "RuntimeError: fake: accelerator hung up" == by_stage[("fake:npu-crashes", "invoke")].split(" raised ")[1]
        assert "differs from litert:xnnpack" in by_stage[("fake:npu-wrong", "parity")]
        assert "libtensorflowlite_gpu_delegate.so" in by_stage[("litert:gpu", "open")]
        # Dropped accelerators are closed, not leaked.
        assert opened["fake:npu-crashes"][0].closed and opened["fake:npu-wrong"][0].closed
        # The good GPU passes its parity frames and is kept; the record says so.
        s.run(frames[0][1])
        assert s.attempts[-1].backend == "fake:gpu-good" and s.attempts[-1].stage == "parity" and s.attempts[-1].ok
        for frame in frames[0][2:6]:
            s.run(frame)
        assert s.backend == "fake:gpu-good" and len(s.attempts) == 9
        s.close()


def test_results_after_fallback_equal_the_cpu_results(digits_conversion: Path, frames: tuple) -> None:
    with fake_backends():
        fallen = chain_session(digits_conversion / "manifest.json", ["fake:npu-wrong", "litert:xnnpack"])
        cpu = Session(digits_conversion / "manifest.json", backend="litert:xnnpack")
        for frame in frames[0][:5]:
            assert np.array_equal(fallen.run(frame)[0], cpu.run(frame)[0])
        assert fallen.backend == "litert:xnnpack"


def test_a_failure_after_the_first_invoke_is_an_error_not_a_silent_switch(digits_conversion: Path, frames: tuple) -> None:
    with fake_backends():
        s = chain_session(digits_conversion / "manifest.json", ["fake:gpu-dies-later", "litert:xnnpack"],
                          parity_frames=0)
        for frame in frames[0][:4]:
            s.run(frame)
        with pytest.raises(EdgeServeError, match="fake:gpu-dies-later failed: fake: accelerator hung up"):
            s.run(frames[0][4])


def test_strict_raises_with_every_attempt_in_the_message(digits_conversion: Path) -> None:
    with pytest.raises(BackendError) as err:
        Session(digits_conversion / "manifest.json", "coral-dev-board", strict=True)
    text = str(err.value)
    assert "strict" in text and "litert:edgetpu [open] failed: cannot load delegate libedgetpu.so.1" in text
    assert "xnnpack" not in text  # strict does not even try the fallback
    with fake_backends():
        with pytest.raises(BackendError, match=r"(?s)fake:npu-crashes failed at invoke.*accelerator hung up"):
            chain_session(digits_conversion / "manifest.json", ["fake:npu-crashes", "litert:xnnpack"],
                          strict=True).run(np.zeros((8, 8, 1), np.uint8))


def test_require_keeps_only_that_kind(digits_conversion: Path) -> None:
    with pytest.raises(BackendError) as err:
        Session(digits_conversion / "manifest.json", "coral-dev-board", require="npu")
    assert "no backend of kind npu" in str(err.value)
    assert "litert:xnnpack [select] failed: is cpu, require=npu" in str(err.value)
    with fake_backends():
        s = chain_session(digits_conversion / "manifest.json", ["fake:npu-no-driver", "fake:npu-good",
                                                                 "litert:xnnpack"], require="npu")
        assert s.backend == "fake:npu-good"
    s = Session(digits_conversion / "manifest.json", "coral-dev-board", require="cpu")
    assert s.backend == "litert:xnnpack" and attempts(s)[0] == ("litert:edgetpu", "select", False)
    with pytest.raises(InputError, match="require must be one of npu, gpu, cpu"):
        Session(digits_conversion / "manifest.json", require="tpu")


def test_chain_entries_without_a_matching_artifact_are_skipped_with_the_reason(digits_conversion: Path) -> None:
    s = Session(digits_conversion / "manifest.json", "jetson-orin-nano")
    assert attempts(s) == [("onnxruntime:tensorrt", "select", False), ("onnxruntime:cuda", "select", False),
                           ("litert:xnnpack", "open", True)]
    assert s.attempts[0].reason == "no onnxruntime artifact to run (have .tflite)"


def test_unknown_backend_and_core_ml_on_linux(digits_conversion: Path, tmp_path: Path) -> None:
    # An explicit name is checked before anything opens: a typo is a usage problem, with the list.
    with pytest.raises(InputError, match=r"unknown backend 'litert:tpu'\. Did you mean \"litert:npu\"\?.*litert:xnnpack"):
        Session(digits_conversion / "manifest.json", backend="litert:tpu")
    package = tmp_path / "m.mlpackage"
    package.mkdir()
    import platform

    if platform.system() != "Darwin":
        with pytest.raises(BackendError, match="Core ML runs only on macOS"):
            Session(package)


def test_litert_placement_walks_delegate_partitions() -> None:
    def op(name: str, ins: list[int], outs: list[int]) -> dict:
        return {"op_name": name, "inputs": np.array(ins), "outputs": np.array(outs)}

    # conv(0,w1)->2, relu(2)->3, custom(3)->4, fc(4,w5)->6 ; delegate took conv+relu and fc.
    ops = [op("CONV_2D", [0, 1], [2]), op("RELU", [2], [3]), op("CUSTOM", [3], [4]),
           op("FULLY_CONNECTED", [4, 5, -1], [6]),
           op("DELEGATE", [0, 1], [3]), op("DELEGATE", [4, 5], [6])]
    p = litert_placement(ops, "Edge TPU")
    assert (p.total, p.accelerated, p.partitions, p.on_cpu) == (4, 3, 2, ("CUSTOM",))
    assert str(p) == "3/4 ops on Edge TPU in 2 partition(s)"


# ----- frames, outputs, zero copy ---------------------------------------------------------
def test_frames_classify_like_the_plain_path(digits_conversion: Path, frames: tuple) -> None:
    from edgeserve.runtime.backends.litert_run import TfliteRunner

    s = Session(digits_conversion / "manifest.json", labels=[f"digit {i}" for i in range(10)])
    runner = TfliteRunner((digits_conversion / "model_int8.tflite").read_bytes())
    spec = s.preprocess.bind_to_input(s.inputs[0].shape)
    x, y = frames
    hits = 0
    for frame, label in zip(x[:100], y[:100]):
        got = s.run(frame)[0].copy()
        d = s.inputs[0]
        raw = runner.run_raw([plain_preprocess(spec, frame, d.dtype, d.scale, d.zero_point)])[0]
        assert np.array_equal(got, runner.outputs[0].dequantize(raw))
        best = s.classify(frame, k=3)
        assert [p.label for p in best] == [f"digit {p.index}" for p in best]
        assert best[0].score >= best[1].score >= best[2].score
        hits += best[0].index == label
    assert hits >= 95  # the converted model's held-out top-1 is ~98 %


def test_the_frame_is_written_into_the_interpreters_own_input(digits_conversion: Path, frames: tuple) -> None:
    s = Session(digits_conversion / "manifest.json", backend="litert:xnnpack")
    frame = frames[0][7]
    s.run(frame)
    d = s.inputs[0]
    interp = s._active._interp
    spec = s.preprocess.bind_to_input(d.shape)
    assert np.array_equal(interp.get_tensor(d.index), plain_preprocess(spec, frame, d.dtype, d.scale, d.zero_point))
    buffer = s._active.input_buffer(0)
    assert np.shares_memory(buffer, interp.tensor(d.index)())
    del buffer


def test_outputs_are_reused_buffers(digits_conversion: Path, frames: tuple) -> None:
    s = Session(digits_conversion / "manifest.json")
    first = s.run(frames[0][0])[0]
    second = s.run(frames[0][1])[0]
    assert first is second and first.dtype == np.float32


def test_a_thousand_frames_allocate_nothing(testdata: Path) -> None:
    """Steady state: the frame goes into the interpreter and the outputs into arrays made once."""
    s = Session(testdata / MOBILENET, preprocess=IMAGENET, backend="litert:xnnpack", threads=2)
    import cv2
    from skimage import data as skdata

    frame = cv2.resize(skdata.astronaut(), (640, 480))
    for _ in range(20):
        s.run(frame)
    tracemalloc.start(50)
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(1000):
            s.run(frame)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    # Only what Session.run allocated counts: threads left running by other tests (samplers,
    # coremltools) allocate too, but never with Session.run on their stack.
    import edgeserve.runtime.session as session_module

    mine = [tracemalloc.Filter(True, session_module.__file__, all_frames=True)]
    growth = sum(d.size_diff for d in after.filter_traces(mine).compare_to(before.filter_traces(mine), "filename"))
    assert growth == 0


def test_mobilenet_on_a_real_photo_matches_the_plain_pipeline(testdata: Path) -> None:
    from edgeserve.runtime.backends.litert_run import TfliteRunner
    from skimage import data as skdata

    s = Session(testdata / MOBILENET, preprocess=IMAGENET, backend="litert:xnnpack")
    frame = skdata.chelsea()  # a cat: 300 x 451
    got = s.run(frame)[0].copy()
    d = s.inputs[0]
    runner = TfliteRunner((testdata / MOBILENET).read_bytes())
    x = plain_preprocess(IMAGENET.bind_to_input(d.shape), frame, d.dtype, d.scale, d.zero_point)
    want = runner.outputs[0].dequantize(runner.run_raw([x])[0])
    assert np.array_equal(got, want)
    assert 281 <= int(np.argmax(got)) <= 287  # ImageNet's cat classes (tabby 281 ... lynx 287)


# ----- tensors and bad input ----------------------------------------------------------------
def test_tensor_inputs_are_quantized_or_taken_as_they_are(testdata: Path) -> None:
    from edgeserve.runtime.backends.litert_run import TfliteRunner

    model = testdata / "mlperf-tiny/kws_ref_model.tflite"
    s = Session(model)
    assert s.preprocess is None
    d = s.inputs[0]
    x = np.random.default_rng(0).normal(0, 20, d.shape).astype(np.float32)
    runner = TfliteRunner(model.read_bytes())
    want = runner.predict([x])[0][0]
    assert np.allclose(s.run(x)[0], want, atol=runner.outputs[0].scale)
    assert np.array_equal(s.run(x[0])[0], s.run(x)[0])  # the batch dimension is optional
    raw = runner.inputs[0].quantize(x)
    assert np.array_equal(s.run(raw)[0], runner.outputs[0].dequantize(runner.run_raw([raw])[0]))


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (np.zeros((4, 4, 4, 4), np.uint8), r"expects shape \(1, 8, 8, 1\) int8, got \(4, 4, 4, 4\) uint8"),
        (np.zeros((8, 8, 2), np.uint8), r"1\|3\|4|channel"),
        (np.zeros((0, 8, 3), np.uint8), "empty"),
        (np.zeros((8, 8, 1), np.float64) * np.nan, "NaN"),
        (np.zeros((8, 8, 1), np.int16), "expects int8"),
    ],
)
def test_bad_frames_name_what_was_expected(digits_conversion: Path, bad: np.ndarray, message: str) -> None:
    s = Session(digits_conversion / "manifest.json")
    with pytest.raises(InputError, match=message):
        s.run(bad)


def test_camera_frames_without_a_spec_say_how_to_fix_it(testdata: Path) -> None:
    s = Session(testdata / "mlperf-tiny/kws_ref_model.tflite")
    with pytest.raises(InputError, match=r"images need a PreprocessSpec: pass preprocess=PreprocessSpec"):
        s.run(np.zeros((480, 640, 3), np.uint8))


# ----- manifests -----------------------------------------------------------------------------
def test_a_tampered_artifact_is_refused(digits_conversion: Path, tmp_path: Path) -> None:
    copy = tmp_path / "build"
    shutil.copytree(digits_conversion, copy)
    model = copy / "model_int8.tflite"
    data = bytearray(model.read_bytes())
    data[-100] ^= 0xFF
    model.write_bytes(bytes(data))
    with pytest.raises(ManifestError, match="does not match its manifest.*refusing to run it"):
        Session(copy)
    assert hashlib.sha256(model.read_bytes()).hexdigest() != json.loads((copy / "manifest.json").read_text())[
        "artifacts"][0]["sha256"]


def test_bare_tflite_takes_the_spec_stamped_in_its_metadata(digits_conversion: Path) -> None:
    s = Session(digits_conversion / "model_int8.tflite")
    assert s.preprocess is not None and s.preprocess.color == "gray"
    assert s.run(np.zeros((8, 8, 1), np.uint8))[0].shape == (1, 10)


def test_not_a_model(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"expected a manifest.json or a model file .* got '.txt'"):
        Session(tmp_path / "x.txt") if (tmp_path / "x.txt").write_text("x") else None
    with pytest.raises(InputError, match="no such artifact"):
        Session(tmp_path / "missing.tflite")


def test_set_threads_reopens_the_same_backend(digits_conversion: Path, frames: tuple) -> None:
    s = Session(digits_conversion / "manifest.json", threads=1)
    want = s.run(frames[0][3])[0].copy()
    s.set_threads(2)
    assert s.threads == 2 and s.backend == "litert:xnnpack"
    assert np.array_equal(s.run(frames[0][3])[0], want)


def test_labels_recorded_in_the_manifest_name_the_classes(digits_conversion: Path, tmp_path: Path,
                                                          frames: tuple) -> None:
    copy = tmp_path / "build"
    shutil.copytree(digits_conversion, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["labels"] = [f"class {i}" for i in range(10)]  # what `convert --labels FILE` writes
    (copy / "manifest.json").write_text(json.dumps(stamp(manifest)))  # re-stamped, as a knowing editor would
    best = Session(copy).classify(frames[0][0], k=2)
    assert [p.label for p in best] == [f"class {p.index}" for p in best]
    assert best[0].index == frames[1][0]


def test_verification_on_every_core_equals_one_interpreter_in_order() -> None:
    """tflite-int8's check runs one LiteRT interpreter per core, each on every other sample:
    the outputs come back in sample order, equal to one interpreter's, for an odd count too,
    and the progress callback sees one tick per sample."""
    from conftest import TESTDATA, require_testdata

    from edgeserve.runtime.backends.litert_run import TfliteRunner, predict_on_cores

    model = require_testdata(TESTDATA / "mlperf-tiny" / "kws_ref_model.tflite").read_bytes()
    runner = TfliteRunner(model)
    x = np.random.default_rng(0).uniform(-3, 3, (9, *runner.inputs[0].shape[1:])).astype(np.float32)
    ticks: list[int] = []

    def track(items, total):
        for item in items:
            ticks.append(total)
            yield item

    got = predict_on_cores(model, [x], track, workers=2)
    want = runner.predict([x])[0]
    assert len(got) == len(want) and all(np.array_equal(g, w) for g, w in zip(got, want))
    assert len(np.unique(want[0].argmax(1))) > 1  # the samples differ, so an order mix-up would show
    assert ticks == [9] * 9
    # The caller's own interpreter as the first worker: the same outputs.
    again = predict_on_cores(model, [x], workers=3, first=runner)
    assert all(np.array_equal(g, w) for g, w in zip(again, want))


def test_wrong_arguments_and_a_closed_session_are_edgeserve_errors(digits_conversion: Path) -> None:
    """classify(k=None) and Session(None) let TypeError out of the API; reset() after close() did
    nothing without a word. Each is now an error of edgeserve's, saying what was expected."""
    from edgeserve.errors import BackendError, InputError

    with pytest.raises(InputError, match="Session takes the path of an artifact.*got NoneType None"):
        Session(None)  # type: ignore[arg-type]
    session = Session(digits_conversion / "manifest.json", backend="litert:xnnpack")
    frame = session.example_input()
    assert len(session.classify(frame, k=3)) == 3
    for k in (None, 0, -1, 2.5, True, "3"):
        with pytest.raises(InputError, match="k is how many classes to return"):
            session.classify(frame, k=k)  # type: ignore[arg-type]
    session.close()
    with pytest.raises(BackendError, match="the Session is closed"):
        session.reset()
