"""The published JSON Schema of the manifest (edgeserve/manifest/manifest.schema.json, issue 49):
what convert writes validates against it, what breaks the contract does not, and its lists of
targets and source kinds are the ones the code has."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

jsonschema = pytest.importorskip("jsonschema")

from edgeserve.manifest import schema_path  # noqa: E402


@pytest.fixture(scope="module")
def validator() -> "jsonschema.Draft202012Validator":
    schema = json.loads(schema_path().read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory, testdata: Path, digits_conversion: Path) -> list[dict]:
    """Manifests as convert writes them: the digits CNN (Keras, --calib and --eval), TFLM's
    float sine model to three targets, and the full-INT8 one with onnx refused by name."""
    base = tmp_path_factory.mktemp("schema")
    runs = [(testdata / "tflm/hello_world_float.tflite", ["tflite-int8", "mcu-c", "onnx", "--calib-random"],
             base / "float"),
            (testdata / "tflm/hello_world_int8.tflite", ["mcu-c", "onnx"], base / "int8")]
    for model, targets, out in runs:
        subprocess.run([sys.executable, "-m", "edgeserve", "-q", "convert", str(model), "-o", str(out),
                        *(a for t in targets for a in (("-t", t) if not t.startswith("--") else (t,)))],
                       capture_output=True)
    found = [json.loads((out / "manifest.json").read_text()) for _, _, out in runs]
    return [json.loads((digits_conversion / "manifest.json").read_text()), *found]


def test_what_convert_writes_validates(validator, written: list[dict]) -> None:
    assert [sorted(a["target"] for a in m["artifacts"]) for m in written] == [
        ["tflite-int8"], ["mcu-c", "onnx", "tflite-int8"], ["mcu-c"]]
    assert written[2]["refused"][0]["target"] == "onnx"  # the refusal's record is checked too
    for manifest in written:
        assert list(validator.iter_errors(manifest)) == []


@pytest.mark.parametrize("break_it, where", [
    (lambda m: m["artifacts"][0].pop("target"), "target"),
    (lambda m: m["artifacts"][0].update(status="maybe"), "status"),
    (lambda m: m["artifacts"][0].update(sha256=m["artifacts"][0]["sha256"].upper()), "sha256"),
    (lambda m: m["artifacts"][0].update(path="/etc/passwd"), "path"),
    (lambda m: m["artifacts"][0].update(path="../../outside.tflite"), "path"),
    (lambda m: m["artifacts"][0]["quality"]["outputs"][0].update(judged_by="vibes"), "judged_by"),
    (lambda m: m.update(schema="edgeserve.manifest/2"), "schema"),
    (lambda m: m["source"].update(kind="caffe"), "kind"),
    (lambda m: m.pop("manifest_sha256"), "manifest_sha256"),
])
def test_what_breaks_the_contract_does_not(validator, written: list[dict], break_it, where: str) -> None:
    broken = copy.deepcopy(written[1])
    break_it(broken)
    errors = list(validator.iter_errors(broken))
    assert errors and any(where in (list(e.absolute_path) + [e.message]) or where in e.message for e in errors), \
        [e.message for e in errors]


def test_the_schemas_lists_are_the_codes() -> None:
    from edgeserve.converters import target_names
    from edgeserve.routes import SOURCE_KINDS

    schema = json.loads(schema_path().read_text())
    assert sorted(schema["$defs"]["target"]["enum"]) == sorted(target_names())
    assert sorted(schema["properties"]["source"]["properties"]["kind"]["enum"]) == sorted(SOURCE_KINDS)


def test_the_typed_record_is_the_schemas_artifact() -> None:
    """Readers outside a target's folder take an entry through edgeserve.manifest.entry.ArtifactEntry:
    its fields are the schema's artifact properties, and its required ones the schema's."""
    from edgeserve.manifest.entry import _CONTRACT, contract_fields

    artifact = json.loads(schema_path().read_text())["$defs"]["artifact"]
    assert sorted(contract_fields()) == sorted(artifact["properties"])
    # read() fills the record from _CONTRACT: a field missing there would stay at its default unread.
    assert [name for name, _, _ in _CONTRACT] == contract_fields()
    assert [name for name, _, required in _CONTRACT if required] == artifact["required"]


def test_every_written_entry_reads_as_the_typed_record(written: list[dict]) -> None:
    from edgeserve.manifest.entry import ArtifactEntry

    for manifest in written:
        for entry in manifest["artifacts"]:
            record = ArtifactEntry.read(entry)
            assert (record.target, record.status, record.path) == (entry["target"], entry["status"], entry["path"])
            assert record.ok is (entry["status"] == "ok") and record.fields is entry
            assert record.size and record.size == (entry.get("bytes") or sum(f["bytes"] for f in entry["files"]))


@pytest.mark.parametrize("break_it, says", [
    (lambda e: e.pop("path"), "expected the field 'path' (a string), found none"),
    (lambda e: e.update(bytes="12"), "expected 'bytes' to be an integer, found str"),
    (lambda e: e.update(bytes=True), "expected 'bytes' to be an integer, found bool"),
    (lambda e: e.update(files={"path": "a"}), "expected 'files' to be a list, found dict"),
])
def test_the_typed_record_refuses_a_broken_entry_in_one_line(written: list[dict], break_it, says: str) -> None:
    from edgeserve.errors import ManifestError
    from edgeserve.manifest.entry import ArtifactEntry

    entry = copy.deepcopy(written[1]["artifacts"][0])
    ArtifactEntry.read(entry)  # whole, it reads
    break_it(entry)
    with pytest.raises(ManifestError) as caught:
        ArtifactEntry.read(entry, "OUT/manifest.json artifact 0")
    assert str(caught.value).startswith(f"OUT/manifest.json artifact 0: {says}") and "\n" not in str(caught.value)
