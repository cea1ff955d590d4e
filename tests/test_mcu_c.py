"""mcu-c: interpreter-free C, checked against independent references.

- every full-INT8 model in ../shared/testdata that has kernels here: gcc -Werror builds it,
  and on 50 random inputs its outputs equal LiteRT's reference kernels (TFLM's for
  person_detect, which LiteRT refuses) bit for bit;
- the arena plan is checked without the planner's own bookkeeping: no two tensors alive
  at the same step share a byte, and the arena is at most TFLM's head (0.85x on KWS, VWW, ResNet-8);
- AddressSanitizer + UBSan with the per-kernel region check run clean, and the same check
  fails when one region is cut short (so it can fail);
- the Cortex-M4 image runs under qemu-system-arm and prints the host's outputs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest


from edgeserve.converters.microcontroller.arena import plan_head
from edgeserve.converters.mcu_c import check
from edgeserve.converters.mcu_c.generate import Generated, generate
from edgeserve.converters.mcu_c.lower import UnsupportedOperatorError
from edgeserve.converters.mcu_c.planner import Plan
from edgeserve.tflite.model import TfliteModel
from tools_required import require_compiler, require_qemu

MODELS = {  # file -> TFLM arena head from ../shared/testdata/README.md (32-bit plan equals it)
    "mlperf-tiny/kws_ref_model.tflite": 16_000,
    "mlperf-tiny/vww_96_int8.tflite": 73_728,
    "mlperf-tiny/pretrainedResnet_quant.tflite": 49_152,
    "mlperf-tiny/ad01_int8.tflite": 768,
    "mlperf-tiny/str_ww_ref_model.tflite": 6_656,
    "tflm/person_detect.tflite": 55_296,
    "tflm/micro_speech_quantized.tflite": 5_968,
    "tflm/hello_world_int8.tflite": 32,
    "tflm/mobilenet_v2_quantized_1x3x224x224.tflite": 2_451_840,
}
SAMPLES = 50
FEW_SAMPLES = {"tflm/mobilenet_v2_quantized_1x3x224x224.tflite": 3}  # 300 M MACs each in the reference


def _write(generated: Generated, directory: Path) -> Path:
    for rel, text in generated.files.items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return directory


def _generate(testdata: Path, rel: str, name: str = "model") -> tuple[TfliteModel, Generated]:
    model = TfliteModel.from_file(testdata / rel)
    return model, generate(model, name, Path(rel).name)


def _inputs(model: TfliteModel, count: int, seed: int = 0) -> np.ndarray:
    graph = model.subgraphs[0]
    shape = graph.tensors[graph.inputs[0]].shape
    return np.random.default_rng(seed).integers(-128, 128, size=(count, *shape), dtype=np.int8)


def _reference(model: TfliteModel, inputs: np.ndarray) -> tuple[str, np.ndarray]:
    from edgeserve.converters.mcu_c.reference import reference_outputs

    return reference_outputs(model.file_bytes, inputs)


@pytest.fixture
def cli():
    from click.testing import CliRunner

    from edgeserve.cli import cli as command

    def run(*args: str):
        return CliRunner().invoke(command, list(args))

    return run


@pytest.mark.parametrize("rel", sorted(MODELS))
def test_generated_c_is_bit_exact_with_the_reference_kernels(testdata, tmp_path, rel):
    require_compiler("host-c")
    model, generated = _generate(testdata, rel)
    directory = _write(generated, tmp_path / "out")
    harness = check.build_host(directory, "model", tmp_path / "harness")
    samples = FEW_SAMPLES.get(rel, SAMPLES)
    inputs = _inputs(model, samples)
    graph = model.subgraphs[0]
    ours = check.run_host(harness, inputs, tuple(graph.tensors[graph.outputs[0]].shape))
    which, reference = _reference(model, inputs)
    assert which == "tflm-reference"  # what the user would otherwise flash (and CMSIS-NN equals)
    # The comparison can fail only if the reference outputs vary with the input.
    assert len(np.unique(reference.reshape(samples, -1), axis=0)) > 1
    np.testing.assert_array_equal(ours, reference.reshape(ours.shape))


def assert_plan_sound(plan: Plan, steps: list, graph, outputs) -> None:
    """Independent of the planner's blocks: each tensor's bytes and the steps it is alive in
    (from its writer to its last reader), and each scratch buffer at its step; no two of them
    alive at one step share a byte, except an in-place step's output and its own input."""
    positions = {s.output: i for i, s in enumerate(steps)}
    last = {}
    for i, s in enumerate(steps):
        for t in s.inputs:
            last[t] = i
    for t in outputs:
        last[t] = len(steps)
    spans = []
    for t, (where, offset) in plan.location.items():
        if where != "arena":
            continue
        first = positions[t]
        # an alias (RESHAPE) shares its source's bytes by design: it is the same tensor
        spans.append((t, offset, offset + graph.tensors[t].nbytes, first, max(last.get(t, first), first)))
    for position in plan.inplace_steps:
        temp = plan.temp_offset(position)
        if temp is not None:
            spans.append((-1 - position, temp, temp + steps[position].inplace.temp_bytes, position, position))
    for position in plan.scratch_steps:
        scratch = plan.scratch_offset(position)
        spans.append((-10_000 - position, scratch, scratch + steps[position].scratch_bytes, position, position))
    aliases = {s.output: s.inputs[0] for s in steps if s.kernel is None}

    def root(t: int) -> int:
        while t in aliases:
            t = aliases[t]
        return t

    pairs = {(plan.inplace_sources[p], steps[p].output) for p in plan.inplace_sources}
    for a in spans:
        assert a[1] % 4 == 0 and a[2] <= plan.arena_bytes, a
        for b in spans:
            if a[0] >= b[0] or root(a[0]) == root(b[0]):
                continue
            live_together = a[3] <= b[4] and b[3] <= a[4]
            overlap = a[1] < b[2] and b[1] < a[2]
            if live_together and overlap:
                # Only an in-place step's output may overlap its own input, at that step.
                assert (root(a[0]), b[0]) in pairs or (root(b[0]), a[0]) in pairs or \
                    (a[0], b[0]) in pairs or (b[0], a[0]) in pairs, (a, b)
                assert min(a[4], b[4]) == max(a[3], b[3]), "in-place tensors overlap beyond the step that hands over"


