"""The OpenVINO execution provider, loaded for real (onnxruntime-ep-openvino, no fakes): the
automatic chain tries its NPU, GPU and CPU devices before ONNX Runtime's CPU provider and
records each outcome with the library's own reason."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

ORDER = ["onnxruntime:openvino-npu", "onnxruntime:openvino-gpu", "onnxruntime:cpu"]


@pytest.fixture(scope="module")
def onnx_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small float ONNX classifier built here (Conv, Relu, GlobalAveragePool, Gemm)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w"),
               numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b"),
               numpy_helper.from_array(rng.standard_normal((8, 5)).astype(np.float32), "fc")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]), helper.make_node("MatMul", ["f", "fc"], ["y"])]
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], weights)
    path = tmp_path_factory.mktemp("openvino") / "small.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _plugin() -> None:
    try:
        import onnxruntime_ep_openvino  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("onnxruntime-ep-openvino is not installed; `make setup` installs it (edgeserve[onnx])")
        pytest.skip("onnxruntime-ep-openvino is not installed")


def _intel_cpu() -> bool:
    import onnxruntime as ort

    return any(d.device.vendor_id == 0x8086 for d in ort.get_ep_devices() if d.ep_name == "CPUExecutionProvider")


def test_the_chain_tries_openvinos_accelerators_then_the_cpu_provider(onnx_model):
    _plugin()
    from edgeserve.runtime import Session

    with Session(onnx_model) as session:
        tried = [a for a in session.attempts if a.backend in ORDER and a.stage == "open"]
        # After TensorRT and CUDA (absent here): OpenVINO's NPU, its GPU, then the CPU provider.
        assert [a.backend for a in tried] == ORDER[:len(tried)] and tried[-1].backend == session.backend
        reasons = {a.backend: a.reason for a in tried if not a.ok}
        if not _intel_cpu():
            # The plugin's factory takes Intel hardware only: on this CPU it offers no device,
            # and says which hardware ONNX Runtime does see.
            assert session.backend == "onnxruntime:cpu"
            for name in ORDER[:2]:
                assert "offers no device on this machine" in reasons[name] and "vendor 0x8086" in reasons[name]
        else:  # an Intel machine without an NPU or GPU: OpenVINO's own reason for each
            assert all(reasons.get(name) for name in ORDER[:2] if name != session.backend)


def test_openvinos_cpu_device_by_name_runs_or_says_why(onnx_model):
    """Not in the automatic chain (ONNX Runtime's CPU provider is the reference there), but
    a user can name it; it then computes what the CPU provider does, or is refused."""
    _plugin()
    from edgeserve.errors import BackendError
    from edgeserve.runtime import Session

    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    with Session(onnx_model, backend="onnxruntime:cpu") as cpu:
        want = cpu.run(x)[0].copy()
    if not _intel_cpu():
        with pytest.raises(BackendError, match="offers no device on this machine.*sees CPU by"):
            Session(onnx_model, backend="onnxruntime:openvino-cpu")
        return
    with Session(onnx_model, backend="onnxruntime:openvino-cpu") as session:
        np.testing.assert_allclose(session.run(x)[0], want, rtol=1e-4, atol=1e-4)


def test_require_npu_fails_with_the_librarys_reason(onnx_model):
    _plugin()
    from edgeserve.errors import BackendError
    from edgeserve.runtime import Session

    if _intel_cpu():
        pytest.skip("an Intel machine may have an NPU; the refusal below is asserted where it cannot")
    with pytest.raises(BackendError) as caught:
        Session(onnx_model, require="npu")
    assert "onnxruntime:openvino-npu" in str(caught.value) and "offers no device on this machine" in str(caught.value)
