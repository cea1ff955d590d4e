"""ONNX Runtime backends: IOBinding over our arrays, and providers that are missing or dropped."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgeserve.errors import BackendError
from edgeserve.preprocess import PreprocessSpec
from edgeserve.runtime import Session

ort = pytest.importorskip("onnxruntime")


def tiny_cnn(path: Path) -> Path:
    """Conv -> Relu -> GlobalAveragePool -> Flatten -> MatMul -> Softmax on a 1x3x16x16 float input."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.normal(size=(4, 3, 3, 3)).astype(np.float32), "W"),
               numpy_helper.from_array(rng.normal(size=(4, 5)).astype(np.float32), "G")]
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]), helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("MatMul", ["f", "G"], ["l"]), helper.make_node("Softmax", ["l"], ["y"], axis=1)]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_cnn(tmp_path_factory.mktemp("onnx") / "tiny.onnx")


def test_default_chain_records_missing_gpu_providers(model: Path) -> None:
    s = Session(model)
    assert s.backend == "onnxruntime:cpu"
    assert [(a.backend, a.ok) for a in s.attempts] == [
        ("onnxruntime:tensorrt", False), ("onnxruntime:cuda", False), ("onnxruntime:openvino-npu", False),
        ("onnxruntime:openvino-gpu", False), ("onnxruntime:cpu", True)]
    assert "this onnxruntime build has no TensorrtExecutionProvider" in s.attempts[0].reason
    assert s.placement.total == 6 and s.placement.accelerated == 6
    assert s.placement.taken_by == "CPUExecutionProvider"


def test_results_equal_a_plain_inference_session_and_use_our_buffers(model: Path) -> None:
    s = Session(model)
    x = np.random.default_rng(1).random((1, 3, 16, 16), dtype=np.float32)
    got = s.run(x)[0].copy()
    want = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.allclose(got, want, rtol=1e-6, atol=1e-7)
    # IOBinding reads the array the Session wrote and writes the array it reads.
    assert np.array_equal(s._active.input_buffer(0), x)
    assert np.array_equal(s._active.output_buffer(0), want) or np.allclose(s._active.output_buffer(0), want)


def test_camera_frames_go_through_the_float_path(model: Path) -> None:
    spec = PreprocessSpec(layout="nchw", mean=(0.5,), std=(0.25,))
    s = Session(model, preprocess=spec)
    frame = np.random.default_rng(2).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    got = s.run(frame)[0].copy()
    x = spec.bind_to_input((1, 3, 16, 16)).apply(frame)
    want = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.allclose(got, want, atol=1e-5)


def test_a_provider_dropped_at_session_creation_is_recorded(model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ORT lists a provider as available but opens on the CPU (a CUDA build without CUDA libraries)."""
    real = ort.get_available_providers()
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", *real])
    s = Session(model, backend="auto")
    cuda = next(a for a in s.attempts if a.backend == "onnxruntime:cuda")
    assert not cuda.ok and "dropped CUDAExecutionProvider when opening the model" in cuda.reason
    assert s.backend == "onnxruntime:cpu"
    with pytest.raises(BackendError, match="dropped CUDAExecutionProvider"):
        Session(model, backend="onnxruntime:cuda")


def test_jetson_profile_chain_on_an_onnx_file(model: Path) -> None:
    s = Session(model, "jetson-orin-nano")
    assert [(a.backend, a.stage, a.ok) for a in s.attempts] == [
        ("onnxruntime:tensorrt", "open", False), ("onnxruntime:cuda", "open", False),
        ("litert:xnnpack", "select", False), ("onnxruntime:cpu", "open", True)]
    assert s.threads == 6


def test_tensorrt_is_opened_with_fp16_int8_for_qdq_and_an_engine_cache(model: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """No TensorRT here: the session ORT is asked for is captured, then refused as ORT would."""
    from edgeserve.runtime.backends.onnx import provider_list

    asked: list = []
    real_session = ort.InferenceSession

    def capture(data: bytes, options: object, providers: list) -> object:
        asked.append(providers)
        return real_session(data, options, providers=["CPUExecutionProvider"])  # what a build without TRT opens

    real = ort.get_available_providers()
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["TensorrtExecutionProvider", *real])
    monkeypatch.setattr(ort, "InferenceSession", capture)
    s = Session(model, "jetson-orin-nano")
    trt = next(a for a in s.attempts if a.backend == "onnxruntime:tensorrt")
    assert not trt.ok and "dropped TensorrtExecutionProvider" in trt.reason
    (name, options), *rest = asked[0]
    assert name == "TensorrtExecutionProvider" and rest == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert options["trt_fp16_enable"] is True and options["trt_int8_enable"] is False  # a float model
    assert options["trt_engine_cache_enable"] and "trt-engines" in options["trt_engine_cache_path"]
    qdq = provider_list("TensorrtExecutionProvider", model.read_bytes() + b"QuantizeLinear")
    assert qdq[0][1]["trt_int8_enable"] is True
    assert provider_list("CPUExecutionProvider", b"") == ["CPUExecutionProvider"]
