"""`-t mcu-c --kernels generated`: int8 convolutions written for each layer (1x1, depthwise,
and the rest through a column: es_pointwise.h, es_depthwise.h, es_conv_im2col.h).

Checked against independent references:
- the one-multiply requantization (es_dsp.h) against TFLM's double rounding
  (quant.mul_by_quantized_multiplier, written from TFLite's definition) on every channel of
  the generated layers of three MLPerf Tiny / TFLM models, ties and range ends included;
- each build's outputs against TFLM's reference kernels (the tflite-micro interpreter) on 50
  random inputs, on the host (es_dsp.h's C path), and on the emulated Cortex-M4 (its DSP
  instructions) against the host's; an intermediate tensor where the output barely varies;
- the per-operator instruction counts against CMSIS-NN's on the same layers, same board;
- a generated kernel broken on purpose (one requantization constant, the weights' lane
  order) is caught by the same comparison;
- AddressSanitizer, UBSan and the per-kernel region check on a model whose 1x1 layers run in
  place and whose channels include ones that are constant.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgeserve.converters.mcu_c import check, specialise
from edgeserve.converters.mcu_c.cmsis_nn_tree import locate
from edgeserve.converters.mcu_c.generate import Generated, generate
from edgeserve.converters.microcontroller import quant
from edgeserve.tflite.model import TfliteModel
from conftest import ROOT
from generated_c import random_inputs, write_files
from tools_required import require_compiler, require_qemu

SAMPLES = 50
KWS = "mlperf-tiny/kws_ref_model.tflite"
VWW = "mlperf-tiny/vww_96_int8.tflite"
PERSON = "tflm/person_detect.tflite"
RESNET = "mlperf-tiny/pretrainedResnet_quant.tflite"


def _host_outputs(generated: Generated, directory: Path, inputs: np.ndarray, cmsis_nn: Path | None = None,
                  shape: tuple[int, ...] | None = None) -> np.ndarray:
    harness = check.build_host(write_files(generated, directory), generated.name, directory / "harness", cmsis_nn=cmsis_nn)
    return check.run_host(harness, inputs, shape or (generated.output_bytes,))


def _requantize_like_es_dsp(acc: np.ndarray, q: np.ndarray, act_min: int, act_max: int) -> np.ndarray:
    """es_requantize_q in exact integers: SMMLAR(2 acc, M, Cc + (acc >> 31)) >> e, saturated."""
    _, m, cc, e = (int(v) for v in q)
    acc = acc.astype(np.int64)
    high = ((cc + (acc >> 31)) * (1 << 32) + 2 * acc * m + (1 << 31)) >> 32
    return np.clip(np.clip(high >> e, -128, 127), act_min, act_max)


@pytest.mark.parametrize("rel", [KWS, VWW, PERSON, RESNET, "mlperf-tiny/ad01_int8.tflite"])
def test_the_one_multiply_requantization_is_tflms_on_every_channel(testdata, rel):
    model = TfliteModel.from_file(testdata / rel)
    from edgeserve.converters.mcu_c.lower import Lowering

    rng = np.random.default_rng(3)
    checked = constant_channels = 0
    for step in Lowering(model).steps():
        kernel = specialise.kernel_for(step)
        if kernel is None:
            continue
        planned = specialise.plan(step, kernel)
        assert isinstance(planned, specialise.Channels), planned
        p = step.params
        weights = planned.weights
        tflm_bias = specialise._folded_bias(step, weights)  # what TFLM's accumulator adds to sum(w * x)
        lo, hi = specialise.accumulator_range(weights, tflm_bias)
        multipliers, shifts = specialise.channel_multipliers(step)
        for c in range(len(weights)):
            # Each channel's whole accumulator range: its ends, random values, and the values
            # around every tie of the final rounding the range holds near zero.
            accs = np.concatenate([[lo[c], hi[c]], rng.integers(lo[c], hi[c] + 1, 2000),
                                   np.arange(max(lo[c], -3000), min(hi[c], 3000) + 1)])
            want = np.clip(quant.mul_by_quantized_multiplier(accs, int(multipliers[c]), int(shifts[c]))
                           + p["out_offset"], p["act_min"], p["act_max"])
            q = planned.table[c]
            if q[1] == 0:  # a constant channel: the generated kernel starts its accumulator from 0
                constant_channels += 1
                assert len(np.unique(want)) == 1
                got = _requantize_like_es_dsp(accs - tflm_bias[c], q, p["act_min"], p["act_max"])
            else:
                assert q[0] == tflm_bias[c]
                got = _requantize_like_es_dsp(accs, q, p["act_min"], p["act_max"])
            np.testing.assert_array_equal(got, want, err_msg=f"operator {step.index}, channel {c}")
            checked += 1
    assert checked >= 346  # KWS 588 channels, ResNet-8 346, AD01 1,416, VWW and person_detect over 3,000
    if rel == VWW:
        assert constant_channels > 0  # VWW's zero multipliers and 27-31-bit shifts


def test_the_identity_needs_its_sign_term():
    """Without the (acc >> 31) term the formula rounds negative ties the wrong way: the check
    above can tell the difference."""
    acc = np.arange(-3000, 3001)
    m, e, zp = (1 << 30) + 12345, 4, -3
    want = quant.mul_by_quantized_multiplier(acc, m, -e) + zp
    cc = (1 << (e - 1)) + zp * (1 << e)
    without = (((cc * (1 << 32) + 2 * acc.astype(np.int64) * m + (1 << 31)) >> 32) >> e)
    assert np.any(without != want)
    np.testing.assert_array_equal(_requantize_like_es_dsp(acc, np.array([0, m, cc, e]), -128, 127),
                                  np.clip(want, -128, 127))


@pytest.mark.parametrize("rel, library", [(KWS, False), (PERSON, False), (VWW, True), (RESNET, False),
                                          ("mlperf-tiny/str_ww_ref_model.tflite", False),
                                          ("mlperf-tiny/ad01_int8.tflite", False)])
def test_generated_kernels_are_bit_exact_with_tflm_on_the_host(testdata, cmsis_nn_dir, tmp_path, rel, library):
    require_compiler("host-c")
    from edgeserve.converters.mcu_c.reference import reference_outputs

    model = TfliteModel.from_file(testdata / rel)
    tree = locate(cmsis_nn_dir) if library else None
    generated = generate(model, "model", Path(rel).name, cmsis_nn=tree, kernels="generated")
    on = [c for c in generated.choices if c.library == "generated"]
    assert on and not generated.not_generated
    assert {c.op for c in on} <= {"CONV_2D", "DEPTHWISE_CONV_2D", "CONV_2D+DEPTHWISE_CONV_2D", "FULLY_CONNECTED"}
    inputs = random_inputs(model, SAMPLES)
    ours = _host_outputs(generated, tmp_path / "out", inputs, cmsis_nn_dir if library else None)
    which, reference = reference_outputs(model.file_bytes, inputs)
    assert which == "tflm-reference" and len(np.unique(reference.reshape(SAMPLES, -1), axis=0)) > 1
    np.testing.assert_array_equal(ours, reference.reshape(ours.shape))


def test_an_intermediate_tensor_of_vww_is_bit_exact(testdata, tmp_path):
    """VWW's two-class output takes few values; the output of its seventh 1x1 layer (128
    channels, some of them constant) varies in every element."""
    require_compiler("host-c")
    from edgeserve.converters.mcu_c.reference import reference_tensor

    model = TfliteModel.from_file(testdata / VWW)
    tensor = next(op.outputs[0] for op in model.subgraphs[0].operators if op.index == 14)
    generated = generate(model, "model", "vww", output_tensor=tensor, kernels="generated")
    inputs = random_inputs(model, 8, seed=2)
    shape = tuple(model.subgraphs[0].tensors[tensor].shape)
    ours = _host_outputs(generated, tmp_path / "out", inputs, shape=shape)
    reference = reference_tensor(model.file_bytes, inputs, tensor)
    assert len(np.unique(reference)) > 100
    np.testing.assert_array_equal(ours, reference.reshape(ours.shape))
    # The same bytes with no layer streamed (the first expanding 1x1 is, above).
    assert any(s.op == "CONV_2D+DEPTHWISE_CONV_2D" for s in generated.steps)
    whole = generate(model, "model", "vww", output_tensor=tensor, kernels="generated", streaming=False)
    assert not any(s.op == "CONV_2D+DEPTHWISE_CONV_2D" for s in whole.steps)
    np.testing.assert_array_equal(_host_outputs(whole, tmp_path / "whole", inputs, shape=shape), ours)


@pytest.fixture(scope="module")
def built_here(tmp_path_factory):
    """A Keras model with what the generated kernels must handle (odd pixel and channel counts,
    stride 2, a 5x5 depthwise, a ReLU6 clamp, a 1x1 of 7 input channels, a depthwise of 6) and
    a fully connected layer they must refuse (6 inputs)."""
    import mcu_c_models

    return mcu_c_models.int8_tflite("generated", tmp_path_factory.mktemp("generated_model"))


def test_a_model_built_here_runs_the_same_on_the_host_and_the_cortex_m4(built_here, tmp_path):
    require_compiler("host-c")
    require_qemu()
    from edgeserve.converters.mcu_c.reference import reference_outputs

    model = TfliteModel.from_file(built_here)
    generated = generate(model, "model", "generated", kernels="generated")
    on = {(c.op, c.index) for c in generated.choices if c.library == "generated"}
    # The first 3x3 convolution, four depthwise layers (one 5x5, one of 6 channels), the three
    # 1x1s (the one of 7 input channels through a column, in place), a 5x5 convolution in place
    # through a ring of rows, a 1x1 streamed into a stride-2 depthwise, and a fully connected
    # layer of 9 rows
    assert len(on) == 11
    assert any(op == "FULLY_CONNECTED" for op, _ in on)
    assert any(generated.steps[c.position].op == "DEPTHWISE_CONV_2D" and generated.steps[c.position].params["in_c"] == 6
               for c in generated.choices if c.library == "generated")
    assert any(generated.steps[i].op == "CONV_2D" and generated.steps[i].params["k_h"] == 5
               for i in generated.plan.inplace_sources)
    assert any(generated.steps[i].params["in_c"] == 7 for i in generated.plan.inplace_sources)
    # The stride-2 depthwise writes over its input from the end, last pixel first.
    assert any(generated.steps[i].op == "DEPTHWISE_CONV_2D" and generated.steps[i].params["stride_h"] == 2
               and generated.plan.location[generated.steps[i].output][1] >
               generated.plan.location[source][1] for i, source in generated.plan.inplace_sources.items())
    # The streamed pair writes over its input's end, last row first.
    assert any(generated.steps[i].op == "CONV_2D+DEPTHWISE_CONV_2D" and
               generated.plan.location[generated.steps[i].output][1] > generated.plan.location[source][1]
               for i, source in generated.plan.inplace_sources.items())
    assert set(generated.not_generated.values()) == {"6 input channels (the generated kernels read them four at a time)"}
    rng = np.random.default_rng(1)
    levels = rng.integers(-100, 100, size=(SAMPLES, 1, 1, 1, 1))
    inputs = np.clip(random_inputs(model, SAMPLES).astype(np.int32) // 4 + levels, -128, 127).astype(np.int8)
    ours = _host_outputs(generated, tmp_path / "out", inputs)
    which, reference = reference_outputs(model.file_bytes, inputs)
    assert which == "tflm-reference" and len(np.unique(reference.reshape(SAMPLES, -1), axis=0)) > 1
    np.testing.assert_array_equal(ours, reference.reshape(ours.shape))
    # Every kernel variant above under AddressSanitizer, UBSan and the region check.
    sanitized = check.build_host(tmp_path / "out", "model", tmp_path / "asan", sanitize=True)
    np.testing.assert_array_equal(check.run_host(sanitized, inputs[:4], (generated.output_bytes,)), ours[:4])
    # The board runs the DSP instructions (SXTB16, SMLAD, SMLABB/SMLATT, SMMLAR, SSAT) the
    # host's C stands in for.
    image = check.build_cortex_m4(tmp_path / "out", "model", inputs[:3], tmp_path / "m4")
    np.testing.assert_array_equal(check.run_cortex_m4(image, "model", generated.output_bytes).outputs,
                                  ours[:3].reshape(3, -1))
    disassembly = subprocess.run(["arm-none-eabi-objdump", "-d", str(image)], capture_output=True, text=True,
                                 check=True).stdout
    assert all(f"\t{instruction}\t" in disassembly for instruction in ("smlad", "smlabb", "smmlar", "ssat"))


def test_int8_weights_halve_the_generated_flash_and_stay_bit_exact(testdata, tmp_path):
    """Every 1x1, column and fully connected layer of VWW reading int8 weights (widened in the loop) instead of
    int16: the same bytes as TFLM on the host, and as the host on the board."""
    require_compiler("host-c")
    require_qemu()
    from edgeserve.converters.mcu_c.reference import reference_tensor

    model = TfliteModel.from_file(testdata / VWW)
    wide = generate(model, "model", "vww", kernels="generated")
    narrow = specialise.narrowing(wide.steps, 10**9)  # more than any model saves: every layer that can
    assert len(narrow) == 15 and specialise.narrowing(wide.steps, 1) == narrow[:1]
    tensor = next(op.outputs[0] for op in model.subgraphs[0].operators if op.index == 14)
    generated = generate(model, "model", "vww", output_tensor=tensor, kernels="generated", int8_weights=narrow)
    assert generated.int8_weights == tuple(sorted(narrow))
    assert generated.weight_bytes < 0.6 * wide.weight_bytes
    inputs = random_inputs(model, 4, seed=7)
    shape = tuple(model.subgraphs[0].tensors[tensor].shape)
    ours = _host_outputs(generated, tmp_path / "out", inputs, shape=shape)
    np.testing.assert_array_equal(ours, reference_tensor(model.file_bytes, inputs, tensor).reshape(ours.shape))
    image = check.build_cortex_m4(tmp_path / "out", "model", inputs[:2], tmp_path / "m4")
    np.testing.assert_array_equal(check.run_cortex_m4(image, "model", generated.output_bytes).outputs,
                                  ours[:2].reshape(2, -1))


@pytest.mark.parametrize("breakage", ["requantization constant", "weight lane order"])
def test_a_wrong_generated_kernel_is_caught(testdata, tmp_path, breakage):
    """The comparison that stands behind every generated layer fails when one is wrong."""
    require_compiler("host-c")
    from edgeserve.converters.mcu_c.reference import reference_outputs

    model = TfliteModel.from_file(testdata / KWS)
    generated = generate(model, "model", "kws", kernels="generated")
    text = generated.files["model.c"]
    if breakage == "requantization constant":  # channel 0's Cc of the first 1x1: every output one step up
        match = re.search(r"static const int32_t model_q2\[\d+\] = \{\n  (-?\d+), (-?\d+), (-?\d+), (\d+),", text)
        assert match is not None
        bias, m, cc, e = (int(match.group(i)) for i in range(1, 5))
        broken = match.group(0).replace(f"{cc}, {e},", f"{cc + (1 << e)}, {e},")
    else:  # the first weight words of the first depthwise layer, swapped
        match = re.search(r"static const int32_t model_v1\[\d+\] = \{\n  (-?\d+), (-?\d+),", text)
        assert match is not None and match.group(1) != match.group(2)
        broken = match.group(0)[:-len(f"{match.group(1)}, {match.group(2)},")] + f"{match.group(2)}, {match.group(1)},"
    generated.files["model.c"] = text.replace(match.group(0), broken, 1)
    inputs = random_inputs(model, SAMPLES)
    ours = _host_outputs(generated, tmp_path / "out", inputs)
    _, reference = reference_outputs(model.file_bytes, inputs)
    assert not np.array_equal(ours, reference.reshape(ours.shape))


def _overwrites_a_read(p: dict, backward: bool) -> bool:
    """Whether es_depthwise_s8 in place (no ring) would read a pixel an output has already
    overwritten: simulated pixel by pixel, the output at the input's start (forward) or end
    (backward, last pixel first)."""
    in_pixels, out_pixels = p["in_h"] * p["in_w"], p["out_h"] * p["out_w"]
    start = in_pixels - out_pixels if backward else 0
    written = set()
    order = range(out_pixels - 1, -1, -1) if backward else range(out_pixels)
    for pixel in order:
        oy, ox = divmod(pixel, p["out_w"])
        for ky in range(p["k_h"]):
            for kx in range(p["k_w"]):
                y, x = oy * p["stride_h"] - p["pad_h"] + ky, ox * p["stride_w"] - p["pad_w"] + kx
                if 0 <= y < p["in_h"] and 0 <= x < p["in_w"] and y * p["in_w"] + x in written:
                    return True
        written.add(start + pixel)  # read before written: a pixel may overwrite its own input
    return False


def test_the_in_place_depthwise_rules_agree_with_a_simulation():
    """specialise's rules for writing a depthwise output over its input, against simulating
    the kernel's order on every small shape: never in place where a read would be overwritten."""
    cases = allowed = 0
    for size, k, stride, pad in itertools.product(range(5, 10), (3, 5), (1, 2), (0, 1, 2)):
        out = (size + 2 * pad - k) // stride + 1
        p = dict(in_h=size, in_w=size, out_h=out, out_w=out, stride_h=stride, stride_w=stride, pad_h=pad,
                 pad_w=pad, k_h=k, k_w=k)
        for backward, rule in ((False, specialise.reads_ahead_of_writes), (True, specialise.reads_behind_writes)):
            cases += 1
            if rule(p):
                allowed += 1
                assert not _overwrites_a_read(p, backward), (p, backward)
    assert cases == 120 and 0 < allowed < cases  # stride 1 with padding is refused; stride 2 allowed
    # The simulation finds the hazard a refused shape has (so the agreement above can fail).
    same = dict(in_h=8, in_w=8, out_h=8, out_w=8, stride_h=1, stride_w=1, pad_h=1, pad_w=1, k_h=3, k_w=3)
    assert not specialise.reads_ahead_of_writes(same) and _overwrites_a_read(same, backward=False)


