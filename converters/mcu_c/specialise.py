"""`-t mcu-c --kernels generated`: layers whose kernel is written for their own shapes.

Four kinds of int8 layer become a small function of the generated file that calls a kernel
of firmware/kernels with the layer's sizes as constants (always inlined, so every loop
bound is a constant), with the weights widened to int16 lane pairs offline and the input
zero point folded into the bias:

- a pointwise CONV_2D (1x1, stride 1, unpadded, one image): es_pointwise.h;
- a DEPTHWISE_CONV_2D up to 5x5 (depth multiplier 1, no dilation, one image): es_depthwise.h;
- any other CONV_2D (no dilation, no groups, one image), and a DEPTHWISE_CONV_2D of one input
  channel (which is one): es_conv_im2col.h;
- a FULLY_CONNECTED (symmetric weights, inputs a multiple of four): es_gemv.h.

A generated 1x1 whose output only a following generated depthwise of stride > 1 reads may be
streamed into it (es_stream.h): one step, the 1x1's output kept as a ring of rows.

Requantization is es_dsp.h's single multiply (docs/plans/issue-51.md, 4a), exact only under
conditions checked here per layer; a layer that misses one keeps the kernel it had, and the
reason is recorded. Everything is meant to be bit-exact with TFLM's reference kernels, and is
checked that way: the mcu-c tests compare each build's outputs with the tflite-micro
interpreter's, on the host and on the emulated Cortex-M4.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Sequence

import numpy as np

from edgeserve.converters.mcu_c.steps import ConstArray, InPlace, LibraryCall, Step
from edgeserve.converters.microcontroller import quant

LIBRARY = "generated"
POINTWISE = "es_pointwise_s8"
DEPTHWISE = "es_depthwise_s8"
MAX_DEPTHWISE_K = 5  # es_depthwise.h's ES_DEPTHWISE_MAX_K
MAX_RING_K = 7  # es_conv_im2col.h's ES_IM2COL_RING_MAX_K
IM2COL = "es_conv_im2col_s8"
STREAM = "es_pointwise_depthwise_s8"
FULLY_CONNECTED = "es_fully_connected_s8"
HEADERS = {POINTWISE: "es_pointwise.h", DEPTHWISE: "es_depthwise.h", IM2COL: "es_conv_im2col.h",
           STREAM: "es_stream.h", FULLY_CONNECTED: "es_gemv.h"}
# The headers each kernel's header includes, copied beside it too.
INCLUDES = {POINTWISE: ("es_dsp.h",), DEPTHWISE: ("es_dsp.h",), IM2COL: ("es_pointwise.h", "es_dsp.h"),
            STREAM: ("es_depthwise.h", "es_pointwise.h", "es_dsp.h"), FULLY_CONNECTED: ("es_pointwise.h", "es_dsp.h")}
# es_requantize_q's operands stay exact in int64 (es_dsp.h's C path) and in SMMLAR's 64-bit
# sum on the board: |2 acc * M| < 2^61 and |Cc| < 2^28.
ACC_LIMIT = 1 << 29
MAX_SHIFT = 20


def kernel_for(step: Step) -> str | None:
    """The generated kernel this step's shape calls for, if any (before the per-channel checks)."""
    p = step.params
    if step.library_call is None and step.op == "FULLY_CONNECTED" and step.kernel == "es_fully_connected" \
            and p["filter_offset"] == 0:
        return FULLY_CONNECTED
    if step.library_call is not None or p.get("batches") != 1:
        return None
    if step.op not in ("CONV_2D", "DEPTHWISE_CONV_2D") or (p["dil_h"], p["dil_w"]) != (1, 1):
        return None
    if step.op == "CONV_2D" and step.kernel == "es_conv2d" and p["k_c"] == p["in_c"]:
        # A 1x1 whose pixels are not whole words (42 channels) gathers them into a column.
        return POINTWISE if _pointwise_shape(p) and p["in_c"] % 4 == 0 else IM2COL
    if step.op == "DEPTHWISE_CONV_2D" and step.kernel == "es_depthwise_conv2d":
        if p["in_c"] == 1:  # each output channel sees the one input channel: a convolution
            return IM2COL
        if p["depth_multiplier"] == 1 and max(p["k_h"], p["k_w"]) <= MAX_DEPTHWISE_K:
            return DEPTHWISE
    return None


