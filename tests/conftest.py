"""Shared fixtures: the bundled example trained once, the shared test models, the CLI runner."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The reference models (MLPerf Tiny, TFLM examples) live outside the repository; CI has them
# at ../shared/testdata. EDGESERVE_TESTDATA points elsewhere (a copy, or an empty folder).
TESTDATA = Path(os.environ.get("EDGESERVE_TESTDATA", ROOT.parent / "shared" / "testdata")).resolve()
DATA_SKIP_PREFIX = "needs reference data:"
# The target cache shared between output folders is off for the suite (set before any test, so
# the corpus's and the CLI's subprocesses inherit it): a test that builds a target must build it,
# not take what an earlier test left. tests/test_cache.py turns it on in a folder of its own.
os.environ["EDGESERVE_TARGET_CACHE"] = "off"


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
    """The reference models; missing is a failure in CI (CI=true) and a counted skip elsewhere."""
    return require_testdata()


def require_testdata(path: Path | None = None) -> Path:
    """``path`` (default: the folder) when it exists; else fail in CI, skip elsewhere."""
    wanted = path or TESTDATA
    if not wanted.exists() or (path is None and not any(TESTDATA.iterdir())):
        message = f"{DATA_SKIP_PREFIX} {wanted} not found (set EDGESERVE_TESTDATA; default ../shared/testdata)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return wanted


def machine_state() -> str:
    """Peak memory of this process, and what is left: when a run fails on another machine, its
    last lines say whether memory or disk ran out."""
    import resource
    import shutil

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10  # KiB on Linux
    available = "?"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = str(int(line.split()[1]) >> 10)
    except OSError:
        pass
    return (f"machine: test process peak {peak} MB, "
            f"{available} MB memory available, {shutil.disk_usage(ROOT).free >> 20} MB disk free, "
            f"{os.cpu_count()} CPUs")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say how many tests could not run for want of data kept outside the repository."""
    from tflm_build import SKIP_PREFIX as TFLM_SKIP_PREFIX

    terminalreporter.write_line(machine_state())
    counts = {DATA_SKIP_PREFIX: 0, TFLM_SKIP_PREFIX: 0}
    for report in terminalreporter.stats.get("skipped", []):
        reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
        for prefix in counts:
            if prefix in reason:
                counts[prefix] += 1
    if counts[DATA_SKIP_PREFIX]:
        terminalreporter.write_line(
            f"{counts[DATA_SKIP_PREFIX]} test(s) skipped: the reference models were not found at {TESTDATA}; "
            "put ../shared/testdata beside the project or set EDGESERVE_TESTDATA to a copy")
    if counts[TFLM_SKIP_PREFIX]:
        terminalreporter.write_line(
            f"{counts[TFLM_SKIP_PREFIX]} test(s) skipped: no complete TFLM source tree to build against "
            "(../shared/tflm with its third-party downloads, or EDGESERVE_TFLM_DIR); see tests/tflm_build.py")


# The corpus matrix's test (tests/test_corpus.py): its converts start with the session and run
# beside every other test; its cases are moved to the end of the run, where they collect them.
CORPUS_MATRIX = "test_every_cell_converts_and_agrees_or_is_refused_by_name"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items[:] = sorted(items, key=lambda item: getattr(item, "originalname", "") == CORPUS_MATRIX)  # stable


@pytest.fixture(scope="session", autouse=True)
def corpus_beside_the_tests(request: pytest.FixtureRequest,
                            tmp_path_factory: pytest.TempPathFactory) -> Any:
    """{model name: Future of its row} for the corpus models this session will check, their
    converts started in the background when the session's first test starts (tests/corpus.py,
    start_in_background); None when the session checks none. Stopped at the session's end."""
    models = [item.callspec.params["model"] for item in request.session.items
              if getattr(item, "originalname", "") == CORPUS_MATRIX]
    if not models:
        yield None
        return
    from corpus import TARGETS, start_in_background, stop_running

    futures = start_in_background(models, TARGETS, tmp_path_factory.mktemp("corpus"))
    yield futures
    stop_running(futures)


@pytest.fixture(scope="session")
def tflm() -> Any:
    """Real TFLM (reference kernels) built for this host from ../shared/tflm, once and cached
    outside the repository (tests/tflm_build.py). Missing sources fail in CI, skip elsewhere."""
    from tflm_build import TflmUnavailable, host_build

    try:
        return host_build()
    except TflmUnavailable as reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI runs every real-TFLM test")
        pytest.skip(str(reason))


@pytest.fixture(scope="session")
def tflm_cortex_m4() -> dict[str, Path]:
    """TFLM's own Cortex-M4 builds (reference kernels and CMSIS-NN), from ../shared/tflm, with
    the kernels of the side-by-side test's model, built once and cached like the host build.
    Missing sources fail in CI, skip elsewhere."""
    from tflm_build import SIDE_BY_SIDE_OPS, TflmUnavailable, build

    try:
        return {flavour: build(flavour, SIDE_BY_SIDE_OPS).library.parents[1] for flavour in ("cortex-m4-ref", "cortex-m4")}
    except TflmUnavailable as reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI runs every real-TFLM test")
        pytest.skip(str(reason))


@pytest.fixture(scope="session")
def cmsis_nn_dir() -> Path:
    """The CMSIS-NN tree TFLM pins, under ../shared/tflm's downloads: what `--cmsis-nn`
    tests build against (the project ships none). Missing fails in CI, skips elsewhere."""
    from tflm_build import SKIP_PREFIX, shared_tflm

    tree = shared_tflm() / "src" / "tensorflow" / "lite" / "micro" / "tools" / "make" / "downloads" / "cmsis_nn"
    if not (tree / "Include" / "arm_nnfunctions.h").is_file():
        message = f"{SKIP_PREFIX} no CMSIS-NN at {tree}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return tree


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
    from edgeserve.conversion.convert import convert

    out = tmp_path_factory.mktemp("digits_build")
    convert(
        digits_example / "digits_cnn.keras", ["tflite-int8"], out,
        calib=digits_example / "calib.npz", eval_data=digits_example / "eval.npz",
    )
    return out
