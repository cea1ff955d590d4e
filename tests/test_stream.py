"""Session.stream: pipelined frames, in order, with a drop policy for live sources and a clean stop."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from edgeserve.preprocess import PreprocessSpec
from edgeserve.runtime import Session
from edgeserve.runtime.streaming.video_pipeline import StreamStats

SPEC = PreprocessSpec(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), crop="center")


@pytest.fixture
def session(testdata):
    with Session(testdata / "tflm/mobilenet_v2_quantized_1x3x224x224.tflite", preprocess=SPEC,
                 backend="litert:xnnpack", threads=1) as s:
        yield s


def _frames(n: int) -> list[np.ndarray]:
    """Photos from scikit-image (a cup of coffee, a cat, a rocket, an astronaut), 160x120."""
    import cv2
    import skimage.data

    photos = [cv2.resize(p, (160, 120)) for p in (skimage.data.coffee(), skimage.data.chelsea(),
                                                    skimage.data.rocket(), skimage.data.astronaut())]
    return [np.roll(photos[i % 4], i, axis=1) for i in range(n)]


def _producers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "edgeserve-stream-producer"]


def test_a_file_source_gives_every_frame_in_order_equal_to_sequential_runs(session):
    frames = _frames(12)
    expected = [session.run(f)[0].copy() for f in frames]
    stats = StreamStats()
    got = [(i, out[0].copy()) for i, out in session.stream(iter(frames), stats=stats)]
    assert [i for i, _ in got] == list(range(12))
    for (_, out), want in zip(got, expected):
        np.testing.assert_array_equal(out, want)
    assert (stats.frames_in, stats.frames_out, stats.dropped) == (12, 12, 0)
    assert len(np.unique(np.stack(expected).argmax(axis=-1))) > 1  # different frames, different answers
    assert not _producers()


def test_a_live_source_drops_the_oldest_when_the_model_is_slower(session):
    frames = _frames(30)
    stats = StreamStats()
    seen = []
    for index, _ in session.stream(iter(frames), live=True, depth=2, stats=stats):
        seen.append(index)
        time.sleep(0.01)  # a model slower than the camera
    assert seen == sorted(seen) and seen[-1] == 29  # in order, and the newest frame is the last one served
    assert stats.dropped > 0 and stats.frames_out + stats.dropped == 30


def test_breaking_out_stops_the_producer_and_closes_the_source(session):
    closed = threading.Event()

    def camera():
        try:
            while True:
                yield _frames(1)[0]
        finally:
            closed.set()  # a real camera is released here

    for count, _ in enumerate(session.stream(camera(), live=True)):
        if count == 5:
            break
    assert closed.wait(5) and not _producers()


def test_an_error_in_the_source_reaches_the_caller(session):
    def broken():
        yield _frames(1)[0]
        raise ValueError("the video ended mid-frame")

    with pytest.raises(ValueError, match="ended mid-frame"):
        for _ in session.stream(broken()):
            pass
    assert not _producers()


def test_run_pipelines_a_video_file_written_by_opencv(testdata, tmp_path):
    import json

    import cv2
    from click.testing import CliRunner

    from edgeserve.cli import cli

    path = tmp_path / "clip.avi"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 10, (160, 120))
    for frame in _frames(8):
        writer.write(frame)
    writer.release()
    result = CliRunner().invoke(cli, ["run", str(testdata / "tflm/mobilenet_v2_quantized_1x3x224x224.tflite"),
                                      "--input", str(path), "--mean", "0.485,0.456,0.406", "--std",
                                      "0.229,0.224,0.225", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    names = [r["input"] for r in data["results"]]
    assert names == [f"{path}#{i}" for i in range(8)]
    # A file is not live: every frame is served, none dropped (a camera would count its drops here).
    assert data["stream"] == {"live": False, "frames_in": 8, "frames_out": 8, "dropped": 0}


def test_bench_pipeline_reports_both_rates_from_one_run(testdata):
    import json

    from click.testing import CliRunner

    from edgeserve.cli import cli

    result = CliRunner().invoke(cli, ["bench", str(testdata / "tflm/mobilenet_v2_quantized_1x3x224x224.tflite"),
                                      "--synthetic", "640x480", "--mean", "0.485,0.456,0.406", "--std",
                                      "0.229,0.224,0.225", "--frames", "30", "--warmup", "2", "--pipeline",
                                      "--json", "--threads", "1"])
    assert result.exit_code == 0, result.output
    pipeline = json.loads(result.stdout)["pipeline"]
    assert pipeline["fps"] > 0 and pipeline["invoke_fps"] > 0 and pipeline["frames"] == 30
    assert pipeline["ratio"] == pytest.approx(pipeline["fps"] / pipeline["invoke_fps"], rel=0.01)


def test_a_frame_of_the_wrong_size_or_type_ends_the_stream_with_its_reason(session):
    from edgeserve.errors import InputError

    def frames():
        yield _frames(1)[0]
        yield np.zeros((10, 10), np.float64)  # not a camera frame, not the model's tensor

    served = []
    with pytest.raises(InputError, match="expects shape"):
        for index, _ in session.stream(frames()):
            served.append(index)
    assert served == [0] and not _producers()


def test_run_on_a_truncated_video_gives_one_error_line(tmp_path, testdata):
    from click.testing import CliRunner

    from edgeserve.cli import cli

    clip = tmp_path / "cut.avi"
    clip.write_bytes(b"RIFF\x00\x10\x00\x00AVI LIST" + bytes(64))  # a header and nothing after it
    result = CliRunner().invoke(cli, ["run", str(testdata / "tflm/mobilenet_v2_quantized_1x3x224x224.tflite"),
                                      "--input", str(clip), "--mean", "0.485,0.456,0.406", "--std",
                                      "0.229,0.224,0.225"])
    assert result.exit_code != 0
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cut.avi" in errors[0]