def test_the_soundness_check_fails_on_a_plan_that_overlaps(testdata):
    """The check above can fail: two tensors alive together moved onto the same bytes."""
    model, generated = _generate(testdata, "mlperf-tiny/kws_ref_model.tflite")
    plan, steps, graph = generated.plan, generated.steps, model.subgraphs[0]
    assert_plan_sound(plan, steps, graph, graph.outputs)
    # A step writing to new bytes whose input is in the arena: its output moved onto that input.
    position = next(p for p, s in enumerate(steps) if s.kernel is not None and p not in plan.inplace_sources
                    and plan.location[s.inputs[0]][0] == "arena")
    moved = {**plan.location, steps[position].output: plan.location[steps[position].inputs[0]]}
    broken = dataclasses.replace(plan, location=moved)
    with pytest.raises(AssertionError):
        assert_plan_sound(broken, steps, graph, graph.outputs)


@pytest.mark.parametrize("rel", sorted(MODELS))
def test_arena_plan_is_sound_and_below_tflm(testdata, rel):
    model, generated = _generate(testdata, rel)
    plan, steps = generated.plan, generated.steps
    graph = model.subgraphs[0]
    assert_plan_sound(plan, steps, graph, graph.outputs)
    head = plan_head(model, pointer_bytes=4).head_bytes
    assert head == MODELS[rel]
    assert plan.lower_bound <= plan.arena_bytes <= head
    if rel.endswith(("kws_ref_model.tflite", "vww_96_int8.tflite", "pretrainedResnet_quant.tflite",
                     "mobilenet_v2_quantized_1x3x224x224.tflite")):
        assert plan.arena_bytes <= 0.85 * head  # the convolutional MLPerf Tiny models


