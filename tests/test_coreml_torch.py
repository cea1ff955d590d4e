"""PyTorch sources to Core ML: ExportedProgram (.pt2) and TorchScript, checked against torch.

The model is a tiny CNN trained for a few seconds (seeded) on scikit-learn's digits, shown
as RGB frames with ImageNet-style per-channel normalization: Core ML's ImageType has one
scale for all channels, so this also exercises the per-channel affine traced into the graph.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgeserve.cli import cli
from edgeserve.errors import SourceModelError, UnsupportedOpError
from torch_digits import SPEC, TorchExample, build

torch = pytest.importorskip("torch")
pytest.importorskip("coremltools")



@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> TorchExample:
    return build(tmp_path_factory.mktemp("torch_digits"))


def convert(example: TorchExample, source: str, out: Path, **kwargs: object) -> dict:
    from edgeserve.conversion.convert import convert as run

    result = run(example.root / source, ["coreml"], out, calib=example.root / "calib.npz",
                 eval_data=example.root / "eval.npz", **kwargs)  # type: ignore[arg-type]
    (entry,) = result.manifest["artifacts"]
    return entry | {"_manifest": result.manifest}


def test_exported_program_with_image_input(example: TorchExample, tmp_path: Path) -> None:
    from edgeserve.converters.coreml.evaluator import MilEvaluator
    from edgeserve.converters.coreml.program import MilProgram

    entry = convert(example, "digits.pt2", tmp_path, preprocess=SPEC,
                    options={"coreml_precision": "int8-weights", "labels": [str(i) for i in range(10)]})
    assert entry["_manifest"]["source"]["kind"] == "torch-export"
    assert entry["_manifest"]["source"]["framework"] == "pytorch"
    assert entry["status"] == "ok"
    (inp,) = entry["inputs"]
    # ImageType cannot scale channels differently: raw pixels in, the affine in the graph
    assert inp["kind"] == "image" and inp["color_layout"] == "RGB" and inp["scale"] == 1.0
    assert inp["in_graph"]["scale"] == pytest.approx([1 / 255 / s for s in SPEC.std], rel=1e-6)
    v = entry["verification"]
    assert v["top1_agreement"] >= 0.98 and v["max_abs_diff"] < 0.2
    assert entry["metrics"]["float"] > 0.6  # it did learn something, so agreement is meaningful

    # Independently: raw RGB frames into the package vs torch on the spec's preprocessing.
    program = MilProgram.load(tmp_path / "model.mlpackage")
    evaluator = MilEvaluator(program)
    name = program.inputs[0][0]
    got = np.array([[evaluator.run({name: f.transpose(2, 0, 1)[None].astype(np.float32)})["classLabel_probs"][str(c)]
                     for c in range(10)] for f in example.frames[:80]])
    spec = SPEC.bind_to_input((1, 3, 8, 8))
    with torch.no_grad():
        expected = example.module(torch.from_numpy(np.concatenate([spec.apply(f) for f in example.frames[:80]])))
    expected = expected.numpy()
    assert np.mean(got.argmax(1) == expected.argmax(1)) >= 0.98
    assert np.abs(got - expected).max() < 0.2


def test_torchscript_with_tensor_input_and_a_fake_core_ml(example: TorchExample, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """TorchScript, fp16, no PreprocessSpec given. The calibration data is ImageNet-normalized
    (about -2.1..2.6), which the default spec (RGB, NCHW, 1/255) cannot give, so none is recorded
    (issue 48: it used to be, and the package then took 0..1 images the model was never trained
    on) and the package takes a tensor. Core ML predict is faked (as on a Mac, where it runs too)
    by the evaluator plus a tiny offset, to check how both are recorded."""
    from edgeserve.converters.coreml import predict, toolchain
    from edgeserve.converters.coreml.evaluator import MilEvaluator

    def fake_core_ml(package: Path, program: object, feeds: object) -> list[np.ndarray]:
        evaluator = MilEvaluator(program)  # type: ignore[arg-type]
        rows = [predict.numeric_outputs(program, evaluator.run(feed))[0] for feed in feeds]  # type: ignore[arg-type,attr-defined]
        return [np.concatenate(rows) + 1e-4]

    monkeypatch.setattr(toolchain, "predict_available", lambda: (True, ""))
    monkeypatch.setattr(predict, "run_core_ml", fake_core_ml)
    entry = convert(example, "digits.pt", tmp_path, options={"coreml_precision": "fp16"})
    assert entry["_manifest"]["source"]["kind"] == "torchscript"
    (inp,) = entry["inputs"]
    assert inp["kind"] == "tensor" and inp["shape"] == [1, 3, 8, 8]
    assert entry["_manifest"]["preprocess"] is None
    v = entry["verification"]
    assert v["method"] == "coreml-predict" and v["coreml_predict"]["compute_units"] == "CPU_ONLY"
    assert v["top1_agreement"] >= 0.98
    numpy_diff = v["mil_numpy"]["max_abs_diff"]
    assert numpy_diff < 0.01 and v["max_abs_diff"] == pytest.approx(v["coreml_predict"]["max_abs_diff"])
    with np.load(tmp_path / "verify" / "coreml.npz") as fixture:
        np.testing.assert_allclose(fixture["predict_0"] - fixture["raw_0"], 1e-4, atol=1e-6)
    verified = CliRunner().invoke(cli, ["verify", str(tmp_path), "--json"])
    assert verified.exit_code == 0, verified.output
    names = [c["name"] for c in json.loads(verified.stdout)["artifacts"][0]["checks"]]
    assert "outputs equal the recorded ones (Core ML predict)" in names


def test_an_op_the_evaluator_cannot_run_fails_the_conversion(example: TorchExample, tmp_path: Path) -> None:
    class CumulativeSum(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cumsum(x.flatten(1), dim=1)

    torch.export.save(torch.export.export(CumulativeSum(), (torch.zeros(1, 3, 8, 8),)), tmp_path / "cumsum.pt2")
    from edgeserve.conversion.convert import convert as run

    out = tmp_path / "out"
    with pytest.raises(UnsupportedOpError) as err:
        run(tmp_path / "cumsum.pt2", ["coreml"], out, calib=example.root / "calib.npz")
    assert err.value.op == "cumsum"
    assert "not verified: op cumsum" in str(err.value)
    assert not (out / "model.mlpackage").exists()  # nothing unverified is written


def test_a_corrupt_onnx_source_is_one_clean_error(tmp_path: Path) -> None:
    onnx = tmp_path / "model.onnx"
    onnx.write_bytes(b"\x08\x07")
    # --calib-random: without calibration that mistake is said first, before the model is read.
    result = CliRunner().invoke(cli, ["convert", str(onnx), "-t", "coreml", "--calib-random", "-o",
                                      str(tmp_path / "o")])
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error:") and "ModelProto" in line
    assert not (tmp_path / "o").exists()


def test_pytorch_sources_need_shapes(example: TorchExample, tmp_path: Path) -> None:
    from edgeserve.sources import load_source

    scripted = tmp_path / "scripted.pt"
    torch.jit.script(example.module).save(str(scripted))  # scripted: no recorded input shapes
    with pytest.raises(SourceModelError, match="records no input shapes"):
        load_source(scripted)
    state = tmp_path / "weights.pt"
    torch.save(example.module.state_dict(), state)
    with pytest.raises(SourceModelError, match="not a TorchScript archive"):
        load_source(state)
    source = load_source(example.root / "digits.pt")
    assert [(t.name, t.shape) for t in source.signature.inputs] == [("input", (1, 3, 8, 8))]
    assert [t.shape for t in source.signature.outputs] == [(1, 10)]


class _OnesMask(torch.nn.Module):
    """An attention-mask step as a Hugging Face BERT writes it: ``new_ones`` of the input's
    batch and length, which torch.export keeps and coremltools 9 cannot convert."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = x.new_ones(x.shape[0], x.shape[1])
        weights = torch.softmax(self.proj(x).sum(-1) + (1.0 - mask) * -1e4, dim=-1)
        return (weights.unsqueeze(-1) * x).sum(1) + mask.sum(-1, keepdim=True)


