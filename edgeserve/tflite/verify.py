"""Verify a .tflite file before LiteRT or TFLM sees it: one validator for convert, verify and run.

A corrupted model must raise :class:`~edgeserve.errors.ModelFileError`, never crash the
process inside C++. :func:`validate_tflite` verifies the flatbuffer against the TFLite
schema (:mod:`edgeserve.tflite.schema`) the way the flatbuffers ``Verifier`` does (every
table, vtable, vector, string and union in bounds and aligned, the file identifier, nesting
depth and table count), then checks what LiteRT and TFLM dereference without checking:
indices (tensor, buffer, operator code, subgraph), shapes, constant buffer sizes,
quantization and sparsity parameters, the data flow (nothing reads a tensor before it has
data, nothing writes a constant), the subgraph call graph, and the quantization parameters
that kernels turn into fixed-point multipliers with checks that abort the process.

ONNX files are checked by :mod:`edgeserve.onnx_check`; what static checks cannot reach is
run in a child process by :mod:`edgeserve.runtime.backends.probe`.

Example:
    >>> model = validate_tflite(open("model.tflite", "rb").read())  # doctest: +SKIP
    >>> interpreter = Interpreter(model_content=model.file_bytes)  # doctest: +SKIP
"""

from __future__ import annotations

import math
import struct
from typing import Any, NoReturn

import numpy as np

from edgeserve.errors import ModelFileError, model_file_guard
from edgeserve.tflite.flatbuffer import _Table
from edgeserve.tflite.model import INTEGER_DTYPES, TENSOR_TYPES, TfliteModel, read_model

__all__ = ["validate_tflite"]

_MAX_ELEMENTS = (1 << 31) - 1  # kernels count elements in int32


# --- layer 1b: what the interpreter trusts ----------------------------------------------------

def validate_tflite(data: bytes, *, runtime: str = "litert") -> TfliteModel:
    """Check a .tflite file thoroughly enough that LiteRT can load and run it without crashing.

    Args:
        data: The whole file.
        runtime: "litert", or "tflm" for a model only TFLM will run: TFLM's kernels never
            read ``quantized_dimension`` of a scalar or 1-D tensor (a bias takes its channel
            axis from the filter), so an out-of-range one there (person_detect's biases say 3)
            is refused for LiteRT, which refuses it too, and allowed for TFLM.

    Returns:
        The parsed model (its ``file_bytes`` are the bytes to hand to the interpreter).

    Raises:
        ModelFileError: The file is truncated, corrupted or inconsistent; the message names
            the structure and the byte offset at fault.
    """
    if not isinstance(data, bytes):
        data = bytes(data)
    model, root = read_model(data)  # one verifying walk; semantics reads the same tables
    with model_file_guard("checking the model"):
        _Semantics(data, root, model, per_channel_only=runtime == "tflm").check()
    return model


