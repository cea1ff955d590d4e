"""What is recorded is what runs: a flag overrides one field of the recorded PreprocessSpec.

The probe (issue 13): converting vww_96 with --mean/--std and running the manifest on a cat
gave 1=0.816; adding --interpolation bilinear, the value already recorded, gave 0=0.969,
because any one flag replaced the whole recorded spec with defaults.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from edgeserve.cli import cli
from edgeserve.runtime import Session


def test_a_field_given_again_with_its_recorded_value_changes_nothing(digits_conversion: Path,
                                                                    digits_example: Path) -> None:
    frame = np.load(digits_example / "frames.npz")["frames"][3]
    with Session(digits_conversion) as plain:
        recorded, expected = plain.preprocess, plain.run(frame)[0].copy()
    with Session(digits_conversion, preprocess={"interpolation": recorded.interpolation}) as same:
        assert same.preprocess == recorded and same.preprocess_overrides == ()
        np.testing.assert_array_equal(same.run(frame)[0], expected)


def test_one_field_is_overridden_and_the_rest_kept(digits_conversion: Path) -> None:
    with Session(digits_conversion) as plain:
        recorded = plain.preprocess
    with Session(digits_conversion, preprocess={"mean": [0.5]}) as session:
        assert session.preprocess_overrides == ("mean",)
        assert session.preprocess.mean == (0.5,)
        assert (session.preprocess.size, session.preprocess.color, session.preprocess.scale) == (
            recorded.size, recorded.color, recorded.scale)


def test_the_cli_says_which_fields_were_overridden(digits_conversion: Path, digits_example: Path,
                                                   tmp_path: Path) -> None:
    import cv2

    photo = tmp_path / "digit.png"
    cv2.imwrite(str(photo), np.load(digits_example / "frames.npz")["frames"][3])
    result = CliRunner().invoke(cli, ["run", str(digits_conversion), "--input", str(photo), "--mean", "0.25",
                                      "--json"])
    assert result.exit_code == 0, result.output
    assert "preprocess: mean overridden, the rest as recorded" in result.stderr
    assert json.loads(result.stdout)["results"]


def test_bench_synthetic_without_a_spec_says_so(testdata: Path) -> None:
    result = CliRunner().invoke(cli, ["bench", str(testdata / "tflm/hello_world_int8.tflite"),
                                      "--synthetic", "640x480", "--frames", "5"])
    assert result.exit_code == 1
    assert "needs a PreprocessSpec" in result.stderr
    plain = CliRunner().invoke(cli, ["bench", str(testdata / "tflm/hello_world_int8.tflite"), "--frames", "5",
                                     "--json"])
    assert plain.exit_code == 0, plain.output
    assert json.loads(plain.stdout)["input"] == "model tensor"