def test_new_ones_converts_and_matches_torch(tmp_path: Path) -> None:
    from edgeserve.conversion.convert import convert as run
    from edgeserve.converters.coreml.evaluator import MilEvaluator
    from edgeserve.converters.coreml.frontend import _ops_coremltools_lacks
    from edgeserve.converters.coreml.program import MilProgram

    torch.manual_seed(0)
    module = _OnesMask().eval()
    program = torch.export.export(module, (torch.zeros(1, 6, 8),))
    # The case under test is real: the op is still in the program coremltools is given without
    # the rewrite, and gone with it.
    kept = {str(n.target) for n in program.run_decompositions({}).graph.nodes}
    assert "aten.new_ones.default" in kept
    rewritten = {str(n.target) for n in program.run_decompositions(_ops_coremltools_lacks(torch)).graph.nodes}
    assert "aten.new_ones.default" not in rewritten
    torch.export.save(program, tmp_path / "masked.pt2")
    samples = np.random.default_rng(0).normal(size=(16, 1, 6, 8)).astype(np.float32)
    np.savez(tmp_path / "calib.npz", x=samples[:, 0])

    result = run(tmp_path / "masked.pt2", ["coreml"], tmp_path / "out", calib=tmp_path / "calib.npz")
    (entry,) = result.manifest["artifacts"]
    assert entry["status"] == "ok"
    # Independently of the gate: the package against torch on inputs it was not calibrated on.
    package = MilProgram.load(tmp_path / "out" / "model.mlpackage")
    evaluator = MilEvaluator(package)
    name = package.inputs[0][0]
    fresh = np.random.default_rng(1).normal(size=(4, 1, 6, 8)).astype(np.float32)
    for x in fresh:
        got = np.concatenate([np.asarray(v).ravel() for v in evaluator.run({name: x}).values()])
        with torch.no_grad():
            expected = module(torch.from_numpy(x)).numpy().ravel()
        np.testing.assert_allclose(got, expected, atol=2e-2)