def _stream_overwrites_a_read(p: dict, q: dict, last_row_first: bool) -> bool:
    """Whether es_stream.h in place would read an input row after an output row has written
    over it: simulated byte by byte in the kernel's order, the output at the input's start
    (first row first) or end (last row first)."""
    in_row, out_row = p["in_w"] * p["in_c"], q["out_w"] * q["out_c"]
    start = p["in_h"] * in_row - q["out_h"] * out_row if last_row_first else 0
    written: set[int] = set()
    computed: set[int] = set()
    for oy in (range(q["out_h"] - 1, -1, -1) if last_row_first else range(q["out_h"])):
        y0 = oy * q["stride_h"] - q["pad_h"]
        for y in sorted((y for y in range(y0, y0 + q["k_h"]) if 0 <= y < p["in_h"] and y not in computed),
                        reverse=last_row_first):
            if written & set(range(y * in_row, (y + 1) * in_row)):
                return True
            computed.add(y)
        written |= set(range(start + oy * out_row, start + (oy + 1) * out_row))
    return False


def test_the_in_place_stream_rules_agree_with_a_simulation():
    """specialise's rules for writing a streamed pair's output over its input, both directions,
    against simulating es_stream.h's order on small shapes."""
    cases = allowed = 0
    for size, k, pad, c_in, mid in itertools.product(range(5, 10), (3, 5), (0, 1, 2), (2, 4), (4, 8, 16)):
        out = (size + 2 * pad - k) // 2 + 1
        p = dict(in_h=size, in_w=size, in_c=c_in)
        q = dict(out_h=out, out_w=out, out_c=mid, stride_h=2, pad_h=pad, k_h=k)
        for last_row_first in (False, True):
            cases += 1
            if specialise._stream_in_place(p, q, last_row_first):
                allowed += 1
                assert not _stream_overwrites_a_read(p, q, last_row_first), (p, q, last_row_first)
    assert cases == 360 and 0 < allowed < cases
    # The simulation finds the hazard a refused shape has (so the agreement above can fail):
    # four times the channels, first row first, overwrites rows still to be read.
    wide = (dict(in_h=9, in_w=9, in_c=2), dict(out_h=5, out_w=5, out_c=16, stride_h=2, pad_h=1, k_h=3))
    assert not specialise._stream_in_place(*wide) and _stream_overwrites_a_read(*wide, last_row_first=False)
    # and last row first, a padding of two writes the top output row over input rows still to be read.
    padded = (dict(in_h=9, in_w=9, in_c=4), dict(out_h=6, out_w=6, out_c=8, stride_h=2, pad_h=2, k_h=3))
    assert not specialise._stream_in_place(*padded, last_row_first=True)
    assert _stream_overwrites_a_read(*padded, last_row_first=True)


