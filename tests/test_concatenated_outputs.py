"""An output that concatenates ranges one int8 scale cannot hold (a YOLOv8 head's boxes and class
scores) is judged channel group by channel group (edgeserve/quality.py small_range_channels).

The unit tests build such outputs with a known quantization; the real model is nudenet's
YOLOv8n (ONNX, from its wheel), whose all-INT8 model keeps the boxes and flattens every class
score to 0 or one step while the output as a whole measures about 30 dB.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from edgeserve.quality import DEFAULT_MIN_SQNR_DB, judge, small_range_channels


def _detector_output(samples: int = 16) -> np.ndarray:
    """[samples, 4 + 3, 50]: boxes in pixels (0-320), then three class scores in [0, 0.9]."""
    rng = np.random.default_rng(0)
    boxes = rng.uniform(0, 320, (samples, 4, 50))
    scores = rng.uniform(0, 0.9, (samples, 3, 50))
    return np.concatenate([boxes, scores], axis=1)


def _quantized(x: np.ndarray, steps: int) -> np.ndarray:
    scale = (x.max() - x.min()) / (steps - 1)
    return np.round((x - x.min()) / scale) * scale + x.min()


def test_score_channels_flattened_by_one_int8_scale_fail_the_gate() -> None:
    reference = _detector_output()
    int8 = _quantized(reference, 256)
    assert judge("mae", [reference], [int8], None, max_drop=1.0, min_sqnr_db=0.0).ok  # the whole output alone
    axis, channels, db = small_range_channels(reference, int8)
    assert (axis, channels) == (1, [4, 5, 6]) and db < 5.0
    verdict = judge("mae", [reference], [int8], None, max_drop=1.0, min_sqnr_db=DEFAULT_MIN_SQNR_DB)
    assert verdict.outputs[0].sqnr_db > 30.0  # what the gate used to pass on
    assert not verdict.ok and "channels 4-6 of axis 1" in verdict.outputs[0].reason
    # int16 steps hold both ranges: the same output passes.
    assert judge("mae", [reference], [_quantized(reference, 65536)], None, max_drop=1.0,
                 min_sqnr_db=DEFAULT_MIN_SQNR_DB).ok


def test_outputs_of_one_range_are_not_split() -> None:
    reference = np.random.default_rng(1).normal(size=(16, 10, 50))
    reference[:, 3] *= 20  # one channel 20x the others: within what one scale holds
    assert small_range_channels(reference, reference + 0.01) is None
    assert small_range_channels(np.zeros((4, 3, 8)), np.zeros((4, 3, 8))) is None  # no signal: nothing to split
    # A channel that is 0 up to float noise (the hand model's wrist depth) is no range of its own.
    reference[:, 7] = 1e-7 * np.random.default_rng(2).normal(size=(16, 50))
    assert small_range_channels(reference, reference + 0.01) is None


def test_a_real_yolov8_takes_int16_activations_for_its_class_scores(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    ort = pytest.importorskip("onnxruntime")
    from corpus import views
    from edgeserve.runtime.litert import TfliteRunner
    from registry_models import YOLOV8N, registry_model

    from edgeserve.metrics import sqnr_db
    from edgeserve.pipeline import convert

    source = registry_model(YOLOV8N, tmp_path)
    x = views((320, 320), 24).transpose(0, 3, 1, 2).astype(np.float32)  # YOLOv8 takes RGB in [0, 1]
    np.savez(tmp_path / "calib.npz", images=x)
    result = convert(source, ["tflite-int8"], tmp_path / "out", calib=tmp_path / "calib.npz",
                     input_shapes={"images": (1, 3, 320, 320)}, options={"max_drop": 100.0})
    entry = result.manifest["artifacts"][0]
    first, chosen = entry["attempts"][0], next(a for a in entry["attempts"] if a["status"] == "ok")
    # The class-score channels (4 and up; a class these photos never show can sit under the
    # int16 floor and is left out), named with the reason.
    named = re.search(r"channels (\d+)\D.* of axis 1 .* one scale cannot hold", first["reason"])
    assert first["remedy"] == "int8" and named and int(named.group(1)) >= 4, first
    assert chosen["remedy"] == "int16x8"
    session = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"])
    expected = np.concatenate([session.run(None, {"images": x[i:i + 1]})[0] for i in range(8)])
    got = TfliteRunner((tmp_path / "out" / entry["path"]).read_bytes()).predict([x[:8]])[0][0]
    assert sqnr_db(expected[:, 4:], got[:, 4:]) >= DEFAULT_MIN_SQNR_DB  # the class scores, against ONNX Runtime
