"""The package installs as laid out, and stays light to import."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from edgeserve._deps import require
from edgeserve.errors import MissingDependencyError

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("tensorflow", "keras", "coremltools", "torch", "onnxruntime", "ai_edge_litert", "cv2", "tflite_micro")


def _run(code: str, cwd: Path, python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300)


def _heavy_after(statement: str, tmp_path: Path) -> list[str]:
    code = f"""
import json, sys
{statement}
print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))
"""
    proc = _run(code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_edgeserve_imports_no_framework(tmp_path: Path) -> None:
    assert _heavy_after("import edgeserve, edgeserve.converters, edgeserve.runtime", tmp_path) == []


def test_convert_and_session_come_from_the_package_and_import_no_framework(tmp_path: Path) -> None:
    """``from edgeserve import convert, Session``: the pipeline's and the runtime's own objects,
    loaded when asked for (``import edgeserve`` alone loads neither module)."""
    statement = ("import edgeserve\nassert 'edgeserve.conversion.convert' not in sys.modules\n"
                 "from edgeserve import convert, Session\n"
                 "import edgeserve.conversion.convert, edgeserve.runtime.session\n"
                 "assert convert is edgeserve.conversion.convert.convert and Session is edgeserve.runtime.session.Session")
    assert _heavy_after(statement, tmp_path) == []
    import edgeserve

    with pytest.raises(AttributeError, match="no attribute 'Convert'"):
        edgeserve.Convert  # noqa: B018 - a misspelt name is an AttributeError, not an import


@pytest.mark.parametrize("args", [["--help"], ["convert", "--help"], ["targets"], ["profiles"]])
def test_cli_commands_that_do_no_conversion_import_no_framework(args: list[str], tmp_path: Path) -> None:
    statement = f"""
from edgeserve.cli import cli
try:
    cli.main({args!r}, prog_name="edgeserve", standalone_mode=False)
except SystemExit:
    pass
"""
    assert _heavy_after(statement, tmp_path) == []


def test_missing_extra_names_the_pip_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # makes `import tensorflow` raise ImportError
    with pytest.raises(MissingDependencyError) as err:
        require("tensorflow", "INT8 conversion")
    assert "pip install 'edgeserve[convert]'" in str(err.value)
    assert "tensorflow-cpu" in str(err.value) and "INT8 conversion" in str(err.value)


def test_cli_reports_missing_extra_as_one_line(tmp_path: Path) -> None:
    import zipfile

    model = tmp_path / "m.keras"
    with zipfile.ZipFile(model, "w") as archive:  # a sound archive: the damaged-file check passes it
        archive.writestr("config.json", "not really a model")
    code = f"""
import sys
sys.modules["tensorflow"] = None
from edgeserve.cli import cli
cli.main(["convert", {str(model)!r}, "-t", "tflite-int8", "--calib-random", "-o", {str(tmp_path / "out")!r}],
         prog_name="edgeserve")
"""
    proc = _run(code, tmp_path)
    assert proc.returncode == 1
    assert "pip install 'edgeserve[convert]'" in proc.stderr
    assert "Traceback" not in proc.stderr


def _fresh_venv(tmp_path: Path) -> Path:
    """A venv that sees this environment's dependencies but not its edgeserve install."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    # A plain path entry: numpy/click/setuptools become importable, but this environment's
    # own .pth files (including its editable edgeserve finder) are not executed.
    outer = sysconfig.get_paths()["purelib"]
    (Path(purelib) / "outer_deps.pth").write_text(outer + "\n")
    # venv seeds an old setuptools (65 on Python 3.11) that cannot read the SPDX licence
    # field; the build must use the one pyproject.toml asks for, as an isolated build would.
    for seeded in Path(purelib).glob("setuptools*"):
        shutil.rmtree(seeded)
    for hook in ("_distutils_hack", "distutils-precedence.pth"):
        target = Path(purelib) / hook
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    return python


