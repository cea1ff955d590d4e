"""examples/imagenet/labels.py: ImageNet class names from the timm wheel, checked on a model
nobody here wrote (TFLM's MobileNetV2) and photos scikit-image ships (a cat, a cup of coffee)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import require_testdata
from registry_models import TIMM, required_wheel

ROOT = Path(__file__).resolve().parent.parent
MOBILENET = "tflm/mobilenet_v2_quantized_1x3x224x224.tflite"
# torchvision's ImageNet preprocessing, which this model was trained with (shared/testdata/README.md).
PREPROCESS = ["--layout", "nchw", "--crop", "center", "--crop-fraction", "0.875",
              "--mean", "0.485,0.456,0.406", "--std", "0.229,0.224,0.225"]
CATS = {"tabby", "tiger cat", "Egyptian cat", "Persian cat", "Siamese cat", "lynx"}


@pytest.fixture(scope="module")
def labels(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("imagenet") / "imagenet_labels.txt"
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "imagenet" / "labels.py"), str(out),
                           "--wheel", str(required_wheel(TIMM))], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return out


def test_the_list_has_the_thousand_classes_in_output_order(labels: Path) -> None:
    names = labels.read_text().splitlines()
    assert len(names) == 1000
    assert (names[0], names[281], names[504], names[999]) == ("tench", "tabby", "coffee mug", "toilet tissue")


def test_mobilenet_v2_names_what_is_in_the_photo(labels: Path, tmp_path: Path) -> None:
    from PIL import Image
    from skimage import data

    model = require_testdata(require_testdata() / MOBILENET)
    photos = {"cat": data.chelsea(), "coffee": data.coffee()}
    for name, pixels in photos.items():
        Image.fromarray(np.asarray(pixels)).save(tmp_path / f"{name}.png")
    done = subprocess.run([sys.executable, "-m", "edgeserve", "run", str(model), "--input",
                           *(str(tmp_path / f"{name}.png") for name in photos), *PREPROCESS,
                           "--labels", str(labels), "-k", "3", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    # A bare .tflite records no preprocessing: what the flags do not give comes from the model.
    assert "the rest from the model's input (the artifact records no preprocessing)" in done.stderr
    results = {Path(r["input"]).stem: r["top_k"] for r in json.loads(done.stdout)["results"]}
    names = labels.read_text().splitlines()
    for top in results.values():
        assert all(row["label"] == names[row["index"]] for row in top)
    assert {row["label"] for row in results["cat"]} <= CATS, results["cat"]  # measured: tabby, Egyptian cat, tiger cat
    assert results["coffee"][0]["label"] == "espresso", results["coffee"]
