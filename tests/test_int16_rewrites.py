"""The int16x8 remedy's rewrites (converters/tflite_int8/int16_rewrites.py): PRELU, LEAKY_RELU,
HARD_SWISH, DEPTH_TO_SPACE and SPACE_TO_DEPTH written as operators with an int16 path, checked in float
against the original operators in LiteRT's reference kernels, then quantized to an
integer-only int16x8 model that LiteRT runs."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ai_edge_quantizer")
tf = pytest.importorskip("tensorflow")


def _run(model: bytes, x: np.ndarray) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interpreter = Interpreter(model_content=model, experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    interpreter.allocate_tensors()
    detail, out = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    outputs = []
    for sample in x:
        value = sample[None]
        if detail["dtype"] != np.float32:
            scale, zero = detail["quantization"]
            info = np.iinfo(detail["dtype"])
            value = np.clip(np.round(value / scale) + zero, info.min, info.max).astype(detail["dtype"])
        interpreter.set_tensor(detail["index"], value)
        interpreter.invoke()
        y = interpreter.get_tensor(out["index"]).astype(np.float64)
        if out["dtype"] != np.float32:
            scale, zero = out["quantization"]
            y = (y - zero) * scale
        outputs.append(y[0])
    return np.stack(outputs)


@pytest.fixture(scope="module")
def four_ops(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A float .tflite with one of each operator the rewrite covers, between convolutions."""
    import keras

    inputs = keras.Input((8, 8, 4), batch_size=1)
    h = keras.layers.Conv2D(8, 3, padding="same")(inputs)
    h = keras.layers.PReLU(shared_axes=[1, 2], alpha_initializer=keras.initializers.RandomUniform(0.05, 0.5, seed=1))(h)
    h = keras.layers.Lambda(lambda t: tf.nn.depth_to_space(t, 2))(h)
    h = keras.layers.Conv2D(4, 3, padding="same")(h)
    h = keras.layers.LeakyReLU(negative_slope=0.1)(h)
    h = keras.layers.Lambda(lambda t: tf.nn.space_to_depth(t, 2))(h)
    model = keras.Model(inputs, keras.layers.Conv2D(3, 1)(h))
    return tf.lite.TFLiteConverter.from_keras_model(model).convert()


def _samples(count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(count, 8, 8, 4)).astype(np.float32)


