"""The quality gate (edgeserve/quality.py): every output judged, each by what fits it.

The unit tests work each rule on arrays whose SQNR is known by construction. The
conversion tests take a two-headed Keras model (a softmax classifier and a regression
head) through tflite-int8: once as converted, where both heads pass, and once with one
layer's scale broken on the way (the second head's output requantized 64x coarser), where
the headline classifier still passes and the gate must fail naming the broken head.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgeserve.quality import DEFAULT_MIN_AGREEMENT, DEFAULT_MIN_SQNR_DB, judge, relative_rmse


def _noisy(reference: np.ndarray, sqnr_db: float, seed: int = 0) -> np.ndarray:
    """``reference`` plus white noise at exactly ``sqnr_db`` (by construction of its power)."""
    noise = np.random.default_rng(seed).normal(size=reference.shape)
    signal_power = np.sum(np.square(reference))
    noise *= np.sqrt(signal_power / 10 ** (sqnr_db / 10) / np.sum(np.square(noise)))
    return (reference + noise).astype(np.float64)


def test_a_regression_output_without_labels_is_judged_by_sqnr_not_percent_more_error() -> None:
    """What the old gate refused: 5 % more error than a float model whose own error is 0."""
    reference = np.random.default_rng(1).normal(size=(64, 10))
    quantized = _noisy(reference, 25.0)
    verdict = judge("mae", [reference], [quantized], None, max_drop=1.0, min_sqnr_db=DEFAULT_MIN_SQNR_DB)
    assert verdict.metrics.drop_points > 1.0  # the old bound would refuse it
    assert verdict.ok and verdict.outputs[0].judged_by == "sqnr"
    assert verdict.outputs[0].sqnr_db == pytest.approx(25.0, abs=0.01)
    # With labels, or with --metric asked for, the task metric judges it as before.
    labelled = judge("mae", [reference], [quantized], reference, max_drop=1.0, min_sqnr_db=10.0)
    asked = judge("mae", [reference], [quantized], None, max_drop=1.0, min_sqnr_db=10.0, metric_requested=True)
    assert not labelled.ok and not asked.ok and labelled.outputs[0].judged_by == "metric"


def test_every_output_is_judged_and_a_broken_second_head_fails_by_name() -> None:
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(50, 5))
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    boxes = rng.normal(size=(50, 4)) * 100
    verdict = judge("top1", [probs, boxes], [probs, _noisy(boxes, 3.3)], None, max_drop=1.0,
                    min_sqnr_db=10.0, names=["scores", "boxes"])
    assert verdict.metrics.drop_points == 0.0 and verdict.outputs[0].ok  # the headline is perfect
    assert not verdict.ok and verdict.failed_outputs == [1]
    assert verdict.reason == "boxes: SQNR 3.3 dB < min 10 dB"
    assert verdict.shortfall() == (1, pytest.approx(6.7, abs=0.01))
    passing = judge("top1", [probs, boxes], [probs, _noisy(boxes, 10.5)], None, max_drop=1.0, min_sqnr_db=10.0)
    assert passing.ok and passing.shortfall() == (0, 0.0)


def _softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_an_unlabelled_classifier_is_judged_by_top1_agreement_not_by_one_flip() -> None:
    """One flip in 32 samples was "a 3.1-point drop" and refused a classifier that works
    (fer's emotion model through tflite-int8, 96.9 % agreement). Without labels, output 0 of a
    classifier is judged by agreement with the float model's top-1 against --min-agreement."""
    probs = _softmax(np.random.default_rng(3).normal(size=(32, 7)) * 3)
    one_flip = probs.copy()
    one_flip[0] = one_flip[0][::-1]  # sample 0's top-1 moves to another class
    assert one_flip[0].argmax() != probs[0].argmax()
    verdict = judge("top1", [probs], [one_flip], None, max_drop=1.0, min_sqnr_db=10.0)
    assert verdict.metrics.drop_points == pytest.approx(100 / 32)  # what the old gate refused
    assert verdict.ok and verdict.outputs[0].judged_by == "agreement"
    # A broken classifier (half of its answers moved) fails, with the figure and the bound named.
    broken = probs.copy()
    broken[::2] = broken[::2, ::-1]
    moved = int(np.sum(broken.argmax(1) != probs.argmax(1)))
    verdict = judge("top1", [probs], [broken], None, max_drop=1.0, min_sqnr_db=10.0)
    agreed = 100 * (32 - moved) / 32
    assert not verdict.ok and agreed < 60
    assert verdict.reason == (f"top-1 agreement with the float model {agreed:.1f} % < min {DEFAULT_MIN_AGREEMENT:g} % "
                              "on 32 samples")
    assert verdict.shortfall() == (1, pytest.approx(DEFAULT_MIN_AGREEMENT - agreed))
    # With labels, --max-drop judges accuracy points as before: the one flip fails at 1.0.
    labelled = judge("top1", [probs], [one_flip], probs.argmax(1), max_drop=1.0, min_sqnr_db=10.0)
    assert not labelled.ok and labelled.outputs[0].judged_by == "metric"
    strict = judge("top1", [probs], [one_flip], None, max_drop=1.0, min_sqnr_db=10.0, min_agreement=100.0)
    assert not strict.ok


def test_exact_and_silent_outputs() -> None:
    zeros = np.zeros((4, 3))
    ones = np.ones((4, 3))
    exact = judge("mae", [ones, zeros], [ones, zeros], None, max_drop=1.0, min_sqnr_db=10.0)
    assert exact.ok and exact.outputs[0].sqnr_db is None  # no noise: None, and it passes
    silent = judge("mae", [ones, zeros], [ones, zeros + 0.5], None, max_drop=1.0, min_sqnr_db=10.0)
    assert not silent.ok and "all zero" in silent.reason
    assert relative_rmse(ones, ones) is None  # a constant output has no spread to compare with
    assert relative_rmse(np.array([0.0, 2.0]), np.array([0.0, 3.0])) == pytest.approx(np.sqrt(0.5), abs=1e-5)


# ----- through tflite-int8 -----------------------------------------------------------------
@pytest.fixture(scope="module")
def two_heads(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import keras

    keras.utils.set_random_seed(0)
    root = tmp_path_factory.mktemp("two_heads")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 16)).astype(np.float32)
    labels = (x[:, :4].argmax(axis=1)).astype(np.int64)
    target = np.stack([x[:, 4] * 3 + x[:, 5], x[:, 6] - x[:, 7] * 2], axis=1).astype(np.float32)
    inputs = keras.Input((16,), name="x")
    hidden = keras.layers.Dense(32, activation="relu")(inputs)
    scores = keras.layers.Dense(4, activation="softmax", name="scores")(hidden)
    values = keras.layers.Dense(2, name="values")(keras.layers.Dense(32, activation="relu")(inputs))
    model = keras.Model(inputs, [scores, values])
    model.compile(optimizer="adam", loss=["sparse_categorical_crossentropy", "mse"])
    model.fit(x, [labels, target], epochs=40, batch_size=32, verbose=0)
    model.save(root / "two_heads.keras")
    np.savez(root / "calib.npz", x=x[:200])  # no --eval: both heads judged against the float model
    return root


