"""The four MLPerf Tiny Keras sources convert to full INT8 and agree with their float models.

Sources: ../shared/testdata/mlperf-tiny/{ad01,vww_96,pretrainedResnet,str_ww_ref_model}.h5
(Keras 2 files; vww_96 and str_ww load only through edgeserve/sources/keras_legacy.py). The data
sets are not available offline, so calibration and evaluation use what ships in packages
(examples/mlperf_tiny/calibration_data.py): crops of the scikit-image / scikit-learn photos
for vww_96 and ResNet-8, log-mel features of the bundled tflite-micro clips for ad01 and
str_ww. Evaluation samples are never calibration samples (another seed).

Each model is converted once (module-scoped fixture), then checked three ways:
1. the manifest: status ok, int8 scheme, integer-only operators, int8 I/O, the drop;
2. independently: the written .tflite is re-parsed and run here with LiteRT, and its
   outputs are compared with the Keras source's float outputs on the eval inputs;
3. against the MLCommons reference INT8 conversions of the same models on the same inputs.

Without ground truth, the eval sets carry the float model's own top-1 as labels ``y``
(``load_eval`` requires labels), so a classifier's "top1" drop is exactly its
float-vs-INT8 disagreement in points; for the ad01 autoencoder ``y`` is the input itself
and "mae" is the reconstruction error, so its drop is the relative MAE increase in %.

Thresholds were measured on these seeded sets (figures in ``CASES`` comments; 200 eval
samples each, 120 calibration samples, LiteRT XNNPACK kernels on x86-64).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import ROOT, load_script

pytestmark = pytest.mark.slow

CALIB_SAMPLES = 120
# 200, not fewer: one flipped decision is 100/n points, so a bound of a point or two
# cannot even be expressed on 60-100 samples. Running 200 samples costs < 2 s per model.
EVAL_SAMPLES = 200
CALIB_SEED, EVAL_SEED = 0, 1
# A float decision is "confident" when its top-1 probability leads the runner-up by more
# than this. Measured on three 200-crop eval sets (seeds 1-3) for the three classifiers:
# no INT8 flip above 0.4; below it flips occur (ResNet-8 at margins 0.21 and 0.30,
# str_ww at 0.23), as the output error reaches 0.15-0.25 in probability.
CONFIDENT_MARGIN = 0.4


@dataclasses.dataclass(frozen=True)
class Case:
    name: str  # the .h5 stem
    data: str  # "photos", or the calibration_data.log_mel_frames model name
    reference: str  # the MLCommons INT8 conversion of the same model
    max_drop: float  # given to the converter; see each case for why
    min_reference_top1: float | None = None  # ours-vs-reference INT8 top-1 agreement
    image_size: int = 0
    pixel_scale: float = 1.0
    metric: str | None = None

    @property
    def min_top1(self) -> float:
        """Float-vs-INT8 top-1 agreement: for a classifier, the drop is the disagreement."""
        return 1.0 - self.max_drop / 100.0


# Figures: eval seeds 1 / 2 / 3, 200 samples each ("ours" = this conversion, "reference" =
# the MLCommons INT8 file); the test asserts on seed 1.
CASES = {
    "vww_96": Case(
        "vww_96", "photos", "vww_96_int8.tflite",
        # Int8 flips 3 / 2 / 2 of 200 float decisions (1.5 / 1.0 / 1.0 points), all near
        # ties (float margin 0.04-0.11); the reference INT8 flips 2 / 2 / 1. A 1-point bound
        # is beyond int8 on these inputs (the converter would fall back to int16x8, whose
        # I/O is int16, not full INT8), as it is for the reference conversion. 3 points =
        # twice the worst measured rate. Ours vs reference: 0.995 / 0.990 / 0.995.
        max_drop=3.0, min_reference_top1=0.98,
        image_size=96, pixel_scale=1 / 255,
    ),
    "pretrainedResnet": Case(
        "pretrainedResnet", "photos", "pretrainedResnet_quant.tflite",
        # Int8 agrees with float on 0.945 / 0.965 / 0.950 of the crops; the reference INT8
        # on 0.895 / 0.930 / 0.915. A CIFAR-10 classifier shown photos that are none of its
        # ten classes makes many near-tie decisions (17 % have a margin < 0.2), and
        # quantization noise flips some. Remedies do not help: on 80 crops int16
        # activations left 6.25 points and 1-8 float layers 6.25-7.5 points. 10 points is
        # the reference conversion's own worst rate; confident decisions are checked apart.
        # Ours vs reference: 0.880 / 0.905 / 0.915 (each flips different near-ties), so 0.85.
        max_drop=10.0, min_reference_top1=0.85,
        image_size=32, pixel_scale=1.0,  # raw 0..255 pixels, as the reference (scale 1.0, zp -128)
    ),
    "ad01": Case(
        "ad01", "ad01", "ad01_int8.tflite",
        # The drop is the relative increase of the reconstruction MAE, in %: ours +0.65 /
        # +0.88 / +0.65 %, the reference INT8 +6.0 / +7.3 / +6.5 %. Earlier 80-sample
        # slices ranged 0.57-1.09 %, so a 1 % bound would be decided by which samples are
        # drawn; 2 % is above that spread and a third of the reference conversion's cost.
        # The metric is given: with y == x (float, shaped like the output) choose_metric
        # takes y for one-hot labels and would score the reconstruction by top-1.
        max_drop=2.0, metric="mae",
    ),
    "str_ww_ref_model": Case(
        "str_ww_ref_model", "str_ww", "str_ww_ref_model.tflite",
        # Int8 flips 1 / 0 / 1 of 200 (the reference 0 / 0 / 1): the default 1-point bound
        # holds. Ours vs reference: 0.995 / 1.000 / 1.000.
        max_drop=1.0, min_reference_top1=0.99,
    ),
}


@dataclasses.dataclass
class Converted:
    case: Case
    source: Path
    out: Path
    entry: dict[str, Any]
    x_eval: np.ndarray
    float_out: np.ndarray  # the Keras source's outputs on x_eval

    @property
    def artifact(self) -> Path:
        return self.out / self.entry["path"]


@pytest.fixture(scope="module")
def calibration_data() -> Any:
    return load_script(ROOT / "examples" / "mlperf_tiny" / "calibration_data.py")


@pytest.fixture(scope="module")
def photo_calibration(calibration_data: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder of PNG crops, read through each model's own PreprocessSpec."""
    return calibration_data.photo_folder(tmp_path_factory.mktemp("photos"), n=CALIB_SAMPLES, seed=CALIB_SEED)


