"""The manifest is the contract a device acts on: verify and Session refuse the same edits.

Probe findings (issue 13): verify hashed files outside the folder (`../..`, absolute paths);
the mcu entry's `name` picked an unhashed file; Session ran `../` and absolute paths and a
modified artifact when its sha256 was deleted; preprocess, labels, arena and fit were covered
by no hash; re-running only `-t tflite-int8` left an mcu build of the old model beside the new one.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgeserve.cli import cli
from edgeserve.errors import ManifestError
from edgeserve.manifest.record import stamp
from edgeserve.runtime import Session


@pytest.fixture(scope="module")
def build(digits_example: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from edgeserve.conversion.convert import convert

    out = tmp_path_factory.mktemp("contract") / "OUT"
    convert(digits_example / "digits_cnn.keras", ["tflite-int8", "mcu"], out, calib=digits_example / "calib.npz",
            eval_data=digits_example / "eval.npz", profile="arduino-nano-33-ble", options={"name": "digits"})
    return out


def edited(build: Path, tmp_path: Path, change: Callable[[dict], None], restamp: bool = False) -> Path:
    copy = tmp_path / "OUT"
    shutil.copytree(build, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    change(manifest)
    (copy / "manifest.json").write_text(json.dumps(stamp(manifest) if restamp else manifest))
    return copy


def entry(manifest: dict, target: str) -> dict:
    return next(a for a in manifest["artifacts"] if a["target"] == target)


def refused_by_both(out: Path) -> tuple[str, str]:
    """verify's failure text and Session's error for the same manifest, which say the same."""
    result = CliRunner().invoke(cli, ["verify", str(out)])
    assert result.exit_code == 1, result.output
    with pytest.raises(ManifestError) as caught:
        Session(out / "manifest.json")
    assert f"error: {caught.value}" in result.output  # the same words, not two wordings of it
    return result.output, str(caught.value)


def verify_checks(out: Path) -> dict[str, dict]:
    result = CliRunner().invoke(cli, ["verify", str(out), "--json"])
    assert result.exit_code == 1, result.output
    return {f"{a['target']}: {c['name']}": c for a in json.loads(result.stdout)["artifacts"] for c in a["checks"]}


def test_the_untouched_build_passes(build: Path) -> None:
    assert CliRunner().invoke(cli, ["verify", str(build)]).exit_code == 0
    with Session(build) as session:
        assert session.backend.startswith("litert:")


@pytest.mark.parametrize("path", ["../../etc/passwd", "/etc/passwd", "model_int8.tflite/../../x.tflite"])
def test_paths_that_leave_the_folder(build: Path, tmp_path: Path, path: str) -> None:
    out = edited(build, tmp_path, lambda m: entry(m, "tflite-int8").update(path=path), restamp=True)
    verify_text, session_text = refused_by_both(out)
    assert "leaves the manifest's folder" in verify_text and "leaves the manifest's folder" in session_text
    assert "root:" not in verify_text  # nothing of the outside file was read or shown


@pytest.mark.parametrize(("what", "change"), [
    ("report", lambda m: entry(m, "tflite-int8")["report"].update(path="/etc/passwd")),
    ("fixture", lambda m: entry(m, "tflite-int8")["verification"]["fixture"].update(path="../x.npz")),
    ("mcu folder", lambda m: entry(m, "mcu").update(path="/etc")),
    ("mcu file", lambda m: entry(m, "mcu")["files"][0].update(path="mcu/../../x.h")),
])
def test_no_file_of_any_entry_leaves_the_folder(build: Path, tmp_path: Path, what: str,
                                                change: Callable[[dict], None]) -> None:
    """Session refuses too: a manifest that names a file outside is not one to act on."""
    _, session_text = refused_by_both(edited(build, tmp_path, change, restamp=True))
    assert "leaves the manifest's folder" in session_text, what


def test_a_symlink_out_of_the_folder_is_refused(build: Path, tmp_path: Path) -> None:
    def link_out(m: dict) -> None:
        (tmp_path / "OUT" / "elsewhere.tflite").symlink_to(build / "model_int8.tflite")
        entry(m, "tflite-int8")["path"] = "elsewhere.tflite"

    _, session_text = refused_by_both(edited(build, tmp_path, link_out, restamp=True))
    assert "path 'elsewhere.tflite' leaves the manifest's folder" in session_text


@pytest.mark.parametrize(("what", "change"), [
    ("preprocess mean", lambda m: m["preprocess"].update(mean=[0.5])),
    ("labels", lambda m: m.update(labels=["cat"] * 10)),
    ("arena", lambda m: entry(m, "mcu").update(arena_bytes=1024)),
    ("fit", lambda m: entry(m, "mcu").update(fits={"ram": True, "flash": True})),
    ("metrics", lambda m: entry(m, "tflite-int8")["metrics"].update(quantized=1.0)),
    ("integer_only", lambda m: entry(m, "tflite-int8").update(integer_only=False)),
    ("quantization", lambda m: entry(m, "tflite-int8")["quantization"].update(io="float32")),
])
def test_an_edited_field_is_refused(build: Path, tmp_path: Path, what: str, change: Callable[[dict], None]) -> None:
    out = edited(build, tmp_path, change)
    verify_text, session_text = refused_by_both(out)
    assert "was changed after edgeserve wrote it" in verify_text, what
    assert "was changed after edgeserve wrote it" in session_text, what


def test_a_deleted_hash_is_an_error_not_a_pass(build: Path, tmp_path: Path) -> None:
    out = edited(build, tmp_path, lambda m: m.pop("manifest_sha256"))
    verify_text, session_text = refused_by_both(out)
    assert "has no manifest_sha256" in verify_text and "has no manifest_sha256" in session_text
    out2 = edited(build, tmp_path / "b", lambda m: entry(m, "tflite-int8").pop("sha256"), restamp=True)
    (out2 / "model_int8.tflite").write_bytes(b"TFL3 anything")  # the probe's modified artifact
    _, session_text = refused_by_both(out2)
    assert "'model_int8.tflite' has no sha256" in session_text


@pytest.mark.parametrize("record", ["report", "fixture", "mcu model file"])
def test_every_file_a_verification_reads_has_its_hash(build: Path, tmp_path: Path, record: str) -> None:
    def drop(m: dict) -> None:
        {"report": lambda: entry(m, "tflite-int8")["report"],
         "fixture": lambda: entry(m, "tflite-int8")["verification"]["fixture"],
         "mcu model file": lambda: next(f for f in entry(m, "mcu")["files"] if f["path"].endswith(".tflite")),
         }[record]().pop("sha256")

    _, session_text = refused_by_both(edited(build, tmp_path, drop, restamp=True))
    assert "has no sha256: nothing proves it is the file that was verified" in session_text


def test_the_mcu_name_cannot_point_past_the_hashed_files(build: Path, tmp_path: Path) -> None:
    out = edited(build, tmp_path, lambda m: entry(m, "mcu").update(name="../model_int8"), restamp=True)
    result = CliRunner().invoke(cli, ["verify", str(out), "--json"])
    assert result.exit_code == 1
    checks = {c["name"]: c for a in json.loads(result.stdout)["artifacts"] for c in a["checks"]}
    assert checks["model file is hashed"]["ok"] is False


@pytest.mark.parametrize(("change", "expected"), [
    (lambda m: entry(m, "mcu").pop("model_sha256"), "the entry has no model_sha256"),
    (lambda m: entry(m, "mcu").update(model_from="other.tflite"),
     "stale: built from other.tflite, but the tflite-int8 artifact is model_int8.tflite"),
    (lambda m: m.update(artifacts=[entry(m, "mcu")]),
     "stale: built from tflite-int8's model_int8.tflite, which this manifest no longer lists"),
])
def test_an_mcu_build_that_cannot_name_its_model_fails(build: Path, tmp_path: Path, change: Callable[[dict], None],
                                                       expected: str) -> None:
    checks = verify_checks(edited(build, tmp_path, change, restamp=True))
    assert checks["mcu: built from the model beside it"]["ok"] is False
    assert checks["mcu: built from the model beside it"]["detail"].startswith(expected)


def test_a_restamped_preprocess_is_caught_by_the_model_s_own_record(build: Path, tmp_path: Path) -> None:
    """Even a manifest re-hashed after the edit: the .tflite carries the spec it was calibrated with."""
    checks = verify_checks(edited(build, tmp_path, lambda m: m["preprocess"].update(mean=[0.5]), restamp=True))
    assert checks["tflite-int8: provenance in the model"]["detail"] == (
        "stale: calibrated with another PreprocessSpec than the manifest's preprocess")
    assert checks["mcu: built from the model beside it"]["ok"]


def test_a_stale_mcu_build_is_reported(build: Path, tmp_path: Path) -> None:
    def pretend_rebuilt(m: dict) -> None:
        entry(m, "mcu")["model_sha256"] = "0" * 64  # made from some other INT8 model

    out = edited(build, tmp_path, pretend_rebuilt, restamp=True)
    result = CliRunner().invoke(cli, ["verify", str(out)])
    assert result.exit_code == 1 and "stale: model_int8.tflite changed" in result.output


def test_converting_one_target_again_drops_what_was_built_from_it(build: Path, digits_example: Path,
                                                                  tmp_path: Path) -> None:
    from edgeserve.conversion.convert import convert

    out = tmp_path / "OUT"
    shutil.copytree(build, out)
    convert(digits_example / "digits_cnn.keras", ["tflite-int8"], out, calib=digits_example / "calib.npz",
            max_calib_samples=50)  # different calibration: a different INT8 model
    targets = [a["target"] for a in json.loads((out / "manifest.json").read_text())["artifacts"]]
    assert targets == ["tflite-int8"]  # the mcu build of the old model is not kept beside the new one
    assert not (out / "mcu").exists() and not (out / "reports" / "mcu.json").exists()  # nor its files
    assert CliRunner().invoke(cli, ["verify", str(out)]).exit_code == 0


def test_entries_made_with_another_preprocess_spec_are_not_kept(build: Path, tmp_path: Path) -> None:
    from edgeserve.manifest.record import load_manifest, merge_into_existing

    old = load_manifest(build)
    fresh = {**old, "artifacts": [], "preprocess": {**old["preprocess"], "mean": [0.5]}}
    merged, stale = merge_into_existing(build / "manifest.json", fresh, {"coreml"}, lambda target: ())
    assert merged["artifacts"] == [] and [e["target"] for e in stale] == ["tflite-int8", "mcu"]
    same = {**old, "artifacts": []}
    merged, stale = merge_into_existing(build / "manifest.json", same, {"coreml"}, lambda target: ())
    assert [e["target"] for e in merged["artifacts"]] == ["tflite-int8", "mcu"] and stale == []


def test_the_fixture_holds_the_artifact_s_own_raw_outputs(build: Path) -> None:
    """The recorded raw outputs are taken from the verification run's dequantized ones: they equal
    a fresh run of the written artifact, integer for integer."""
    import numpy as np

    from edgeserve.runtime.backends.litert_run import TfliteRunner

    record = entry(json.loads((build / "manifest.json").read_text()), "tflite-int8")
    fixture = np.load(build / record["verification"]["fixture"]["path"])
    _, raw = TfliteRunner((build / record["path"]).read_bytes()).predict([fixture["inputs_0"]])
    assert fixture["raw_0"].dtype == raw[0].dtype == np.int8
    assert np.array_equal(fixture["raw_0"], raw[0]) and len(np.unique(raw[0])) > 10