class _Semantics:
    """The checks LiteRT's InterpreterBuilder and kernels (and TFLM) do not do before use."""

    def __init__(self, data: bytes, root: _Table, model: TfliteModel, *, per_channel_only: bool = False) -> None:
        self.data, self.root, self.model = data, root, model
        self.per_channel_only = per_channel_only  # TFLM: quantized_dimension only where kernels read it

    def fail(self, where: _Table, problem: str) -> NoReturn:
        raise ModelFileError(f"{where.path} at byte {where.pos}: {problem}")

    def check(self) -> None:
        root, model = self.root, self.model
        buffers: list[_Table] = root.get("buffers") or []
        if not buffers:
            self.fail(root, "has no buffers (buffer 0 must exist and be empty)")
        if model.buffers[0].size:
            self.fail(buffers[0], "the 0th buffer must be empty: tensors without data use it")
        for code, t in zip(model.operator_codes, root.get("operator_codes") or []):
            if code.is_custom and not code.custom_code:
                self.fail(t, "custom operator without a custom_code")
            if code.version < 1:
                self.fail(t, f"operator version {code.version} (versions start at 1)")
        for t in root.get("metadata") or []:
            if t.get("name") is None:
                self.fail(t, "metadata entry without a name")
        meta_buffers = root.get("metadata_buffer")
        if meta_buffers is not None and ((meta_buffers < 0) | (meta_buffers >= len(buffers))).any():
            self.fail(root, f"metadata_buffer names a buffer outside [0, {len(buffers)})")
        for t in root.get("signature_defs") or []:
            if t.get("signature_key") is None:
                self.fail(t, "signature without a signature_key")
        subgraphs: list[_Table] = root.get("subgraphs") or []
        for sg, st in zip(model.subgraphs, subgraphs):
            if st.get("tensors") is None:
                self.fail(st, "subgraph without a tensors vector")
            for t, tt in zip(sg.tensors, st.get("tensors")):
                self._tensor(sg, t, tt)
            # What an operator may read: constants, variables, the subgraph's inputs and what
            # earlier operators wrote. Anything else has no data yet, and kernels that read
            # weights in Prepare (LSTM, FULLY_CONNECTED) dereference its null pointer.
            ready = set(sg.inputs) | {t.index for t in sg.tensors if t.is_constant or t.is_variable}
            for op, ot in zip(sg.operators, st.get("operators") or []):
                self._operator(sg, op, ot, ready)
                ready.update(op.outputs)
        self._call_graph(subgraphs)

    def _tensor(self, sg: Any, t: Any, tt: _Table) -> None:
        count = math.prod(t.shape)
        if count > _MAX_ELEMENTS:
            self.fail(tt, f"shape {list(t.shape)} has {count} elements; kernels count in int32")
        signature = tt.get("shape_signature")
        signature = [] if signature is None or not t.shape else signature.tolist()
        if signature and (len(signature) != len(t.shape) or any(
                s not in (d, -1) for s, d in zip(signature, t.shape))):
            self.fail(tt, f"shape_signature {signature[:16]} does not match shape "
                      f"{list(t.shape)[:16]}")
        buf = self.model.buffers[t.buffer_index]
        sparsity = tt.get("sparsity")
        if t.is_constant:
            info = TENSOR_TYPES[t.type_code]
            if t.is_variable:
                self.fail(tt, "a variable tensor cannot have constant data")
            if sparsity is not None:
                self._sparsity(t, sparsity, buf.size)
            elif info.name == "string":
                self._string_buffer(tt, t, buf.offset, buf.size, count)
            elif info.bits == 0:
                self.fail(tt, f"a {info.name} tensor cannot have constant data")
            elif buf.size != t.nbytes:
                self.fail(tt, f"buffer {t.buffer_index} holds {buf.size} bytes, but shape "
                          f"{list(t.shape)[:16]} of {info.name} needs {t.nbytes}")
        q = tt.get("quantization")
        if q is not None:
            self._quantization(sg, t, q)

    def _string_buffer(self, tt: _Table, t: Any, offset: int, size: int, count: int) -> None:
        """TFLite string tensors: int32 n, n+1 int32 offsets, then the bytes."""
        if size < 4:
            self.fail(tt, f"string buffer of {size} bytes has no header")
        n = struct.unpack_from("<i", self.data, offset)[0]
        if n != count or size < 4 * (n + 2):
            self.fail(tt, f"string buffer holds {n} strings in {size} bytes; shape needs {count}")
        offsets = np.frombuffer(self.data, "<i4", n + 1, offset + 4)
        if offsets[0] != 4 * (n + 2) or offsets[-1] != size or (np.diff(offsets) < 0).any():
            self.fail(tt, "string buffer offsets are out of order or outside the buffer")

    def _quantization(self, sg: Any, t: Any, q: _Table) -> None:
        scale, zero_point = q.get("scale"), q.get("zero_point")
        n_scales = 0 if scale is None else len(scale)
        if n_scales:
            if zero_point is None or len(zero_point) != n_scales:
                self.fail(q, f"{n_scales} scales but "
                          f"{0 if zero_point is None else len(zero_point)} zero points")
            info = TENSOR_TYPES[t.type_code]
            # Kernels turn scale ratios into fixed-point multipliers; quantization_util.cc
            # aborts (TFLITE_CHECK) on a zero, negative or NaN one. Activations and weights
            # (8 and 16 bits, packed 4 and 2 bits) must have a positive scale; wider integers
            # (int32 biases, int64 indices) and floats only a finite, non-negative one.
            narrow = info.name in INTEGER_DTYPES and info.bits <= 16
            bad = ~np.isfinite(scale) | ((scale <= 0) if narrow else (scale < 0))
            if bad.any():
                self.fail(q, f"{info.name} scales must be finite and "
                          f"{'positive' if narrow else 'not negative'}, found "
                          f"{scale[bad][:4].tolist()}")
            dim = q.get("quantized_dimension")
            rank = len(t.shape)
            if self.per_channel_only and rank <= 1:
                # TFLM never reads the dimension of a per-tensor or a 1-D (bias) tensor: its
                # kernels take the channel axis from the filter. person_detect's biases say 3.
                dim = 0
            if not (0 <= dim < max(rank, 1)):
                self.fail(q, f"quantized_dimension {dim} outside [0, {rank}) for shape "
                          f"{list(t.shape)[:16]}")
            if n_scales != 1 and (rank == 0 or n_scales != t.shape[dim]):
                self.fail(q, f"{n_scales} scales for dimension {dim} of shape "
                          f"{list(t.shape)[:16]} (needs 1 or one per slice)")
            if info.numpy and np.dtype(info.numpy).kind in "iu" and info.bits <= 16:
                lo, hi = ((-(1 << (info.bits - 1)), (1 << (info.bits - 1)) - 1)
                          if np.dtype(info.numpy).kind == "i" else (0, (1 << info.bits) - 1))
                if ((zero_point < lo) | (zero_point > hi)).any():
                    self.fail(q, f"zero point outside the {info.name} range [{lo}, {hi}]")
        details = q.get("details")
        n = len(sg.tensors)
        if details is not None and details.kind in ("BlockwiseQuantization",
                                                    "MultiAxisQuantization"):
            for name in ("scales", "zero_points"):
                index = details.get(name)
                if not -1 <= index < n or (name == "scales" and index < 0):
                    self.fail(details, f"{name} names tensor {index}, outside [0, {n})")
            if details.get("block_size") <= 0 and details.kind == "BlockwiseQuantization":
                self.fail(details, f"block_size {details.get('block_size')} must be positive")
            dims = details.get("quantized_dimensions") if details.kind != \
                "BlockwiseQuantization" else None
            if dims is not None and ((dims < 0) | (dims >= max(len(t.shape), 1))).any():
                self.fail(details, f"quantized_dimensions {dims.tolist()[:16]} outside the rank")

    def _sparsity(self, t: Any, sp: _Table, nbytes: int) -> None:
        """Check a sparse constant's metadata the way FormatConverter will walk it."""
        order, block_map = sp.get("traversal_order"), sp.get("block_map")
        dim_metadata: list[_Table] = sp.get("dim_metadata") or []
        rank = len(t.shape)
        order = [] if order is None else order.tolist()
        block_map = [] if block_map is None else block_map.tolist()
        total = rank + len(block_map)
        if sorted(order) != list(range(total)) or sorted(order[:rank]) != list(range(rank)):
            self.fail(sp, f"traversal_order {order[:16]} is not a permutation of "
                      f"{total} dimensions, original ones first")
        if len(dim_metadata) != total:
            self.fail(sp, f"{len(dim_metadata)} dim_metadata entries for {total} dimensions")
        if len(set(block_map)) != len(block_map) or any(not 0 <= b < rank for b in block_map):
            self.fail(sp, f"block_map {block_map[:16]} names dimensions outside [0, {rank})")
        sizes = list(t.shape)
        for i, b in enumerate(block_map):
            block = dim_metadata[order.index(rank + i)].get("dense_size")
            if block <= 0 or sizes[b] % block:
                self.fail(sp, f"block size {block} does not divide dimension {b} ({sizes[b]})")
            sizes[b] //= block
            sizes.append(block)
        values = 1  # positions stored at the current level
        for level, dm in enumerate(dim_metadata):
            size = sizes[order[level]]
            if dm.get("format") == 0:  # DENSE
                if dm.get("dense_size") != size:
                    self.fail(dm, f"dense_size {dm.get('dense_size')} != dimension size {size}")
                values *= size
            elif dm.get("format") == 1:  # SPARSE_CSR
                seg, idx = dm.get("array_segments"), dm.get("array_indices")
                if seg is None or idx is None:
                    self.fail(dm, "sparse dimension without array_segments and array_indices")
                seg, idx = seg.get("values"), idx.get("values")
                if seg is None or idx is None or len(seg) != values + 1 or int(seg[0]) != 0 \
                        or (np.diff(seg.astype(np.int64)) < 0).any() \
                        or int(seg[-1]) != len(idx) or (idx.astype(np.int64) >= size).any() \
                        or (idx.astype(np.int64) < 0).any():
                    self.fail(dm, "array_segments/array_indices are inconsistent with the "
                              f"{values} positions and dimension size {size}")
                values = len(idx)
            else:
                self.fail(dm, f"unknown dimension format {dm.get('format')}")
        expected = (values * TENSOR_TYPES[t.type_code].bits + 7) // 8
        if expected != nbytes:
            self.fail(sp, f"sparse data needs {expected} bytes, the buffer holds {nbytes}")

    def _operator(self, sg: Any, op: Any, ot: _Table, ready: set[int]) -> None:
        for position, i in enumerate(op.inputs):
            # Custom operators may take workspace tensors nothing writes (Vela's ethos-u op
            # reads its scratch buffers this way); builtin kernels never do. Nor is there
            # anything to read in RESHAPE's shape when it has no elements: litert-torch gives
            # a reshape to a scalar such a tensor, which TFLM allocates no bytes for.
            if i >= 0 and i not in ready and not op.is_custom and not (
                    op.op_name == "RESHAPE" and position == 1 and 0 in sg.tensors[i].shape):
                t = sg.tensors[i]
                self.fail(ot, f"{op.op_name} reads tensor {i} '{t.name}' before anything wrote "
                          "it (it is not constant, a variable or a subgraph input)")
        problem = None if op.is_custom else _omitted_inputs_problem(op.op_name, op.inputs)
        if problem:
            self.fail(ot, f"{op.op_name} {problem}")
        for i in op.outputs:
            if i < 0 and not op.is_custom and op.op_name not in _OPTIONAL_OUTPUTS:
                self.fail(ot, f"{op.op_name} output cannot be omitted (-1)")
            if i >= 0 and sg.tensors[i].is_constant:
                self.fail(ot, f"{op.op_name} writes tensor {i}, which is constant data")
        options = ot.get("builtin_options")
        rule = _KERNEL_RULES.get(op.op_name)
        if rule is not None:
            problem = rule(sg, op, options)
            if problem:
                self.fail(ot, f"{op.op_name}: {problem}; LiteRT's kernel would abort the process")

    def _call_graph(self, subgraphs: list[_Table]) -> None:
        """Subgraph indices in control-flow options exist and never recurse."""
        n = len(subgraphs)
        calls: list[set[int]] = [set() for _ in range(n)]
        for s, st in enumerate(subgraphs):
            for ot in st.get("operators") or []:
                for options in (ot.get("builtin_options"), ot.get("builtin_options_2")):
                    for target in _called_subgraphs(options):
                        if not 0 <= target < n:
                            self.fail(options, f"calls subgraph {target}, outside [0, {n})")
                        calls[s].add(target)
        state = [0] * n  # 0 unvisited, 1 on the stack, 2 done
        for start in range(n):
            stack = [(start, iter(sorted(calls[start])))]
            if state[start]:
                continue
            state[start] = 1
            while stack:
                node, children = stack[-1]
                child = next(children, None)
                if child is None:
                    state[node] = 2
                    stack.pop()
                elif state[child] == 1:
                    self.fail(subgraphs[node], f"subgraph {node} calls subgraph {child}, "
                              "which is already running: recursion would never end")
                elif state[child] == 0:
                    state[child] = 1
                    stack.append((child, iter(sorted(calls[child]))))


