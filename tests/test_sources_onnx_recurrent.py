"""Recurrent ONNX models (LSTM, GRU) through edgeserve's ONNX reader, checked against ONNX Runtime.

The reader unrolls each over the fixed sequence (edgeserve/sources/onnx/recurrent.py). Checked
on what PyTorch's exporter writes (two layers, one and two directions) and on single nodes built
here for what it never writes (peepholes, reverse direction, initial states, GRU's default
linear_before_reset = 0), then one LSTM through the INT8, Core ML and microcontroller targets.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from edgeserve.cli import cli

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

HIDDEN, FEATURES, STEPS = 16, 8, 20


class _Recurrent(torch.nn.Module):
    def __init__(self, kind: str, bidirectional: bool) -> None:
        super().__init__()
        cls = torch.nn.LSTM if kind == "LSTM" else torch.nn.GRU
        self.rnn = cls(FEATURES, HIDDEN, num_layers=2, batch_first=True, bidirectional=bidirectional)
        self.head = torch.nn.Linear(HIDDEN * (2 if bidirectional else 1), 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.rnn(x)
        return self.head(y[:, -1])


def _exported(kind: str, bidirectional: bool) -> bytes:
    torch.manual_seed(0)
    buffer = io.BytesIO()
    torch.onnx.export(_Recurrent(kind, bidirectional).eval(), (torch.zeros(1, STEPS, FEATURES),), buffer,
                      input_names=["x"], opset_version=17, dynamo=False)
    return buffer.getvalue()


def _reader_vs_ort(data: bytes, feeds: dict[str, np.ndarray]) -> float:
    from edgeserve.sources.onnx.reader import build_module

    expected = ort.InferenceSession(data).run(None, feeds)
    module = build_module(onnx, onnx.load_model_from_string(data))
    got = module(*[torch.from_numpy(v) for v in feeds.values()])
    got = got if isinstance(got, tuple) else (got,)
    return max(float(np.max(np.abs(g.detach().numpy() - e))) for g, e in zip(got, expected))


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("bidirectional", [False, True], ids=["forward", "bidirectional"])
def test_exported_recurrent_layers_read_as_onnx_runtime_computes_them(kind: str, bidirectional: bool) -> None:
    data = _exported(kind, bidirectional)
    assert kind in {n.op_type for n in onnx.load_model_from_string(data).graph.node}
    x = np.random.default_rng(1).standard_normal((1, STEPS, FEATURES)).astype(np.float32)
    assert _reader_vs_ort(data, {"x": x}) < 1e-5


def _single_node(op: str, attrs: dict, peepholes: bool = False, states: bool = False) -> tuple[bytes, dict]:
    """One LSTM/GRU node with random weights; all its outputs are graph outputs."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(2)
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    gates = 4 if op == "LSTM" else 3
    weights = {"W": (dirs, gates * HIDDEN, FEATURES), "R": (dirs, gates * HIDDEN, HIDDEN),
               "B": (dirs, 2 * gates * HIDDEN)}
    if peepholes:
        weights["P"] = (dirs, 3 * HIDDEN)
    initializers = [numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n)
                    for n, s in weights.items()]
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, [STEPS, 1, FEATURES])]
    feeds = {"X": rng.standard_normal((STEPS, 1, FEATURES)).astype(np.float32)}
    state_names = ["h0", "c0"][: 2 if op == "LSTM" else 1] if states else []
    for name in state_names:
        inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [dirs, 1, HIDDEN]))
        feeds[name] = rng.standard_normal((dirs, 1, HIDDEN)).astype(np.float32)
    node_inputs = ["X", "W", "R", "B", "", *(state_names or ["", ""][: 2 if op == "LSTM" else 1])]
    if peepholes:
        node_inputs.append("P")
    outputs = ["Y", "Y_h", "Y_c"][: 3 if op == "LSTM" else 2]
    node = helper.make_node(op, node_inputs, outputs, hidden_size=HIDDEN, **attrs)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                                                    for o in outputs], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString(), feeds


@pytest.mark.parametrize(("op", "attrs", "peepholes", "states"), [
    ("LSTM", {"direction": "reverse"}, True, True),
    ("LSTM", {"direction": "bidirectional"}, False, True),
    ("GRU", {"linear_before_reset": 0}, False, True),
    ("GRU", {"direction": "bidirectional", "linear_before_reset": 1}, False, False),
], ids=["lstm-reverse-peepholes", "lstm-bidirectional-states", "gru-reset-first", "gru-bidirectional"])
def test_what_exporters_rarely_write_reads_as_onnx_runtime_computes_it(op: str, attrs: dict, peepholes: bool,
                                                                       states: bool) -> None:
    data, feeds = _single_node(op, attrs, peepholes, states)
    assert _reader_vs_ort(data, feeds) < 1e-5  # Y, Y_h (and Y_c) all compared