@pytest.mark.parametrize("rel", ["mlperf-tiny/kws_ref_model.tflite", "mlperf-tiny/vww_96_int8.tflite",
                                 "mlperf-tiny/pretrainedResnet_quant.tflite", "tflm/person_detect.tflite"])
def test_generated_kernels_plans_are_sound(testdata, rel):
    """The plans of --kernels generated: streamed pairs written over their inputs' ends, chains
    cut where that shrinks the arena, every generated kernel's scratch."""
    model = TfliteModel.from_file(testdata / rel)
    generated = generate(model, "model", Path(rel).name, kernels="generated")
    graph = model.subgraphs[0]
    assert generated.plan.scratch_steps
    assert_plan_sound(generated.plan, generated.steps, graph, graph.outputs)


def test_mlperf_tiny_arena_figures(testdata):
    """The figures the README quotes."""
    assert _generate(testdata, "mlperf-tiny/kws_ref_model.tflite")[1].plan.arena_bytes == 8_128
    assert _generate(testdata, "mlperf-tiny/vww_96_int8.tflite")[1].plan.arena_bytes == 39_168
    assert _generate(testdata, "mlperf-tiny/pretrainedResnet_quant.tflite")[1].plan.arena_bytes == 33_792


@pytest.mark.parametrize("rel", ["mlperf-tiny/kws_ref_model.tflite", "mlperf-tiny/pretrainedResnet_quant.tflite",
                                 "mlperf-tiny/vww_96_int8.tflite"])
def test_sanitizers_and_region_check_are_clean(testdata, tmp_path, rel):
    require_compiler("host-c")
    model, generated = _generate(testdata, rel)
    directory = _write(generated, tmp_path / "out")
    harness = check.build_host(directory, "model", tmp_path / "asan", sanitize=True)
    graph = model.subgraphs[0]
    check.run_host(harness, _inputs(model, 2), tuple(graph.tensors[graph.outputs[0]].shape))


def test_region_check_catches_a_kernel_reading_outside_its_tensors(testdata, tmp_path):
    """Cut the input region of the last softmax short: the run must stop with a report."""
    require_compiler("host-c")
    model, generated = _generate(testdata, "mlperf-tiny/kws_ref_model.tflite")
    directory = _write(generated, tmp_path / "out")
    source = directory / "model.c"
    text = source.read_text()
    line = re.search(r"  MODEL_REGIONS\((\d+), (\d+), (\d+), (\d+)\);\n  es_softmax", text)
    assert line is not None
    cut = f"  MODEL_REGIONS({line.group(1)}, 1, {line.group(3)}, 1);\n  es_softmax"
    source.write_text(text.replace(line.group(0), cut))
    harness = check.build_host(directory, "model", tmp_path / "asan", sanitize=True)
    with pytest.raises(RuntimeError, match="AddressSanitizer"):
        check.run_host(harness, _inputs(model, 1), (1, 12))


def test_generation_is_deterministic_and_only_needed_kernels_are_copied(testdata):
    _, a = _generate(testdata, "mlperf-tiny/ad01_int8.tflite")
    _, b = _generate(testdata, "mlperf-tiny/ad01_int8.tflite")
    assert a.files == b.files
    assert sorted(p for p in a.files if p.startswith("kernels/")) == [
        "kernels/es_fixedpoint.h", "kernels/es_fully_connected.c", "kernels/es_kernels.h"]
    assert "static const int8_t model_w0[" in a.files["model.c"]  # weights are const: flash


def test_unsupported_operators_are_refused_by_name(testdata):
    model = TfliteModel.from_file(testdata / "tflm/keyword_scrambled.tflite")
    with pytest.raises(UnsupportedOperatorError, match=r"no kernel for SVDF .*-t mcu"):
        generate(model, "m", "keyword_scrambled")