def test_sanitizers_and_region_check_run_clean_with_generated_kernels(testdata, tmp_path):
    require_compiler("host-c")
    model = TfliteModel.from_file(testdata / VWW)
    generated = generate(model, "model", "vww", kernels="generated")
    # 1x1 layers in place, each with its own scratch, and constant channels.
    assert any(s.library_call and s.scratch_bytes for s in generated.steps)
    assert any(generated.steps[i].library_call for i in generated.plan.inplace_sources)
    # Four expanding 1x1s could stream into the stride-2 depthwise after them; only the first,
    # whose 36,864-byte output is the network's largest tensor, lowers the arena so, and only
    # it is streamed.
    records = generated.summary()["generated_kernels"]["streamed"]
    assert [(r["conv"], r["tensor_bytes"], r["streamed"], r["recomputed_macs"]) for r in records] == [
        (2, 36_864, True, 0), (6, 18_432, False, 0), (10, 9_216, False, 0), (22, 4_608, False, 0)]
    assert all(r["arena_bytes_whole"] > r["arena_bytes"] for r in records if r["streamed"])
    assert all(r["arena_bytes_whole"] <= r["arena_bytes"] for r in records if not r["streamed"])
    # It writes over its input's end, last row first; the arena well below the portable C's
    # (20,768 against 39,168 B when measured)
    streamed = [i for i, s in enumerate(generated.steps) if s.op == "CONV_2D+DEPTHWISE_CONV_2D"]
    assert len(streamed) == 1
    assert all(generated.plan.location[generated.steps[i].output][1] >
               generated.plan.location[generated.plan.inplace_sources[i]][1] for i in streamed)
    assert generated.plan.arena_bytes < 0.6 * generate(model, "model", "vww").plan.arena_bytes
    directory = write_files(generated, tmp_path / "out")
    inputs = random_inputs(model, 2)
    sanitized = check.build_host(directory, "model", tmp_path / "asan", sanitize=True)
    plain = check.build_host(directory, "model", tmp_path / "plain")
    np.testing.assert_array_equal(check.run_host(sanitized, inputs, (generated.output_bytes,)),
                                  check.run_host(plain, inputs, (generated.output_bytes,)))