# Inputs a builtin kernel may find omitted (-1), from LiteRT's kernels (GetOptionalInputTensor
# and explicit kTfLiteOptionalTensor checks); None: any but the first. Elsewhere -1 reaches code
# that dereferences it: the XNNPACK delegate crashes on an omitted CONV_2D filter, ADD or MUL
# operand, the builtin RESHAPE and TRANSPOSE kernels on their second input.
_LSTM_OPTIONAL = frozenset({1, 5, 9, 10, 11, 12, 16, 17, 20, 21, 22, 23})
_OPTIONAL_INPUTS: dict[str, frozenset[int] | None] = {
    "FULLY_CONNECTED": frozenset({2}), "SVDF": frozenset({3}), "TRANSPOSE_CONV": frozenset({3}),
    "PAD": frozenset({2}), "PADV2": frozenset({2}), "CONV_2D": frozenset({2}),
    "DEPTHWISE_CONV_2D": frozenset({2}),  # both refuse an omitted bias cleanly
    "LSTM": _LSTM_OPTIONAL, "UNIDIRECTIONAL_SEQUENCE_LSTM": _LSTM_OPTIONAL,
    "BIDIRECTIONAL_SEQUENCE_LSTM": frozenset(
        {1, 5, 9, 10, 11, 12, 16, 17} | {18, 22, 26, 27, 28, 29, 33, 34} | set(range(39, 48))),
    "BIDIRECTIONAL_SEQUENCE_RNN": frozenset({9, 10, 11}),
    "IF": None, "STABLEHLO_CASE": None, "STABLEHLO_COMPOSITE": None,
}
_OPTIONAL_OUTPUTS = frozenset({"IF", "WHILE", "STABLEHLO_CASE", "STABLEHLO_COMPOSITE"})
# The coupled LSTM gates (first index of each direction): without input-to-input weights the
# cell is CIFG and the input gate's recurrent weights and bias must go too; the kernel
# dereferences the input gate bias whenever input-to-input weights are present.
_LSTM_GATES = {"LSTM": (0,), "UNIDIRECTIONAL_SEQUENCE_LSTM": (0,),
               "BIDIRECTIONAL_SEQUENCE_LSTM": (0, 17)}


