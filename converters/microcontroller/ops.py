"""The TFLite operators TensorFlow Lite for Microcontrollers (TFLM) can run, and their flash cost.

:data:`SUPPORTED` maps each builtin operator TFLM has a kernel for to the
``tflite::MicroMutableOpResolver`` method that registers it, the highest operator version
its kernel implements, and an estimate of the flash the kernel adds. :func:`resolve_ops`
checks a model against it and returns what the generated resolver must register.

Where the facts come from (read, not copied):

* Operators and resolver methods: ``tensorflow/lite/micro/micro_mutable_op_resolver.h`` of
  tflite-micro commit 90b983c2b3f1480642e040bbd2ddb37b998f3424 (2026-08-20), the newest
  source available to us. The pinned wheel (0.dev20261023182759, built from 8f6596d) is newer;
  a test checks that every operator here has a ``Register_*`` kernel in that wheel.
* Highest versions: TFLM's resolver ignores versions, but a kernel fails in Prepare or Eval on
  a feature it lacks (int16 activations, hybrid weights, more than 4 dimensions, ...).
  We read what each kernel under ``tensorflow/lite/micro/kernels/`` at that commit accepts,
  and which feature each version stands for in TensorFlow's
  ``tensorflow/lite/tools/versioning/op_version.cc``. The comment on each row lists the
  versions and features that decided it.

What ``max_version`` means, honestly: the highest version whose defining feature TFLM
implements. Versions are numbered per feature, not per capability, so a lower version can
still name something TFLM lacks (FULLY_CONNECTED 3 is hybrid float x int8, which TFLM
rejects in Prepare). We do not reject those lower versions: old converters numbered
differently (person_detect.tflite's int8 CONV_2D is version 2, which today means hybrid),
so rejecting them would refuse models TFLM runs. Hybrid models are caught by the full-integer
check instead (:meth:`TfliteModel.is_full_integer`). Where the version rules did not let us
tell what a version means, we chose the lower bound and say so.

Custom operators (``CUSTOM`` with a custom code) are reported as unsupported: the generated
resolver registers builtin operators only. :data:`TFLM_CUSTOM_KERNELS` lists the custom codes
TFLM ships kernels for, so the error can say which method would register one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, NoReturn

from edgeserve.errors import UnsupportedOpError

if TYPE_CHECKING:
    from edgeserve.tflite.model import Operator, Subgraph, TfliteModel

TARGET = "mcu"
TFLM_COMMIT = "90b983c2b3f1480642e040bbd2ddb37b998f3424"


@dataclass(frozen=True)
class TflmOp:
    """One builtin operator TFLM can run.

    Attributes:
        builtin: BuiltinOperator name, as :attr:`edgeserve.tflite.model.Operator.op_name`.
        resolver_method: the ``tflite::MicroMutableOpResolver`` method that registers it.
        max_version: the highest operator version whose feature the TFLM kernel implements.
        code_bytes: estimated Cortex-M4 flash the kernel adds (method beside the table).
    """

    builtin: str
    resolver_method: str
    max_version: int
    code_bytes: int


@dataclass(frozen=True)
class OpUse:
    """A builtin operator a model uses: its highest version and how many layers use it."""

    builtin: str
    version: int
    count: int
    resolver_method: str
    code_bytes: int


# --- Code size -----------------------------------------------------------------------------
# ESTIMATES FROM A MEASUREMENT, not guarantees. How they were made (2026-11-22):
# * Sources: the tflite-micro tree above with its reference kernels (no CMSIS-NN),
#   flatbuffers v25.9.23 with TFLM's patch, gemmlowp's fixedpoint headers, and a no-op
#   stand-in for ruy's profiling label (an empty class unless RUY_PROFILER is defined, which
#   TFLM builds never define).
# * Compiler: arm-none-eabi-g++ 12.2.1 20221205 (Debian gcc-arm-none-eabi 15:12.2.rel1-1),
#   newlib-nano 3.3.0. Flags of TFLM's Makefile for TARGET=cortex_m_generic
#   TARGET_ARCH=cortex-m4+fp, default build type: -mcpu=cortex-m4 -mfpu=fpv4-sp-d16
#   -mfloat-abi=hard -mthumb -std=c++17 -fno-rtti -fno-exceptions -fno-threadsafe-statics
#   -ffunction-sections -fdata-sections -DTF_LITE_STATIC_MEMORY; the core at -Os and the
#   kernels at -O2 (the Makefile's levels); error strings kept.
# * Probes: a program that builds a MicroInterpreter, registers one operator and calls
#   AllocateTensors and Invoke, linked with --gc-sections --specs=nano.specs
#   --specs=nosys.specs; flash = text + data reported by arm-none-eabi-size. Also linked: an
#   empty program, the program with no operator, and programs registering all operators of
#   kws_ref_model, mobilenet_v2 and trained_lstm, and all 100 operators.
# * Split: the interpreter is the no-operator program minus the empty one (whose 1.1 KB of
#   C start-up belongs to the application). Input sections
#   (read from the linker maps) that at least 10 of the 100 one-operator programs link are
#   shared kernel support (soft double arithmetic, QuantizeMultiplier, kernel helpers),
#   counted once in CORE_CODE_BYTES. An operator's figure is its program minus the
#   no-operator program minus the shared support it pulled in.
# * Check, CORE_CODE_BYTES + the sum of a model's figures against its real program:
#   kws_ref_model +9.6%, mobilenet_v2 +8.6%, trained_lstm +5.7%, all 100 operators +30%.
#   Always over, because code shared by fewer than 10 operators (pooling for AVERAGE and
#   MAX, comparison helpers, ...) is counted for each of them. With the kernels at -Os too,
#   the same real programs are 7-15% smaller (kws -12%, mobilenet_v2 -15%, lstm -7%);
#   CMSIS-NN kernels or link-time optimisation change them further. Treat these as a budget.
_INTERPRETER_CODE_BYTES = 28_636  # MicroInterpreter, allocator, planner, flatbuffer access, log
_KERNEL_SUPPORT_CODE_BYTES = 4_822  # what nearly every kernel links (see above)
#: Flash of TFLM itself before any operator: the interpreter and the shared kernel support.
CORE_CODE_BYTES = _INTERPRETER_CODE_BYTES + _KERNEL_SUPPORT_CODE_BYTES

# --- The table -----------------------------------------------------------------------------
# (builtin, resolver method, max version, code bytes). "vN" is a version from op_version.cc;
# "no ..." is a feature of a higher version the TFLM kernel lacks; "lacks ..." a feature of
# a lower version it lacks (accepted anyway, see the module docstring).
_ROWS: tuple[tuple[str, str, int, int], ...] = (
    ("ABS", "AddAbs", 4, 2_420),  # int8 v2, int16 quantized v3 and raw v4; no int32 v5
    ("ADD", "AddAdd", 3, 10_313),  # int8 v2, int16 with any scale v3; no int64 v4, raw int16 v5
    ("ADD_N", "AddAddN", 1, 2_837),  # one version
    ("ARG_MAX", "AddArgMax", 2, 2_259),  # int8 v2; no bool input v3
    ("ARG_MIN", "AddArgMin", 2, 2_259),  # int8 v2; no bool input v3
    ("ASSIGN_VARIABLE", "AddAssignVariable", 1, 1_590),  # one version
    ("AVERAGE_POOL_2D", "AddAveragePool2D", 3, 4_733),  # int8 v2, int16 v3
    ("BATCH_MATMUL", "AddBatchMatMul", 3, 10_045),  # int8 v2, int16 v3; no hybrid v4
    ("BATCH_TO_SPACE_ND", "AddBatchToSpaceNd", 3, 2_399),  # int8 v2, 3-D input v3; no int16 v4
    ("BROADCAST_ARGS", "AddBroadcastArgs", 1, 1_658),  # one version
    ("BROADCAST_TO", "AddBroadcastTo", 3, 2_496),  # starts at v2; int8/int16 v3 (copies bytes)
    ("CALL_ONCE", "AddCallOnce", 1, 724),  # one version
    ("CAST", "AddCast", 3, 2_147),  # uint32 v2, int8 v3; no uint16 v4, float16/64 v5, int4 v6
    ("CEIL", "AddCeil", 1, 1_411),  # one version
    ("CONCATENATION", "AddConcatenation", 3, 5_703),  # int8 v2, int16 v3; no uint32 v4
    # int8 v3, grouped v6, int4 filters v7, int16 x int8 with int32 bias v8;
    # lacks the lower hybrid v2/v5 and int16-filter v4 (see the module docstring)
    ("CONV_2D", "AddConv2D", 8, 10_680),
    ("COS", "AddCos", 1, 5_153),  # one version (float)
    ("CUMSUM", "AddCumSum", 1, 3_095),  # one version
    ("DEPTH_TO_SPACE", "AddDepthToSpace", 2, 2_692),  # int8 v2
    # dilation v2, int8 v3, int4 filters v7; lacks hybrid v4/v6 and int16 filters v5
    ("DEPTHWISE_CONV_2D", "AddDepthwiseConv2D", 7, 9_288),
    # int8 v2, int16 v3 (but not float16, also v3); no per-channel v5, int4 v6
    ("DEQUANTIZE", "AddDequantize", 3, 2_263),
    ("DIV", "AddDiv", 2, 8_321),  # broadcast beyond 4-D v2 (int8 and int32 are v1)
    ("DYNAMIC_UPDATE_SLICE", "AddDynamicUpdateSlice", 2, 3_369),  # int64 indices v2
    ("ELU", "AddElu", 1, 2_742),  # one version
    # Conservative: today's rules emit only v1 and v4 (int4 / per-channel, which TFLM lacks);
    # v2-v3 came from older converters and we could not confirm what they mean.
    ("EMBEDDING_LOOKUP", "AddEmbeddingLookup", 1, 3_258),
    ("EQUAL", "AddEqual", 2, 9_201),  # int8 v2; no string v3, int16 v4
    ("EXP", "AddExp", 1, 1_982),  # float only; no int8/int16 v2
    ("EXPAND_DIMS", "AddExpandDims", 1, 1_747),  # one version
    ("FILL", "AddFill", 3, 1_735),  # int8/int16 v3; lacks bool/string v2; no float16 v4
    ("FLOOR", "AddFloor", 1, 747),  # one version
    ("FLOOR_DIV", "AddFloorDiv", 2, 2_933),  # float v2; lacks int32 v1; no int8/int16 v3
    ("FLOOR_MOD", "AddFloorMod", 1, 3_018),  # float only; no int8/int16 v2
    # int8 v4, keep_num_dims v5, no bias v6, int4 filters v10, int16 x int8 with int32
    # bias v11; lacks hybrid v3/v9/v12, int16 filters v7, sparse v8, int16 x int4 v13
    ("FULLY_CONNECTED", "AddFullyConnected", 11, 6_426),
    # int8 v2, batch_dims v5; lacks bool v3 and int16 v4; no int16 indices v6, int4 v7
    ("GATHER", "AddGather", 5, 2_776),
    ("GATHER_ND", "AddGatherNd", 1, 2_156),  # no string v2, int16 v3/v4, bool v5
    ("GREATER", "AddGreater", 2, 10_801),  # int8 v2
    ("GREATER_EQUAL", "AddGreaterEqual", 2, 7_857),  # int8 v2; no int16 v3
    ("HARD_SWISH", "AddHardSwish", 1, 2_247),  # one version
    ("IF", "AddIf", 1, 2_241),  # one version
    ("L2_NORMALIZATION", "AddL2Normalization", 2, 2_745),  # int8 output v2
    ("L2_POOL_2D", "AddL2Pool2D", 1, 3_861),  # one version (float)
    ("LEAKY_RELU", "AddLeakyRelu", 2, 1_868),  # int16 v2
    ("LESS", "AddLess", 2, 7_857),  # int8 v2; no int16 v3
    ("LESS_EQUAL", "AddLessEqual", 2, 7_857),  # int8 v2
    ("LOG", "AddLog", 1, 1_640),  # float only; no int8/int16 v2
    ("LOG_SOFTMAX", "AddLogSoftmax", 2, 6_299),  # int8 v2
    ("LOGICAL_AND", "AddLogicalAnd", 1, 1_622),  # one version
    ("LOGICAL_NOT", "AddLogicalNot", 1, 1_009),  # one version
    ("LOGICAL_OR", "AddLogicalOr", 1, 1_622),  # one version
    ("LOGISTIC", "AddLogistic", 3, 5_721),  # int8 v2, int16 v3
    ("MAX_POOL_2D", "AddMaxPool2D", 3, 4_693),  # int8 v2, int16 v3
    ("MAXIMUM", "AddMaximum", 4, 7_291),  # int8 v2, 5-D broadcast v3, int16 v4
    ("MEAN", "AddMean", 3, 6_182),  # int8 v2, int16 v3
    ("MINIMUM", "AddMinimum", 4, 7_291),  # int8 v2, 5-D broadcast v3, int16 v4
    ("MIRROR_PAD", "AddMirrorPad", 2, 1_406),  # int8 v2; no int16 v3
    ("MUL", "AddMul", 4, 9_868),  # int8 v2/v3, int16 v4; no int64 v5, complex v6, raw int16 v7
    ("NEG", "AddNeg", 1, 483),  # one version
    ("NOT_EQUAL", "AddNotEqual", 2, 9_137),  # int8 v2; no string v3
    ("PACK", "AddPack", 3, 1_793),  # int8 v2, int16 v3; no uint32 v4
    ("PAD", "AddPad", 4, 5_077),  # int8 v2, int16 v3, 5-D v4
    ("PADV2", "AddPadV2", 4, 5_077),  # int8 v2, int16 v3, 5-D v4
    ("PRELU", "AddPrelu", 1, 4_694),  # one version
    ("QUANTIZE", "AddQuantize", 2, 3_084),  # int16 output v2; no per-channel v3, int4 v4
    ("READ_VARIABLE", "AddReadVariable", 1, 742),  # one version
    ("REDUCE_ALL", "AddReduceAll", 1, 3_271),  # one version
    ("REDUCE_MAX", "AddReduceMax", 2, 3_579),  # int8 v2; no int16 v3
    ("REDUCE_MIN", "AddReduceMin", 2, 3_579),  # int8 v2; no int16 v3
    ("RELU", "AddRelu", 3, 1_644),  # int8 v2, int16 v3
    ("RELU6", "AddRelu6", 3, 1_461),  # int8 v2, int16 v3
    ("RESHAPE", "AddReshape", 1, 1_838),  # one version
    ("RESIZE_BILINEAR", "AddResizeBilinear", 3, 4_428),  # int8 v2, half-pixel v3; no int16 v4
    # int8 v2, half-pixel / align-corners v3, int16 v4
    ("RESIZE_NEAREST_NEIGHBOR", "AddResizeNearestNeighbor", 4, 4_017),
    ("REVERSE_V2", "AddReverseV2", 3, 5_809),  # bool v2, int8 v3
    ("ROUND", "AddRound", 1, 1_507),  # one version
    ("RSQRT", "AddRsqrt", 2, 3_431),  # int8 v2; no int16 v3
    ("SELECT_V2", "AddSelectV2", 1, 7_565),  # no uint32 v2
    ("SHAPE", "AddShape", 1, 725),  # one version
    ("SIN", "AddSin", 1, 5_153),  # one version (float)
    ("SLICE", "AddSlice", 5, 3_899),  # int8 v2, int16 v4, 5-D v5; lacks string v3; no uint32 v6
    ("SOFTMAX", "AddSoftmax", 3, 8_271),  # int8 v2, int16 v3
    ("SPACE_TO_BATCH_ND", "AddSpaceToBatchNd", 3, 2_623),  # int8 v2, 3-D input v3; no int16 v4
    ("SPACE_TO_DEPTH", "AddSpaceToDepth", 2, 2_732),  # int8 v2
    ("SPLIT", "AddSplit", 4, 2_163),  # int8 v2, int32 v3, int16 v4
    ("SPLIT_V", "AddSplitV", 2, 2_615),  # int8 v2
    ("SQRT", "AddSqrt", 1, 1_128),  # one version (float)
    ("SQUARE", "AddSquare", 1, 1_009),  # one version (float)
    ("SQUARED_DIFFERENCE", "AddSquaredDifference", 2, 8_422),  # int8 v2
    ("SQUEEZE", "AddSqueeze", 1, 1_493),  # no string v2
    # int8 v2, bool v3; no 5-D v4 (TFLM stops at 4-D), string v5, ellipsis/new-axis
    # masks v6, uint32 v7, offset v8
    ("STRIDED_SLICE", "AddStridedSlice", 3, 13_843),
    # int8 v2, 5-D broadcast v3, int16 with any scale v5; lacks int64 v4
    ("SUB", "AddSub", 5, 10_513),
    ("SUM", "AddSum", 2, 6_402),  # int8 v2
    ("SVDF", "AddSvdf", 3, 8_117),  # int8 v3; lacks hybrid v2; no hybrid v4
    ("TANH", "AddTanh", 3, 6_225),  # int8 v2, int16 v3
    # int8 v2, 5-D v4, int16 v5; lacks bool v3; no 6-D v6
    ("TRANSPOSE", "AddTranspose", 5, 2_679),
    # int8 v2, bias input v3, fused activation v4; no int16 x int8 with int32 bias v5
    ("TRANSPOSE_CONV", "AddTransposeConv", 4, 9_986),
    # int8 v1, int16 activations v5; lacks hybrid v2/v3 and diagonal recurrent weights v4
    ("UNIDIRECTIONAL_SEQUENCE_LSTM", "AddUnidirectionalSequenceLSTM", 5, 16_579),
    ("UNPACK", "AddUnpack", 4, 1_573),  # int8 v2, int16 v4; lacks bool v3
    ("VAR_HANDLE", "AddVarHandle", 1, 836),  # one version
    ("WHILE", "AddWhile", 1, 2_651),  # one version
    ("ZEROS_LIKE", "AddZerosLike", 1, 934),  # one version
)

#: Builtin operator name -> what TFLM offers for it.
SUPPORTED: Mapping[str, TflmOp] = MappingProxyType({row[0]: TflmOp(*row) for row in _ROWS})

#: Custom codes TFLM ships kernels for -> the resolver method that registers each.
#: ("ethos-u" is registered only in TFLM builds for Arm Ethos-U NPUs.)
TFLM_CUSTOM_KERNELS: Mapping[str, str] = MappingProxyType({
    "CIRCULAR_BUFFER": "AddCircularBuffer",
    "SignalDelay": "AddDelay",
    "SignalEnergy": "AddEnergy",
    "SignalFftAutoScale": "AddFftAutoScale",
    "SignalFilterBank": "AddFilterBank",
    "SignalFilterBankLog": "AddFilterBankLog",
    "SignalFilterBankSpectralSubtraction": "AddFilterBankSpectralSubtraction",
    "SignalFilterBankSquareRoot": "AddFilterBankSquareRoot",
    "SignalFramer": "AddFramer",
    "SignalIrfft": "AddIrfft",
    "SignalOverlapAdd": "AddOverlapAdd",
    "SignalPCAN": "AddPCAN",
    "SignalRfft": "AddRfft",
    "SignalStacker": "AddStacker",
    "SignalWindow": "AddWindow",
    "TFLite_Detection_PostProcess": "AddDetectionPostprocess",
    "TFLM_DECODE": "AddDecode",
    "ethos-u": "AddEthosU",
})

_LAYERS_SHOWN = 3  # per problem; a 50-layer CONV_2D problem lists three and counts the rest

# Kernels with no int16 path at TFLM_COMMIT (resize_bilinear.cc: "requires float or int8"),
# checked by data type: ai-edge-quantizer writes an int16 RESIZE_BILINEAR at version 3, not
# the 4 that would fail the version check above, and TFLM's Python interpreter then fails at
# Invoke without a word of why (MediaPipe's palm detector with the int16x8 remedy).
NO_INT16 = {"RESIZE_BILINEAR": "float and int8"}
# Kernels with no int8 path either (elementwise.cc: SQRT is float only), though LiteRT runs the
# int8 form; the mcu target looks it up in a table from a float source (int8_lookup.py).
NO_INT8 = {"SQRT": "float"}


def resolve_ops(model: TfliteModel) -> list[OpUse]:
    """Check every operator of ``model`` against TFLM and list what the resolver must register.

    Operators of every subgraph count (TFLM runs the bodies of IF and WHILE from the same
    resolver). An operator code used at several versions is reported at the highest.

    Returns:
        One :class:`OpUse` per distinct builtin operator, sorted by name.

    Raises:
        UnsupportedOpError: at least one operator has no TFLM kernel, is a custom operator, or
            has a version newer than TFLM implements. Every problem is in the one message,
            each with the operator, its version, the layers (index and first output tensor)
            and what to do.
    """
    versions: dict[str, int] = {}
    counts: dict[str, int] = defaultdict(int)
    # (op name, version, is custom[, "int16"]) -> the layers with that problem
    problems: dict[tuple, list[str]] = defaultdict(list)
    for subgraph in model.subgraphs:
        for op in subgraph.operators:
            known = SUPPORTED.get(op.op_name)
            if op.op_name in NO_INT16 and any(subgraph.tensors[i].dtype_name == "int16" for i in op.outputs if i >= 0):
                problems[(op.op_name, op.version, False, "int16")].append(_layer(subgraph, op, model))
                continue
            if op.op_name in NO_INT8 and any(subgraph.tensors[i].dtype_name in ("int8", "int16")
                                             for i in op.outputs if i >= 0):
                problems[(op.op_name, op.version, False, "integer")].append(_layer(subgraph, op, model))
                continue
            if op.is_custom or known is None or op.version > known.max_version:
                problems[(op.op_name, op.version, op.is_custom)].append(
                    _layer(subgraph, op, model))
                continue
            versions[op.op_name] = max(op.version, versions.get(op.op_name, op.version))
            counts[op.op_name] += 1
    if problems:
        _raise(problems)
    return [OpUse(name, versions[name], counts[name], SUPPORTED[name].resolver_method,
                  SUPPORTED[name].code_bytes) for name in sorted(versions)]


def _layer(subgraph: Subgraph, op: Operator, model: TfliteModel) -> str:
    where = f"subgraph {subgraph.index} " if len(model.subgraphs) > 1 else ""
    output = next((subgraph.tensors[i].name for i in op.outputs if i >= 0), "")
    return f"{where}layer {op.index} ('{output}')" if output else f"{where}layer {op.index}"


# What to do, per kind of problem; said once however many layers have it.
_ADVICE = {
    "custom_tflm": "Custom operators are not registered by edgeserve's generated resolver: "
                   "call the named MicroMutableOpResolver method yourself after RegisterOps "
                   "(with one more resolver slot each), or rewrite those layers with builtin "
                   "operators.",
    "custom": "A custom operator without a TFLM kernel needs one: write it and register it "
              "with MicroMutableOpResolver::AddCustom, or rewrite the layer with builtin "
              "operators.",
    "no_kernel": "Replace layers TFLM has no kernel for with supported operators in the "
                 "source model.",
    "int16": "Those layers are int16 because tflite-int8 chose int16 activations (int8 ones missed the quality "
             "bound): accept the int8 model with a looser bound (--min-sqnr, --min-detection-match), or replace "
             "the layer in the source model.",
    "integer": "From a float source (Keras, PyTorch, ONNX, a float .tflite) -t mcu looks an int8 SQRT up in a "
               "table of LiteRT's results; from an INT8 .tflite there is no float model to judge that against.",
    "too_new": "A version above TFLM's needs a feature its kernel lacks (a newer data type, "
               "more dimensions or a new option): quantize to int8 (or int16 activations "
               "where supported), or simplify or replace the layer.",
}


def _diagnose(op_name: str, version: int, is_custom: bool, *why: str) -> tuple[str, str]:
    """What is wrong with one operator code, and the kind of problem (a key of _ADVICE)."""
    if why == ("int16",):
        return f"TFLM's {op_name} kernel takes {NO_INT16[op_name]} only, and this layer is int16", "int16"
    if why == ("integer",):
        return f"TFLM's {op_name} kernel takes {NO_INT8[op_name]} only, and this layer is integer", "integer"
    if is_custom:
        method = TFLM_CUSTOM_KERNELS.get(op_name)
        if method:
            return (f"custom operator; TFLM registers its kernel with "
                    f"MicroMutableOpResolver::{method}", "custom_tflm")
        return "custom operator with no TFLM kernel", "custom"
    known = SUPPORTED.get(op_name)
    if known is None:
        return "TFLM has no kernel for this operator", "no_kernel"
    return f"TFLM implements {op_name} up to version {known.max_version}", "too_new"


def _raise(problems: dict[tuple, list[str]]) -> NoReturn:
    lines, kinds = [], []
    for (op_name, version, is_custom, *why), layers in problems.items():
        shown = ", ".join(layers[:_LAYERS_SHOWN])
        more = f" and {len(layers) - _LAYERS_SHOWN} more" if len(layers) > _LAYERS_SHOWN else ""
        reason, kind = _diagnose(op_name, version, is_custom, *why)
        lines.append(f"{op_name} version {version} at {shown}{more}: {reason}.")
        kinds.append(kind)
    if len(lines) > 1:
        lines = [f"{len(lines)} problems:"] + [f"({i}) {line}" for i, line in enumerate(lines, 1)]
    advice = [_ADVICE[kind] for kind in _ADVICE if kind in kinds]
    first_op = next(iter(problems))[0]
    raise UnsupportedOpError(first_op, TARGET, SUPPORTED, " ".join(lines + advice))