def test_a_stream_written_over_its_input_first_row_first_is_bit_exact(testdata, tmp_path, monkeypatch):
    """es_stream.h's other order: with the last-row-first rule refused, VWW's streamed pair
    writes over its input from the start, first row first; under the sanitizers and the region
    check, the bytes equal TFLM's."""
    require_compiler("host-c")
    from edgeserve.converters.mcu_c.reference import reference_tensor

    rule = specialise._stream_in_place
    monkeypatch.setattr(specialise, "_stream_in_place",
                        lambda p, q, last_row_first=False: not last_row_first and rule(p, q))
    model = TfliteModel.from_file(testdata / VWW)
    tensor = next(op.outputs[0] for op in model.subgraphs[0].operators if op.index == 14)
    generated = generate(model, "model", "vww", output_tensor=tensor, kernels="generated")
    forward = [i for i, source in generated.plan.inplace_sources.items()
               if generated.steps[i].op == "CONV_2D+DEPTHWISE_CONV_2D"
               and generated.plan.location[generated.steps[i].output] == generated.plan.location[source]]
    assert forward
    directory = write_files(generated, tmp_path / "out")
    inputs = random_inputs(model, 4, seed=3)
    shape = tuple(model.subgraphs[0].tensors[tensor].shape)
    sanitized = check.build_host(directory, "model", tmp_path / "asan", sanitize=True)
    ours = check.run_host(sanitized, inputs, shape)
    np.testing.assert_array_equal(ours, reference_tensor(model.file_bytes, inputs, tensor).reshape(ours.shape))


