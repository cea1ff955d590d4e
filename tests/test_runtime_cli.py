"""`edgeserve run` / `edgeserve bench`, and the input sources they read."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgeserve.cli import cli
from edgeserve.errors import InputError
from edgeserve.runtime.io.inputs import iter_inputs


def invoke(*args: object) -> object:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def digit_files(digits_example: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    import cv2

    folder = tmp_path_factory.mktemp("digit_images")
    data = np.load(digits_example / "frames.npz")
    for i in range(6):
        cv2.imwrite(str(folder / f"{i:02d}.png"), data["frames"][i])
    return folder, data["y"][:6]


def test_run_json_reports_backend_attempts_and_top_k(digits_conversion: Path, digit_files: tuple,
                                                      tmp_path: Path) -> None:
    folder, labels = digit_files
    names = tmp_path / "labels.txt"
    names.write_text("\n".join(f"digit-{i}" for i in range(10)))
    result = invoke("run", digits_conversion / "manifest.json", "--input", folder, "-k", "3", "--labels", names,
                    "-p", "coral-dev-board", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["backend"] == "litert:xnnpack"
    assert [a["backend"] for a in out["attempts"]] == ["litert:edgetpu", "litert:xnnpack"]
    assert out["attempts"][0]["ok"] is False and "libedgetpu" in out["attempts"][0]["reason"]
    assert [Path(r["input"]).name for r in out["results"]] == [f"{i:02d}.png" for i in range(6)]
    predicted = [r["top_k"][0]["index"] for r in out["results"]]
    assert sum(p == y for p, y in zip(predicted, labels)) >= 5
    first = out["results"][0]["top_k"]
    assert len(first) == 3 and first[0]["label"] == f"digit-{first[0]['index']}"
    assert first[0]["score"] >= first[1]["score"] >= first[2]["score"]


def test_run_require_npu_fails_with_the_attempts(digits_conversion: Path, digit_files: tuple) -> None:
    result = CliRunner().invoke(cli, ["run", str(digits_conversion / "manifest.json"), "-i", str(digit_files[0]),
                                      "-p", "coral-dev-board", "--require", "npu"])
    assert result.exit_code == 1
    assert "no backend of kind npu could run the model" in result.output
    assert "litert:edgetpu [open] failed: cannot load delegate libedgetpu.so.1" in result.output


def test_run_npy_is_the_input_tensor(digits_conversion: Path, digits_example: Path, tmp_path: Path) -> None:
    calib = np.load(digits_example / "eval.npz")
    np.save(tmp_path / "x.npy", calib["x"][0])
    result = invoke("run", digits_conversion / "manifest.json", "-i", tmp_path / "x.npy", "--outputs", "--json")
    out = json.loads(result.output)["results"][0]
    assert out["top_k"][0]["index"] == int(calib["y"][0])
    assert len(out["outputs"][0][0]) == 10


def test_bench_json_fields(digits_conversion: Path) -> None:
    result = invoke("bench", digits_conversion / "manifest.json", "--synthetic", "640x480", "--frames", "60",
                    "--warmup", "5", "--threads", "1", "--json")
    assert result.exit_code == 0, result.output
    r = json.loads(result.output)
    assert r["backend"] == "litert:xnnpack" and r["threads"] == 1
    assert r["input_shape"] == [480, 640, 3] and r["frames"] == 60
    lat = r["latency_ms"]
    assert 0 < lat["p50"] <= lat["p95"] <= lat["p99"]
    assert set(r["stages_ms"]) == {"preprocess", "invoke", "postprocess"}
    assert sum(r["stages_ms"].values()) <= lat["p95"]  # the stages are inside the end-to-end time
    assert r["cold_start_ms"] > lat["p50"] and r["throughput_fps"] > 0
    assert r["alloc_bytes_per_frame"] == 0
    # AI Hub's profile figures: the open alone (within the cold start), opened again, and the peak
    # resident memory the open and the runs added (at least the model's own bytes, read from disk).
    assert 0 < r["load_ms"]["first"] < r["cold_start_ms"] and r["load_ms"]["warm"] > 0
    entry = json.loads((digits_conversion / "manifest.json").read_text())["artifacts"][0]
    model_bytes = (digits_conversion / entry["path"]).stat().st_size
    from edgeserve.runtime.measure.memory import unmeasurable

    if unmeasurable() is None:
        assert r["peak_memory"]["bytes_added"] >= model_bytes, r["peak_memory"]
    else:  # a kernel that cannot reset the mark: no figure, and the reason
        assert r["peak_memory"] == {"bytes_added": None, "reason": unmeasurable()}


def test_bench_rejects_bad_synthetic_sizes(digits_conversion: Path) -> None:
    result = CliRunner().invoke(cli, ["bench", str(digits_conversion / "manifest.json"), "--synthetic", "640"])
    assert result.exit_code == 2 and "expected WIDTHxHEIGHT" in result.output


def test_space_separated_mean_is_a_usage_error_not_inputs(digits_conversion: Path, digit_files: tuple) -> None:
    """`--mean 0.485 0.456 0.406`: click hands --mean the first value and the others arrive as
    input paths; they are refused before anything runs, with the form that works."""
    args = ["run", str(digits_conversion / "manifest.json"), "--input", str(digit_files[0]), "--mean", "0.5", "0.4",
            "0.3"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert "got 0.4, 0.3 where input paths go: --mean and --std take one comma-separated value" in result.output


def test_inputs_folder_video_and_bad_files(tmp_path: Path) -> None:
    import cv2

    frames = [np.full((24, 32, 3), v, np.uint8) for v in (10, 120, 240)]
    writer = cv2.VideoWriter(str(tmp_path / "clip.avi"), cv2.VideoWriter_fourcc(*"MJPG"), 10, (32, 24))
    for f in frames:
        writer.write(f)
    writer.release()
    got = list(iter_inputs([tmp_path / "clip.avi"]))
    assert [name for name, _ in got] == [f"{tmp_path / 'clip.avi'}#{i}" for i in range(3)]
    assert np.allclose([f.mean() for _, f in got], [10, 120, 240], atol=2)  # MJPG: flat frames stay near flat
    assert len(list(iter_inputs([tmp_path / "clip.avi"], max_frames=2))) == 2

    rgb = np.zeros((4, 5, 3), np.uint8)
    rgb[..., 0] = 200  # red
    cv2.imwrite(str(tmp_path / "red.png"), rgb[..., ::-1])
    (name, image), = iter_inputs([tmp_path / "red.png"])
    assert image.shape == (4, 5, 3) and image[0, 0].tolist() == [200, 0, 0]  # decoded as RGB

    (tmp_path / "broken.png").write_bytes(b"not a png")
    with pytest.raises(InputError, match="not an image"):
        list(iter_inputs([tmp_path / "broken.png"]))
    (tmp_path / "x.txt").write_text("x")
    with pytest.raises(InputError, match="expected an image"):
        list(iter_inputs([tmp_path / "x.txt"]))
    with pytest.raises(InputError, match="input not found"):
        list(iter_inputs([tmp_path / "nope.png"]))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="holds no images"):
        list(iter_inputs([empty]))
    with pytest.raises(InputError, match="cannot open video source"):
        list(iter_inputs(["camera:7"]))


def test_the_demo_example_serves_the_build(digits_conversion: Path, digits_example: Path) -> None:
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[1] / "examples" / "digits" / "run_artifact.py"
    out = subprocess.run([sys.executable, str(script), str(digits_conversion), str(digits_example / "frames.npz")],
                         capture_output=True, text=True, check=True).stdout
    manifest = json.loads((digits_conversion / "manifest.json").read_text())
    quantized = manifest["artifacts"][0]["metrics"]["quantized"]
    assert f"top-1 {quantized:.4f}" in out  # frames through the Session score what the converter measured
    assert "with litert:xnnpack" in out and "not used: litert:edgetpu [open]" in out


def test_run_with_a_thermal_budget_goes_through_the_governor(digits_conversion: Path, digit_files: tuple,
                                                              tmp_path: Path) -> None:
    zone = tmp_path / "sys" / "class" / "thermal" / "thermal_zone0"
    zone.mkdir(parents=True)
    (zone / "type").write_text("cpu-thermal\n")
    (zone / "temp").write_text("41500\n")
    result = invoke("run", digits_conversion / "manifest.json", "-i", digit_files[0], "-p", "raspberry-pi-5",
                    "--thermal-budget", "70", "--sysfs-root", tmp_path, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    stats = out["governor"]["stats"]
    assert stats["policy"] == "pace" and stats["budget_c"] == 70.0 and stats["inferences"] == 6
    assert stats["max_temp_c"] == 41.5  # read from the tree, far under the budget: no pacing
    assert len(out["results"]) == 6
    # Without readable zones a budget cannot be kept: an error, not a silent unguarded run.
    bad = CliRunner().invoke(cli, ["run", str(digits_conversion / "manifest.json"), "-i", str(digit_files[0]),
                                   "--thermal-budget", "70", "--sysfs-root", str(tmp_path / "empty")])
    assert bad.exit_code == 1 and "thermal" in bad.output


def test_nchw_model_needs_no_layout_flag_and_stacks_of_frames_run_as_sequences(testdata, tmp_path):
    """Issue 17's layout and shape items: a [1, 3, 224, 224] model with --mean/--std alone reads
    as NCHW (it used to say "224 channels"); an .npz of frames runs frame by frame."""
    import json as _json

    import cv2
    import numpy as np
    import skimage.data
    from click.testing import CliRunner

    from edgeserve.cli import cli

    photo = tmp_path / "coffee.jpg"
    cv2.imwrite(str(photo), cv2.cvtColor(skimage.data.coffee(), cv2.COLOR_RGB2BGR))
    model = testdata / "tflm/mobilenet_v2_quantized_1x3x224x224.tflite"
    args = ["run", str(model), "--input", str(photo), "--mean", "0.485,0.456,0.406", "--std", "0.229,0.224,0.225",
            "--crop", "center", "-k", "3", "--json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    top = _json.loads(result.stdout)["results"][0]["top_k"][0]
    assert top["index"] == 967  # ImageNet "espresso" for scikit-image's coffee cup
    # N frames in one .npz (the bundled example's frames.npz layout): N results, in order.
    frames = np.stack([cv2.resize(skimage.data.coffee(), (320, 240)), cv2.resize(skimage.data.astronaut(), (320, 240))])
    np.savez(tmp_path / "frames.npz", frames=frames)
    result = CliRunner().invoke(cli, [*args[:3], str(tmp_path / "frames.npz"), *args[4:]])
    assert result.exit_code == 0, result.output
    results = _json.loads(result.stdout)["results"]
    assert [r["input"].rsplit("#", 1)[1] for r in results] == ["0", "1"]
    assert results[0]["top_k"][0]["index"] == 967 and results[1]["top_k"][0]["index"] != 967


@pytest.mark.parametrize("command", ["run", "bench", "profile"])
def test_a_microcontroller_profile_is_refused_with_what_to_do_instead(testdata: Path, command: str) -> None:
    """Issue 27: `run -p stm32h747` said "unknown backend name tflm:cmsis-nn"."""
    model = testdata / "tflm/hello_world_int8.tflite"
    extra = {"run": ["--input", "synthetic:1x1"], "bench": ["--synthetic", "1x1", "--frames", "2"], "profile": []}
    result = CliRunner().invoke(cli, [command, str(model), "-p", "stm32h747", *extra[command]])
    assert result.exit_code == 1
    line = result.output.strip().splitlines()[-1]
    assert line.startswith("error: profile 'stm32h747' is a microcontroller") and "-t mcu -p stm32h747" in line
    assert "unknown backend" not in result.output


def test_bench_sends_skipped_backends_to_stderr_and_q_drops_them(testdata: Path) -> None:
    """Issue 27: `bench -q` printed the skipped-backend lines on stdout."""
    model = str(testdata / "tflm/hello_world_int8.tflite")
    args = ["bench", model, "--frames", "3", "-p", "coral-dev-board"]  # its first backend, Edge TPU, is absent here
    loud = CliRunner().invoke(cli, args)
    assert loud.exit_code == 0, loud.output
    assert "skipped litert:edgetpu" in loud.stderr and "skipped" not in loud.stdout
    quiet = CliRunner().invoke(cli, ["-q", *args])
    assert quiet.exit_code == 0 and "skipped" not in quiet.output and "latency" in quiet.stdout


def test_a_tiny_image_is_classified_with_a_note(digits_conversion: Path, tmp_path: Path) -> None:
    """Issue 27: a 1x1-pixel PNG was classified at 0.949 without a word."""
    import cv2

    tiny, fair = tmp_path / "tiny.png", tmp_path / "fair.png"
    cv2.imwrite(str(tiny), np.full((1, 1, 3), 200, np.uint8))
    cv2.imwrite(str(fair), np.full((16, 16, 3), 200, np.uint8))  # larger than the 8x8 input
    result = CliRunner().invoke(cli, ["run", str(digits_conversion / "manifest.json"), "--input", str(tiny)])
    assert result.exit_code == 0, result.output
    assert "note: " in result.stderr and "a 1x1 image was enlarged 8x to the model's 8x8 input" in result.stderr
    out = json.loads(CliRunner().invoke(cli, ["run", str(digits_conversion / "manifest.json"), "--input", str(tiny),
                                              "--input", str(fair), "--json"]).stdout)
    notes = [r.get("note") for r in out["results"]]
    assert notes[0] and "enlarged 8x" in notes[0] and notes[1] is None


@pytest.mark.parametrize(("args", "said"), [
    (["bench", "--frames", "1000000000000"], "'--frames': 1000000000000 is not in the range 1<=x<=1000000"),
    (["bench", "--warmup", "10000000"], "'--warmup': 10000000 is not in the range 0<=x<=1000000"),
    (["bench", "--threads", "2000"], "'--threads': 2000 is not in the range 1<=x<=256"),
    (["run", "--threads", "2000"], "'--threads': 2000 is not in the range 1<=x<=256"),
    (["profile", "--threads", "2000"], "'--threads': 2000 is not in the range 1<=x<=256"),
])
def test_counts_past_what_a_run_can_use_are_refused_before_any_work(tmp_path: Path, args: list[str],
                                                                    said: str) -> None:
    """--frames 10**12 allocated 7.28 TiB and ended in a traceback; --threads 2000 started 904
    threads before blaming a missing package. Refused by the option itself: exit 2, one line."""
    result = invoke(*args[:1], tmp_path, *args[1:])
    assert result.exit_code == 2 and said in result.output and "Traceback" not in result.output