def test_pads_read_only_by_convolutions_are_folded_into_them(testdata):
    model, generated = _generate(testdata, "tflm/mobilenet_v2_quantized_1x3x224x224.tflite")
    ops = [s.op for s in generated.steps]
    assert model.op_counts()["PAD"] == 18 and "PAD" not in ops
    assert generated.plan.arena_bytes == 1_404_928  # the figure docs/mcu-c.md quotes


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    import mcu_c_models

    out = tmp_path_factory.mktemp("mcu_c_synthetic")
    return {kind: mcu_c_models.int8_tflite(kind, out) for kind in ("pad", "act", "move", "prelu", "misc", "resize", "hswish",
                                                                     "tconv", "d2s", "heads")}


@pytest.mark.parametrize("kind", ["pad", "act", "move", "prelu", "misc", "resize", "hswish", "tconv", "d2s"])
def test_every_kernel_is_bit_exact_on_models_built_here(synthetic, tmp_path, kind):
    require_compiler("host-c")
    model = TfliteModel.from_file(synthetic[kind])
    expected = {"pad": {"PAD", "STRIDED_SLICE", "CONCATENATION", "MUL", "ADD", "MAX_POOL_2D", "AVERAGE_POOL_2D"},
                "act": {"LOGISTIC", "TANH", "MEAN", "MUL", "ADD"},
                "move": {"TRANSPOSE", "CONCATENATION", "RESHAPE"},
                "prelu": {"PRELU", "LEAKY_RELU"},
                "misc": {"SUB", "MAXIMUM", "MINIMUM", "RELU", "RELU6"},
                "resize": {"RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"}, "hswish": {"HARD_SWISH"}, "tconv": {"TRANSPOSE_CONV"},
                "d2s": {"DEPTH_TO_SPACE", "SPACE_TO_DEPTH"}}[kind]
    assert expected <= set(model.op_counts())
    generated = generate(model, "model", kind)
    directory = _write(generated, tmp_path / "out")
    harness = check.build_host(directory, "model", tmp_path / "harness")
    # Noise around a level that differs per sample: a global mean of pure noise is nearly
    # the same for every sample, which would make "act" unable to fail.
    rng = np.random.default_rng(1)
    noise = _inputs(model, SAMPLES).astype(np.int32) // 4
    levels = rng.integers(-100, 100, size=(SAMPLES, 1, 1, 1, 1))
    inputs = np.clip(noise + levels, -128, 127).astype(np.int8)
    graph = model.subgraphs[0]
    ours = check.run_host(harness, inputs, tuple(graph.tensors[graph.outputs[0]].shape))
    which, reference = _reference(model, inputs)
    assert which == "tflm-reference"
    assert len(np.unique(reference.reshape(SAMPLES, -1), axis=0)) > 1
    np.testing.assert_array_equal(ours, reference.reshape(ours.shape))


