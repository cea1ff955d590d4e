"""Damaged and hostile files through the commands a user runs (issues 13 and 28), CI-sized.

Four kinds, each walked by one child with a time limit per command (a hang fails the test,
naming the file and command): mutated .tflite models through inspect / convert -t mcu /
verify / run; WAV files through `run WAKEWORD.tflite --input`; manifests edited and mostly
re-stamped through verify / run; hand-made hostile ONNX files through inspect / run /
convert -t onnx. Every outcome must be exit 0 or one clean refusal: no traceback, no hang, no
death by a signal, no command that raises the child's peak memory by 1 GiB or more.
benchmarks/fuzz_cli.py runs any count; the README's figures come from it.

The first probes found, before the fixes: 9 crashes and 6 tracebacks in convert -t mcu and
5 in verify (issue 13); and with these kinds, a truncated fixture and a report replaced by a
list gave tracebacks in verify, a damaged .tflite re-hashed into the manifest reached LiteRT
in verify's own process, an external-data offset past the file's end came through as "an
edgeserve check missed this", and `run` refused ONNX weights kept beside the model.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from cli_fuzz import run_plan, tally, tracebacks
from fuzz_manifests import build_base, write_manifest_mutants
from fuzz_models import MODELS, write_model_mutants
from fuzz_onnx import write_onnx_mutants
from fuzz_wav import write_wav_mutants

CLEAN = {"exit 0", "exit 1", "exit 2"}
PER_COMMAND_S = 120.0  # a hang, not a speed bound: the slowest command measured is under 2 s


def _clean(rows: list[dict[str, Any]], count: int) -> dict[str, Any]:
    assert len(rows) == count
    assert not tracebacks(rows), tracebacks(rows)[:5]
    counts = tally(rows)
    for command, outcomes in counts.items():
        assert set(outcomes) <= CLEAN, (command, outcomes)
    memory = max(m for row in rows for m in row["grew_mib"].values())
    assert memory < 1024, f"one command raised the peak resident memory by {memory} MiB"
    return counts


def test_mutated_models_through_inspect_convert_verify_run(testdata: Path, tmp_path: Path) -> None:
    plan, strategies = write_model_mutants(testdata, tmp_path / "mutants", per_model=150)
    rows, failure = run_plan(plan, tmp_path / "work", PER_COMMAND_S)
    assert failure is None, failure
    counts = _clean(rows, 150 * len(MODELS))
    assert len(strategies) >= 8
    # Both outcomes happen: the check is not passing on refusals alone, nor on clean files alone.
    assert counts["convert"]["exit 0"] > 10 and counts["convert"]["exit 1"] > 100, counts
    assert counts["verify"]["exit 0"] > 10, counts


def test_wav_files_through_a_wake_word_model(tmp_path: Path) -> None:
    pymicro_wakeword = pytest.importorskip("pymicro_wakeword")
    model = Path(pymicro_wakeword.__file__).parent / "models" / "alexa.tflite"
    plan, strategies = write_wav_mutants(model, tmp_path / "wav", 300)
    rows, failure = run_plan(plan, tmp_path / "work", PER_COMMAND_S)
    assert failure is None, failure
    counts = _clean(rows, 300)
    assert len(strategies) == 8
    assert counts["run"]["exit 0"] > 30 and counts["run"]["exit 1"] > 150, counts


def _hashes(folder: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_restamped_and_edited_manifests_through_verify_and_run(testdata: Path, tmp_path: Path) -> None:
    before = _hashes(testdata)  # the manifest names its source by absolute path: nothing may write there
    base = build_base(testdata, tmp_path / "base")
    plan, strategies = write_manifest_mutants(base, tmp_path / "manifests", 200)
    rows, failure = run_plan(plan, tmp_path / "work", PER_COMMAND_S)
    assert failure is None, failure
    counts = _clean(rows, 200)
    assert len(strategies) == 6
    # An edit left unstamped is refused by every command: tampering is always caught.
    must_refuse = {entry["file"] for entry in plan if entry["must_refuse"]}
    assert len(must_refuse) > 15
    let_through = [row for row in rows if row["file"] in must_refuse and set(row["outcomes"].values()) != {"exit 1"}]
    assert not let_through, let_through[:3]
    for command in ("verify", "run", "run --target"):
        assert counts[command]["exit 0"] > 20 and counts[command]["exit 1"] > 50, counts
    assert _hashes(testdata) == before


def test_hostile_onnx_files_through_inspect_run_convert(tmp_path: Path) -> None:
    pytest.importorskip("onnx")
    plan, traits = write_onnx_mutants(tmp_path / "onnx", 300)
    rows, failure = run_plan(plan, tmp_path / "work", PER_COMMAND_S)
    assert failure is None, failure
    counts = _clean(rows, 300)
    assert len(traits) == 10
    for command in ("inspect", "run", "convert"):
        assert counts[command]["exit 0"] > 10 and counts[command]["exit 1"] > 150, counts


def test_output_folders_and_special_files_in_every_path_argument(testdata: Path, tmp_path: Path) -> None:
    """Issue 47: every OUT shape and every special file where a path belongs. Each command ends
    in exit 0 or one refusal as its case says; nothing outside OUT is written, moved, deleted or
    read (in a refused case, nothing at all), and no special file is opened (a FIFO would hang).

    The first run found: `-o` with a 300-byte name and `verify` on links in a loop ended in
    OSError tracebacks, a 255-byte name passed the checks and failed at staging, and an empty
    --labels file was accepted."""
    from fuzz_paths import OUT_SHAPES, run_path_cases

    got = run_path_cases(testdata, tmp_path, count=120, seed=0, per_command=PER_COMMAND_S)
    assert got["failure"] is None, got["failure"]
    _clean(got["rows"], 120)
    assert len(got["strategies"]) >= len(OUT_SHAPES)
    assert not got["wrong_outcome"], got["wrong_outcome"]
    assert not got["trespass"], got["trespass"]
    assert got["outcomes"]["ok"] >= 6 and got["outcomes"]["refused"] >= 100, got["outcomes"]
    if not got["reads_checked"]:
        pytest.xfail("writes, moves and deletions checked; reads not: this file system does not update atimes")


def test_the_trespass_check_sees_a_write_a_read_a_move_a_deletion_and_a_new_file(tmp_path: Path) -> None:
    """The check above can fail: each kind of trespass, done by hand, is named."""
    from fuzz_paths import age_access_times, differences, reads_detectable, snapshot

    root = tmp_path / "disk"
    root.mkdir()
    for name in "abcdf":
        (root / name).write_text(name * 100)
    before = snapshot(root)
    age_access_times(root, before)
    assert differences(before, snapshot(root), root, []) == []  # looking (lstat, then hashing last) is no read
    before = snapshot(root)  # that look read every file: age them again
    age_access_times(root, before)
    (root / "a").read_bytes()
    (root / "b").write_text("changed")
    (root / "c").rename(root / "c2")
    (root / "d").unlink()
    (root / "e").write_text("new")
    found = differences(before, snapshot(root), root, [root / "f"])
    expected = ["b: changed", "c: deleted or moved", "c2: created", "d: deleted or moved", "e: created"]
    if reads_detectable(tmp_path):
        expected.insert(0, "a: read")
    assert found == expected
    allowed = [root / "b", root / "c", root / "c2", root / "d", root / "e"]
    assert differences(before, snapshot(root), root, allowed, [root / "a", root / "f"]) == []


def test_calibration_and_evaluation_data_that_lies(testdata: Path, tmp_path: Path) -> None:
    """Issue 47: lying --calib and --eval data (constant, one sample, NaN, text, fractions,
    labels past the classes, image bombs, a photo cut in half, ...) through convert, then
    verify of what passed. Each case ends as its strategy says, and nothing called ok fails verify.

    The first run found: whole-number labels stored as floats ended in a "cannot reshape"
    traceback, and one calibration sample of varied values passed."""
    from fuzz_data import CALIBRATION, EVALUATION, IMAGES, judge, write_data_cases

    count = len(CALIBRATION) + len(EVALUATION) + len(IMAGES)
    plan, strategies, expect = write_data_cases(testdata, tmp_path / "cases", count)
    rows, failure = run_plan(plan, tmp_path / "work", PER_COMMAND_S)
    assert failure is None, failure
    counts = _clean(rows, count)
    assert len(strategies) == count
    assert not judge(rows, expect), judge(rows, expect)
    assert counts["convert"]["exit 0"] >= 6 and counts["convert"]["exit 1"] >= 20, counts


def test_the_session_api_from_eight_threads_at_random_then_closed_under_them(testdata: Path) -> None:
    """Issue 47: run, classify, a shared StreamStep, reset, set_threads, describe and a bad frame,
    from 8 threads in random order on one Session, which the main thread then closes while they
    go on. Every answer equals a lone Session's; the only refusals are a StreamStep in use by
    another thread, a closed Session, and the bad frame. The first run found calls after close()
    told "no backend is left to run the model" with every backend's open failure listed."""
    from fuzz_threads import run_threads

    got = run_threads(testdata / "mlperf-tiny" / "kws_ref_model.tflite", workers=8, calls=300)
    assert "failure" not in got, got
    assert got["alive"] == 0 and got["distinct"] >= 6, got  # answers differ: a wrong one would show
    tally = got["tally"]
    allowed = {"ok", "ConcurrentUseError", "closed", "InputError"}
    assert all(set(outcomes) <= allowed for outcomes in tally.values()), tally
    for op, outcomes in tally.items():
        assert outcomes.get("ok" if op != "bad-frame" else "InputError", 0) > 50, (op, outcomes)
        assert outcomes.get("closed", 0) > 0, (op, outcomes)  # some calls came after close()
    assert tally["step"].get("ConcurrentUseError", 0) > 0, tally  # the threads did collide