def test_a_recurrent_attribute_without_a_translation_is_one_error_naming_it() -> None:
    from edgeserve.sources.onnx.reader import OnnxOpError, build_module

    data, feeds = _single_node("LSTM", {"clip": 3.0})
    module = build_module(onnx, onnx.load_model_from_string(data))
    with pytest.raises(OnnxOpError, match=r"ONNX operator LSTM \(node '-> Y'\) LSTM with clip is not supported"):
        module(torch.from_numpy(feeds["X"]))


def test_an_lstm_reaches_int8_core_ml_and_both_microcontroller_builds(tmp_path: Path) -> None:
    pytest.importorskip("litert_torch")
    source = tmp_path / "lstm.onnx"
    torch.manual_seed(0)
    model = _Recurrent("LSTM", False)
    model.rnn = torch.nn.LSTM(FEATURES, HIDDEN, batch_first=True)  # one layer: a shorter conversion
    torch.onnx.export(model.eval(), (torch.zeros(1, STEPS, FEATURES),), str(source), input_names=["x"],
                      opset_version=17, dynamo=False)
    t = np.linspace(0, 6, STEPS)[None, :, None]
    noise = np.random.default_rng(0).normal(size=(1, STEPS, FEATURES)) * 0.1
    x = np.concatenate([np.sin(t * f + p) + noise for f, p in zip(np.linspace(0.5, 3, 64), np.linspace(0, 3, 64))])
    np.savez(tmp_path / "seq.npz", x=x.astype(np.float32))
    result = CliRunner().invoke(cli, ["convert", str(source), "-t", "tflite-int8", "-t", "coreml", "-t", "mcu",
                                      "-t", "mcu-c", "--calib", str(tmp_path / "seq.npz"), "--no-fit-check", "-o",
                                      str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    entries = {a["target"]: a for a in manifest["artifacts"]}
    int8 = entries["tflite-int8"]
    # Judged against ONNX Runtime on the file: measured 40.0 dB, every kernel integer.
    assert int8["status"] == "ok" and int8["integer_only"] and min(int8["output_sqnr_db"].values()) > 30
    assert entries["coreml"]["status"] == "ok"
    # The 20 steps' SLICEs and a CONCATENATION kept within TFLM's 10 inputs: TFLM runs the
    # model in the computed arena within one step of LiteRT's reference kernels (bit-exact on
    # the calibration samples; one step apart on a held-out one), and mcu-c bit-exact with TFLM.
    assert entries["mcu"]["status"] == "ok" and entries["mcu"]["verification"]["max_abs_diff"] <= 1
    assert entries["mcu-c"]["verification"]["bit_exact"] is True


# ----- Loop (sources/onnx/loop.py): TensorFlow's while_loop as tf2onnx writes it ----------------------
def test_a_keras_lstm_exported_by_tf2onnx_as_a_loop_reads_as_onnx_runtime_computes_it(tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    tf2onnx = pytest.importorskip("tf2onnx")
    x = tf.keras.Input((STEPS, FEATURES), batch_size=1)
    model = tf.keras.Model(x, tf.keras.layers.Dense(4)(tf.keras.layers.GRU(HIDDEN)(tf.keras.layers.LSTM(
        HIDDEN, return_sequences=True)(x))))
    spec = (tf.TensorSpec((1, STEPS, FEATURES), tf.float32, name="x"),)
    proto, _ = tf2onnx.convert.from_keras(model, input_signature=spec, opset=17)
    loops = [n for n in proto.graph.node if n.op_type == "Loop"]
    assert len(loops) == 2 and not any(n.op_type in ("LSTM", "GRU") for n in proto.graph.node)
    feeds = {"x": np.random.default_rng(3).standard_normal((1, STEPS, FEATURES)).astype(np.float32)}
    assert _reader_vs_ort(proto.SerializeToString(), feeds) < 1e-5


def _loop_model(condition_from_data: bool) -> tuple[bytes, dict]:
    """y = x added to itself 5 times, each partial sum a scan output; the loop's condition is
    either the constant true or "the running sum averages below 100", which depends on the data."""
    from onnx import TensorProto, helper, numpy_helper

    body_nodes = [helper.make_node("Add", ["acc_in", "x"], ["acc_out"]),
                  helper.make_node("Identity", ["acc_out"], ["scan"])]
    if condition_from_data:
        body_nodes += [helper.make_node("ReduceMean", ["acc_out"], ["total"], keepdims=0),
                       helper.make_node("Less", ["total", "limit"], ["cond_out"])]
    else:
        body_nodes.append(helper.make_node("Identity", ["cond_in"], ["cond_out"]))
    vector = [1, 4]
    body = helper.make_graph(
        body_nodes, "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, vector)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, vector),
         helper.make_tensor_value_info("scan", TensorProto.FLOAT, vector)])
    initializers = [numpy_helper.from_array(np.array(5, np.int64), "M"),
                    numpy_helper.from_array(np.array(True), "cond"),
                    numpy_helper.from_array(np.zeros(vector, np.float32), "zero"),
                    numpy_helper.from_array(np.array(100.0, np.float32), "limit")]
    graph = helper.make_graph([helper.make_node("Loop", ["M", "cond", "zero"], ["acc", "steps"], body=body)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, vector)],
                              [helper.make_tensor_value_info("acc", TensorProto.FLOAT, vector),
                               helper.make_tensor_value_info("steps", TensorProto.FLOAT, [5, *vector])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString(), {"x": np.array([[1.0, 2.0, 3.0, 4.0]], np.float32)}


def test_a_loop_with_a_constant_trip_count_is_unrolled_and_one_that_stops_on_its_data_is_refused() -> None:
    from edgeserve.sources.onnx.reader import OnnxOpError, build_module

    data, feeds = _loop_model(condition_from_data=False)
    assert _reader_vs_ort(data, feeds) == 0.0  # the final sum and all 5 scan outputs
    data, feeds = _loop_model(condition_from_data=True)
    module = build_module(onnx, onnx.load_model_from_string(data))
    with pytest.raises(OnnxOpError, match="a loop condition computed from the data is not supported"):
        module(torch.from_numpy(feeds["x"]))


# ----- a state laid out [layers, batch, units] (--batch-axis) and If on a constant ---------------
def _stateful_model() -> bytes:
    """y = x @ W + mean(state); state_out = tanh(state + 1), with state laid out [2, batch, 4]
    and an If on an int64 "mode" input choosing whether y is doubled (as silero-vad's If on its
    sample rate)."""
    from onnx import TensorProto, helper, numpy_helper

    def branch(name: str, factor: float) -> Any:
        return helper.make_graph([helper.make_node("Mul", ["y0", f"{name}_k"], [f"{name}_y"])], name, [],
                                 [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, None)],
                                 [numpy_helper.from_array(np.array(factor, np.float32), f"{name}_k")])

    nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"]),
             helper.make_node("ReduceMean", ["state"], ["m"], keepdims=0),
             helper.make_node("Add", ["xw", "m"], ["y0"]),
             helper.make_node("Equal", ["mode", "two"], ["doubled"]),
             helper.make_node("If", ["doubled"], ["y"], then_branch=branch("then", 2.0),
                              else_branch=branch("else", 1.0)),
             helper.make_node("Add", ["state", "one"], ["s1"]),
             helper.make_node("Tanh", ["s1"], ["state_out"])]
    initializers = [numpy_helper.from_array(np.random.default_rng(4).standard_normal((6, 3)).astype(np.float32), "W"),
                    numpy_helper.from_array(np.array(1.0, np.float32), "one"),
                    numpy_helper.from_array(np.array(2, np.int64), "two")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 6]),
                                           helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, "b", 4]),
                                           helper.make_tensor_value_info("mode", TensorProto.INT64, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 3]),
                               helper.make_tensor_value_info("state_out", TensorProto.FLOAT, [2, "b", 4])],
                              initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_a_state_input_and_output_move_batch_first_and_compute_what_they_did(tmp_path: Path) -> None:
    from edgeserve.errors import SourceModelError
    from edgeserve.sources import load_source

    path = tmp_path / "stateful.onnx"
    path.write_bytes(_stateful_model())
    with pytest.raises(SourceModelError, match="first dimension is not that batch.*--batch-axis"):
        load_source(path, {"state": (2, 1, 4)}, {"mode": "2"})
    source = load_source(path, input_values={"mode": "2"}, batch_axes={"state": 1, "state_out": 1})
    shapes = {t.name: t.shape for t in (*source.signature.inputs, *source.signature.outputs)}
    assert shapes == {"x": (1, 6), "state": (1, 2, 4), "y": (1, 3), "state_out": (1, 2, 4)}
    assert source.describe()["batch_axes"]["state"] == {"axis": 1, "layout_in_source": [2, "b", 4]}
    rng = np.random.default_rng(5)
    x, state = rng.standard_normal((3, 6)).astype(np.float32), rng.standard_normal((3, 2, 4)).astype(np.float32)
    y, state_out = source.predict([x, state])  # ONNX Runtime on the rewritten file, sample by sample
    original = ort.InferenceSession(_stateful_model())
    for i in range(3):  # the original model, fed and read in its own [2, batch, 4] layout
        want_y, want_state = original.run(None, {"x": x[i:i + 1], "state": state[i][:, None],
                                                 "mode": np.array(2, np.int64)})
        np.testing.assert_allclose(y[i:i + 1], want_y, rtol=1e-6)
        np.testing.assert_allclose(state_out[i], want_state[:, 0], rtol=1e-6)
    # The reader takes the If on the now-constant mode (the doubled branch), as ONNX Runtime did.
    from edgeserve.sources.onnx.reader import build_module

    module = build_module(onnx, source.proto)
    got_y, got_state = module(torch.from_numpy(x[:1]), torch.from_numpy(state[:1]))
    np.testing.assert_allclose(got_y.detach().numpy(), y[:1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_state.detach().numpy(), state_out[:1], rtol=1e-5, atol=1e-6)
    with pytest.raises(SourceModelError, match="--batch-axis names nope"):
        load_source(path, input_values={"mode": "2"}, batch_axes={"nope": 1})
    with pytest.raises(SourceModelError, match="must be 1 to 2"):
        load_source(path, input_values={"mode": "2"}, batch_axes={"state": 3})


def test_an_if_on_the_data_runs_both_branches_and_selects_as_onnx_runtime_does() -> None:
    """openwakeword's hey_jarvis runs a verifier network only when its first score reaches 0.5:
    a condition known only at run time. The reader computes both branches and selects each
    output, which gives ONNX Runtime's values whichever branch the data picks; branches whose
    outputs differ in shape have no such form and are refused, naming the flag that fixes it."""
    from onnx import TensorProto, helper, numpy_helper

    from edgeserve.sources.onnx.reader import OnnxOpError, build_module

    model = onnx.load_model_from_string(_stateful_model())  # mode stays an input: known only at run time
    module = build_module(onnx, model)
    session = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(6)
    x, state = rng.standard_normal((1, 6)).astype(np.float32), rng.standard_normal((2, 1, 4)).astype(np.float32)
    seen = set()
    for mode in (2, 3):  # the doubled branch, then the other
        want_y, _ = session.run(None, {"x": x, "state": state, "mode": np.array(mode, np.int64)})
        got_y, _ = module(torch.from_numpy(x), torch.from_numpy(state), torch.tensor(mode))
        np.testing.assert_allclose(got_y.detach().numpy(), want_y, rtol=1e-6)
        seen.add(round(float(want_y[0, 0]), 4))
    assert len(seen) == 2  # the two branches gave different values, so selecting the wrong one fails

    def branch(name: str, shape: list[int]) -> Any:
        return helper.make_graph([helper.make_node("Reshape", ["y0", f"{name}_s"], [f"{name}_y"])], name, [],
                                 [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, None)],
                                 [numpy_helper.from_array(np.array(shape, np.int64), f"{name}_s")])

    graph = helper.make_graph([helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
                               helper.make_node("Greater", ["m", "zero"], ["c"]),
                               helper.make_node("Identity", ["x"], ["y0"]),
                               helper.make_node("If", ["c"], ["y"], then_branch=branch("then", [6]),
                                                else_branch=branch("else", [2, 3]))], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    shaped = build_module(onnx, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    with pytest.raises(OnnxOpError, match=r"branches that give shapes \[6\] and \[2, 3\].*--input-value"):
        shaped(torch.zeros(1, 6))


def test_an_output_with_its_batch_second_is_refused_naming_the_flag_then_moved_first(tmp_path: Path) -> None:
    """A CRNN's logits come [time, batch, classes] (captcha-whisperer's): stacked sample by sample
    along the first dimension they were a traceback in the float check; refused naming the flag,
    then with --batch-axis every artifact gives them batch-first."""
    from onnx import TensorProto, helper

    from edgeserve.errors import SourceModelError
    from edgeserve.sources import load_source

    graph = helper.make_graph([helper.make_node("Transpose", ["x"], ["logits"], perm=[1, 0, 2])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 4])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [3, "batch", 4])])
    path = tmp_path / "time_first.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    with pytest.raises(SourceModelError, match=r"output 'logits' has shape \[3, 1, 4\] for one sample.*"
                                               r"--batch-axis logits=1"):
        load_source(path)
    source = load_source(path, batch_axes={"logits": 1})
    assert source.signature.outputs[0].shape == (1, 3, 4)
    x = np.random.default_rng(9).standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(source.predict([x])[0], x)  # batch-first again: the samples as they came