def test_several_outputs_land_back_to_back_in_the_callers_buffer(synthetic, tmp_path):
    require_compiler("host-c")
    model = TfliteModel.from_file(synthetic["heads"])
    graph = model.subgraphs[0]
    sizes = [graph.tensors[t].nbytes for t in graph.outputs]
    assert sorted(sizes) == [3, 256]
    generated = generate(model, "model", "heads")
    header = generated.files["model.h"]
    assert "#define MODEL_OUTPUT_COUNT 2" in header and f"#define MODEL_OUTPUT_BYTES {sum(sizes)}" in header
    assert f"#define MODEL_OUTPUT1_OFFSET {sizes[0]}" in header and "MODEL_OUTPUT1_ZERO_POINT" in header
    assert [o["offset"] for o in generated.summary()["outputs"]] == [0, sizes[0]]
    directory = _write(generated, tmp_path / "out")
    # A level per sample under the noise: the score head averages the whole image, and pure
    # noise averages to nearly the same scores for every sample.
    levels = np.random.default_rng(2).integers(-100, 100, size=(SAMPLES, 1, 1, 1, 1))
    inputs = np.clip(_inputs(model, SAMPLES).astype(np.int32) // 4 + levels, -128, 127).astype(np.int8)
    ours = check.run_host(check.build_host(directory, "model", tmp_path / "harness"), inputs, (sum(sizes),))
    # The reference, output by output (not the concatenation the generated code is compared
    # with in the converter): each slice of the buffer is that output, and each varies.
    from edgeserve.converters.microcontroller import tflm

    runs = tflm.run(model.file_bytes, 1 << 20, [[x] for x in inputs])
    for i, size in enumerate(sizes):
        expected = np.stack([np.asarray(r[i]).reshape(-1) for r in runs])
        assert len(np.unique(expected, axis=0)) > 1
        np.testing.assert_array_equal(ours[:, sum(sizes[:i]): sum(sizes[:i]) + size], expected)
    check.run_host(check.build_host(directory, "model", tmp_path / "asan", sanitize=True), inputs[:3], (sum(sizes),))


def test_lookup_tables_equal_litert_on_all_256_inputs(synthetic):
    """LOGISTIC and TANH tables against LiteRT's own kernels, every int8 input value."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from edgeserve.converters.microcontroller import quant

    path = synthetic["act"]
    model = TfliteModel.from_file(path)
    graph = model.subgraphs[0]
    interpreter = Interpreter(model_path=str(path), experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
                              experimental_preserve_all_tensors=True)
    interpreter.allocate_tensors()
    detail = interpreter.get_input_details()[0]
    rng = np.random.default_rng(0)
    checked = 0
    for op in graph.operators:
        if op.op_name not in ("LOGISTIC", "TANH"):
            continue
        x, y = graph.tensors[op.inputs[0]], graph.tensors[op.outputs[0]]
        table = quant.lookup_table(op.op_name, x.quantization.scale[0], x.quantization.zero_point[0],
                                   y.quantization.scale[0], y.quantization.zero_point[0])
        seen: set[int] = set()
        for _ in range(40):
            interpreter.set_tensor(detail["index"], rng.integers(-128, 128, size=detail["shape"], dtype=np.int8))
            interpreter.invoke()
            xs = interpreter.get_tensor(op.inputs[0]).reshape(-1)
            np.testing.assert_array_equal(table[xs.astype(np.uint8)], interpreter.get_tensor(op.outputs[0]).reshape(-1))
            seen |= set(xs.tolist())
        assert len(seen) == 256  # every input value was compared
        checked += 1
    assert checked == 2


def test_cli_convert_verify_and_tamper(testdata, tmp_path, cli):
    require_compiler("host-c")
    out = tmp_path / "kws"
    result = cli("convert", str(testdata / "mlperf-tiny/kws_ref_model.tflite"), "-t", "mcu-c", "--name", "kws",
                 "-p", "stm32f746-discovery", "-o", str(out), "--json")
    assert result.exit_code == 0, result.output
    entry = next(a for a in json.loads(result.output)["artifacts"] if a["target"] == "mcu-c")
    assert entry["arena_bytes"] == 8_128 and entry["tflm_arena_head_bytes"] == 16_000
    m4 = entry["verification"].get("cortex_m4") or {}
    if "instructions" in m4:  # the time the instructions mean at the profile's 216 MHz, at best
        clock = m4["at_profile_clock"]
        assert clock["freq_mhz"] == 216 and clock["min_ms"] == round(m4["instructions"] / 216e3, 3)
    assert entry["verification"]["bit_exact"] is True and entry["verification"]["samples"] == 50
    header = (out / "mcu-c" / "kws.h").read_text()
    assert "#define KWS_ARENA_BYTES 8128" in header and "int kws_invoke(const int8_t *input, int8_t *output);" in header
    assert cli("verify", str(out)).exit_code == 0
    source = out / "mcu-c" / "kws.c"
    source.write_text(source.read_text().replace("es_softmax(", "es_softmax (", 1))
    failed = cli("verify", str(out))
    assert failed.exit_code != 0 and "kws.c" in failed.output


def _stdout_blocks(command: list[str]) -> bool:
    """Whether QEMU, started paused (-S) with ``command``, left its stdout blocking."""
    qemu = subprocess.Popen([*command, "-S"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        for _ in range(100):  # QEMU sets up its character devices before it waits on -S
            flags = open(f"/proc/{qemu.pid}/fdinfo/1").read().split()[3]
            if qemu.poll() is not None or int(flags, 8) & os.O_NONBLOCK:
                break
            time.sleep(0.05)
        assert qemu.poll() is None, qemu.stderr.read()
        return not int(flags, 8) & os.O_NONBLOCK
    finally:
        qemu.kill()
        qemu.wait()


def test_the_emulated_board_writes_to_a_blocking_stdout(testdata, tmp_path):
    """A non-blocking stdout loses semihosted bytes when its reader falls behind (CI read
    "out ... stack 600"); -nographic, the self-check, does make it non-blocking."""
    require_qemu()
    model, generated = _generate(testdata, "mlperf-tiny/kws_ref_model.tflite")
    image = check.build_cortex_m4(_write(generated, tmp_path / "out"), "model", _inputs(model, 1), tmp_path / "m4")
    ours = check.qemu_command(image)
    assert _stdout_blocks(ours)
    # The same board with -nographic in place of the three device options it replaced.
    options = ours.index("-display")
    assert ours[options:options + 6] == ["-display", "none", "-monitor", "none", "-serial", "none"]
    assert not _stdout_blocks(ours[:options] + ["-nographic"] + ours[options + 6:])


def test_a_garbled_firmware_line_is_one_clear_error():
    printed = check.firmware_lines("out 1 -2 3\nticks 40\nnoise\nstack 600\n")
    assert printed == {"out": [[1, -2, 3]], "ticks": [[40]], "stack": [[600]]}
    with pytest.raises(RuntimeError, match="unexpected firmware output line: 'out 1 -2 3 stack 600'"):
        check.firmware_lines("out 1 -2 3 stack 600\n")
    with pytest.raises(RuntimeError, match="unexpected firmware output line"):
        check.firmware_lines("ticks 40 41\n")


def test_cli_refusal_writes_nothing(testdata, tmp_path, cli):
    out = tmp_path / "lstm"
    result = cli("convert", str(testdata / "tflm/trained_lstm_int8.tflite"), "-t", "mcu-c", "-o", str(out))
    assert result.exit_code != 0
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" in result.output and "-t mcu" in result.output
    assert not out.exists() or not any(out.rglob("*.c"))


def test_firmware_runs_on_an_emulated_cortex_m4(testdata, tmp_path):
    require_qemu()
    model, generated = _generate(testdata, "mlperf-tiny/kws_ref_model.tflite")
    directory = _write(generated, tmp_path / "out")
    inputs = _inputs(model, 3, seed=7)
    image = check.build_cortex_m4(directory, "model", inputs, tmp_path / "m4")
    run = check.run_cortex_m4(image, "model", 12)
    host = check.run_host(check.build_host(directory, "model", tmp_path / "h"), inputs, (1, 12))
    np.testing.assert_array_equal(run.outputs, host.reshape(3, 12))
    assert len(np.unique(host.reshape(3, -1), axis=0)) > 1
    # Deterministic under -icount: the same work costs the same instructions every time.
    assert run.instructions[1] == run.instructions[2] or abs(run.instructions[1] - run.instructions[2]) < 0.01 * run.instructions[1]
    # ../shared/tflm/README.md measured 199 M instructions for TFLM's reference kernels on KWS.
    assert 1_000_000 < run.instructions[-1] < 199_000_000
    assert run.weight_bytes == generated.weight_bytes
    assert 0 < run.code_bytes < 117_000 // 2  # TFLM reference kernels' image: 117 KB with newlib
    # The painted stack: the kernels and newlib's printf used some of it, and far less than
    # the board's RAM (a paint that never happened would read as 0 or as the whole stack).
    assert run.stack_bytes is not None and 256 < run.stack_bytes < 64 * 1024


def test_fit_check_places_the_arena_in_the_fastest_ram_that_holds_it(testdata):
    from edgeserve.converters.mcu_c.converter import fit
    from edgeserve.device_profiles import load_profile

    _, vww = _generate(testdata, "mlperf-tiny/vww_96_int8.tflite")
    _, mbv2 = _generate(testdata, "tflm/mobilenet_v2_quantized_1x3x224x224.tflite")
    h7 = fit(vww, load_profile("stm32h747"))
    assert h7["fits"] and h7["arena_region"] == "dtcm" and h7["arena_in_fastest_region"]  # 40 KB < 128 KB DTCM
    big = fit(mbv2, load_profile("stm32h747"))
    assert big["arena_region"] == "sdram" and not big["arena_in_fastest_region"]  # 1.8 MB: only the SDRAM
    xiao = fit(mbv2, load_profile("seeed-xiao-esp32s3"))
    assert xiao["fits"] and xiao["arena_region"] == "psram"
    assert fit(vww, load_profile("seeed-xiao-esp32s3"))["arena_region"] == "sram"
    apollo = fit(mbv2, load_profile("ambiq-apollo3"))
    assert apollo["fits"] is False and "flash needs" in apollo["problem"] and "RAM needs" in apollo["problem"]
    assert fit(vww, None)["fits"] is None  # no profile: no verdict


def test_a_model_that_does_not_fit_is_refused_before_anything_is_written(testdata, tmp_path, cli):
    out = tmp_path / "apollo"
    result = cli("convert", str(testdata / "mlperf-tiny/vww_96_int8.tflite"), "-t", "mcu-c", "-p", "ambiq-apollo3",
                 "-o", str(out))
    assert result.exit_code == 0, result.output  # 333 KB: fits the Apollo3's 1 MB flash and 384 KB SRAM
    out = tmp_path / "mbv2"
    result = cli("convert", str(testdata / "tflm/mobilenet_v2_quantized_1x3x224x224.tflite"), "-t", "mcu-c",
                 "-p", "ambiq-apollo3", "-o", str(out))
    assert result.exit_code != 0 and "does not fit ambiq-apollo3" in result.output
    assert not out.exists() or not any(out.rglob("*.c"))


@pytest.mark.parametrize("rel", ["tflm/hello_world_int8.tflite", "mlperf-tiny/ad01_int8.tflite"])
def test_no_double_precision_arithmetic_reaches_the_cortex_m4(testdata, tmp_path, rel):
    """A Cortex-M4 has a single-precision FPU only: any double arithmetic in a kernel or the
    generated model would be software floating point (__aeabi_dmul and friends). Every
    object of the build (the model's .c and each kernel it uses) is compiled as the firmware
    is and its undefined symbols read with nm; FULLY_CONNECTED, which once requantized in
    double to follow LiteRT's desktop kernel, is in both models."""
    import shutil
    import subprocess

    require_compiler("arm-c")
    nm = shutil.which("arm-none-eabi-nm")
    if nm is None:
        pytest.skip("arm-none-eabi-nm is not installed")
    model, generated = _generate(testdata, rel)
    assert "FULLY_CONNECTED" in model.op_counts()
    directory = _write(generated, tmp_path / "out")
    sources = [directory / "model.c", *sorted((directory / "kernels").glob("*.c"))]
    from edgeserve.converters.microcontroller.toolchain import find_compiler

    found = {}
    for source in sources:
        obj = tmp_path / f"{source.stem}.o"
        subprocess.run([str(find_compiler("arm-c")), *check.CORTEX_M4_C_FLAGS, f"-I{directory}",
                        f"-I{directory / 'kernels'}", "-c", str(source), "-o", str(obj)], check=True)
        undefined = subprocess.run([nm, "-u", str(obj)], capture_output=True, text=True, check=True).stdout
        found[source.name] = [line.split()[-1] for line in undefined.splitlines() if "__aeabi_d" in line]
    assert "es_fully_connected.c" in found and not any(found.values()), found


def test_the_sanitizer_run_takes_as_many_inputs_as_fit_its_budget_and_at_least_one() -> None:
    """Three inputs for a small model; fewer as the multiply-accumulates grow (the layout
    detector's 3.3 G, the text detector's 627 M: one each); never none."""
    from edgeserve.converters.mcu_c.converter import check_samples

    assert check_samples(10_000_000) == (50, 3, 2)  # KWS-sized: host, sanitizer, Cortex-M4
    assert check_samples(400_000_000)[1] == 2
    assert check_samples(627_177_344)[1] == 1
    assert check_samples(3_304_536_640) == (3, 1, 1)


def test_a_call_entering_a_running_invoke_is_refused_in_debug_builds(testdata, tmp_path):
    """NAME_invoke has one static arena: two callers at once gave wrong outputs (80-99 % with two
    threads; TSan counted 71 races). A debug build (no NDEBUG) returns NAME_ERROR_REENTERED to a
    call that enters while another runs; a release build (-DNDEBUG) has no flag at all. The
    harness includes the generated .c to stand in for the other caller by setting its flag."""
    import subprocess

    require_compiler("host-c")
    model, generated = _generate(testdata, "tflm/hello_world_int8.tflite", "hw")
    folder = _write(generated, tmp_path / "hw")
    assert "#define HW_ERROR_REENTERED (-4)" in generated.files["hw.h"]
    assert "One caller at a time" in generated.files["hw.h"]
    harness = folder / "reentry.c"
    harness.write_text(
        '#include <stdio.h>\n#include "hw.c"\n'
        "int main(void) {\n  int8_t in[HW_INPUT_BYTES] = {0}, out[HW_OUTPUT_BYTES];\n"
        "#ifndef NDEBUG\n  hw_running = 1;  /* another caller is inside */\n"
        '  printf("%d ", hw_invoke(in, out));\n  hw_running = 0;\n#endif\n'
        '  printf("%d\\n", hw_invoke(in, out));\n  return 0;\n}\n')
    sources = [str(harness), *[str(p) for p in (folder / "kernels").glob("*.c")]]
    said = {}
    for build, flags in (("debug", []), ("release", ["-DNDEBUG"])):
        exe = folder / f"reentry_{build}"
        subprocess.run(["gcc", *check.HOST_FLAGS, *flags, f"-I{folder}", f"-I{folder / 'kernels'}", *sources,
                        "-o", str(exe)], check=True, capture_output=True, text=True)
        said[build] = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    assert said == {"debug": ["-4", "0"], "release": ["0"]}


def test_asan_without_room_under_an_address_space_limit_is_not_a_kernel_finding(testdata, tmp_path):
    """ASan that cannot map its shadow memory (ulimit -v) was reported as "a kernel read or wrote
    outside its tensors". Run here under a real limit: the note says it could not run, and a
    real finding (a region cut short, below) is still a finding."""
    import resource
    import subprocess

    require_compiler("host-c")
    model, generated = _generate(testdata, "tflm/hello_world_int8.tflite", "hw")
    folder = _write(generated, tmp_path / "hw")
    exe = check.build_host(folder, "hw", tmp_path / "asan", sanitize=True)

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # 2 GB: ASan asks for terabytes

    done = subprocess.run([str(exe), "1", "0"], input=bytes(_inputs(model, 1).tobytes()), capture_output=True,
                          preexec_fn=limited, timeout=60)
    assert done.returncode != 0
    said = check.sanitizer_could_not_run(done.stderr.decode("utf-8", "replace"))
    assert said is not None and said.startswith("not run: AddressSanitizer could not start here"), done.stderr[-600:]
    finding = "==1==ERROR: AddressSanitizer: use-after-poison on address 0x6020 at pc 0x55 bp 0x7ff sp 0x7ff"
    assert check.sanitizer_could_not_run(finding) is None