def _omitted_inputs_problem(op_name: str, inputs: tuple[int, ...]) -> str | None:
    omitted = {k for k, i in enumerate(inputs) if i < 0}
    if not omitted:
        return None
    optional = _OPTIONAL_INPUTS.get(op_name, frozenset())
    allowed = set(range(1, len(inputs))) if optional is None else optional
    if omitted - allowed:
        return (f"input {min(omitted - allowed)} cannot be omitted (-1); "
                f"optional inputs: {sorted(allowed) or 'none'}")
    for base in _LSTM_GATES.get(op_name, ()):
        cifg = [base + k in omitted for k in (1, 5, 12)]
        if any(cifg) and not all(cifg):
            return (f"input-to-input weights, recurrent-to-input weights and input gate bias "
                    f"(inputs {base + 1}, {base + 5}, {base + 12}) must be all present or all "
                    "omitted")
    return None


_SUBGRAPH_FIELDS = {
    "IfOptions": ("then_subgraph_index", "else_subgraph_index"),
    "WhileOptions": ("cond_subgraph_index", "body_subgraph_index"),
    "CallOptions": ("subgraph",),
    "CallOnceOptions": ("init_subgraph_index",),
    "StablehloWhileOptions": ("cond_subgraph_index", "body_subgraph_index"),
    "StablehloReduceOptions": ("body_subgraph_index",),
    "StablehloReduceWindowOptions": ("body_subgraph_index",),
    "StablehloSortOptions": ("comparator_subgraph_index",),
    "StablehloScatterOptions": ("update_computation_subgraph_index",),
    "StableHLOCompositeOptions": ("decomposition_subgraph_index",),
    "StablehloCaseOptions": ("branch_subgraph_indices",),
    "StablehloCustomCallOptions": ("called_computations",),
}