def _pointwise_shape(p: dict) -> bool:
    return (p["k_h"], p["k_w"], p["stride_h"], p["stride_w"], p["pad_h"], p["pad_w"]) == (1, 1, 1, 1, 0, 0)


def _array(step: Step, prefix: str) -> np.ndarray | None:
    return next((a.values for a in step.arrays if a.name == f"{prefix}{step.index}"), None)


def requantization_table(bias: np.ndarray, multipliers: np.ndarray, shifts: np.ndarray, out_offset: int,
                         constant: dict[int, int] | None = None) -> np.ndarray:
    """Per channel {bias, M, Cc, e} for es_requantize_q, as int32 [channels, 4]. Every shift
    is -e with 1 <= e <= MAX_SHIFT, except in ``constant`` channels ({channel: value}, each
    output that value whatever the input): those get M = 0, e = 1 and Cc = 2 value + 1,
    which es_requantize_q maps to the value exactly, and a zero bias."""
    e = -shifts.astype(np.int64)
    cc = (np.int64(1) << (e - 1)) + np.int64(out_offset) * (np.int64(1) << e)
    table = np.stack([bias.astype(np.int64), multipliers.astype(np.int64), cc, e], axis=1)
    for channel, value in (constant or {}).items():
        table[channel] = (0, 0, 2 * value + 1, 1)
    return table.astype(np.int32)