def test_on_the_cortex_m4_each_generated_layer_takes_fewer_instructions_than_cmsis_nn(testdata, cmsis_nn_dir,
                                                                                      tmp_path):
    """KWS with CMSIS-NN for the other layers, against the same C calling CMSIS-NN for all:
    operator by operator (SysTick after each), on the same input. Instruction counts under
    -icount are deterministic: a count, not a time."""
    require_qemu()
    model = TfliteModel.from_file(testdata / KWS)
    tree = locate(cmsis_nn_dir)
    inputs = random_inputs(model, 1, seed=5)
    runs = {}
    for kernels in ("portable", "generated"):
        generated = generate(model, "model", "kws", cmsis_nn=tree, kernels=kernels)
        directory = write_files(generated, tmp_path / kernels)
        image = check.build_cortex_m4(directory, "model", inputs, tmp_path / f"m4_{kernels}", cmsis_nn=cmsis_nn_dir,
                                      checks=False, step_ticks=True)
        runs[kernels] = (generated, check.run_cortex_m4(image, "model", generated.output_bytes))
    base, (ours, run) = runs["portable"][1], runs["generated"]
    np.testing.assert_array_equal(run.outputs, base.outputs)
    assert [op for op, _ in run.step_instructions] == [s.index for s in ours.steps if s.kernel is not None]
    # The per-operator counts add up to the whole inference, less the harness's own reads.
    assert 0 < run.instructions[-1] - sum(t for _, t in run.step_instructions) < 2000
    cmsis = dict(base.step_instructions)
    generated_ops = {c.index for c in ours.choices if c.library == "generated"}
    assert len(generated_ops) == 10  # nine convolutions and the fully connected layer
    for op, instructions in run.step_instructions:
        if op in generated_ops:
            assert instructions < 0.8 * cmsis[op], (op, instructions, cmsis[op])
    # The goal for KWS: at most 0.60x TFLM + CMSIS-NN's instructions (measured 0.49x
    # of this same C calling CMSIS-NN everywhere, which is within 0.1 % of TFLM + CMSIS-NN).
    assert run.instructions[-1] < 0.6 * base.instructions[-1]