def _called_subgraphs(options: _Table | None) -> list[int]:
    if options is None:
        return []
    out: list[int] = []
    for name in _SUBGRAPH_FIELDS.get(options.kind, ()):
        value = options.get(name)
        if isinstance(value, np.ndarray):
            out.extend(int(v) for v in value)
        elif value is not None:
            out.append(int(value))
    return out


# --- kernel preconditions that end in abort() ---------------------------------------------------
# LiteRT kernels turn quantization scales into fixed-point multipliers in Prepare (or Eval) with
# functions from kernels/internal/quantization_util.cc that TFLITE_CHECK their argument: a
# failed check aborts the process instead of returning an error. Each rule returns the problem,
# or None. The int8/uint8 (and non-power-of-two int16) paths are the ones that call them.

def _scale(sg: Any, index: int) -> float:
    """The per-tensor scale a kernel sees (TfLiteTensor.params.scale): the first, or 0."""
    if index < 0:
        return 0.0
    q = sg.tensors[index].quantization
    return float(np.float32(q.scale[0])) if q is not None and q.scale else 0.0


def _quantized_io(sg: Any, op: Any, n_inputs: int) -> tuple[str, list[float], float] | None:
    if len(op.inputs) < n_inputs or not op.outputs or min(op.inputs[:n_inputs]) < 0:
        return None
    out = sg.tensors[op.outputs[0]]
    return (out.dtype_name, [_scale(sg, i) for i in op.inputs[:n_inputs]],
            _scale(sg, op.outputs[0]))


