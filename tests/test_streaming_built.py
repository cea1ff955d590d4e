"""A streaming model built in the test (tests/streaming_model.py) through every streaming path:
inspect, the runtime Session against a plain LiteRT loop, -t mcu (TFLM, 100 frames, reset,
repeat, smallest arena) and -t mcu-c (static state, NAME_reset())."""

from __future__ import annotations

import numpy as np
import pytest

from edgeserve.tflite.model import TfliteModel

FRAMES = 100


@pytest.fixture(scope="module")
def stream_model(tmp_path_factory):
    import streaming_model

    return streaming_model.build(tmp_path_factory.mktemp("stream"))


def _frames(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(-128, 128, size=(FRAMES, 1, 1, 8), dtype=np.int8)


def test_inspect_counts_the_state(stream_model):
    from edgeserve.inspect import inspect_path

    info = inspect_path(stream_model)
    assert info["integer_only"] is True
    model = TfliteModel.from_file(stream_model)
    assert model.resource_variables() == [{"name": "Variable", "container": "", "dtype": "int8", "shape": [1, 4, 8],
                                           "bytes": 32, "subgraph": 0}]
    routes = {r["target"]: r for r in info["routes"]}
    assert routes["mcu"]["exists"] and routes["mcu-c"]["exists"]


def test_session_streams_like_a_plain_litert_loop_and_resets(stream_model):
    from ai_edge_litert.interpreter import Interpreter

    from edgeserve.runtime import Session

    frames = _frames()
    plain = Interpreter(model_path=str(stream_model))
    plain.allocate_tensors()
    i, o = plain.get_input_details()[0]["index"], plain.get_output_details()[0]["index"]
    expected = []
    for x in frames:
        plain.set_tensor(i, x)
        plain.invoke()
        expected.append(plain.get_tensor(o).copy())
    with Session(stream_model, backend="litert:xnnpack", threads=1) as session:
        detail = session.outputs[0]
        for _ in range(2):
            got = [session.run(x)[0].copy() for x in frames]
            want = [(e.astype(np.float32) - detail.zero_point) * np.float32(detail.scale) for e in expected]
            np.testing.assert_array_equal(np.stack(got), np.stack(want))
            session.reset()
    assert len(np.unique(np.stack(expected))) > 5  # the state changes the output: this can fail


def test_stream_step_gives_every_output_like_run(stream_model):
    """StreamStep on a model with a three-value output: step() equals Session.run stride for
    stride, state carried; value() says it needs a one-value output."""
    from edgeserve.runtime import Session

    frames = _frames()
    with Session(stream_model, backend="litert:xnnpack", threads=1) as session:
        want = [session.run(x)[0].copy() for x in frames]
        session.reset()
        step = session.stream_step()
        got = [step(x)[0].copy() for x in frames]
        assert step.fast
        np.testing.assert_array_equal(np.stack(got), np.stack(want))
        with pytest.raises(ValueError, match=r"one output of one value; this model gives \[1, 3\]"):
            step.value(frames[0][0].astype(np.float32))  # and floats without the batch dim take the checked path


def test_mcu_streams_through_tflm_and_plans_the_smallest_arena(stream_model, tmp_path):
    from edgeserve.converters.microcontroller.arena import plan_head
    from edgeserve.converters.microcontroller.child import call_in_child
    from edgeserve.converters.tflm.persistent import estimate_arena
    from edgeserve.conversion.convert import convert

    pytest.importorskip("tflite_micro")
    result = convert(stream_model, ["mcu", "mcu-c"], tmp_path / "out")
    entries = {a["target"]: a for a in result.manifest["artifacts"]}
    stream = entries["mcu"]["verification"]["stream"]
    assert stream["frames"] == 100 and stream["max_abs_diff"] == 0 and stream["reset_repeats"]
    assert stream["distinct_outputs"] > 5
    assert "MicroResourceVariables::Create(allocator, 1);" in (tmp_path / "out" / "mcu" / "main.cc").read_text()
    model = TfliteModel.from_file(stream_model)
    data = model.file_bytes
    head = plan_head(model, pointer_bytes=8).head_bytes
    total = estimate_arena(model, head, pointer_bytes=8, recording=True).total_bytes
    assert entries["mcu"]["arena_bytes_host"] == total
    use = call_in_child("edgeserve.converters.microcontroller.tflm:arena_use", data, 100_000, what="reading TFLM's allocations")
    assert use.head == head
    fits = "edgeserve.converters.microcontroller.tflm:fits"
    assert call_in_child(fits, data, total, what="x") and not call_in_child(fits, data, total - 16, what="x")
    mcu_c = entries["mcu-c"]
    assert mcu_c["state_bytes"] == 32 and mcu_c["verification"]["bit_exact"]
    assert "degenerate" not in mcu_c["verification"]


def test_mcu_c_stream_reset_and_repeat(stream_model, tmp_path):
    from edgeserve.converters.mcu_c import check
    from edgeserve.converters.mcu_c.generate import generate
    from edgeserve.converters.mcu_c.reference import reference_outputs

    model = TfliteModel.from_file(stream_model)
    generated = generate(model, "stream", "stream")
    for rel, text in generated.files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    harness = check.build_host(tmp_path, "stream", tmp_path / "harness")
    frames = _frames(3)
    ours = check.run_host(harness, np.concatenate([frames, frames]), (1, 3), reset_every=FRAMES)
    _, reference = reference_outputs(model.file_bytes, frames)
    np.testing.assert_array_equal(ours[:FRAMES], reference.reshape(FRAMES, 1, 3))
    np.testing.assert_array_equal(ours[FRAMES:], reference.reshape(FRAMES, 1, 3))
