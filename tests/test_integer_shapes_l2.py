"""Operators ai-edge-quantizer leaves float that have exact or standard int8 forms, made int8 in
tflite-int8 (converters/tflite_int8/integer_activations.py), so the microcontroller target takes
the model: SHAPE of a squeeze-excite block's pooled vector (it reads the int8 tensor: the same
dimensions) and an embedding's last L2_NORMALIZATION (int8 on the kernels' fixed 1/128 scale);
mcu-c runs the L2 norm with its own kernel (firmware/kernels/es_l2norm.c) and needs no code for
the shape arithmetic. A hotword embedding model of issue 48's trial (efficientword-net) was
refused by mcu and mcu-c for both."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
pytest.importorskip("ai_edge_quantizer")

from edgeserve.tflite.model import TfliteModel  # noqa: E402


def squeeze_excite_embedder() -> bytes:
    """A float .tflite: conv, a squeeze-excite block whose Reshape keeps a free batch (SHAPE ->
    STRIDED_SLICE -> PACK -> RESHAPE after conversion), a dense embedding, L2-normalized."""
    import keras

    keras.utils.set_random_seed(3)
    x = keras.Input((16, 16, 1))
    y = keras.layers.Conv2D(8, 3, activation="relu")(x)
    pooled = keras.layers.GlobalAveragePooling2D()(y)
    gate = keras.layers.Reshape((1, 1, 8))(pooled)
    gate = keras.layers.Conv2D(8, 1, activation="sigmoid")(gate)
    y = keras.layers.Multiply()([y, gate])
    y = keras.layers.Flatten()(keras.layers.MaxPooling2D(2)(y))
    # tf.math.l2_normalize converts to one L2_NORMALIZATION (Keras's UnitNormalization does not)
    y = keras.layers.Lambda(lambda t: tf.math.l2_normalize(t, axis=-1))(keras.layers.Dense(16)(y))
    return tf.lite.TFLiteConverter.from_keras_model(keras.Model(x, y)).convert()


def op_types(data: bytes) -> dict[str, list[str]]:
    """Operator -> the types of its first input, for the operators this file is about."""
    model = TfliteModel.from_bytes(data)
    graph = model.subgraphs[0]
    found: dict[str, list[str]] = {}
    for op in graph.operators:
        found.setdefault(op.op_name, []).append(graph.tensors[op.inputs[0]].dtype_name)
    return found


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    from edgeserve.conversion.convert import convert

    root = tmp_path_factory.mktemp("se_embedder")
    source = root / "embedder.tflite"
    source.write_bytes(squeeze_excite_embedder())
    assert {"SHAPE", "PACK", "L2_NORMALIZATION"} <= set(op_types(source.read_bytes()))
    calib = root / "calib.npz"
    np.savez(calib, x=np.random.default_rng(0).uniform(0, 1, (48, 16, 16, 1)).astype(np.float32))
    result = convert(source, ["tflite-int8", "mcu", "mcu-c"], root / "out", calib=calib)
    return root / "out", {a["target"]: a for a in result.manifest["artifacts"]}


def test_shape_and_l2_normalization_become_int8_and_the_model_integer_only(converted: tuple[Path, dict]) -> None:
    out, entries = converted
    int8 = entries["tflite-int8"]
    assert int8["status"] == "ok" and int8["integer_only"], int8.get("reason")
    data = (out / int8["path"]).read_bytes()
    types = op_types(data)
    assert set(types["SHAPE"]) == {"int8"} and types["L2_NORMALIZATION"] == ["int8"]
    assert "DEQUANTIZE" not in types
    graph = TfliteModel.from_bytes(data).subgraphs[0]
    l2 = next(op for op in graph.operators if op.op_name == "L2_NORMALIZATION")
    quantization = graph.tensors[l2.outputs[0]].quantization
    assert list(quantization.scale) == [1.0 / 128.0] and list(quantization.zero_point) == [0]
    # The int8 embedding against the float one, on samples held back from calibration.
    assert min(int8["output_sqnr_db"].values()) > 20


def test_the_microcontroller_build_takes_it_and_matches_tflm(converted: tuple[Path, dict]) -> None:
    """mcu refused both operators before; now TFLM runs the model in the arena edgeserve
    computed, bit-exact with LiteRT's int8 kernels (the target's own check)."""
    _, entries = converted
    mcu = entries["mcu"]
    assert mcu["status"] == "ok", mcu.get("reason")
    assert {"SHAPE", "PACK", "L2_NORMALIZATION"} <= set(mcu["ops"])


def test_plain_c_runs_it_bit_exact_with_tflm_with_no_code_for_the_shape_arithmetic(
        converted: tuple[Path, dict]) -> None:
    out, entries = converted
    entry = entries["mcu-c"]
    assert entry["status"] == "ok", entry.get("reason")
    verification = entry["verification"]
    assert verification["bit_exact"] and verification["distinct_reference_outputs"] > 1
    assert verification["cortex_m4"]["matches_host"]
    model_c = (out / "mcu-c" / "embedder.c").read_text()
    assert "es_l2_normalization(" in model_c
    assert not re.search(r"\d+: (SHAPE|STRIDED_SLICE|PACK) \*/", model_c)  # each call is commented "N: OP"
    assert (out / "mcu-c" / "kernels" / "es_l2norm.c").exists()
