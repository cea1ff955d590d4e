"""What each TFLM reference kernel puts in the tensor arena, as data.

One :class:`KernelData` row per builtin operator says what TFLM allocates for one node of
that operator while ``AllocateTensors()`` runs:

* ``params``: the builtin-options struct the operator's parser allocates in the tail
  (through ``MicroBuiltinDataAllocator``, aligned to the struct's own alignment);
* ``op_data``: the struct the kernel's ``Init`` allocates in the tail
  (``AllocatePersistentBuffer``, 16-byte aligned);
* ``temps``: the tensors the kernel's ``Prepare`` fetches as temporary ``TfLiteTensor``
  structs, in call order (each one also copies its quantization into temp memory). TFLM
  only moves the temp pointer back after the whole ``Prepare``, so they all add up;
* ``prepare``: the byte sizes of the tail buffers ``Prepare`` allocates (per-channel
  multiplier and shift arrays and the like), each 16-byte aligned.

Scratch-buffer requests are not listed here: :func:`edgeserve.converters.microcontroller.arena.scratch_requests`
already knows them (the head planner places them), and the tail only needs their count.

Struct sizes are ``(size, alignment)`` pairs for four builds, in the order of
:data:`COLUMNS`: x86-64 (LP64, the tflite-micro wheel), 32-bit Arm (arm-none-eabi,
AAPCS: 4-byte pointers and ``size_t``, 8-byte aligned ``int64_t``/``double``, and
GCC's default ``-fshort-enums`` for that target, so an enum takes one byte), and the same
two with ``USE_TFLM_COMPRESSION`` (the wheel is built with it; a firmware build by
default is not). They were measured by compiling ``sizeof``/``alignof`` probes against
the TFLM headers at commit 90b983c2 (Aug 2026) with ``g++`` and
``arm-none-eabi-g++ -mcpu=cortex-m4``; the x86-64 column was then checked against the
tflite-micro wheel (Oct 2026): the size each kernel's ``Init`` and each parser asks for,
read from the wheel's machine code, and the recorded totals its ``print_allocations``
reports. Where the wheel differs from the Aug source, the wheel wins and the row says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import NamedTuple

from edgeserve.tflite.model import Operator, Subgraph, Tensor

#: Builds the size tables describe, in column order.
COLUMNS = ("lp64", "arm32", "lp64+compression", "arm32+compression")


class StructSize(NamedTuple):
    """``sizeof`` and ``alignof`` of one struct in one build."""

    size: int
    align: int


def row(
    lp64: tuple[int, int], arm32: tuple[int, int],
    lp64_compression: tuple[int, int] | None = None,
    arm32_compression: tuple[int, int] | None = None,
) -> tuple[StructSize, ...]:
    # Most structs do not change with USE_TFLM_COMPRESSION; say so once.
    return tuple(StructSize(*pair) for pair in (
        lp64, arm32, lp64_compression or lp64, arm32_compression or arm32))


#: Builtin-options structs (builtin_op_data.h), as the parsers allocate them; the x86-64
#: column equals the size each tflite::micro::Parse* function of the wheel asks for. On
#: Arm, structs made only of enums and bools shrink (one-byte enums).
PARAMS: dict[str, tuple[StructSize, ...]] = {
    "TfLiteAddParams": row((8, 4), (2, 1)),  # activation enum, bool
    "TfLiteConcatenationParams": row((8, 4), (8, 4)),  # int axis, activation
    "TfLiteConvParams": row((28, 4), (28, 4)),  # enums between ints: padded to 4 on Arm too
    "TfLiteDepthwiseConvParams": row((28, 4), (28, 4)),  # likewise
    # The wheel's parser asks for 32 bytes aligned to 8 (the Aug source: 16 and 4): it
    # appends a pointer and a count, read from a new FullyConnectedOptions vector, after
    # the 16 bytes of enums and bools (disassembly of tflite::micro::ParseFullyConnected:
    # pointer at offset 16, count at 24). On Arm the same members take 16 bytes: five
    # one-byte enums/bools, the pointer at 8, the count at 12.
    "TfLiteFullyConnectedParams": row((32, 8), (16, 4)),
    "TfLiteMulParams": row((4, 4), (1, 1)),  # one activation enum
    "TfLitePoolParams": row((40, 4), (40, 4)),  # ints + computed padding
    "TfLiteReducerParams": row((1, 1), (1, 1)),  # bool keep_dims
    "TfLiteReshapeParams": row((36, 4), (36, 4)),  # int32 shape[8] + count
    "TfLiteSoftmaxParams": row((4, 4), (4, 4)),  # float beta
    "TfLiteSubParams": row((8, 4), (2, 1)),  # activation enum, bool
    "TfLiteSVDFParams": row((12, 4), (8, 4)),  # int rank, activation, bool
    # The four below were laid out from builtin_op_data.h (not probed); the tail they give,
    # with the state rows further down, equals the wheel's on the four microWakeWord models.
    "TfLiteStridedSliceParams": row((24, 4), (24, 4)),  # five int masks, bool offset
    "TfLiteSplitVParams": row((4, 4), (4, 4)),  # int num_splits
    "TfLiteVarHandleParams": row((16, 8), (8, 4)),  # container and shared_name pointers
    "TfLiteCallOnceParams": row((4, 4), (4, 4)),  # int init_subgraph_index
    # Read from builtin_op_data.h (Nov 2026), not probed: two bools; one float.
    "TfLiteResizeBilinearParams": row((2, 1), (2, 1)),  # align_corners, half_pixel_centers
    "TfLiteResizeNearestNeighborParams": row((2, 1), (2, 1)),  # likewise
    "TfLiteLeakyReluParams": row((4, 4), (4, 4)),  # float alpha
    "TfLiteGatherParams": row((8, 4), (8, 4)),  # int axis, int batch_dims (read, not probed)
    # two TfLiteType enums (read, not probed; one byte each on Arm, as the other enum structs)
    "TfLiteCastParams": row((8, 4), (2, 1)),
    "TfLiteUnidirectionalSequenceLSTMParams": row((16, 4), (16, 4)),  # enum, 2 floats, bools
    # padding enum, two ints, activation enum, quantized bias type enum; probed with g++ and
    # arm-none-eabi-g++ -mcpu=cortex-m4 against ../shared/tflm (Nov 2026).
    "TfLiteTransposeConvParams": row((20, 4), (16, 4)),
    # Read from builtin_op_data.h (Nov 2026), not probed: one activation enum, as TfLiteMulParams.
    "TfLiteDivParams": row((4, 4), (1, 1)),
    # Read from builtin_op_data.h (Nov 2026), not probed: one int block_size each.
    "TfLiteDepthToSpaceParams": row((4, 4), (4, 4)),
    "TfLiteSpaceToDepthParams": row((4, 4), (4, 4)),
    # Read from builtin_op_data.h (Nov 2026), not probed: SHAPE's one TfLiteType enum and
    # L2_NORMALIZATION's one activation enum (one byte on Arm, as TfLiteMulParams); PACK's two ints.
    "TfLiteShapeParams": row((4, 4), (1, 1)),
    "TfLiteL2NormParams": row((4, 4), (1, 1)),
    "TfLitePackParams": row((8, 4), (8, 4)),
}

#: The structs kernels allocate in Init (each kernel's OpData), by their TFLM name and the
#: header under tensorflow/lite/micro/kernels/ that defines them; the x86-64 compression
#: column equals the size each kernel's Init in the wheel asks for.
OP_DATA: dict[str, tuple[StructSize, ...]] = {
    "DequantizeOpData": row((32, 8), (32, 8)),  # dequantize.h
    "OpDataAdd": row((60, 4), (60, 4)),  # add.h
    # tflite::HardSwishParams (kernels/internal/types.h): three int16, an int, an int16, an
    # int; probed with g++ and arm-none-eabi-g++ -mcpu=cortex-m4 (Nov 2026).
    "HardSwishParams": row((20, 4), (20, 4)),
    # concatenation.cc (OpData); compression adds a decompression scratch index per
    # input (kMaxInputNum = 10).
    "OpDataConcatenation": row((40, 8), (24, 4), (80, 8), (64, 4)),
    # conv.h (also DEPTHWISE_CONV_2D's); compression adds the weights and bias
    # decompression scratch indices, here and in fully_connected.h.
    "OpDataConv": row((72, 8), (56, 4), (80, 8), (64, 4)),
    "OpDataFullyConnected": row((64, 8), (48, 4), (72, 8), (56, 4)),
    "OpDataLogistic": row((16, 4), (16, 4)),  # logistic.h
    # Read from the sources (Nov 2026), not probed: div.cc's OpDataDiv, seven int32/int;
    # comparisons.cc's OpData, a ComparisonParams (kernels/internal/types.h: seven int32/int
    # and a bool); select.cc's OpData, one bool.
    "OpDataDiv": row((28, 4), (28, 4)),
    "OpDataComparison": row((32, 4), (32, 4)),
    "OpDataSelect": row((1, 1), (1, 1)),
    "LeakyReluOpData": row((24, 4), (24, 4)),  # leaky_relu.h: six int32
    "PreluParams": row((28, 4), (28, 4)),  # kernels/internal/types.h: seven int32/int
    "OpDataLSTM": row((688, 8), (688, 8)),  # lstm_eval.h: no pointers, int64-aligned
    "OpDataMul": row((36, 4), (36, 4)),  # mul.h
    "OpDataPad": row((56, 4), (56, 4)),  # pad.h (OpData)
    "OpDataPooling": row((32, 4), (32, 4)),  # pooling.h
    "OpDataQuantizeReference": row((32, 8), (32, 8)),  # quantize.h
    # kernels/internal/types.h StridedSliceParams: three (int8 count, int32[5]) groups,
    # five uint16 masks and a bool, no pointers.
    "StridedSliceParams": row((84, 4), (84, 4)),
    "VarHandleOpData": row((4, 4), (4, 4)),  # var_handle.cc: int32 resource_id
    "CallOnceOpData": row((8, 4), (8, 4)),  # call_once.cc: int init_subgraph_index, bool has_run
    # kernels/internal/types.h L2NormalizationParams: one int32 input_zero_point (read, not probed).
    "L2NormalizationParams": row((4, 4), (4, 4)),
    # assign_variable.cc: Init exists only with USE_TFLM_COMPRESSION (int scratch_index);
    # size 0 means no Init, so no allocation.
    "AssignVariableOpData": row((0, 4), (0, 4), (4, 4), (4, 4)),
    "OpDataReduce": row((44, 4), (44, 4)),  # reduce.h
    "OpDataSub": row((52, 4), (52, 4)),  # sub.h
    "OpDataSvdf": row((36, 4), (36, 4)),  # svdf.h
    "OpDataTanh": row((16, 4), (16, 4)),  # tanh.cc (OpData)
    "Relu6OpData": row((8, 4), (8, 4)),  # activations.h
    # transpose_conv.cc (OpData): ConvParams, scratch and bias-conversion indices, the two
    # per-channel array pointers; compression adds two scratch indices. Probed as above.
    "OpDataTransposeConv": row((80, 8), (72, 4), (88, 8), (80, 4)),
    "ReluOpData": row((28, 4), (28, 4)),  # activations.h
    # tflite::SoftmaxParams (kernels/internal/types.h) holds int64-aligned members.
    "SoftmaxParams": row((80, 8), (56, 8)),
}

_INT16_SOFTMAX_LUT_BYTES = 2 * 513  # LUTSize<int16_t>() int16 entries (internal/common.h)


@dataclasses.dataclass(frozen=True)
class Node:
    """One operator with its subgraph, and helpers to reach its tensors by position."""

    graph: Subgraph
    op: Operator

    def input(self, position: int) -> Tensor | None:
        """Input ``position``, or None when it is omitted (-1) or past the end."""
        if position >= len(self.op.inputs) or self.op.inputs[position] < 0:
            return None
        return self.graph.tensors[self.op.inputs[position]]

    def output(self, position: int = 0) -> Tensor | None:
        if position >= len(self.op.outputs) or self.op.outputs[position] < 0:
            return None
        return self.graph.tensors[self.op.outputs[position]]


# A temp list names tensors by position: ("i", n) is input n, ("o", n) output n.
TempRef = tuple[str, int]


def _refs(spec: str) -> tuple[TempRef, ...]:
    """``"o0 i0 i1"`` -> ``(("o", 0), ("i", 0), ("i", 1))``."""
    return tuple((word[0], int(word[1:])) for word in spec.split())


def _fixed(spec: str) -> Callable[[Node], Sequence[TempRef]]:
    refs = _refs(spec)
    return lambda node: refs


def _none(node: Node) -> Sequence[int]:
    return ()


def _channels(tensor: Tensor | None, axis: int) -> int:
    if tensor is None or not tensor.shape:
        return 0
    return tensor.shape[axis if axis >= 0 else len(tensor.shape) + axis]


def _conv_arrays(axis: int) -> Callable[[Node], Sequence[int]]:
    # ConvPrepare / DepthwiseConvPrepare: an int32 multiplier and an int32 shift per
    # output channel, for every input type (float too), sized from the filter's shape.
    def arrays(node: Node) -> Sequence[int]:
        channels = _channels(node.input(1), axis)
        return (4 * channels, 4 * channels)
    return arrays


def _fully_connected_arrays(node: Node) -> Sequence[int]:
    # CalculateOpDataFullyConnected: per-channel arrays only when the filter has more
    # than one scale (and the input is quantized).
    data, weights = node.input(0), node.input(1)
    quant = weights.quantization if weights is not None else None
    if data is None or data.dtype_name == "float32" or quant is None or len(quant.scale) <= 1:
        return ()
    return (4 * len(quant.scale), 4 * len(quant.scale))


def _softmax_luts(node: Node) -> Sequence[int]:
    # InitializeLutForInt16: two int16 lookup tables, only for int16 input.
    data = node.input(0)
    return (_INT16_SOFTMAX_LUT_BYTES,) * 2 if data is not None and data.dtype_name == "int16" else ()


def _reshape_dims(node: Node) -> Sequence[int]:
    # ReshapeOutput: a -1 in the output shape makes the kernel copy the dims into the tail
    # (CreateWritableTensorDimsWithCopy: a TfLiteIntArray of the output's rank).
    out = node.output(0)
    if out is not None and -1 in out.shape:
        return (4 + 4 * len(out.shape),)
    return ()


def _output_dims(node: Node) -> Sequence[int]:
    # A TfLiteIntArray of the output's rank, copied into the tail in Prepare.
    out = node.output(0)
    return (4 + 4 * len(out.shape),) if out is not None else ()


def _pad_temps(node: Node) -> Sequence[TempRef]:
    # PadPrepare: input, paddings, the constant value when given (PADV2), output.
    return _refs("i0 i1 i2 o0") if len(node.op.inputs) == 3 else _refs("i0 i1 o0")


def _mean_temps(node: Node) -> Sequence[TempRef]:
    # PrepareMeanOrSumHelper: input, output, axis; then PrepareSimple: input, axis, and
    # for int8 input the output again.
    data = node.input(0)
    tail = " o0" if data is not None and data.dtype_name == "int8" else ""
    return _refs("i0 o0 i1 i0 i1" + tail)


def _concatenation_temps(node: Node) -> Sequence[TempRef]:
    # ConcatenationPrepare: input 0 and the output, then every input once more.
    return _refs("i0 o0") + tuple(("i", n) for n in range(len(node.op.inputs)))


def _lstm_temps(node: Node) -> Sequence[TempRef]:
    # LstmTensors: all 24 inputs (omitted ones cost nothing), then the output.
    return tuple(("i", n) for n in range(24)) + (("o", 0),)


@dataclasses.dataclass(frozen=True)
class KernelData:
    """What one node of an operator allocates; see the module docstring."""

    params: str | None
    op_data: str | None
    temps: Callable[[Node], Sequence[TempRef]]
    prepare: Callable[[Node], Sequence[int]] = _none
    source: str = ""


#: The reference kernels edgeserve can size, by builtin operator name. ``source`` is the
#: file under tensorflow/lite/micro/kernels/ each row was read from.
KERNELS: dict[str, KernelData] = {
    "ADD": KernelData("TfLiteAddParams", "OpDataAdd", _fixed("i0 i1 o0"), source="add_common.cc"),
    "AVERAGE_POOL_2D": KernelData("TfLitePoolParams", "OpDataPooling", _fixed("i0 o0"),
                                  source="pooling_common.cc"),
    "CONCATENATION": KernelData("TfLiteConcatenationParams", "OpDataConcatenation",
                                _concatenation_temps, source="concatenation.cc"),
    # ConvPrepare fetches output, input, filter; CalculateOpDataConv fetches input,
    # filter, bias, output again before any is released.
    "CONV_2D": KernelData("TfLiteConvParams", "OpDataConv", _fixed("o0 i0 i1 i0 i1 i2 o0"),
                          _conv_arrays(0), source="conv_common.cc"),
    "DEPTHWISE_CONV_2D": KernelData("TfLiteDepthwiseConvParams", "OpDataConv",
                                    _fixed("o0 i0 i1 i0 i1 i2 o0"), _conv_arrays(3),
                                    source="depthwise_conv_common.cc"),
    "DEQUANTIZE": KernelData(None, "DequantizeOpData", _fixed("i0 o0"), source="dequantize_common.cc"),
    "FULLY_CONNECTED": KernelData("TfLiteFullyConnectedParams", "OpDataFullyConnected",
                                  _fixed("i0 i1 i2 o0"), _fully_connected_arrays,
                                  source="fully_connected.cc, fully_connected_common.cc"),
    # HardSwishInit allocates the params; HardSwishPrepare fetches input and output.
    "HARD_SWISH": KernelData(None, "HardSwishParams", _fixed("i0 o0"), source="hard_swish.cc, hard_swish_common.cc"),
    "LEAKY_RELU": KernelData("TfLiteLeakyReluParams", "LeakyReluOpData", _fixed("i0 o0"),
                             source="leaky_relu.cc, leaky_relu_common.cc"),
    "LOGISTIC": KernelData(None, "OpDataLogistic", _fixed("i0 o0"), source="logistic_common.cc"),
    # No Init and no Prepare: the two compare raw values with one shared scale.
    "MAXIMUM": KernelData(None, None, _fixed(""), source="maximum_minimum.cc"),
    "MINIMUM": KernelData(None, None, _fixed(""), source="maximum_minimum.cc"),
    "PRELU": KernelData(None, "PreluParams", _fixed("i0 i1 o0"), source="prelu.cc, prelu_common.cc"),
    # No Init; Prepare fetches input, size, output.
    "RESIZE_BILINEAR": KernelData("TfLiteResizeBilinearParams", None, _fixed("i0 i1 o0"),
                                  source="resize_bilinear.cc"),
    "RESIZE_NEAREST_NEIGHBOR": KernelData("TfLiteResizeNearestNeighborParams", None, _fixed("i0 i1 o0"),
                                          source="resize_nearest_neighbor.cc"),
    "MAX_POOL_2D": KernelData("TfLitePoolParams", "OpDataPooling", _fixed("i0 o0"),
                              source="pooling_common.cc"),
    "MEAN": KernelData("TfLiteReducerParams", "OpDataReduce", _mean_temps, source="reduce_common.cc"),
    "MUL": KernelData("TfLiteMulParams", "OpDataMul", _fixed("i0 i1 o0"), source="mul_common.cc"),
    "PAD": KernelData(None, "OpDataPad", _pad_temps, source="pad_common.cc"),
    "PADV2": KernelData(None, "OpDataPad", _pad_temps, source="pad_common.cc"),
    "QUANTIZE": KernelData(None, "OpDataQuantizeReference", _fixed("i0 o0"), source="quantize_common.cc"),
    "RELU": KernelData(None, "ReluOpData", _fixed("i0 o0"), source="activations_common.cc"),
    "RELU6": KernelData(None, "Relu6OpData", _fixed("i0"), source="activations_common.cc"),
    # No Init: RESHAPE keeps nothing per node.
    "RESHAPE": KernelData("TfLiteReshapeParams", None, _fixed("i0 o0"), _reshape_dims,
                          source="reshape_common.cc"),
    "SOFTMAX": KernelData("TfLiteSoftmaxParams", "SoftmaxParams", _fixed("i0 o0"), _softmax_luts,
                          source="softmax_common.cc"),
    "SUB": KernelData("TfLiteSubParams", "OpDataSub", _fixed("i0 i1 o0"), source="sub_common.cc"),
    "SVDF": KernelData("TfLiteSVDFParams", "OpDataSvdf", _fixed("i0 i1 i2 i3 i4 o0"),
                       source="svdf_common.cc"),
    # TransposeConvPrepare fetches output, input (2), filter (1); its per-channel arrays come
    # from the filter's first dimension; CalculateOpData (integer types) fetches input,
    # filter, bias (3, optional) and output again. Scratch: arena.scratch_requests.
    "TRANSPOSE_CONV": KernelData("TfLiteTransposeConvParams", "OpDataTransposeConv",
                                 _fixed("o0 i2 i1 i2 i1 i3 o0"), _conv_arrays(0), source="transpose_conv.cc"),
    # TanhPrepare fetches the input, then CalculateArithmeticOpData input and output.
    "TANH": KernelData(None, "OpDataTanh", _fixed("i0 i0 o0"), source="tanh.cc"),
    # No Init; Prepare fetches input and output and copies the output's dims into the tail
    # (CreateWritableTensorDimsWithCopy: a TfLiteIntArray of rank 4).
    "DEPTH_TO_SPACE": KernelData("TfLiteDepthToSpaceParams", None, _fixed("i0 o0"), lambda node: (4 + 4 * 4,),
                                 source="depth_to_space.cc"),
    "SPACE_TO_DEPTH": KernelData("TfLiteSpaceToDepthParams", None, _fixed("i0 o0"), lambda node: (4 + 4 * 4,),
                                 source="space_to_depth.cc"),
    # Neither has Init. CAST's Prepare fetches input and output; GATHER's input, positions and
    # output, and copies the output's dims into the tail (CreateWritableTensorDimsWithCopy). The
    # mcu target looks an int8 SQRT up with the two (int8_lookup.py).
    "CAST": KernelData("TfLiteCastParams", None, _fixed("i0 o0"), source="cast.cc"),
    "GATHER": KernelData("TfLiteGatherParams", None, _fixed("i0 i1 o0"), _output_dims, source="gather.cc"),
    # No Init, no builtin options; Prepare fetches params, indices and output, and copies the
    # output's dims into the tail to write its shape (CreateWritableTensorDimsWithCopy). A reflect
    # pad of edgeserve's ONNX reader is one GATHER_ND with constant indices (silero-vad's STFT).
    "GATHER_ND": KernelData(None, None, _fixed("i0 i1 o0"), _output_dims, source="gather_nd.cc"),
    # DIV's Prepare fetches both inputs and the output. The comparisons (comparisons.cc) have
    # no builtin options (their Parse* allocate nothing) and fetch their two inputs only;
    # SELECT_V2 has none either and fetches condition, x, y and output. tflite-int8 compares
    # a dequantized int8 score with a constant in int8 (openwakeword's verifier gate), and
    # the mcu target writes SELECT as SELECT_V2 (select_v2.py).
    "DIV": KernelData("TfLiteDivParams", "OpDataDiv", _fixed("i0 i1 o0"), source="div.cc"),
    **{op: KernelData(None, "OpDataComparison", _fixed("i0 i1"), source="comparisons.cc")
       for op in ("EQUAL", "NOT_EQUAL", "GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL")},
    "SELECT_V2": KernelData(None, "OpDataSelect", _fixed("i0 i1 i2 o0"), source="select.cc"),
    # No Init; TransposeContext fetches input, permutation, output.
    "TRANSPOSE": KernelData(None, None, _fixed("i0 i1 o0"), source="transpose_common.cc"),
    # StridedSliceContext fetches input, begin, end, strides, output.
    # No Init, no builtin options (ParseSlice allocates nothing); Prepare fetches input, begin,
    # size and output. The unrolled LSTM/GRU of edgeserve's ONNX reader reads its steps with it.
    "SLICE": KernelData(None, None, _fixed("i0 i1 i2 o0"), source="slice.cc"),
    "STRIDED_SLICE": KernelData("TfLiteStridedSliceParams", "StridedSliceParams", _fixed("i0 i1 i2 i3 o0"),
                                source="strided_slice.cc, strided_slice_common.cc"),
    # An EfficientNet-style squeeze-excite block's shape arithmetic (SHAPE -> STRIDED_SLICE ->
    # PACK -> RESHAPE) and an embedding's last L2_NORMALIZATION (a hotword model of the issue 48
    # trial). SHAPE has no Init and a Prepare that fetches nothing; PACK has neither; L2NormInit
    # allocates its params, L2NormPrepare fetches input and output.
    "SHAPE": KernelData("TfLiteShapeParams", None, _fixed(""), source="shape.cc"),
    "PACK": KernelData("TfLitePackParams", None, _fixed(""), source="pack.cc"),
    "L2_NORMALIZATION": KernelData("TfLiteL2NormParams", "L2NormalizationParams", _fixed("i0 o0"),
                                   source="l2norm.cc"),
    "SPLIT_V": KernelData("TfLiteSplitVParams", None, _fixed("i2"), source="split_v.cc"),  # the axis only
    # State. CALL_ONCE and VAR_HANDLE fetch no TfLiteTensor in Prepare; READ_VARIABLE the
    # handle, ASSIGN_VARIABLE the value. ASSIGN_VARIABLE's Prepare also allocates the
    # variable's buffer the first time a variable is assigned: persistent.py does that,
    # since it depends on which node comes first.
    "CALL_ONCE": KernelData("TfLiteCallOnceParams", "CallOnceOpData", _fixed(""), source="call_once.cc"),
    "VAR_HANDLE": KernelData("TfLiteVarHandleParams", "VarHandleOpData", _fixed(""), source="var_handle.cc"),
    "READ_VARIABLE": KernelData(None, None, _fixed("i0"), source="read_variable.cc"),
    "ASSIGN_VARIABLE": KernelData(None, "AssignVariableOpData", _fixed("i1"), source="assign_variable.cc"),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": KernelData(
        "TfLiteUnidirectionalSequenceLSTMParams", "OpDataLSTM", _lstm_temps,
        source="unidirectional_sequence_lstm.cc, lstm_eval.cc"),
}


# ----- CMSIS-NN ----------------------------------------------------------------------------
#: TFLM built with ``OPTIMIZED_KERNEL_DIR=cmsis_nn`` swaps these kernels for the files in
#: tensorflow/lite/micro/kernels/cmsis_nn/ (read at the tree in ../shared/tflm, Nov 2026;
#: every other operator keeps its reference kernel, and ADD, MUL, PAD, TRANSPOSE, MAXIMUM and
#: MINIMUM's CMSIS-NN files allocate exactly what the reference ones do). Their Init structs
#: wrap the reference ones and add the scratch-buffer index and, for FULLY_CONNECTED, the
#: sizes CMSIS-NN reads; their scratch requests are in arena.scratch_requests. The arm32
#: sizes are what the Cortex-M4 build uses; the lp64 ones keep the table whole.
#: Not modelled: CMSIS-NN's TRANSPOSE_CONV, sized as the reference kernel (whose int32
#: accumulator scratch is larger: on a small upsampler, 6,176 bytes planned where TFLM +
#: CMSIS-NN needed 3,104 on the emulated Cortex-M4), and int16 (16x8) paths.
CMSIS_NN_OP_DATA: dict[str, tuple[StructSize, ...]] = {
    # cmsis_nn/conv.cc and depthwise_conv.cc: {OpDataConv reference_op_data; int buffer_idx;}
    "CmsisNnConvOpData": row((80, 8), (60, 4), (88, 8), (68, 4)),
    # cmsis_nn/fully_connected.cc: OpDataFullyConnected, two scratch indices, the kernel-sum
    # pointer, batches, accum_depth, output_depth.
    "CmsisNnFullyConnectedOpData": row((96, 8), (72, 4), (104, 8), (80, 4)),
    # cmsis_nn/pooling.cc: {OpDataPooling reference_op_data; int buffer_idx;}
    "CmsisNnPoolingOpData": row((36, 4), (36, 4)),
    # cmsis_nn/softmax.cc: {SoftmaxParams softmax_params; int32_t num_rows, row_size;}
    "CMSISNNSoftmaxParams": row((88, 8), (64, 8)),
}


def _avgpool_temps(node: Node) -> Sequence[TempRef]:
    # cmsis_nn/pooling.cc AveragePrepare: the reference PoolingPrepare (input, output), then
    # input and output fetched again for the CMSIS-NN buffer size.
    return _refs("i0 o0 i0 o0")


CMSIS_NN_KERNELS: dict[str, KernelData] = {
    # Input, filter, output, then output index 2 for the bias (there is none: nothing is
    # allocated), then CalculateOpDataConv's input, filter, bias, output.
    "CONV_2D": dataclasses.replace(KERNELS["CONV_2D"], op_data="CmsisNnConvOpData",
                                   temps=_fixed("i0 i1 o0 i0 i1 i2 o0"), source="cmsis_nn/conv.cc"),
    "DEPTHWISE_CONV_2D": dataclasses.replace(KERNELS["DEPTHWISE_CONV_2D"], op_data="CmsisNnConvOpData",
                                             temps=_fixed("i0 i1 o0 i0 i1 i2 o0"),
                                             source="cmsis_nn/depthwise_conv.cc"),
    "FULLY_CONNECTED": dataclasses.replace(KERNELS["FULLY_CONNECTED"], op_data="CmsisNnFullyConnectedOpData",
                                           source="cmsis_nn/fully_connected.cc"),
    "AVERAGE_POOL_2D": dataclasses.replace(KERNELS["AVERAGE_POOL_2D"], op_data="CmsisNnPoolingOpData",
                                           temps=_avgpool_temps, source="cmsis_nn/pooling.cc"),
    "MAX_POOL_2D": dataclasses.replace(KERNELS["MAX_POOL_2D"], op_data="CmsisNnPoolingOpData",
                                       source="cmsis_nn/pooling.cc"),
    "SOFTMAX": dataclasses.replace(KERNELS["SOFTMAX"], op_data="CMSISNNSoftmaxParams", source="cmsis_nn/softmax.cc"),
}

#: Kernel libraries whose arena use edgeserve models: TFLM's reference kernels, and TFLM
#: with CMSIS-NN (what a Cortex-M build ships).
KERNEL_LIBRARIES = ("reference", "cmsis-nn")


def kernels_for(library: str) -> dict[str, KernelData]:
    """The kernel table of a TFLM build with ``library`` kernels."""
    if library == "reference":
        return KERNELS
    if library == "cmsis-nn":
        return KERNELS | CMSIS_NN_KERNELS
    raise ValueError(f"kernel library must be one of {', '.join(KERNEL_LIBRARIES)}, not {library!r}")


OP_DATA.update(CMSIS_NN_OP_DATA)