def test_the_cli_writes_and_verifies_generated_kernels(testdata, tmp_path):
    require_compiler("host-c")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "edgeserve", "convert", str(testdata / KWS), "-t", "mcu-c",
                           "--kernels", "generated", "-o", str(out), "--json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    entry = next(a for a in json.loads(done.stdout)["artifacts"] if a["target"] == "mcu-c")
    assert entry["generated_kernels"] == {"layers": 10, "of": 12, "not_generated": {}, "int8_weights": [],
                                          "streamed": [], "kernels": ["es_conv_im2col_s8", "es_depthwise_s8", "es_fully_connected_s8",
                                                      "es_pointwise_s8"]}
    assert entry["verification"]["bit_exact"] and entry["verification"]["sanitizers"]["ok"]
    source = (out / "mcu-c" / "kws_ref_model.c").read_text()
    assert '#include "es_pointwise.h"' in source and "ES_LAYER void kws_ref_model_g2(" in source
    again = subprocess.run([sys.executable, "-m", "edgeserve", "verify", str(out)], capture_output=True, text=True)
    assert again.returncode == 0 and "regenerated files are byte-identical: yes" in again.stdout, again.stdout


def test_a_profile_whose_flash_cannot_hold_int16_weights_gets_int8_ones(testdata, tmp_path):
    require_compiler("host-c")
    board = (ROOT / "profiles" / "stm32f746-discovery.toml").read_text()
    small = tmp_path / "small-flash.toml"  # KWS generated: 52.5 KB of int16 weights and the code do not fit
    small.write_text(re.sub(r"(?m)^flash_bytes = .*$", "flash_bytes = 60000", board).replace(
        'name = "stm32f746-discovery"', 'name = "small-flash"'))
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "edgeserve", "convert", str(testdata / KWS), "-t", "mcu-c",
                           "--kernels", "generated", "-p", str(small), "-o", str(out), "--json"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    entry = next(a for a in json.loads(done.stdout)["artifacts"] if a["target"] == "mcu-c")
    narrow = entry["generated_kernels"]["int8_weights"]
    assert narrow and entry["fits"] is True and entry["verification"]["bit_exact"]
    assert entry["weight_bytes"] < 52_533 and entry["generated_kernels"]["layers"] == 10
    assert 11 in narrow  # the fewest uses per weight first: the fully connected layer (one row) among them
    again = subprocess.run([sys.executable, "-m", "edgeserve", "verify", str(out)], capture_output=True, text=True)
    assert again.returncode == 0 and "regenerated files are byte-identical: yes" in again.stdout, again.stdout