def _convert(root: Path, out: Path, targets: tuple[str, ...] = ("tflite-int8",)) -> dict:
    from edgeserve.pipeline import convert

    result = convert(root / "two_heads.keras", list(targets), out, calib=root / "calib.npz")
    return result.manifest["artifacts"][0]


def test_both_heads_pass_as_converted(two_heads: Path, tmp_path: Path) -> None:
    entry = _convert(two_heads, tmp_path)
    quality = entry["quality"]
    assert entry["status"] == "ok" and quality["ok"], quality
    kinds = [o["judged_by"] for o in quality["outputs"]]
    assert kinds == ["agreement", "sqnr"], quality  # output 0 is the softmax: top-1 against the float model
    assert quality["outputs"][1]["sqnr_db"] >= DEFAULT_MIN_SQNR_DB + 10, quality


def test_one_broken_layer_scale_fails_the_gate_naming_that_output(two_heads: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Every attempt's model gets the regression head's output scale multiplied by 64 (its
    values requantized to 1/64 of the levels; for the int16 remedy 64 x 256); the classifier
    head is untouched, so every remedy fails and the best one is written, marked failed."""
    import flatbuffers

    from edgeserve.converters.tflite_int8.converter import TfliteInt8Converter
    from edgeserve.errors import AccuracyError
    from edgeserve.tflite_metadata import unpack_model

    original = TfliteInt8Converter.emit

    def broken(self, route, remedy):  # type: ignore[no-untyped-def]
        attempt = original(self, route, remedy)
        if attempt.model is not None:
            model = unpack_model(attempt.model)
            graph = model.subgraphs[0]
            head = next(i for i in graph.outputs if graph.tensors[i].shape[-1] == 2)
            q = graph.tensors[head].quantization
            if q is not None and q.scale is not None and len(q.scale):
                wide = graph.tensors[head].type == 7  # int16 (the 16x8 remedy): 256x finer to begin with
                q.scale = [float(s) * (64 * 256 if wide else 64) for s in q.scale]
            builder = flatbuffers.Builder(len(attempt.model) + 1024)
            builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
            attempt.model = bytes(builder.Output())
        return attempt

    monkeypatch.setattr(TfliteInt8Converter, "emit", broken)
    with pytest.raises(AccuracyError) as err:
        _convert(two_heads, tmp_path, ("tflite-int8", "mcu"))
    manifest = err.value.result.manifest
    entry = manifest["artifacts"][0]
    # mcu builds on that artifact: it is not built, and says so (manifest and message) rather
    # than vanishing from the run.
    assert [a["target"] for a in manifest["artifacts"]] == ["tflite-int8"]
    assert manifest["not_built"] == [{"target": "mcu", "reason": "not built: it is built from tflite-int8's "
                                                                 "artifact, which failed its quality gate"}]
    assert "mcu: not built" in str(err.value)
    outputs = entry["quality"]["outputs"]
    assert entry["status"] == "failed"
    assert outputs[0]["ok"] and not outputs[1]["ok"], outputs  # the headline alone would have passed
    assert entry["metrics"]["drop_points"] <= 1.0
    assert outputs[1]["sqnr_db"] < DEFAULT_MIN_SQNR_DB
    message = str(err.value)
    assert "--min-sqnr" in message and outputs[1]["name"] in message, message
    assert all(a["status"] in ("sqnr too low", "skipped", "error") for a in entry["attempts"]), entry["attempts"]
    # The layers kept in float come from the failing head only (its hidden and output Dense),
    # never from the classifier's, although a classifier layer is among the worst overall.
    floated = [a["float_layers"] for a in entry["attempts"] if a["remedy"] == "float-layers"]
    assert floated and all(len(f) <= 2 for f in floated), floated
    assert not any("scores" in name for f in floated for name in f), floated
