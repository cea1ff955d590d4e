"""A float .tflite's RFFT2D written as matrix products for tf2onnx (converters/onnx/tflite_dft.py):
each chain the rewrite takes gives LiteRT's outputs again, one it does not take is left as it
was, and tf2onnx converts what it writes (BirdNET's and a wake-phrase model's spectrograms, the
issue 48 trial, were stopped there: docs/sources.md)."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
pytest.importorskip("ai_edge_litert")

from edgeserve.converters.onnx.tflite_dft import dft_as_matmul  # noqa: E402
from edgeserve.tflite.model import TfliteModel  # noqa: E402

READ_AS = {"abs": tf.abs, "cast": lambda c: tf.cast(c, tf.float32), "real": tf.math.real, "imag": tf.math.imag}


def spectrum_model(read: str, length: int, fft: int, squeeze: bool = False) -> bytes:
    """log(1 + |X|^2) of a [1, 5, length] signal's spectrum, read by ``read``; ``squeeze``: an
    RFFT2D over [1, 5, 1, length] and a SQUEEZE, as BirdNET's graph has, instead of TF's RESHAPEs."""
    shape = [1, 5, 1, length] if squeeze else [1, 5, length]

    @tf.function(input_signature=[tf.TensorSpec(shape, tf.float32)])
    def spectrum(x: tf.Tensor) -> tf.Tensor:
        spec = tf.squeeze(tf.signal.rfft2d(x, fft_length=[1, fft]), axis=2) if squeeze else \
            tf.signal.rfft(x, fft_length=[fft])
        value = READ_AS[read](spec)
        return tf.math.log(value * value + 1.0)

    return tf.lite.TFLiteConverter.from_concrete_functions([spectrum.get_concrete_function()]).convert()


def litert(data: bytes, x: np.ndarray) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=data)
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    return interpreter.get_tensor(interpreter.get_output_details()[0]["index"])


def operators(data: bytes) -> list[str]:
    return [op.op_name for op in TfliteModel.from_bytes(data).subgraphs[0].operators]


@pytest.mark.parametrize(("read", "length", "fft", "squeeze"), [
    ("abs", 64, 64, False),
    ("abs", 64, 64, True),  # BirdNET's and the wake-phrase model's SQUEEZE between
    ("cast", 64, 64, True),  # BirdNET: a CAST takes the real part
    ("real", 64, 64, False),
    ("imag", 64, 64, False),
    ("abs", 100, 64, False),  # a frame longer than the FFT: RFFT2D's crop
    ("abs", 64, 32, True),
])
def test_each_rewritten_chain_gives_litert_outputs_again(read: str, length: int, fft: int, squeeze: bool) -> None:
    data = spectrum_model(read, length, fft, squeeze)
    rewritten, note = dft_as_matmul(data)
    assert "RFFT2D" in operators(data) and "RFFT2D" not in operators(rewritten)
    assert note and note.startswith("1 RFFT2D")
    x = np.random.default_rng(0).standard_normal([1, 5, 1, length] if squeeze else [1, 5, length]).astype(np.float32)
    expected, got = litert(data, x), litert(rewritten, x)
    assert got.shape == expected.shape == (1, 5, fft // 2 + 1)
    assert np.abs(got - expected).max() < 1e-4 * max(1.0, float(np.abs(expected).max()))


def test_the_comparison_tells_a_wrong_spectrum_apart() -> None:
    """The check above fails on a rewrite that is off by one bin (the matrices' columns shifted)."""
    data = spectrum_model("abs", 64, 64, squeeze=True)
    rewritten, _ = dft_as_matmul(data)
    from edgeserve.tflite.metadata import pack_model, unpack_model

    model = unpack_model(rewritten)
    graph = model.subgraphs[0]
    for tensor in graph.tensors:
        if tensor.name.endswith(b"dft_real_matrix"):
            buffer = model.buffers[tensor.buffer]
            matrix = np.frombuffer(bytes(buffer.data), np.float32).reshape(64, 33)
            buffer.data = np.frombuffer(np.roll(matrix, 1, axis=1).tobytes(), np.uint8)
    broken = pack_model(model, len(rewritten))
    x = np.random.default_rng(0).standard_normal([1, 5, 1, 64]).astype(np.float32)
    assert np.abs(litert(broken, x) - litert(data, x)).max() > 0.1


def test_a_spectrum_read_twice_is_left_as_it_was() -> None:
    @tf.function(input_signature=[tf.TensorSpec([1, 5, 64], tf.float32)])
    def both(x: tf.Tensor) -> tf.Tensor:
        spec = tf.signal.rfft(x)
        return tf.abs(spec) + tf.math.real(spec)

    data = tf.lite.TFLiteConverter.from_concrete_functions([both.get_concrete_function()]).convert()
    assert dft_as_matmul(data) == (data, None)


def test_tf2onnx_converts_the_rewritten_model_and_onnx_runtime_agrees(tmp_path) -> None:
    import subprocess
    import sys

    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("tf2onnx")
    data = spectrum_model("cast", 64, 64, squeeze=True)
    source = tmp_path / "spectrum.tflite"
    source.write_bytes(data)
    refused = subprocess.run([sys.executable, "-m", "tf2onnx.convert", "--tflite", str(source), "--opset", "17",
                              "--output", str(tmp_path / "as_given.onnx")], capture_output=True, text=True)
    assert refused.returncode != 0 and "RFFT" in refused.stderr  # what stopped BirdNET
    rewritten = tmp_path / "rewritten.tflite"
    rewritten.write_bytes(dft_as_matmul(data)[0])
    subprocess.run([sys.executable, "-m", "tf2onnx.convert", "--tflite", str(rewritten), "--opset", "17",
                    "--output", str(tmp_path / "rewritten.onnx")], capture_output=True, check=True)
    session = ort.InferenceSession(str(tmp_path / "rewritten.onnx"), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal([1, 5, 1, 64]).astype(np.float32)
    got = session.run(None, {session.get_inputs()[0].name: x})[0]
    expected = litert(data, x)
    assert np.abs(got - expected).max() < 1e-4 * max(1.0, float(np.abs(expected).max()))


def test_a_float_tflite_with_a_spectrum_reaches_onnx_and_coreml(tmp_path, monkeypatch) -> None:
    """The onnx and coreml targets of such a file (both start from tf2onnx, run once for the
    two), judged against the file as given in LiteRT; the route says what was rewritten."""
    pytest.importorskip("tf2onnx")
    pytest.importorskip("torch")
    pytest.importorskip("coremltools")
    from edgeserve.conversion.convert import convert
    from edgeserve.converters.onnx import export

    runs = []
    real = export._tf2onnx
    monkeypatch.setattr(export, "_tf2onnx", lambda *a: runs.append(a) or real(*a))
    source = tmp_path / "spectrum.tflite"
    source.write_bytes(spectrum_model("abs", 64, 64, squeeze=True))
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=np.random.default_rng(2).standard_normal((16, 5, 1, 64)).astype(np.float32))
    result = convert(source, ["onnx", "coreml"], tmp_path / "out", calib=calib)
    assert len(runs) == 1
    entries = {a["target"]: a for a in result.manifest["artifacts"]}
    assert entries["onnx"]["status"] == "ok" and entries["coreml"]["status"] == "ok", entries
    assert entries["onnx"]["route"]["export"] == "float .tflite (RFFT2D as matrix products) -> tf2onnx"
    assert any("RFFT2D written as products" in note for note in entries["onnx"]["route"]["notes"])
    assert min(entries["onnx"]["output_sqnr_db"].values()) > 60
