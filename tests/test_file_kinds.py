"""A mistaken or renamed file is named for what it is (issue 27: a JPEG renamed .onnx said
"field 25427343 has invalid wire type 7", `verify model.tflite` said "'utf-8' codec can't
decode")."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from edgeserve.cli import cli
from edgeserve.file_kinds import describe


def test_known_heads_are_named_and_others_are_not(testdata: Path) -> None:
    assert describe((testdata / "tflm/hello_world_int8.tflite").read_bytes()[:16]).startswith("a TFLite model")
    assert describe(b"\xff\xd8\xff\xe0\x00\x10JFIF") == "a JPEG image"
    assert describe(b"\x89HDF\r\n\x1a\n").startswith("an HDF5 file")
    assert describe(b"\x08\x07\x12\x07pytorch") is None  # an ONNX file's first field: no guess


def test_a_jpeg_renamed_onnx_and_a_model_given_to_verify(testdata: Path, tmp_path: Path) -> None:
    from skimage import data, io

    photo = tmp_path / "cat.jpg"
    io.imsave(photo, data.chelsea())
    renamed = tmp_path / "cat.onnx"
    renamed.write_bytes(photo.read_bytes())
    for command in (["inspect", str(renamed)], ["run", str(renamed), "--input", str(photo)]):
        result = CliRunner().invoke(cli, command)
        assert result.exit_code == 1
        assert result.output.strip().splitlines()[-1] == "error: model: not an ONNX model: the file starts like a JPEG image"
    model = testdata / "tflm/hello_world_int8.tflite"
    before = model.read_bytes()
    result = CliRunner().invoke(cli, ["verify", str(model)])
    assert result.exit_code != 0
    assert "is a TFLite model (.tflite), not a manifest: give the conversion's output folder" in result.output
    assert model.read_bytes() == before  # read, never written


def test_a_truncated_keras_file_is_named_before_tensorflow_loads(tmp_path: Path) -> None:
    """Issue 27: Keras said "File not found" for a truncated .keras, after ~11 s of import."""
    import subprocess
    import sys
    import zipfile

    good = tmp_path / "good.keras"
    with zipfile.ZipFile(good, "w") as archive:  # a .keras file is a ZIP archive of these
        archive.writestr("config.json", "{}" * 2000)
        archive.writestr("model.weights.h5", bytes(range(256)) * 64)
    truncated = tmp_path / "model.keras"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    h5 = tmp_path / "model.h5"
    h5.write_bytes(b"\xff\xd8\xff\xe0 a JPEG named .h5")
    for path, message in ((truncated, "is not a .keras model: a .keras file is a ZIP archive and this one cannot be "
                                      "read as one (truncated or damaged?)"),
                          (h5, "is not a Keras .h5 model: the file is a JPEG image")):
        done = subprocess.run([sys.executable, "-m", "edgeserve", "inspect", str(path)], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 1 and done.stderr.strip() == f"error: {path} {message}"


def test_the_container_is_checked_before_tensorflow_is_asked_for(tmp_path: Path, monkeypatch) -> None:
    import pytest

    from edgeserve.errors import SourceModelError
    from edgeserve.sources import keras as keras_source

    def no_tensorflow(*args: object) -> None:
        raise AssertionError("TensorFlow was asked for before the file was checked")

    monkeypatch.setattr(keras_source, "require", no_tensorflow)
    damaged = tmp_path / "model.keras"
    damaged.write_bytes(b"PK\x03\x04 and nothing after")
    with pytest.raises(SourceModelError, match="cannot be read as one"):
        keras_source.load_keras(damaged)


def test_names_from_a_model_are_printed_as_text_never_as_markup(tmp_path: Path) -> None:
    """Issue 28: an input named `[/]...` crashed `inspect` in rich's markup parser."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["[/]in[bold]"], ["[red]out"], name="[/]relu")], "[/]g",
        [helper.make_tensor_value_info("[/]in[bold]", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("[red]out", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path = tmp_path / "markup.onnx"
    onnx.save(model, str(path))
    inspected = CliRunner().invoke(cli, ["inspect", str(path)])
    assert inspected.exit_code == 0, inspected.output
    assert "[/]in[bold]" in inspected.output and "[red]out" in inspected.output
    converted = CliRunner().invoke(cli, ["convert", str(path), "-t", "tflite-int8", "--calib-random",
                                         "-o", str(tmp_path / "out")])
    assert converted.exit_code == 0, converted.output
    assert "[red]out SQNR" in converted.output  # the quality line names the output as written
