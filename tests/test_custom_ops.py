"""Every operator accounted for before work starts (issue 48): a float .tflite with custom
operators LiteRT has no kernel for (MediaPipe's Landmarks2TransformMatrix and the like) ended
in "RuntimeError: Encountered unresolved custom op" at the float reference outputs, after
`inspect` had called all eight targets ready. Now `inspect` refuses every route with the
reason and `convert` refuses in one line before any work; a custom operator LiteRT has
(TFLite_Detection_PostProcess) is no reason to refuse.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgeserve.cli import cli

pytest.importorskip("ai_edge_litert")


def _with_custom_op(data: bytes, code: str) -> bytes:
    """``data`` with its second FULLY_CONNECTED made the custom operator ``code``."""
    import flatbuffers

    from edgeserve.tflite.metadata import schema_module, unpack_model

    schema = schema_module()
    model = unpack_model(data)
    custom = schema.OperatorCodeT()
    custom.builtinCode = custom.deprecatedBuiltinCode = 32  # CUSTOM
    custom.customCode, custom.version = code, 1
    model.operatorCodes.append(custom)
    op = model.subgraphs[0].operators[1]
    op.opcodeIndex = len(model.operatorCodes) - 1
    op.builtinOptionsType, op.builtinOptions, op.customOptions = 0, None, []
    builder = flatbuffers.Builder(len(data) + 4096)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


@pytest.fixture(scope="module")
def landmarks(testdata: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("custom") / "landmarks.tflite"
    path.write_bytes(_with_custom_op((testdata / "tflm" / "hello_world_float.tflite").read_bytes(),
                                     "Landmarks2TransformMatrix"))
    return path


def test_inspect_names_the_custom_operator_and_refuses_every_route(landmarks: Path) -> None:
    result = CliRunner().invoke(cli, ["inspect", str(landmarks), "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info["custom_ops"] == ["Landmarks2TransformMatrix"]
    routes = info["routes"]
    assert len(routes) >= 6 and not any(r["ready"] for r in routes), routes
    assert all("custom operator(s) Landmarks2TransformMatrix that LiteRT has no kernel for" in r["reason"]
               for r in routes)


def test_convert_refuses_in_one_line_before_any_work(landmarks: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["convert", str(landmarks), "-t", "tflite-int8", "-t", "onnx", "--calib-random",
                                      "-o", str(out), "--json"])
    assert result.exit_code == 1, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Landmarks2TransformMatrix" in errors[0] and "What to do: export" in errors[0], errors
    assert "Traceback" not in result.output and not out.exists()


def test_a_custom_operator_litert_has_is_no_reason_to_refuse(tmp_path: Path) -> None:
    """A float model whose only operator is LiteRT's own TFLite_Detection_PostProcess: its
    custom operator is listed, and LiteRT builds it (the runner the reference then uses)."""
    import numpy as np
    from ssd_postprocess_model import build

    from edgeserve.sources.tflite_custom_ops import check_runnable, custom_ops
    from edgeserve.tflite.model import TfliteModel

    anchors = np.random.default_rng(0).uniform(0.1, 0.9, (16, 4)).astype(np.float32)
    path = build(tmp_path / "ssd_post.tflite", anchors, classes=3)
    model = TfliteModel.from_file(path)
    assert custom_ops(model) == ["TFLite_Detection_PostProcess"]
    assert check_runnable(path.name, model, path.read_bytes()) is not None  # a runner: LiteRT built it
