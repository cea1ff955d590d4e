"""onnx2tf, the second route from an ONNX source to LiteRT (the first with
EDGESERVE_ONNX_ROUTE=onnx2tf), beside edgeserve's ONNX reader.

Checked against ONNX Runtime on the same file: onnx2tf's float model with the source's layout
restored at its outputs, the rewrites that make its HardSigmoid and SHAPE ops quantizable, and
each route taking over, with why, when the other's model is not used.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx2tf")
pytest.importorskip("ai_edge_litert")


class _Head(torch.nn.Module):
    """A detector-like head: conv features, a HardSigmoid gate (onnx2tf writes RELU_0_TO_1),
    and an output laid out [batch, positions, channels] by a final transpose (which onnx2tf
    drops, handing back [batch, channels, positions])."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 6, 3, padding=1)
        self.gate = torch.nn.Conv2d(6, 6, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x))
        y = y * torch.nn.functional.hardsigmoid(self.gate(y))
        return y.flatten(2).transpose(1, 2)


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("onnx2tf") / "head.onnx"
    torch.onnx.export(_Head().eval(), (torch.zeros(1, 3, 8, 8),), str(path), input_names=["image"],
                      output_names=["features"], dynamo=False, opset_version=13)
    return path


def _ort(path: Path, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"image": x})[0]


def _litert(model: bytes, x: np.ndarray) -> np.ndarray:
    from edgeserve.runtime.backends.litert_run import TfliteRunner

    runner = TfliteRunner(model)
    return runner.run_raw([x])[0]


def test_onnx2tf_model_keeps_the_sources_layout_and_numbers(head: Path, tmp_path: Path) -> None:
    from edgeserve.sources.onnx.onnx2tf_lowering import lower_to_tflite
    from edgeserve.sources.onnx.source import ROUTE_ONNX2TF, OnnxSource

    x = np.random.default_rng(1).random((1, 3, 8, 8), dtype=np.float32)
    expected = _ort(head, x)
    assert expected.shape == (1, 64, 6)
    # onnx2tf alone hands the output back transposed: the restoring TRANSPOSE is needed.
    raw = _litert(lower_to_tflite(head.read_bytes(), {"image": (1, 3, 8, 8)}, tmp_path / "raw"), x)
    assert raw.shape == (1, 6, 64) and np.allclose(raw.transpose(0, 2, 1), expected, atol=1e-5)
    made = OnnxSource(head).onnx2tf_tflite(tmp_path, None)
    assert made.route == ROUTE_ONNX2TF and made.fallback is None and made.tools["onnx2tf"]
    got = _litert(made.model, x)
    assert got.shape == expected.shape and np.abs(got - expected).max() < 1e-5


def test_hard_sigmoid_and_shape_ops_become_quantizable(head: Path, tmp_path: Path) -> None:
    from edgeserve.converters.tflite_int8.float_prep import prepare_float_tflite
    from edgeserve.sources.onnx.source import OnnxSource
    from edgeserve.tflite.model import TfliteModel

    made = OnnxSource(head).onnx2tf_tflite(tmp_path, None)
    ops = TfliteModel.from_bytes(made.model).op_counts_all()
    # What the rewrites have to remove (so the check below is not vacuous): the gate's clamp, and
    # the flatten's shape computed at run time from SHAPE.
    assert ops.get("RELU_0_TO_1") == 1 and ops.get("SHAPE")
    prepared = prepare_float_tflite(made.model)
    after = TfliteModel.from_bytes(prepared.model).op_counts_all()
    assert not {"RELU_0_TO_1", "SHAPE", "EQUAL", "SELECT", "CONCATENATION"} & set(after), after
    assert any("RELU_0_TO_1" in step for step in prepared.steps)
    x = np.random.default_rng(2).normal(0, 3, (1, 3, 8, 8)).astype(np.float32)  # past both ends of the clamp
    assert np.abs(_litert(prepared.model, x) - _litert(made.model, x)).max() < 1e-5