def _is_pot(scale: float) -> bool:
    return scale > 0 and abs(math.log2(scale) - round(math.log2(scale))) < 1e-3


def _add_sub_rule(sg: Any, op: Any, options: _Table | None) -> str | None:
    io = _quantized_io(sg, op, 2)
    if io is None or io[0] not in ("int8", "uint8", "int16"):
        return None
    dtype, (s1, s2), so = io
    if dtype == "int16" and all(_is_pot(s) for s in (s1, s2, so)):
        return None  # the power-of-two int16 path computes no multipliers
    if min(s1, s2, so) <= 0:
        return f"input scales {s1:g}, {s2:g} and output scale {so:g} must be positive"
    left_shift = 15 if dtype == "int16" else 20
    out_multiplier = 2 * max(s1, s2) / ((1 << left_shift) * so)
    if op.op_name == "ADD" and out_multiplier >= 1:
        return (f"output multiplier {out_multiplier:g} (2 * max input scale / 2**{left_shift} / "
                "output scale) must be below 1")
    if out_multiplier == 1:  # SUB picks GreaterThanOne only above 1, SmallerThanOne below
        return "output multiplier is exactly 1"
    return None


def _squared_difference_rule(sg: Any, op: Any, options: _Table | None) -> str | None:
    io = _quantized_io(sg, op, 2)
    if io is None or io[0] != "int8":
        return None
    _, (s1, s2), so = io
    if min(s1, s2, so) <= 0:
        return f"input scales {s1:g}, {s2:g} and output scale {so:g} must be positive"
    if (2 * max(s1, s2)) ** 2 / ((1 << 14) * so) >= 1:
        return "output multiplier (2 * max input scale)**2 / 2**14 / output scale must be below 1"
    return None


def _comparison_rule(sg: Any, op: Any, options: _Table | None) -> str | None:
    if len(op.inputs) < 2 or min(op.inputs[:2]) < 0:
        return None
    if sg.tensors[op.inputs[0]].dtype_name not in ("int8", "uint8", "int16"):
        return None
    scales = [_scale(sg, i) for i in op.inputs[:2]]
    # QuantizeMultiplier sends 1.0 to QuantizeMultiplierGreaterThanOne, which checks > 1.
    if min(scales) <= 0 or 1.0 in scales:
        return f"input scales {scales} must be positive and not exactly 1"
    return None


def _softmax_rule(sg: Any, op: Any, options: _Table | None) -> str | None:
    if not op.inputs or op.inputs[0] < 0:
        return None
    if sg.tensors[op.inputs[0]].dtype_name not in ("int8", "uint8"):
        return None
    beta = options.get("beta") if options is not None and options.kind == "SoftmaxOptions" else (
        0.0 if op.op_name == "SOFTMAX" else 1.0)
    # PreprocessSoftmaxScaling: beta * input scale * 2**(31 - 5) goes to GreaterThanOne
    # (the reference kernel; the optimized one builds a table and survives).
    if not beta * _scale(sg, op.inputs[0]) * (1 << 26) > 1:  # also false for NaN
        return f"beta {beta:g} * input scale {_scale(sg, op.inputs[0]):g} must exceed 2**-26"
    return None


_KERNEL_RULES = {
    "ADD": _add_sub_rule, "SUB": _add_sub_rule, "SQUARED_DIFFERENCE": _squared_difference_rule,
    "SOFTMAX": _softmax_rule, "LOG_SOFTMAX": _softmax_rule,
    **{name: _comparison_rule for name in ("EQUAL", "NOT_EQUAL", "LESS", "LESS_EQUAL",
                                           "GREATER", "GREATER_EQUAL")},
}
