"""Shared fixtures: the bundled example trained once, the shared test models, the CLI runner."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTDATA = ROOT.parent / "shared" / "testdata"


def load_script(path: Path) -> ModuleType:
    """Import an example/benchmark script by path (they are not part of the package)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def testdata() -> Path:
    """../shared/testdata; missing is a failure in CI (CI=true) and a skip elsewhere."""
    if not TESTDATA.is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail(f"shared test data not found at {TESTDATA}")
        pytest.skip(f"shared test data not found at {TESTDATA}")
    return TESTDATA


@pytest.fixture(scope="session")
def digits_example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled example, trained once per session: digits_cnn.keras, calib/eval/frames .npz."""
    out = tmp_path_factory.mktemp("digits_example")
    build_model = load_script(ROOT / "examples" / "digits" / "build_model.py")
    build_model.build(out, epochs=30)
    return out


@pytest.fixture(scope="session")
def digits_conversion(digits_example: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """digits_cnn.keras converted to tflite-int8 once; tests must not modify it (copy first)."""
    from edgeserve.pipeline import convert

    out = tmp_path_factory.mktemp("digits_build")
    convert(
        digits_example / "digits_cnn.keras", ["tflite-int8"], out,
        calib=digits_example / "calib.npz", eval_data=digits_example / "eval.npz",
    )
    return out
