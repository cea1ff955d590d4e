"""A streaming model's state in the Session: carried from one run() to the next, reset() to start over.

The model is microWakeWord's alexa (pymicro-wakeword's wheel): six int8 ring buffers in
resource variables, set up by CALL_ONCE. Fed quiet feature frames, its first output after a
fresh start differs from the steady one (the buffers start at zero), which is what shows
whether the state was carried or reset.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from registry_models import ALEXA, registry_model

pytest.importorskip("ai_edge_litert")


def _quiet_frames(n: int) -> np.ndarray:
    return np.random.default_rng(0).integers(-128, -60, (n, 1, 3, 40)).astype(np.int8)


def _litert_stream(model: bytes, frames: np.ndarray) -> list[int]:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=model)
    interpreter.allocate_tensors()
    index_in, index_out = interpreter.get_input_details()[0]["index"], interpreter.get_output_details()[0]["index"]
    out = []
    for frame in frames:
        interpreter.set_tensor(index_in, frame)
        interpreter.invoke()
        out.append(int(interpreter.get_tensor(index_out).ravel()[0]))
    return out


def test_state_is_carried_between_runs_and_reset_starts_over(tmp_path: Path) -> None:
    from edgeserve.runtime import Session

    alexa = registry_model(ALEXA, tmp_path)
    frames = _quiet_frames(100)
    expected = _litert_stream(alexa.read_bytes(), frames)  # a plain LiteRT loop, state carried
    assert expected[0] != expected[-1]  # the fresh start shows in the output, or nothing below could fail

    with Session(alexa, backend="litert:cpu") as session:
        step = session.outputs[0].scale  # uint8 probability, scale 1/256
        assert step == pytest.approx(1 / 256)

        def stream() -> list[int]:
            return [int(round(float(np.asarray(session.run(f)[0]).ravel()[0]) / step)) for f in frames]

        first = stream()
        assert first == expected  # the Session carries the state exactly as LiteRT does
        carried = stream()
        assert carried[0] == expected[-1] != expected[0]  # no reset: the buffers still hold the last stream
        session.reset()
        assert stream() == expected  # reset: a new stream, bit for bit