@pytest.fixture(scope="module", params=list(CASES))
def converted(
    request: pytest.FixtureRequest, testdata: Path, calibration_data: Any, photo_calibration: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Converted:
    from edgeserve.errors import AccuracyError
    from edgeserve.conversion.convert import convert
    from edgeserve.preprocess import PreprocessSpec
    from edgeserve.sources import load_source

    case = CASES[request.param]
    source = testdata / "mlperf-tiny" / f"{case.name}.h5"
    work = tmp_path_factory.mktemp(case.name)
    if case.data == "photos":
        calib: Path = photo_calibration
        preprocess = PreprocessSpec(scale=case.pixel_scale)
        x = calibration_data.photo_batch(case.image_size, EVAL_SAMPLES, EVAL_SEED, scale=case.pixel_scale)
    else:
        wavs = testdata / "tflm"
        calib = work / "calib.npz"
        np.savez(calib, x=calibration_data.log_mel_frames(case.data, CALIB_SAMPLES, CALIB_SEED, wavs))
        preprocess = None
        x = calibration_data.log_mel_frames(case.data, EVAL_SAMPLES, EVAL_SEED, wavs)

    float_out = load_source(source).predict([x])[0]
    # No ground truth offline: an autoencoder's target is its input; a classifier's
    # "label" is the float model's own decision (so the drop is the disagreement).
    labels = x if case.metric == "mae" else float_out.argmax(axis=1)
    np.savez(work / "eval.npz", x=x, y=labels)

    options = {"max_drop": case.max_drop, "metric": case.metric, "io": "int8", "debug_samples": 8}
    try:
        convert(source, ["tflite-int8"], work / "build", calib=calib, eval_data=work / "eval.npz",
                preprocess=preprocess, options=options)
    except AccuracyError:
        pass  # the manifest marks the artifact failed; test_converts_to_full_int8 shows its attempts
    manifest = json.loads((work / "build" / "manifest.json").read_text())
    (entry,) = [a for a in manifest["artifacts"] if a["target"] == "tflite-int8"]
    return Converted(case, source, work / "build", entry, x, float_out)


def _run_int8(path: Path, x: np.ndarray) -> np.ndarray:
    from edgeserve.runtime.backends.litert_run import TfliteRunner

    return TfliteRunner(path.read_bytes()).predict([x])[0][0]


def _confident(float_out: np.ndarray) -> np.ndarray:
    top2 = np.sort(float_out, axis=1)[:, -2:]
    return (top2[:, 1] - top2[:, 0]) > CONFIDENT_MARGIN


# ----- 1. the manifest -----------------------------------------------------------------------
def test_converts_to_full_int8(converted: Converted) -> None:
    from edgeserve.tflite.model import TfliteModel

    entry = converted.entry
    assert entry["status"] == "ok", entry["attempts"]
    assert entry["quantization"]["scheme"] == "int8"
    assert entry["quantization"]["float_layers"] == []
    assert entry["integer_only"] is True and entry["float_ops"] == []
    assert [t["dtype"] for t in entry["inputs"] + entry["outputs"]] == ["int8", "int8"]
    # Re-parse the written file: every operator reads and writes integer tensors only.
    ok, problems = TfliteModel.from_file(converted.artifact).is_full_integer()
    assert ok, problems


def test_manifest_metrics_within_bound(converted: Converted) -> None:
    case, metrics = converted.case, converted.entry["metrics"]
    assert metrics["samples"] == EVAL_SAMPLES and metrics["labelled"] is True
    assert metrics["drop_points"] <= case.max_drop
    if case.metric == "mae":
        assert metrics["metric"] == "mae"
    else:
        assert metrics["metric"] == "top1" and metrics["float"] == 1.0  # labels are float's decisions
        assert converted.entry["agreement"]["top1_agreement"] >= case.min_top1


# ----- 2. independent check: run the written file, compare with Keras ---------------------------
def test_int8_file_agrees_with_keras_source(converted: Converted) -> None:
    # float_out was computed by the fixture with load_source(...).predict, outside the
    # converter; the INT8 side is the written file, run here.
    case, float_out = converted.case, converted.float_out
    q = _run_int8(converted.artifact, converted.x_eval)
    assert q.shape == float_out.shape

    if case.metric == "mae":
        x = converted.x_eval
        mae_float, mae_int8 = np.abs(float_out - x).mean(), np.abs(q - x).mean()
        increase = 100 * (mae_int8 - mae_float) / mae_float
        assert increase <= case.max_drop
        assert increase == pytest.approx(converted.entry["metrics"]["drop_points"], abs=0.01)
        return
    agree = q.argmax(axis=1) == float_out.argmax(axis=1)
    assert agree.mean() >= case.min_top1
    # The same kernels on the same inputs: the manifest's figure is reproducible here.
    assert agree.mean() == pytest.approx(converted.entry["agreement"]["top1_agreement"], abs=1e-9)
    confident = _confident(float_out)
    assert confident.mean() > 0.5  # measured 0.65-0.98: the check must cover most samples
    assert agree[confident].all(), f"{np.count_nonzero(~agree[confident])} confident decision(s) flipped"


# ----- 3. against the MLCommons reference INT8 conversions --------------------------------------
def test_matches_mlcommons_reference_int8(converted: Converted, testdata: Path) -> None:
    from edgeserve.runtime.backends.litert_run import TfliteRunner

    case = converted.case
    reference = testdata / "mlperf-tiny" / case.reference
    ours = _run_int8(converted.artifact, converted.x_eval)
    theirs = _run_int8(reference, converted.x_eval)
    x, float_out = converted.x_eval, converted.float_out

    if case.metric == "mae":
        mae = {name: np.abs(out - x).mean() for name, out in (("float", float_out), ("ours", ours),
                                                                ("reference", theirs))}
        # Ours costs less reconstruction error than the reference conversion (+0.65 % vs +6.0 %).
        assert mae["ours"] - mae["float"] < mae["reference"] - mae["float"]
        return
    agree = ours.argmax(axis=1) == theirs.argmax(axis=1)
    assert agree.mean() >= case.min_reference_top1
    # Ours flips no confident decision (asserted above), so a disagreement here is the
    # reference's own flip: measured 0.978 for ResNet-8 (3 of 138), 1.0 for the others.
    assert agree[_confident(float_out)].mean() >= 0.97
    if case.data == "photos":
        # Raw pixels map to int8 exactly as in the reference: the input step is one pixel level.
        ours_in = TfliteRunner(converted.artifact.read_bytes()).inputs[0]
        ref_in = TfliteRunner(reference.read_bytes()).inputs[0]
        assert ours_in.scale == pytest.approx(ref_in.scale, rel=1e-3)
        assert ours_in.zero_point == ref_in.zero_point