def test_each_rewrite_computes_the_original_operator_exactly(four_ops: bytes) -> None:
    from edgeserve.converters.tflite_int8.int16_rewrites import rewrite_for_int16
    from edgeserve.tflite.model import TfliteModel

    before = TfliteModel.from_bytes(four_ops).op_counts_all()
    assert {name: before.get(name) for name in ("PRELU", "LEAKY_RELU", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH")} == \
        {"PRELU": 1, "LEAKY_RELU": 1, "DEPTH_TO_SPACE": 1, "SPACE_TO_DEPTH": 1}, before
    rewritten, done = rewrite_for_int16(four_ops)
    assert done == {"PRELU": 1, "LEAKY_RELU": 1, "DEPTH_TO_SPACE": 1, "SPACE_TO_DEPTH": 1}
    after = TfliteModel.from_bytes(rewritten).op_counts_all()
    assert not {"PRELU", "LEAKY_RELU", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH"} & set(after), after
    assert after["TRANSPOSE"] == 2 and after["RESHAPE"] == 4 and after["MAXIMUM"] == 1 and after["RELU"] == 1
    graph = TfliteModel.from_bytes(rewritten).subgraphs[0]  # batch 1: 5-D, which TFLM's TRANSPOSE takes
    assert [len(graph.tensors[op.inputs[0]].shape) for op in graph.operators if op.op_name == "TRANSPOSE"] == [5, 5]
    x = _samples(8, 0)
    reference, candidate = _run(four_ops, x), _run(rewritten, x)
    # Half the values are negative, so both branches of each activation are exercised, and
    # a wrong block order would move values: the comparison is exact, not a tolerance.
    assert (x < 0).mean() > 0.4 and np.abs(reference).max() > 0.1
    np.testing.assert_array_equal(candidate, reference)
    assert rewrite_for_int16(rewritten) == (rewritten, {})  # nothing left: the bytes come back as given


def test_hard_swish_is_rewritten_to_float_rounding_and_then_quantizes_to_int16() -> None:
    """HARD_SWISH (MobileNetV3-style models: selfie segmentation, PaddleOCR's text detector):
    its arithmetic is reordered, so the float check allows float rounding, no more."""
    import keras

    from edgeserve.converters.tflite_int8.int16_rewrites import rewrite_for_int16
    from edgeserve.converters.tflite_int8.quantizer_route import QuantizerRoute
    from edgeserve.datasets import SampleSet
    from edgeserve.quality.metrics import sqnr_db
    from edgeserve.tflite.model import TfliteModel

    inputs = keras.Input((8, 8, 4), batch_size=1)
    h = keras.layers.Activation("hard_swish")(keras.layers.Conv2D(8, 3, padding="same")(inputs))
    model = keras.Model(inputs, keras.layers.Conv2D(3, 1)(h))
    data = tf.lite.TFLiteConverter.from_keras_model(model).convert()
    assert TfliteModel.from_bytes(data).op_counts_all().get("HARD_SWISH") == 1
    rewritten, done = rewrite_for_int16(data)
    assert done == {"HARD_SWISH": 1} and "HARD_SWISH" not in TfliteModel.from_bytes(rewritten).op_counts_all()
    x = _samples(8, 4) * 3  # past both knees of the curve (-3 and 3)
    reference = _run(data, x)
    np.testing.assert_allclose(_run(rewritten, x), reference, rtol=1e-5, atol=1e-5 * np.abs(reference).max())
    route = QuantizerRoute(data, SampleSet((_samples(32, 5) * 3,), None, "npz", None, None), "float")
    assert sqnr_db(reference, _run(route.emit_scheme("int16x8"), x)) > 30.0


def test_a_leaky_relu_steeper_than_one_is_left_for_the_quantizer_to_name() -> None:
    """max(x, a*x) is LEAKY_RELU only for 0 <= a <= 1; a steeper slope stays as it was."""
    import keras

    inputs = keras.Input((6,), batch_size=1)
    model = keras.Model(inputs, keras.layers.LeakyReLU(negative_slope=1.5)(keras.layers.Dense(6)(inputs)))
    data = tf.lite.TFLiteConverter.from_keras_model(model).convert()
    from edgeserve.converters.tflite_int8.int16_rewrites import rewrite_for_int16

    assert rewrite_for_int16(data) == (data, {})


def test_the_int16x8_remedy_quantizes_a_model_it_could_not_before(four_ops: bytes) -> None:
    """ai-edge-quantizer's int16x8 recipe has no rule for these four operators; with the rewrite
    the model is integer-only, int16 between int8-weight kernels, and close to float."""
    from edgeserve.converters.tflite_int8.quantizer_route import QuantizerRoute
    from edgeserve.datasets import SampleSet
    from edgeserve.quality.metrics import sqnr_db
    from edgeserve.tflite.model import TfliteModel

    route = QuantizerRoute(four_ops, SampleSet((_samples(32, 1),), None, "npz", None, None), "float")
    model = route.emit_scheme("int16x8")
    assert route.int16_rewrites == {"PRELU": 1, "LEAKY_RELU": 1, "DEPTH_TO_SPACE": 1, "SPACE_TO_DEPTH": 1}
    graph = TfliteModel.from_bytes(model).subgraphs[0]
    computing = [op for op in graph.operators if op.op_name not in ("QUANTIZE", "DEQUANTIZE")]
    kinds = {graph.tensors[op.outputs[0]].dtype_name for op in computing}
    assert kinds == {"int16"}, kinds
    x = _samples(16, 2)
    measured = sqnr_db(_run(four_ops, x), _run(model, x))
    assert measured > 30.0, measured  # int8 weights bound it; int8 activations measure lower below
    assert measured > sqnr_db(_run(four_ops, x), _run(route.emit_scheme("int8"), x))


def test_the_microcontroller_targets_name_what_an_int16x8_model_leaves_them(tmp_path_factory: pytest.TempPathFactory) -> None:
    """An int16x8 model (the remedy tflite-int8 chose) with a bilinear resize: TFLM's kernel has
    no int16 path, and ai-edge-quantizer leaves its version at 3, so only the data type tells
    (TFLM's Python interpreter fails at Invoke with no reason); the mcu target runs such a
    resize in int8 (tests/test_mcu_tflm_rewrites.py). mcu-c has an int16 bilinear
    kernel of its own (LiteRT's arithmetic; tests/test_mcu_c_int16.py checks it), so it takes it."""
    import keras

    from edgeserve.converters.microcontroller.ops import resolve_ops
    from edgeserve.converters.mcu_c.lower import Lowering
    from edgeserve.converters.tflite_int8.quantizer_route import QuantizerRoute
    from edgeserve.datasets import SampleSet
    from edgeserve.errors import UnsupportedOpError
    from edgeserve.tflite.model import TfliteModel

    inputs = keras.Input((8, 8, 4), batch_size=1)
    h = keras.layers.UpSampling2D(2, interpolation="bilinear")(keras.layers.Conv2D(4, 3, padding="same")(inputs))
    model = keras.Model(inputs, keras.layers.Conv2D(2, 1)(h))
    float_model = tf.lite.TFLiteConverter.from_keras_model(model).convert()
    route = QuantizerRoute(float_model, SampleSet((_samples(16, 3),), None, "npz", None, None), "int8")
    int16 = TfliteModel.from_bytes(route.emit_scheme("int16x8"))
    with pytest.raises(UnsupportedOpError, match="RESIZE_BILINEAR kernel takes float and int8 only, and this "
                                                 "layer is int16") as refused:
        resolve_ops(int16)
    assert "int16 activations" in str(refused.value)
    resolve_ops(TfliteModel.from_bytes(route.emit_scheme("int8")))  # the int8 model is TFLM's to run
    assert "es_resize_bilinear_s16" in {step.kernel for step in Lowering(int16).steps()}


@pytest.mark.parametrize("scheme", ["int8", "int16x8"])
def test_calibrating_on_every_core_makes_the_same_model(four_ops: bytes, scheme: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The calibration set split over one calibrator per core: min/max of the parts' ranges is
    the range of the whole set, so the quantized model is the same byte for byte."""
    import os

    from edgeserve.converters.tflite_int8 import quantizer_route

    data = {"serving_default": [{"input_1": x[None]} for x in _samples(24, 7)]}
    key = quantizer_route.QuantizerRoute(four_ops, None, "int8")  # the signature's own names
    data = {key._key: [{key._names[0]: sample["input_1"]} for sample in data["serving_default"]]}
    made = {}
    for cores in (1, 3):
        monkeypatch.setattr(os, "cpu_count", lambda cores=cores: cores)
        made[cores] = quantizer_route.quantize_step(key.float_model, scheme, False, [], data)
    assert made[1] == made[3] and len(made[1]) > 1000
    # A different set gives a different model: the comparison can tell them apart.
    other = {key._key: [{key._names[0]: 3 * sample[key._names[0]]} for sample in data[key._key]]}
    assert quantizer_route.quantize_step(key.float_model, scheme, False, [], other) != made[1]
