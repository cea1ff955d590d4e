"""mcu-c on models with several inputs (a recurrent model's samples and state, as silero-vad
takes them), and on the two kernels silero-vad's INT8 model needed: GATHER_ND with constant
indices (its STFT's reflect pad, as edgeserve's ONNX reader writes it) and int8 SQRT (a table
of LiteRT's own results; TFLM has no int8 SQRT, so LiteRT's reference kernels judge it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ai_edge_quantizer")
tf = pytest.importorskip("tensorflow")

from tools_required import require_compiler  # noqa: E402

from edgeserve.converters.mcu_c import check  # noqa: E402
from edgeserve.converters.mcu_c.generate import generate  # noqa: E402
from edgeserve.tflite.model import TfliteModel  # noqa: E402

SAMPLES = 12


def _quantized(model, calibration: list[np.ndarray]) -> bytes:
    """ai-edge-quantizer's full-integer model (int8 in and out) of a Keras model."""
    from edgeserve.converters.tflite_int8.quantizer_route import QuantizerRoute
    from edgeserve.datasets import SampleSet

    float_model = tf.lite.TFLiteConverter.from_keras_model(model).convert()
    return QuantizerRoute(float_model, SampleSet(tuple(calibration), None, "npz", None, None), "int8").emit_scheme("int8")


def _write(generated, directory: Path) -> Path:
    for relative, text in generated.files.items():
        (directory / relative).parent.mkdir(parents=True, exist_ok=True)
        (directory / relative).write_text(text)
    return directory


def test_several_inputs_are_read_back_to_back_from_the_callers_buffer(tmp_path: Path) -> None:
    require_compiler("host-c")
    import keras

    from edgeserve.converters.microcontroller import tflm
    from edgeserve.converters.mcu_c.reference import split_inputs

    frame, state = keras.Input((16,), batch_size=1), keras.Input((8,), batch_size=1)
    hidden = keras.layers.Dense(8, activation="tanh")(keras.layers.Concatenate()([frame, state]))
    model = keras.Model([frame, state], [keras.layers.Dense(2)(hidden), hidden])
    rng = np.random.default_rng(0)
    data = _quantized(model, [rng.standard_normal((32, 16)).astype(np.float32),
                              rng.uniform(-1, 1, (32, 8)).astype(np.float32)])
    parsed = TfliteModel.from_bytes(data)
    graph = parsed.subgraphs[0]
    sizes = [graph.tensors[t].nbytes for t in graph.inputs]
    assert sorted(sizes) == [8, 16]
    generated = generate(parsed, "model", "two inputs")
    header = generated.files["model.h"]
    assert "#define MODEL_INPUT_COUNT 2" in header and f"#define MODEL_INPUT_BYTES {sum(sizes)}" in header
    assert f"#define MODEL_INPUT1_OFFSET {sizes[0]}" in header and "MODEL_INPUT1_ZERO_POINT" in header
    assert generated.input_bytes == sum(sizes)
    directory = _write(generated, tmp_path / "out")
    buffers = rng.integers(-128, 128, (SAMPLES, sum(sizes))).astype(np.int8)
    out_bytes = generated.output_bytes
    ours = check.run_host(check.build_host(directory, "model", tmp_path / "harness"), buffers, (out_bytes,))
    # TFLM given each input separately: the C must read each from its own offset.
    runs = tflm.run(data, 1 << 20, split_inputs(data, buffers))
    expected = np.stack([np.concatenate([np.asarray(o).reshape(-1) for o in run]) for run in runs])
    assert len(np.unique(expected, axis=0)) == SAMPLES  # every sample differs: a swapped input would show
    np.testing.assert_array_equal(ours, expected)
    swapped = np.concatenate([buffers[:, sizes[0]:], buffers[:, :sizes[0]]], axis=1)
    assert not np.array_equal(ours, check.run_host(check.build_host(directory, "model", tmp_path / "h2"), swapped,
                                                   (out_bytes,)))
    check.run_host(check.build_host(directory, "model", tmp_path / "asan", sanitize=True), buffers[:3], (out_bytes,))
    main = generated.files["main.c"]
    assert "MODEL_INPUT0_ZERO_POINT" in main and "MODEL_INPUT1_OFFSET" in main


def test_a_constant_gather_and_an_int8_sqrt_are_bit_exact_with_litert(tmp_path: Path) -> None:
    require_compiler("host-c")
    import keras

    from edgeserve.converters.mcu_c.reference import reference_outputs

    # A reflect pad of 8 at both ends of 64 values, as constant indices (what the ONNX reader
    # gives litert-torch), then the magnitude of two channels, as an STFT's.
    index = np.abs(np.arange(-8, 72))
    index = np.where(index >= 64, 126 - index, index).reshape(-1, 1).astype(np.int32)
    x = keras.Input((64, 2), batch_size=1)
    padded = keras.layers.Lambda(lambda t: tf.expand_dims(tf.gather_nd(t[0], index), 0))(x)
    magnitude = keras.layers.Lambda(lambda t: tf.sqrt(t[..., 0] * t[..., 0] + t[..., 1] * t[..., 1]))(padded)
    data = _quantized(keras.Model(x, magnitude), [np.random.default_rng(0).standard_normal((32, 64, 2))
                                                  .astype(np.float32)])
    parsed = TfliteModel.from_bytes(data)
    ops = parsed.op_counts()
    assert {"GATHER_ND", "SQRT"} <= set(ops), ops
    generated = generate(parsed, "model", "gather and sqrt")
    directory = _write(generated, tmp_path / "out")
    inputs = np.random.default_rng(1).integers(-128, 128, (SAMPLES, 1, 64, 2)).astype(np.int8)
    ours = check.run_host(check.build_host(directory, "model", tmp_path / "harness"), inputs, (1, 80))
    which, reference = reference_outputs(data, inputs)
    assert which.startswith("litert-reference"), which  # TFLM refuses the int8 SQRT
    assert len(np.unique(reference)) > 20
    np.testing.assert_array_equal(ours, reference.reshape(ours.shape))