@pytest.mark.parametrize("editable", [False, True], ids=["regular", "editable"])
def test_install_maps_converters_and_runtime_into_the_package(tmp_path: Path, editable: bool) -> None:
    python = _fresh_venv(tmp_path)
    cmd = [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
    cmd += ["-e", str(ROOT)] if editable else [str(ROOT)]
    subprocess.run(cmd, check=True, timeout=600, cwd=tmp_path, capture_output=True)
    code = """
import json
import edgeserve, edgeserve.converters, edgeserve.runtime
from edgeserve.device_profiles import list_profiles
from edgeserve.converters import target_names
print(json.dumps({"converters": edgeserve.converters.__file__, "runtime": edgeserve.runtime.__file__,
                  "profiles": list_profiles(), "targets": target_names()}))
"""
    proc = _run(code, tmp_path, str(python))
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    if editable:  # the source folders themselves
        assert Path(info["converters"]) == ROOT / "converters" / "__init__.py"
        assert Path(info["runtime"]) == ROOT / "runtime" / "__init__.py"
    else:  # copies inside the installed package
        assert Path(info["converters"]).parts[-3:] == ("edgeserve", "converters", "__init__.py")
        assert str(tmp_path / "venv") in info["converters"]
        assert str(tmp_path / "venv") in info["runtime"]
    assert "raspberry-pi-5" in info["profiles"] and len(info["profiles"]) >= 11
    assert "tflite-int8" in info["targets"]


def test_no_resource_warning_at_exit(testdata: Path, tmp_path: Path) -> None:
    """Every program that opened a Session printed a ResourceWarning at exit (issue 13)."""
    code = ("import numpy as np; from edgeserve.runtime import Session; "
            f"s = Session({str(testdata / 'tflm' / 'hello_world_int8.tflite')!r}); s.run(np.zeros((1, 1), np.float32))")
    proc = subprocess.run([sys.executable, "-X", "dev", "-W", "error::ResourceWarning", "-c", code],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "ResourceWarning" not in proc.stderr, proc.stderr


def test_a_runtime_only_install_serves_a_conversion_without_any_converter(digits_conversion: Path,
                                                                          digits_example: Path,
                                                                          tmp_path: Path) -> None:
    """`pip install edgeserve[runtime]` in an empty venv, from the registry, as on a Pi: no
    TensorFlow, torch or coremltools arrives, and `Session` serves the tflite-int8 artifact
    with the same outputs as this environment's runtime on the same raw frames."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"{ROOT}[runtime]"],
                             capture_output=True, text=True, timeout=1200, cwd=tmp_path)
    assert install.returncode == 0, install.stderr[-2000:]
    frames = np.load(digits_example / "frames.npz")["frames"][:16]
    np.save(tmp_path / "frames.npy", frames)
    code = f"""
import importlib.util, json, sys
import numpy as np
from edgeserve.runtime import Session
frames = np.load({str(tmp_path / "frames.npy")!r})
with Session({str(digits_conversion)!r}) as session:
    outputs = [session.run(frame)[0].tolist() for frame in frames]
    backend = session.backend
print(json.dumps({{"outputs": outputs, "backend": backend,
                  "frameworks": [m for m in ("tensorflow", "torch", "coremltools", "onnx")
                                 if importlib.util.find_spec(m) is not None]}}))
"""
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    served = json.loads(proc.stdout.strip().splitlines()[-1])
    assert served["frameworks"] == [] and served["backend"].startswith("litert")
    from edgeserve.runtime import Session

    with Session(digits_conversion) as session:
        here = [session.run(frame)[0].tolist() for frame in frames]
    assert served["outputs"] == here


def test_every_python_folder_is_a_listed_package() -> None:
    """A regular install (a wheel, as `pip install edgeserve[runtime]` on a Pi) copies only the
    packages pyproject lists: runtime/decoders and converters/executorch were missing, so
    `run --decoder` and `-t executorch` worked from a checkout and failed from a wheel."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    folders = {package: ROOT / path for package, path in config["package-dir"].items()}
    found = set()
    for package, folder in folders.items():
        for init in folder.rglob("__init__.py"):
            relative = init.parent.relative_to(folder).parts
            found.add(".".join((package, *relative)))
    assert found - listed == set(), f"folders with __init__.py not in [tool.setuptools] packages: {found - listed}"
    assert len(found) >= 14  # the check walks the real folders


def test_installed_says_what_can_be_imported_without_importing_it() -> None:
    import sys

    from edgeserve._deps import installed

    assert installed("json") and installed("edgeserve.conversion.schedule")
    assert not installed("edgeserve_no_such_module") and not installed("edgeserve_no_such_module.sub")
    assert "edgeserve_no_such_module" not in sys.modules


def test_a_module_once_found_stays_found_and_a_target_thread_looks_again(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Targets side by side (--jobs) once saw ExecuTorch as "not installed" while another thread
    was importing: a module the calling thread found stays found, and a target thread's miss is
    looked up again (here the module's folder comes back on sys.path between the two looks)."""
    import importlib
    import threading

    from edgeserve import _deps

    (tmp_path / "es_probe_found.py").write_text("")
    (tmp_path / "es_probe_later.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    _deps.remember_installed(("es_probe_found",))
    sys.path.remove(str(tmp_path))
    importlib.invalidate_caches()
    assert _deps.installed("es_probe_found")  # remembered
    assert not _deps.installed("es_probe_later")  # the calling thread looks once and believes it
    real = importlib.invalidate_caches

    def path_back() -> None:
        if str(tmp_path) not in sys.path:
            sys.path.insert(0, str(tmp_path))
        real()

    monkeypatch.setattr(importlib, "invalidate_caches", path_back)
    seen: list[bool] = []
    thread = threading.Thread(target=lambda: seen.append(_deps.installed("es_probe_later")))
    thread.start()
    thread.join()
    assert seen == [True]


def test_every_data_file_is_matched_by_package_data() -> None:
    """A wheel carries only the data files package-data names: the C, C++ and CMake templates,
    the kernels and the board files under firmware/, the profiles. A file no pattern matches
    works from a checkout and is missing from an install."""
    import fnmatch
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    unmatched = []
    for package in ("edgeserve._firmware", "edgeserve._profiles"):
        folder = ROOT / config["package-dir"][package]
        patterns = config["package-data"][package]
        for path in folder.rglob("*"):
            relative = path.relative_to(folder).as_posix()
            if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in relative \
                    and not any(fnmatch.fnmatch(relative, p) and relative.count("/") == p.count("/") for p in patterns):
                unmatched.append(f"{package}: {relative}")
    assert unmatched == []
    assert (ROOT / "firmware/templates/tflm/main.cc.in").is_file()  # the walk sees the templates