def accumulator_range(weights: np.ndarray, folded: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The least and greatest accumulator of each channel ([channels, taps] weights) over
    every int8 input."""
    return (folded + np.minimum(-128 * weights, 127 * weights).sum(axis=1),
            folded + np.maximum(-128 * weights, 127 * weights).sum(axis=1))


def pack_lanes(weights: np.ndarray) -> np.ndarray:
    """[rows, n] int8 (n a multiple of 4) as int32 words of int16 lane pairs: per four values
    k..k+3 of a row, (w[k], w[k+2]) then (w[k+1], w[k+3]), the low half first; the order
    SXTB16 and SXTB16 ROR 8 widen four input bytes into."""
    rows, n = weights.shape
    quads = weights.astype(np.int64).reshape(rows, n // 4, 4)
    lo, hi = quads[:, :, [0, 1]], quads[:, :, [2, 3]]
    words = ((hi & 0xFFFF) << 16) | (lo & 0xFFFF)
    return words.reshape(rows, n // 2).astype(np.uint32).view(np.int32)


def pointwise_words(weights: np.ndarray, narrow: bool = False) -> np.ndarray:
    """[channels, depth] weights in es_gemm_pair_s8's order: per pair of channels (an odd last
    one paired with itself), per four input channels, each channel's two lane-pair words, or
    with ``narrow`` each channel's four bytes as one word."""
    if len(weights) % 2:
        weights = np.concatenate([weights, weights[-1:]])
    if narrow:
        quads = weights.astype(np.int8).reshape(len(weights) // 2, 2, -1, 4)  # [pair, channel, group, byte]
        return np.ascontiguousarray(quads.transpose(0, 2, 1, 3)).view(np.int32).reshape(-1)
    lanes = pack_lanes(weights)  # [channels, depth / 2]
    pairs = lanes.reshape(len(weights) // 2, 2, -1, 2)  # [pair, channel, group, word]
    return pairs.transpose(0, 2, 1, 3).reshape(-1)


def _weights(step: Step) -> np.ndarray:
    """The layer's weights as [output channel, taps] int64."""
    p = step.params
    w = _array(step, "w").astype(np.int64)
    if step.op == "FULLY_CONNECTED":  # [out, in]
        return w.reshape(p["out_depth"], p["in_depth"])
    if step.op == "CONV_2D":  # TFLite's filter is [out, kh, kw, in]: a row is a column's order
        return w.reshape(p["out_c"], p["k_h"] * p["k_w"] * p["in_c"])
    return w.reshape(p["k_h"] * p["k_w"], p["out_c"]).T  # TFLite's depthwise filter is [1, kh, kw, C]


def _folded_bias(step: Step, weights: np.ndarray) -> np.ndarray:
    """bias + input_offset * sum(w): TFLM's sum of w * (x + input_offset) is sum(w * x) plus it."""
    bias = _array(step, "b")
    base = bias.astype(np.int64) if bias is not None else np.zeros(weights.shape[0], np.int64)
    return base + np.int64(step.params["in_offset"]) * weights.sum(axis=1)


@dataclasses.dataclass(frozen=True)
class Channels:
    """What the generated kernel is given per output channel, once ``plan_channels`` accepts."""

    weights: np.ndarray  # [channels, taps] int64
    table: np.ndarray  # [channels, 4] int32, requantization_table's


def plan_channels(step: Step) -> Channels | str:
    """The per-channel data es_requantize_q computes this layer with exactly, or why it cannot.

    A channel whose least and greatest accumulator requantize to the same value outputs that
    value for every input (requantization with M >= 0 and no left shift never decreases;
    a padded tap of a depthwise layer reads the input zero point, an int8 value too): trained
    models have such channels (MLPerf Tiny's VWW: zero multipliers, and shifts of 27 to 31
    bits under biases near 2^30), and they are written as constants."""
    p = step.params
    weights = _weights(step)
    folded = _folded_bias(step, weights)
    multipliers, shifts = channel_multipliers(step)
    lo, hi = accumulator_range(weights, folded)
    constant: dict[int, int] = {}
    for channel in np.flatnonzero((shifts <= 0) & (multipliers >= 0)):
        first, last = (int(quant.mul_by_quantized_multiplier(np.array([acc]), int(multipliers[channel]),
                                                                 int(shifts[channel]))[0])
                       for acc in (lo[channel], hi[channel]))
        if first == last:
            constant[int(channel)] = first + p["out_offset"]
    varying = np.ones(len(shifts), bool)
    varying[list(constant)] = False
    # A constant channel's accumulator starts from 0, not its bias: only its products count.
    folded = np.where(varying, folded, 0)
    bound = np.where(varying, np.maximum(np.abs(lo), np.abs(hi)), 128 * np.abs(weights).sum(axis=1))
    if np.any(bound >= ACC_LIMIT):
        return f"accumulators up to {int(bound.max()):,} (the generated kernels allow under 2^29)"
    m, e = multipliers[varying], -shifts[varying]
    if np.any(m <= 0) or np.any(e < 1):
        return "a left shift or a zero multiplier in its requantization (the one-multiply requantization shifts right)"
    if np.any(e > MAX_SHIFT):
        return f"a requantization shift of {int(e.max())} bits (the one-multiply requantization takes up to {MAX_SHIFT})"
    table = requantization_table(folded, multipliers, np.where(varying, shifts, -1), p["out_offset"], constant)
    return Channels(weights, table)


def channel_multipliers(step: Step) -> tuple[np.ndarray, np.ndarray]:
    """Each output channel's multiplier and shift (a per-tensor layer's one, repeated)."""
    channels = _weights(step).shape[0]
    return (np.broadcast_to(_array(step, "m").astype(np.int64), (channels,)),
            np.broadcast_to(_array(step, "s").astype(np.int64), (channels,)))


def plan(step: Step, kernel: str) -> Channels | str:
    """What ``kernel`` is given for ``step``, or the condition the layer misses."""
    depth = step.params["in_depth"] if kernel == FULLY_CONNECTED else step.params["in_c"]
    if depth % 4 and kernel in (POINTWISE, FULLY_CONNECTED):  # their rows are read four bytes at a time
        return f"{depth} input channels (the generated kernels read them four at a time)"
    return plan_channels(step)


def _arrays(index: int, words: np.ndarray, channels: Channels) -> list[ConstArray]:
    """A generated layer's const arrays: its packed weights (v) and per-channel table (q)."""
    return [ConstArray(f"v{index}", "int32_t", words.reshape(-1)),
            ConstArray(f"q{index}", "int32_t", channels.table.reshape(-1))]


def _depthwise_arrays(index: int, p: dict, channels: Channels) -> list[ConstArray]:
    """A depthwise layer's arrays: per group of four channels, per tap, the two lane-pair
    words, and the table; a last group of fewer channels is padded with zero weights and zero
    table rows (es_depthwise.h computes those lanes and stores none of them)."""
    taps = p["k_h"] * p["k_w"]
    extra = -len(channels.weights) % 4
    weights = np.pad(channels.weights, ((0, extra), (0, 0)))
    padded = Channels(weights, np.pad(channels.table, ((0, extra), (0, 0))))
    words = pack_lanes(weights.reshape(len(weights) // 4, 4, taps).transpose(0, 2, 1).reshape(-1, 4))
    return _arrays(index, words, padded)


def _zero_point4(p: dict) -> int:
    """The input zero point in all four bytes of a word (what a padded depthwise tap reads)."""
    return int(np.array([((-p["in_offset"]) & 0xFF) * 0x01010101], np.uint32).view(np.int32)[0])


def _layer_call(index: int, kernel: str, comment: str, arguments: str, prelude: str = "") -> LibraryCall:
    """A generated layer's own function, which calls ``kernel`` with the layer's constants
    (``arguments``), and the call to it from the invoke function."""
    function = (f"ES_LAYER void @P@g{index}(const int8_t *in, int8_t *out, int8_t *scratch) {{  /* {comment} */\n"
                f"{prelude}  {kernel}({arguments});\n}}")
    return LibraryCall(LIBRARY, f"@P@g{index}", (function,), ("@IN0@", "@OUT@", "@SCRATCH@"), returns_status=False,
                       header=HEADERS[kernel])


def _pointwise(step: Step, channels: Channels, narrow: bool = False) -> Step:
    p, i = step.params, step.index
    arrays = _arrays(i, pointwise_words(channels.weights, narrow), channels)
    pixels = p["in_h"] * p["in_w"]
    call = _layer_call(i, POINTWISE, f"CONV_2D {i}: 1x1, {pixels} pixels, {p['in_c']} -> {p['out_c']} channels",
                       f"in, out, (int32_t *)(void *)scratch, @P@v{i}, @P@q{i}, {pixels}, {p['in_c']}, "
                       f"{p['out_c']}, {int(narrow)}, {p['act_min']}, {p['act_max']}")
    # The output may overwrite the input as the portable in-place 1x1 does (es_pointwise.h);
    # the widened pixel pair is this step's scratch whether it runs in place or not.
    inplace = dataclasses.replace(step.inplace, temp_bytes=0) if step.inplace is not None else None
    return dataclasses.replace(step, arrays=arrays, library_call=call, scratch_bytes=4 * p["in_c"], inplace=inplace,
                               source=None)


def _depthwise(step: Step, channels: Channels, narrow: bool = False) -> Step:
    p, i = step.params, step.index
    c = p["out_c"]
    arrays = _depthwise_arrays(i, p, channels)
    zero_point4 = _zero_point4(p)
    # Stride 1 at the input's size may write over its input through a ring of pad_h + 1 rows;
    # a layer whose every read lies ahead of the writes (stride 2) may write over it directly.
    same = (p["stride_h"], p["stride_w"], p["pad_h"], p["pad_w"], p["out_h"], p["out_w"]) == \
        (1, 1, (p["k_h"] - 1) // 2, (p["k_w"] - 1) // 2, p["in_h"], p["in_w"]) and p["k_h"] % 2 == 1
    ring = (p["pad_h"] + 1) * p["in_w"] * c if same else 0
    call = _layer_call(i, DEPTHWISE, f"DEPTHWISE_CONV_2D {i}: {p['k_h']}x{p['k_w']}, {p['in_h']}x{p['in_w']} -> "
                                     f"{p['out_h']}x{p['out_w']}, {c} channels",
                       f"in, out, {'scratch' if same else 'NULL'}, @P@v{i}, @P@q{i}, {p['in_h']}, "
                       f"{p['in_w']}, {c}, {p['k_h']}, {p['k_w']}, {p['stride_h']}, {p['stride_w']}, {p['pad_h']}, "
                       f"{p['pad_w']}, {p['out_h']}, {p['out_w']}, {zero_point4}, {p['act_min']}, {p['act_max']}",
                       prelude="" if same else "  (void)scratch;\n")
    forward, backward = reads_ahead_of_writes(p), reads_behind_writes(p)
    inplace = (InPlace("start", DEPTHWISE) if same or forward and not backward else
               InPlace("either", DEPTHWISE) if forward else None)
    return dataclasses.replace(step, arrays=arrays, library_call=call, inplace=inplace, scratch_bytes=ring,
                               source=None)


def reads_ahead_of_writes(p: dict) -> bool:
    """Whether es_depthwise_s8 may write its output over its input (both start at the same
    byte) without a ring: every output pixel's earliest input pixel (row by row) is not before
    it, so each read lands on bytes no output has reached yet (a pixel's channel group is read
    before the same group of the output pixel is written)."""
    for oy in range(p["out_h"]):
        y = max(oy * p["stride_h"] - p["pad_h"], 0)
        for ox in range(p["out_w"]):
            if y * p["in_w"] + max(ox * p["stride_w"] - p["pad_w"], 0) < oy * p["out_w"] + ox:
                return False
    return True


def reads_behind_writes(p: dict) -> bool:
    """The same for an output that ends where its input ends, written last pixel first: every
    output pixel's last input pixel lies before the bytes the outputs after it have taken."""
    shift = p["in_h"] * p["in_w"] - p["out_h"] * p["out_w"]  # the output's start, in pixels
    for oy in range(p["out_h"]):
        y = min(oy * p["stride_h"] - p["pad_h"] + p["k_h"] - 1, p["in_h"] - 1)
        for ox in range(p["out_w"]):
            x = min(ox * p["stride_w"] - p["pad_w"] + p["k_w"] - 1, p["in_w"] - 1)
            if y * p["in_w"] + x > shift + oy * p["out_w"] + ox:
                return False
    return True


def _im2col(step: Step, channels: Channels, narrow: bool = False) -> Step:
    p, i = step.params, step.index
    taps = channels.weights.shape[1]
    depth = -(-taps // 4) * 4  # the column padded to whole words, against zero weights
    weights = np.pad(channels.weights, ((0, 0), (0, depth - taps)))
    arrays = _arrays(i, pointwise_words(weights, narrow), channels)
    zero_point = -p["in_offset"]
    # Stride 1, an odd kernel with "same" padding and as many channels out as in: written over
    # its input row by row, each row copied into a ring of pad_h + 1 rows first (es_conv_im2col.h).
    same = (p["stride_h"], p["stride_w"], p["pad_h"], p["pad_w"], p["out_h"], p["out_w"], p["out_c"]) == \
        (1, 1, (p["k_h"] - 1) // 2, (p["k_w"] - 1) // 2, p["in_h"], p["in_w"], p["in_c"]) and \
        p["k_h"] % 2 == 1 and p["k_w"] % 2 == 1 and p["k_h"] <= MAX_RING_K and not _pointwise_shape(p)
    ring = (p["pad_h"] + 1) * p["in_w"] * p["in_c"] if same else 0
    call = _layer_call(i, IM2COL, f"{step.op} {i}: {p['k_h']}x{p['k_w']} stride {p['stride_h']}x{p['stride_w']}, "
                                  f"{p['in_h']}x{p['in_w']}x{p['in_c']} -> {p['out_h']}x{p['out_w']}x{p['out_c']}",
                       f"in, out, scratch, @P@v{i}, @P@q{i}, {f'scratch + {6 * depth}' if same else 'NULL'}, "
                       f"{p['in_h']}, {p['in_w']}, {p['in_c']}, {p['k_h']}, "
                       f"{p['k_w']}, {p['stride_h']}, {p['stride_w']}, {p['pad_h']}, {p['pad_w']}, {p['out_h']}, "
                       f"{p['out_w']}, {depth}, {p['out_c']}, {zero_point}, {int(narrow)}, {p['act_min']}, "
                       f"{p['act_max']}")
    # Two int8 columns, then their widened words (then the ring, when there is one). A 1x1
    # gathers both pixels before writing either, so it may write over its input as
    # es_pointwise.h does; a wider field spans rows, and takes the ring.
    inplace = (dataclasses.replace(step.inplace, temp_bytes=0) if _pointwise_shape(p) and step.inplace else
               InPlace("start", IM2COL) if same else None)
    return dataclasses.replace(step, arrays=arrays, library_call=call, scratch_bytes=6 * depth + ring,
                               inplace=inplace, source=None)


def _fully_connected(step: Step, channels: Channels, narrow: bool = False) -> Step:
    p, i = step.params, step.index
    arrays = _arrays(i, pointwise_words(channels.weights, narrow), channels)
    call = _layer_call(i, FULLY_CONNECTED, f"FULLY_CONNECTED {i}: {p['batches']} x {p['in_depth']} -> {p['out_depth']}",
                       f"in, out, (int32_t *)(void *)scratch, @P@v{i}, @P@q{i}, {p['batches']}, "
                       f"{p['in_depth']}, {p['out_depth']}, {int(narrow)}, {p['act_min']}, {p['act_max']}")
    # Pairs of rows are widened into scratch first; a single row is widened in the loop (es_gemv.h).
    scratch = 4 * p["in_depth"] if p["batches"] > 1 else 0
    return dataclasses.replace(step, arrays=arrays, library_call=call, scratch_bytes=scratch, inplace=None,
                               source=None)


BUILDERS = {POINTWISE: _pointwise, DEPTHWISE: _depthwise, IM2COL: _im2col, FULLY_CONNECTED: _fully_connected}


def specialise(steps: list[Step], narrow: Collection[int] = (),
               keep: Collection[int] = (), whole: Collection[int] = ()) -> tuple[list[Step], dict[int, str]]:
    """The steps with generated kernels where a layer fits, and {position: why not} for the
    layers of a generated kernel's shape that keep the portable one. ``narrow``: operator
    indices whose weights stay int8 (``narrowing`` picks them under a flash budget).
    ``keep``: tensors that must exist whole (the model's outputs), never streamed; ``whole``:
    1x1 operators not streamed into the depthwise after them (the planner's choice)."""
    out: list[Step] = []
    missed: dict[int, str] = {}
    channels: dict[int, Channels] = {}  # operator index -> what its generated kernel was given
    for position, step in enumerate(steps):
        kernel = kernel_for(step)
        planned = plan(step, kernel) if kernel is not None else None
        if isinstance(planned, Channels):
            out.append(BUILDERS[kernel](step, planned, step.index in narrow and kernel in NARROWABLE))
            channels[step.index] = planned
            continue
        out.append(step)
        if planned is not None:
            missed[position] = planned
    streamed = _streamed(out, channels, narrow, keep, whole)
    # Positions after a streamed pair move up by one; so do their reasons.
    gone = sorted(position for position, s in enumerate(out) if s is None)
    missed = {position - sum(1 for g in gone if g < position): why for position, why in missed.items()}
    return [s for s in streamed if s is not None], missed


def _streamed(steps: list[Step], channels: dict[int, Channels], narrow: Collection[int],
              keep: Collection[int], whole: Collection[int]) -> list[Step | None]:
    """``steps`` with each generated 1x1 whose output only a following generated depthwise of
    stride > 1 reads streamed into it (es_stream.h): the pair becomes one step at the 1x1's
    place, and None stands where the depthwise was. Steps are changed in place of ``steps``."""
    readers: dict[int, int] = {}
    for step in steps:
        for tensor in step.inputs:
            readers[tensor] = readers.get(tensor, 0) + 1
    for position in range(len(steps) - 1):
        first, second = steps[position], steps[position + 1]
        if first is None or second is None or first.library_call is None or second.library_call is None:
            continue
        if first.library_call.library != LIBRARY or second.library_call.library != LIBRARY:
            continue
        if generated_kernel(first) != POINTWISE or generated_kernel(second) != DEPTHWISE:
            continue
        q = second.params
        if second.inputs[0] != first.output or readers.get(first.output) != 1 or first.output in keep or \
                (q["stride_h"], q["stride_w"]) == (1, 1) or first.index in whole:
            continue
        steps[position] = _stream(first, second, channels[first.index], channels[second.index],
                                  first.index in narrow)
        steps[position + 1] = None
    return steps


def _stream(first: Step, second: Step, one: Channels, two: Channels, narrow: bool) -> Step:
    """The 1x1 ``first`` streamed into the depthwise ``second``, as one step."""
    p, q, i, j = first.params, second.params, first.index, second.index
    mid = p["out_c"]
    ring = q["k_h"] * p["in_w"] * mid
    ring += -ring % 4  # the widened pair after it is read as words
    arrays = [*_arrays(i, pointwise_words(one.weights, narrow), one), *_depthwise_arrays(j, q, two)]
    zero_point4 = _zero_point4(q)
    call = _layer_call(i, STREAM, f"CONV_2D {i} (1x1, {p['in_c']} -> {mid}) streamed into DEPTHWISE_CONV_2D {j} "
                                  f"({q['k_h']}x{q['k_w']} stride {q['stride_h']}): {q['k_h']} rows of "
                                  f"{p['in_w']}x{mid}",
                       f"in, out, scratch, @P@v{i}, @P@q{i}, @P@v{j}, @P@q{j}, {p['in_h']}, {p['in_w']}, "
                       f"{p['in_c']}, {mid}, {int(narrow)}, {p['act_min']}, {p['act_max']}, {q['k_h']}, {q['k_w']}, "
                       f"{q['stride_h']}, {q['stride_w']}, {q['pad_h']}, {q['pad_w']}, {q['out_h']}, {q['out_w']}, "
                       f"{zero_point4}, {q['act_min']}, {q['act_max']}")
    forward, backward = _stream_in_place(p, q), _stream_in_place(p, q, last_row_first=True)
    inplace = (InPlace("either", STREAM) if forward and backward else InPlace("start", STREAM) if forward else None)
    params = {**p, "streamed_into": j, "streamed_macs": q["out_h"] * q["out_w"] * q["out_c"] * q["k_h"] * q["k_w"]}
    return dataclasses.replace(first, op=f"{first.op}+{second.op}", params=params, arrays=arrays, library_call=call,
                               output=second.output, inplace=inplace, scratch_bytes=ring + 4 * p["in_c"], source=None)


def _stream_in_place(p: dict, q: dict, last_row_first: bool = False) -> bool:
    """Whether the streamed pair may write its output over its input: from the input's start,
    first row first, or (``last_row_first``) up to the input's end, last row first (es_stream.h
    takes that order when its output lies after its input). Either way, when output row r is
    written, no input row a later 1x1 row reads may lie under it."""
    out_row, in_row = q["out_w"] * q["out_c"], p["in_w"] * p["in_c"]
    base = p["in_h"] * in_row - q["out_h"] * out_row  # where an output ending at the input's end starts
    for r in range(q["out_h"]):
        if last_row_first:  # rows below max(y0, 0) are still to be read
            if base + r * out_row < max(r * q["stride_h"] - q["pad_h"], 0) * in_row:
                return False
            continue
        computed = min(r * q["stride_h"] - q["pad_h"] + q["k_h"], p["in_h"])  # 1x1 rows done by then
        if (r + 1) * out_row > computed * in_row and computed < p["in_h"]:
            return False
    return True


# The kernels that can read int8 weights (the depthwise's are 9 per channel: not worth it;
# a streamed pair's 1x1 can).
NARROWABLE = (POINTWISE, IM2COL, STREAM, FULLY_CONNECTED)


def _output_pixels(step: Step) -> int:
    """How many times each weight is used: output pixels, or a fully connected layer's rows."""
    p = step.params
    return p["batches"] if step.op == "FULLY_CONNECTED" else p["out_h"] * p["out_w"]


def narrowing(steps: Sequence[Step], excess: int) -> list[int]:
    """Operator indices whose weights, kept int8 instead of int16, save at least ``excess``
    bytes of flash, the layers with the fewest output pixels (multiply-accumulates per weight)
    first; every one that can when that is not enough."""
    candidates = sorted((s for s in steps if s.library_call is not None and s.library_call.library == LIBRARY
                         and generated_kernel(s) in NARROWABLE),
                        key=lambda s: (_output_pixels(s), s.index))
    chosen, saved = [], 0
    for step in candidates:
        if saved >= excess:
            break
        chosen.append(step.index)
        saved += next(a.values.nbytes for a in step.arrays if a.name == f"v{step.index}") // 2
    return chosen


def resizes(step: Step, sizes: Callable[[int], int]) -> bool:
    """Whether ``step`` is a generated kernel that may run in place and whose output is not its
    input's size."""
    return step.library_call is not None and step.library_call.library == LIBRARY and step.inplace is not None \
        and sizes(step.output) != sizes(step.inputs[0])


def narrowed(steps: Sequence[Step], int8_weights: Collection[int]) -> tuple[int, ...]:
    """Which of ``int8_weights`` the generated steps read int8 weights for."""
    return tuple(sorted(s.index for s in steps if s.index in int8_weights and s.library_call is not None
                        and s.library_call.library == LIBRARY and generated_kernel(s) in NARROWABLE))


def generated_kernel(step: Step) -> str:
    """The kernel a generated step calls (for the per-layer choices)."""
    assert step.library_call is not None and step.library_call.header is not None
    return next(k for k, header in HEADERS.items() if header == step.library_call.header)
