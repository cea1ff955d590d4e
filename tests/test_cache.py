"""The cache of targets shared between output folders (issue 46): converting the same source
with the same data, options and tools into another folder takes every target from it; a change
of any key misses; a damaged entry is never used; a killed store leaves no entry; it is bounded,
shown and cleared; --no-cache neither reads nor writes it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgeserve.conversion import cache
from edgeserve.cli import cli

pytest.importorskip("ai_edge_quantizer")


@pytest.fixture()
def cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("EDGESERVE_TARGET_CACHE", "on")
    monkeypatch.setenv("EDGESERVE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "targets"


def _convert(testdata: Path, out: Path, *extra: str, model: Path | None = None) -> dict:
    model = model or testdata / "tflm" / "hello_world_float.tflite"
    result = CliRunner().invoke(cli, ["convert", str(model), "-t", "tflite-int8",
                                      "-t", "mcu", "--calib-random", "--no-fit-check", "-o", str(out), *extra])
    assert result.exit_code == 0, result.output
    return {e["target"]: e for e in json.loads((out / "manifest.json").read_text())["artifacts"]}


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != "manifest.json"}


def test_another_folder_takes_every_target_from_the_cache(testdata: Path, tmp_path: Path, cached: Path) -> None:
    first = _convert(testdata, tmp_path / "a")
    assert not any(e.get("cached") for e in first.values())
    assert len(list(cached.iterdir())) == 2
    second = _convert(testdata, tmp_path / "b")
    assert all(e.get("cached") for e in second.values())
    assert _files(tmp_path / "a") == _files(tmp_path / "b")  # the same bytes, the same names
    checked = CliRunner().invoke(cli, ["verify", str(tmp_path / "b")])
    assert checked.exit_code == 0, checked.output
    shown = json.loads(CliRunner().invoke(cli, ["cache", "--json"]).stdout)
    assert shown["entries"] == 2 and shown["bytes"] > 0 and shown["path"] == str(cached)


def test_the_same_file_elsewhere_hits_and_under_another_name_misses(testdata: Path, tmp_path: Path,
                                                                    cached: Path) -> None:
    """The key holds the source's bytes and file name, not its folder: a copy in another folder
    (another machine's, for a job's cell on a Ray node) takes every target from the cache; a copy
    under another name does not (the mcu build's C names come from it)."""
    import shutil

    _convert(testdata, tmp_path / "a")
    (tmp_path / "elsewhere").mkdir()
    moved = Path(shutil.copy(testdata / "tflm" / "hello_world_float.tflite", tmp_path / "elsewhere"))
    assert all(e.get("cached") for e in _convert(testdata, tmp_path / "b", model=moved).values())
    renamed = Path(shutil.copy(moved, tmp_path / "elsewhere" / "sine.tflite"))
    assert not any(e.get("cached") for e in _convert(testdata, tmp_path / "c", model=renamed).values())


def test_a_changed_option_misses_and_no_cache_neither_reads_nor_writes(testdata: Path, tmp_path: Path,
                                                                        cached: Path) -> None:
    _convert(testdata, tmp_path / "a")
    other = _convert(testdata, tmp_path / "b", "--max-drop", "2")  # one option: every target's key changes
    assert not any(e.get("cached") for e in other.values())
    assert len(list(cached.iterdir())) == 4
    bypass = _convert(testdata, tmp_path / "c", "--no-cache")
    assert not any(e.get("cached") for e in bypass.values())
    assert len(list(cached.iterdir())) == 4
    assert CliRunner().invoke(cli, ["cache", "--clear"]).exit_code == 0
    assert not cached.exists() or not any(cached.iterdir())


def test_a_damaged_entry_is_removed_and_the_target_built(testdata: Path, tmp_path: Path, cached: Path) -> None:
    first = _convert(testdata, tmp_path / "a")
    entry = cached / first["tflite-int8"]["reuse_key"]
    model = entry / first["tflite-int8"]["path"]
    model.write_bytes(model.read_bytes()[:-1] + b"\0")
    again = _convert(testdata, tmp_path / "b")
    assert not again["tflite-int8"].get("cached") and again["mcu"].get("cached")
    assert (cached / first["tflite-int8"]["reuse_key"]).exists()  # stored again, whole, by this build
    assert _files(tmp_path / "a") == _files(tmp_path / "b")


def test_a_killed_store_leaves_no_entry_and_its_leftover_goes(testdata: Path, tmp_path: Path, cached: Path) -> None:
    cached.mkdir(parents=True)
    leftover = cached / ".tmp-999999999-deadbeef"  # a pid that does not exist
    (leftover / "reports").mkdir(parents=True)
    assert cache.entries() == []  # a temporary folder is never an entry
    _convert(testdata, tmp_path / "a")
    assert not leftover.exists() and len(cache.entries()) == 2


def test_the_least_recently_used_entries_go_past_the_bound(tmp_path: Path, cached: Path) -> None:
    cached.mkdir(parents=True)
    for k, name in enumerate(("old", "mid", "new")):
        folder = cached / name
        folder.mkdir()
        (folder / "entry.json").write_bytes(b"x" * 1000)
        os.utime(folder, (1_000_000 + k, 1_000_000 + k))
    removed = cache.evict(limit=2500)
    assert [p.name for p in removed] == ["old"] and sorted(p.name for p in cached.iterdir()) == ["mid", "new"]


def test_the_manifest_says_where_the_time_went(testdata: Path, tmp_path: Path) -> None:
    """Issue 46: the wall time and each stage's time per target, in the manifest and --json."""
    result = CliRunner().invoke(cli, ["convert", str(testdata / "tflm" / "hello_world_float.tflite"), "-t", "tflite-int8",
                                      "-t", "mcu", "--calib-random", "--no-fit-check", "-o", str(tmp_path / "a"),
                                      "--json"])
    assert result.exit_code == 0, result.output
    timing = json.loads(result.stdout)["timing"]
    assert timing == json.loads((tmp_path / "a" / "manifest.json").read_text())["timing"]
    assert timing["shared_steps"][0]["step"] == "load hello_world_float.tflite"
    steps = {t: [s["step"] for s in v["steps"]] for t, v in timing["targets"].items()}
    assert "tflite-int8: int8 activations, int8 per-channel weights" in steps["tflite-int8"]
    assert "mcu: run in TFLM with the planned arena" in steps["mcu"]
    per_target = [v["seconds"] for v in timing["targets"].values()]
    assert all(s >= 0 for s in per_target) and timing["wall_seconds"] >= sum(per_target) - 0.05
    for v in timing["targets"].values():  # a target's time holds its steps' times
        assert v["seconds"] >= sum(s["seconds"] for s in v["steps"]) - 0.05


def test_targets_side_by_side_write_what_one_after_another_writes(testdata: Path, tmp_path: Path) -> None:
    """--jobs 2 against --jobs 1: the same artifacts, listed in the order asked for, and each
    target's steps in the manifest are its own (their order in the run no longer tells)."""
    made = {}
    for jobs in ("1", "2"):
        result = CliRunner().invoke(cli, ["convert", str(testdata / "tflm" / "hello_world_float.tflite"), "-t", "onnx",
                                          "-t", "tflite-int8", "-t", "mcu", "--calib-random", "--no-fit-check",
                                          "-o", str(tmp_path / jobs), "-j", jobs, "--json"])
        assert result.exit_code == 0, result.output
        made[jobs] = json.loads(result.stdout)
    for manifest in made.values():
        assert [a["target"] for a in manifest["artifacts"]] == ["onnx", "tflite-int8", "mcu"]
        assert list(manifest["timing"]["targets"]) == ["onnx", "tflite-int8", "mcu"]
        for target, timing in manifest["timing"]["targets"].items():
            others = {"onnx", "tflite-int8", "mcu"} - {target}
            assert not [s["step"] for s in timing["steps"] if s["step"].split(":")[0] in others], (target, timing)
        assert any(s["step"].startswith("mcu:") for s in manifest["timing"]["targets"]["mcu"]["steps"])
    one, two = ({a["target"]: (a["status"], a.get("sha256"), json.dumps(a.get("files"), sort_keys=True))
                 for a in made[j]["artifacts"]} for j in ("1", "2"))
    assert one == two