def test_int8_from_onnx2tf_model_matches_onnx_runtime(head: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from edgeserve.conversion.convert import convert
    from edgeserve.sources.onnx.source import ROUTE_ENV, ROUTE_ONNX2TF

    monkeypatch.setenv(ROUTE_ENV, "onnx2tf")

    rng = np.random.default_rng(3)
    np.savez(tmp_path / "calib.npz", image=rng.random((24, 3, 8, 8), dtype=np.float32))
    result = convert(head, ["tflite-int8"], tmp_path / "out", calib=tmp_path / "calib.npz")
    entry = result.manifest["artifacts"][0]
    assert entry["status"] == "ok" and entry["integer_only"], entry.get("error")
    assert entry["route"]["float_model"] == ROUTE_ONNX2TF and "float_model_fallback" not in entry["route"]
    assert all(v is None or v > 60 for v in entry["route"]["float_vs_source"]["sqnr_db"].values())
    assert entry["outputs"][0]["shape"] == [1, 64, 6]
    from edgeserve.runtime.backends.litert_run import TfliteRunner

    x = rng.random((16, 3, 8, 8), dtype=np.float32)
    got = TfliteRunner((tmp_path / "out" / entry["path"]).read_bytes()).predict([x])[0][0]
    expected = np.concatenate([_ort(head, x[i:i + 1]) for i in range(len(x))])
    noise = np.mean((got - expected) ** 2)
    assert 10 * np.log10(np.mean(expected ** 2) / noise) > 25  # int8 against ONNX Runtime, in dB


def test_each_route_takes_over_with_the_reason(head: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from edgeserve.sources.onnx import onnx2tf_lowering as onnx2tf_lowering
    from edgeserve.sources.onnx.source import ROUTE, ROUTE_ENV, ROUTE_ONNX2TF, OnnxSource

    x = np.random.default_rng(4).random((1, 3, 8, 8), dtype=np.float32)
    made = OnnxSource(head).float_tflite(tmp_path / "default")
    assert made.route == ROUTE and made.fallback is None  # the reader first (measured better on the corpus)
    # onnx2tf first, held to a bound its float model cannot meet: the check refuses it, says by
    # how much, and the reader's model is used.
    monkeypatch.setenv(ROUTE_ENV, "onnx2tf")
    monkeypatch.setattr(onnx2tf_lowering, "MIN_FLOAT_SQNR_DB", 1000.0)
    made = OnnxSource(head).float_tflite(tmp_path / "strict")
    assert made.route == ROUTE and "dB from ONNX Runtime's (min 1000 dB)" in made.fallback
    assert np.abs(_litert(made.model, x) - _ort(head, x)).max() < 1e-4
    # The first route's model given, the other one is onnx2tf's, with the reason recorded.
    source = OnnxSource(head)
    monkeypatch.undo()
    other = source.other_float_tflite(tmp_path / "other", source.reader_tflite(tmp_path / "r", None), "int8 failed")
    assert other is not None and other.route == ROUTE_ONNX2TF and other.fallback == "int8 failed"
    assert np.abs(_litert(other.model, x) - _ort(head, x)).max() < 1e-4
    monkeypatch.setenv(ROUTE_ENV, "neither")
    with pytest.raises(Exception, match="EDGESERVE_ONNX_ROUTE must be reader or onnx2tf; got 'neither'"):
        OnnxSource(head).float_tflite(tmp_path / "bad")


def test_outputs_are_matched_by_values_not_by_position() -> None:
    from edgeserve.sources.onnx.onnx2tf_lowering import match_outputs

    rng = np.random.default_rng(5)
    boxes, scores = rng.random((1, 10, 4)), rng.random((1, 10, 4))
    # Same shapes, swapped and one transposed: only the values tell which is which.
    found = match_outputs([boxes, scores], [scores.transpose(0, 2, 1), boxes])
    assert found == [(1, (0, 1, 2)), (0, (0, 2, 1))]
    with pytest.raises(Exception, match="no output shaped like ONNX output 0"):
        match_outputs([np.zeros((1, 3))], [np.zeros((1, 4))])


def test_a_real_text_detector_reaches_int8_through_onnx2tf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PaddleOCR's v6 text detector (rapidocr 3.10's wheel), onnx2tf's route asked for first (the
    reader takes this model too since it reads auto_pad SAME_UPPER, its convolutions' padding):
    onnx2tf makes its float model, tflite-int8 is judged against ONNX Runtime on the file and is
    integer-only; -t mcu refuses the GELU onnx2tf fused, by name."""
    from corpus import IMAGENET_MEAN, IMAGENET_STD, documents, views
    from registry_models import OCR_V6_DET, registry_model

    from edgeserve.errors import AccuracyError
    from edgeserve.conversion.convert import convert
    from edgeserve.sources.onnx.source import ROUTE_ENV, ROUTE_ONNX2TF

    source = registry_model(OCR_V6_DET, tmp_path)
    monkeypatch.setenv(ROUTE_ENV, "onnx2tf")
    pages = np.concatenate([documents((160, 160), 12), views((160, 160), 4)])
    np.savez(tmp_path / "calib.npz", x=((pages - IMAGENET_MEAN) / IMAGENET_STD).transpose(0, 3, 1, 2).astype(np.float32))
    with pytest.raises(AccuracyError, match="mcu: refused: operator GELU") as refused:  # mcu's refusal ends the run
        convert(source, ["tflite-int8", "mcu"], tmp_path / "out", calib=tmp_path / "calib.npz",
                input_shapes={"x": (1, 3, 160, 160)}, options={"max_drop": 100.0})
    entries = {a["target"]: a for a in refused.value.result.manifest["artifacts"]}
    int8 = entries["tflite-int8"]
    route = int8["route"]
    assert route["float_model"] == ROUTE_ONNX2TF and not route.get("float_model_fallback")
    assert all(v is None or v > 60 for v in route["float_vs_source"]["sqnr_db"].values())
    assert int8["status"] == "ok" and int8["integer_only"], int8.get("error")
    assert min(int8["output_sqnr_db"].values()) >= 10.0  # the gate's default bound



def _gelu_net(folder: Path) -> tuple[Path, Path]:
    """Conv, then GELU spelled with Erf as exporters write it, then a 1x1 conv. The reader's
    float model computes Erf with a MINIMUM that ai-edge-quantizer has no int8 rule for (a mixed
    model); onnx2tf fuses the GELU into one operator that quantizes."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    arrays = {"W1": rng.standard_normal((8, 3, 3, 3)) * 0.3, "B1": np.zeros(8), "W2": rng.standard_normal((4, 8, 1, 1)) * 0.3,
              "B2": np.zeros(4), "sqrt2": np.array(2 ** 0.5), "one": np.array(1.0), "half": np.array(0.5)}
    nodes = [helper.make_node("Conv", ["x", "W1", "B1"], ["h"], pads=[1, 1, 1, 1]),
             helper.make_node("Div", ["h", "sqrt2"], ["hs"]), helper.make_node("Erf", ["hs"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["h", "e1"], ["he"]),
             helper.make_node("Mul", ["he", "half"], ["g"]), helper.make_node("Conv", ["g", "W2", "B2"], ["y"])]
    graph = helper.make_graph(nodes, "gelu_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])],
                              [numpy_helper.from_array(a.astype(np.float32), n) for n, a in arrays.items()])
    model = folder / "gelu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    calib = folder / "calib.npz"
    np.savez(calib, x=rng.standard_normal((64, 3, 16, 16)).astype(np.float32))
    return model, calib


@pytest.mark.parametrize("route", ["", "reader"])
def test_a_model_that_passes_only_mixed_takes_the_route_that_makes_it_integer_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str) -> None:
    """Issue 48: the reader's model passed only as a mixed INT8 model; onnx2tf's route is tried
    too and kept because it passes integer-only (and says what it was instead of). With the
    reader's route alone (EDGESERVE_ONNX_ROUTE=reader) the mixed model stands, and says so."""
    from edgeserve.conversion.convert import convert

    model, calib = _gelu_net(tmp_path)
    monkeypatch.setenv("EDGESERVE_ONNX_ROUTE", route)
    entry = convert(model, ["tflite-int8"], tmp_path / "out", calib=calib).manifest["artifacts"][0]
    assert entry["status"] == "ok"
    if route == "":
        assert entry["integer_only"] and "onnx2tf" in entry["route"]["float_model"]
        assert "passed only as a mixed model (MINIMUM in float)" in entry["route"]["instead_of"]
    else:
        assert not entry["integer_only"] and list(entry["no_int8_rule"]) == ["MINIMUM"]
        assert "reader" in entry["route"]["float_model"] and "no other route" in entry["route"]["other_route_tried"]
