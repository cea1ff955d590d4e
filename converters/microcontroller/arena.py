"""edgeserve's offline plan of a TFLM tensor arena's head (the activation memory).

TFLM splits its single arena in two. The *head* holds every tensor that is neither a
weight nor persistent, plus the scratch buffers kernels ask for; tensors whose lifetimes
do not overlap share bytes. The *tail* holds persistent data (see ``persistent.py``).
This module reproduces the head exactly, so ``arena_head_bytes`` is a computed number
that the real interpreter can be held to, not a guess:

1. **Which buffers.** A tensor is planned when it has no data in the file (not a weight),
   is not a variable (variables are persistent), and is not empty. Its size is the
   element count times the element size (int4 unpacks to one byte), rounded up to TFLM's
   16-byte buffer alignment. Kernel scratch buffers are planned after all tensors.
2. **Lifetimes.** Time advances one step per operator, in execution order, starting
   after a step 0 at which the subgraph's inputs exist. A tensor lives from the operator
   that writes it (or step 0 for inputs) to the last operator that reads it; the
   subgraph's outputs live to the last step. A scratch buffer lives for its operator.
3. **Placement.** Greedy by size: buffers are taken largest first (ties: the one added
   last goes first, as TFLM's stable bubble sort of a reversed list leaves them) and each
   goes in the lowest gap, scanning buffers placed so far in offset order, that is free
   for its whole lifetime. Buffers with an offline-planned offset (the
   ``OfflineMemoryAllocation`` metadata) keep it and are placed first.
4. **Head** = the highest end offset of any placed buffer.

Facts about TFLM's planner (greedy_memory_planner.cc, micro_allocation_info.cc,
micro_allocator.cc) were read from tensorflow/tflite-micro at 90b983c2 (Aug 2026) and
are checked against the tflite-micro wheel's own report by tests/test_mcu_arena.py.
"""

from __future__ import annotations

import dataclasses
import math
import struct
from collections.abc import Sequence

from edgeserve.errors import ModelFileError, UnsupportedOpError
from edgeserve.tflite.model import Operator, Subgraph, Tensor, TfliteModel

ALIGNMENT = 16  # MicroArenaBufferAlignment(): every planned buffer starts and ends on it
_OFFLINE_METADATA = "OfflineMemoryAllocation"
_ONLINE = -1  # an offline plan's marker for "let the online planner choose"
_CONTROL_FLOW = ("IF", "WHILE", "CALL_ONCE")


@dataclasses.dataclass(frozen=True)
class PlannedBuffer:
    """One buffer of the head plan: a tensor (``tensor`` >= 0) or a kernel scratch buffer."""

    name: str
    tensor: int  # index in subgraph 0, or -1 for a scratch buffer
    operator: int  # for scratch buffers: the operator that asked for it; else -1
    nbytes: int  # what the tensor or kernel needs
    size: int  # nbytes rounded up to ALIGNMENT: what the planner places
    first: int  # first step alive (0 = before the first operator)
    last: int  # last step alive
    offline_offset: int = _ONLINE
    offset: int = -1  # where the plan put it


@dataclasses.dataclass(frozen=True)
class HeadPlan:
    head_bytes: int
    buffers: tuple[PlannedBuffer, ...]  # in the order TFLM adds them to its planner
    scratch_bytes: int  # sum of the (aligned) scratch buffers, before sharing

    def largest(self, count: int = 5) -> list[PlannedBuffer]:
        """The biggest planned buffers: what to shrink when the model does not fit."""
        return sorted(self.buffers, key=lambda b: (-b.size, b.name))[:count]

    def peak_step(self) -> int:
        """The step whose live buffers reach the head: where the memory pressure is."""
        best_step, best_end = 0, -1
        for step in range(max((b.last for b in self.buffers), default=0) + 1):
            end = max((b.offset + b.size for b in self.buffers if b.first <= step <= b.last), default=0)
            if end > best_end:
                best_step, best_end = step, end
        return best_step


def align_up(value: int, alignment: int = ALIGNMENT) -> int:
    return (value + alignment - 1) // alignment * alignment


def element_count(shape: Sequence[int]) -> int:
    return math.prod(shape) if shape else 1


def _tflm_bytes(tensor: Tensor) -> int:
    # TFLM sizes a tensor as elements x bytes per element; it unpacks int4 to one byte.
    if any(d < 0 for d in tensor.shape):
        raise ModelFileError(
            f"tensor {tensor.index} ({tensor.name!r}) has a dynamic shape {list(tensor.shape)}; "
            "TFLM needs every activation shape fixed at conversion time"
        )
    # Resource handles (VAR_HANDLE outputs) are not in the plan: with them as 4-byte int32
    # ids the head comes out 32 bytes over what the tflite-micro wheel reports on all four
    # microWakeWord models; without them it is equal.
    return element_count(tensor.shape) * tensor.element_size


def scratch_requests(graph: Subgraph, op: Operator, pointer_bytes: int,
                     kernels: str = "reference") -> list[tuple[str, int]]:
    """The scratch buffers TFLM's kernel for ``op`` asks for in Prepare, in order.

    Sizes come from each kernel's Prepare (tensorflow/lite/micro/kernels/*.cc): the
    reference kernels (the tflite-micro wheel's), or with ``kernels="cmsis-nn"`` the
    CMSIS-NN ones a Cortex-M build uses (kernels/cmsis_nn/*.cc and CMSIS-NN's
    *_get_buffer_size functions for a core with the DSP extension, built with GCC).
    """
    if kernels == "cmsis-nn":
        requests = _cmsis_nn_scratch(graph, op)
        if requests is not None:
            return requests
    tensors = graph.tensors

    def tensor(position: int) -> Tensor | None:
        if position >= len(op.inputs) or op.inputs[position] < 0:
            return None
        return tensors[op.inputs[position]]

    def out(position: int = 0) -> Tensor:
        return tensors[op.outputs[position]]

    name = op.op_name
    first = tensor(0)
    if name in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"):
        weights = tensor(1)
        if weights is not None and weights.dtype_name == "int4":
            return [("unpacked int4 filter", element_count(weights.shape))]  # one byte each
        return []
    if name in ("MEAN", "SUM") and first is not None:
        requests = []
        axis = tensor(1)
        num_axis = element_count(axis.shape) if axis is not None else 0
        if first.dtype_name in ("int8", "int16"):
            requests.append(("int32 accumulators", 4 * element_count(out().shape)))
        requests.append(("input index iterator", 4 * len(first.shape)))
        requests.append(("resolved axes", 4 * num_axis))
        return requests
    if name in ("REDUCE_MAX", "REDUCE_MIN", "REDUCE_ANY", "REDUCE_ALL") and first is not None:
        axis = tensor(1)
        return [
            ("input index iterator", 4 * len(first.shape)),
            ("resolved axes", 4 * (element_count(axis.shape) if axis is not None else 0)),
        ]
    if name == "UNIDIRECTIONAL_SEQUENCE_LSTM" and first is not None and first.dtype_name != "float32":
        # Four gate buffers of batch x cell units in the cell state's type: the cell state
        # (input 19, a [batch, units] variable) has exactly that shape.
        cell_state = tensor(19)
        if cell_state is None:
            return []
        size = element_count(cell_state.shape) * cell_state.element_size
        return [(f"LSTM gate buffer {i}", size) for i in range(4)]
    if name == "ADD_N" and out().dtype_name in ("float32", "int8"):
        return [("input pointers", pointer_bytes * len(op.inputs))]
    if name == "MIRROR_PAD" and first is not None:
        return [("output strides", 4 * len(first.shape)), ("input strides", 4 * len(first.shape))]
    if name == "TRANSPOSE_CONV":
        data = tensor(2)
        bias = tensor(3)
        requests = []
        if data is not None and data.dtype_name == "int16":
            if bias is not None and bias.dtype_name == "int16":
                requests.append(("int64 bias", 8 * element_count(bias.shape)))
            requests.append(("int64 accumulators", 8 * element_count(out().shape)))
        elif data is not None and data.dtype_name == "int8":
            requests.append(("int32 accumulators", 4 * element_count(out().shape)))
        return requests
    if name == "SVDF" and first is not None:
        weights_feature, weights_time = tensor(1), tensor(2)
        if weights_feature is None or weights_time is None:
            return []
        batch, filters = first.shape[0], weights_feature.shape[0]
        units = out().shape[-1]
        if first.dtype_name == "int8":
            return [("int32 filter state", 4 * batch * filters), ("int32 output", 4 * batch * units)]
        return [("float filter state", 4 * batch * filters)]
    return []


def same_padding(in_size: int, filter_size: int, stride: int, dilation: int, out_size: int) -> int:
    """TFLM's ComputePaddingWithOffset for SAME: the top/left padding (the odd pixel goes
    bottom/right); 0 for VALID's output sizes."""
    effective = (filter_size - 1) * dilation + 1
    return max(0, (out_size - 1) * stride + effective - in_size) // 2


def _cmsis_nn_scratch(graph: Subgraph, op: Operator) -> list[tuple[str, int]] | None:
    """CMSIS-NN's scratch for the int8 kernels TFLM routes to it; None for the operators
    whose CMSIS-NN file asks for what the reference kernel does."""
    name = op.op_name
    if name not in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "AVERAGE_POOL_2D", "MAX_POOL_2D"):
        return None
    if not op.inputs or not op.outputs or op.inputs[0] < 0 or op.outputs[0] < 0:
        return None  # malformed: the reference rule (and TFLM's refusal) stands
    data, out = graph.tensors[op.inputs[0]], graph.tensors[op.outputs[0]]
    if data.dtype_name != "int8":
        return None  # int16 and float keep other paths: not modelled for CMSIS-NN
    if name == "MAX_POOL_2D":
        return []
    if name == "AVERAGE_POOL_2D":
        return [("CMSIS-NN average pool sums", cmsis_nn_avgpool_scratch(out.shape[-1]))] if out.shape else []
    if len(op.inputs) < 2 or op.inputs[1] < 0:
        return None
    weights = graph.tensors[op.inputs[1]]
    if weights.dtype_name != "int8":
        return None
    if name == "FULLY_CONNECTED":
        if not weights.shape or not out.shape:
            return None
        accum_depth, output_depth = weights.shape[-1], out.shape[-1]
        per_tensor = weights.quantization is None or len(weights.quantization.scale) <= 1
        # An output of rank > 2 with a depth divisible by 4 goes to CMSIS-NN's 1x1
        # convolution, which wants 8 bytes per output channel for its per-tensor
        # multipliers (its own buffer is empty on a DSP core built with GCC).
        if len(out.shape) > 2 and accum_depth % 4 == 0 and per_tensor:
            return [("CMSIS-NN 1x1 conv multipliers", 8 * output_depth)]
        return []
    if not len(data.shape) == len(out.shape) == len(weights.shape) == 4:
        return None  # a malformed convolution: TFLM refuses it in Prepare; the reference rule stands
    o = op.options
    _, in_h, in_w, in_c = data.shape
    _, out_h, out_w, _ = out.shape
    _, k_h, k_w, k_c = weights.shape  # conv [out_c, kh, kw, in_c / groups]; depthwise [1, kh, kw, out_c]
    stride_h, stride_w = o.get("stride_h", 1), o.get("stride_w", 1)
    dil_h, dil_w = o.get("dilation_h_factor", 1), o.get("dilation_w_factor", 1)
    # SAME's rule gives 0 for VALID's output sizes, so it serves both.
    pad_h = same_padding(in_h, k_h, stride_h, dil_h, out_h)
    pad_w = same_padding(in_w, k_w, stride_w, dil_w, out_w)
    if name == "CONV_2D":
        bytes_ = cmsis_nn_conv_scratch(k_h, k_w, in_c, k_c, pad_h, pad_w, dil_h, dil_w)
        return [("CMSIS-NN im2col", bytes_)] if bytes_ else []
    bytes_ = cmsis_nn_depthwise_scratch(data.shape[0], in_c, weights.shape[3], k_h, k_w, pad_h, pad_w, dil_h, dil_w)
    return [("CMSIS-NN depthwise im2col", bytes_)] if bytes_ else []


# CMSIS-NN's scratch on a DSP core (Cortex-M4/M7/M33, GCC), as its arm_*_get_buffer_size_dsp
# functions compute it; the plain C path never asks for more. Shared by -t mcu's arena plan
# (TFLM's CMSIS-NN build) and -t mcu-c --cmsis-nn (converters/mcu_c/cmsis_nn.py).
def cmsis_nn_conv_scratch(k_h: int, k_w: int, in_c: int, k_c: int, pad_h: int, pad_w: int, dil_h: int,
                          dil_w: int) -> int:
    """arm_convolve_wrapper_s8: a 1x1 convolution without padding, dilation or groups needs
    nothing; every other form im2col's two columns of kernel-size int16 values, rounded up to 4."""
    if pad_h == pad_w == 0 and k_h == k_w == 1 and dil_h == dil_w == 1 and in_c == k_c:
        return 0
    return 4 * align_up(k_w * k_h * in_c, 4)


def cmsis_nn_depthwise_scratch(batches: int, in_c: int, out_c: int, k_h: int, k_w: int, pad_h: int, pad_w: int,
                               dil_h: int, dil_w: int) -> int:
    """arm_depthwise_conv_wrapper_s8: only channel multiplier 1, batch 1, no dilation and not the
    3x3 fast path (padding at most 1) needs a buffer, one int16 im2col column."""
    if in_c == out_c and batches == 1 and dil_h == dil_w == 1:
        if k_w == k_h == 3 and pad_h <= 1 and pad_w <= 1:
            return 0
        return in_c * k_w * k_h * 2
    return 0


def cmsis_nn_avgpool_scratch(channels: int) -> int:
    """arm_avgpool_s8: an int32 sum per channel."""
    return 4 * channels


def _offline_offsets(model: TfliteModel) -> list[int] | None:
    data = model.metadata.get(_OFFLINE_METADATA)
    if data is None:
        return None
    # Layout: version, subgraph count, tensor count, then one int32 offset per tensor.
    if len(data) < 12:
        raise ModelFileError(f"{_OFFLINE_METADATA} metadata has {len(data)} bytes; expected at least 12")
    count = struct.unpack_from("<I", data, 8)[0]
    if len(data) < 12 + 4 * count:
        raise ModelFileError(f"{_OFFLINE_METADATA} metadata lists {count} tensors but is {len(data)} bytes long")
    return list(struct.unpack_from(f"<{count}i", data, 12))


def plan_head(model: TfliteModel, *, pointer_bytes: int = 4, kernels: str = "reference") -> HeadPlan:
    """Plan the head of the arena the way TFLM's GreedyMemoryPlanner will at AllocateTensors.

    ``pointer_bytes`` only matters for kernels whose scratch holds pointers (ADD_N);
    ``kernels`` is the kernel library ("reference" or "cmsis-nn"), whose scratch differs.
    """
    if not model.subgraphs:
        raise ModelFileError("the model has no subgraph")
    control = sorted({op.op_name for g in model.subgraphs for op in g.operators if op.op_name in _CONTROL_FLOW})
    if set(control) - {"CALL_ONCE"} or (len(model.subgraphs) > 1 and not _init_subgraphs_only(model)):
        raise UnsupportedOpError(
            (sorted(set(control) - {"CALL_ONCE"}) or ["multiple subgraphs"])[0],
            "mcu",
            (),
            "edgeserve's arena planner handles one subgraph, or a second one run by CALL_ONCE "
            "(variable initialisation); IF and WHILE run other subgraphs inside an operator's "
            "lifetime, which it does not model yet. Convert without control flow (unroll loops).",
        )
    offline = _offline_offsets(model)
    total_tensors = sum(len(g.tensors) for g in model.subgraphs)
    if offline is not None and len(offline) != total_tensors:
        raise ModelFileError(
            f"{_OFFLINE_METADATA} gives {len(offline)} offsets for {total_tensors} tensors"
        )

    # Lifetimes in TFLM's allocation scopes (micro_allocation_info.cc): one counter for the
    # whole model; each operator takes a new scope, and an operator that runs a subgraph
    # (CALL_ONCE) walks that subgraph's operators, in new scopes, before its own inputs'
    # last use is marked.
    first = [[-1] * len(g.tensors) for g in model.subgraphs]
    last = [[-1] * len(g.tensors) for g in model.subgraphs]
    scratch: list[PlannedBuffer] = []
    scope = 0

    def mark(index: int) -> None:
        nonlocal scope
        g = model.subgraphs[index]
        for t in g.inputs:
            first[index][t] = scope if first[index][t] == -1 else first[index][t]
            last[index][t] = scope
        for op in g.operators:
            scope += 1
            for t in op.outputs:
                if first[index][t] == -1:
                    first[index][t] = scope
            start = scope
            if op.op_name == "CALL_ONCE":
                scope += 1
                mark(op.options["init_subgraph_index"])
            for t in op.inputs:
                if t >= 0:
                    last[index][t] = scope
            for t in op.outputs:
                last[index][t] = scope
            for label, nbytes in scratch_requests(g, op, pointer_bytes, kernels):
                scratch.append(
                    PlannedBuffer(
                        name=f"{op.op_name} #{op.index} scratch: {label}", tensor=-1, operator=op.index,
                        nbytes=nbytes, size=align_up(nbytes), first=start, last=scope,
                    )
                )
        for t in g.outputs:
            if first[index][t] == -1:
                first[index][t] = scope
            last[index][t] = scope

    mark(0)
    buffers: list[PlannedBuffer] = []
    position = 0
    for index, g in enumerate(model.subgraphs):
        for tensor in g.tensors:
            nbytes = _tflm_bytes(tensor) if not tensor.is_constant else 0
            offset = offline[position] if offline is not None else _ONLINE
            position += 1
            planned = not tensor.is_constant and nbytes > 0 and (not tensor.is_variable or offset != _ONLINE)
            if planned and first[index][tensor.index] >= 0:
                buffers.append(
                    PlannedBuffer(
                        name=tensor.name if index == 0 else f"subgraph {index}: {tensor.name}",
                        tensor=tensor.index if index == 0 else -2, operator=-1, nbytes=nbytes,
                        size=align_up(nbytes), first=first[index][tensor.index], last=last[index][tensor.index],
                        offline_offset=offset,
                    )
                )
    buffers.extend(scratch)
    placed = _place_greedy(buffers)
    head = max((b.offset + b.size for b in placed), default=0)
    return HeadPlan(head_bytes=head, buffers=tuple(placed), scratch_bytes=sum(b.size for b in scratch))


def _init_subgraphs_only(model: TfliteModel) -> bool:
    """Every subgraph but the first is run by a CALL_ONCE of the first (and by nothing else)."""
    called = {op.options.get("init_subgraph_index") for op in model.subgraphs[0].operators
              if op.op_name == "CALL_ONCE"}
    return called == set(range(1, len(model.subgraphs))) and not any(
        op.op_name == "CALL_ONCE" for g in model.subgraphs[1:] for op in g.operators)


def _place_greedy(buffers: list[PlannedBuffer]) -> list[PlannedBuffer]:
    """Offsets for ``buffers`` by TFLM's greedy rule; returns them in the same order."""
    if not buffers:
        return []
    offline = [i for i, b in enumerate(buffers) if b.offline_offset != _ONLINE]
    online = [i for i, b in enumerate(buffers) if b.offline_offset == _ONLINE]
    # TFLM fills its sort array from the back for online buffers, then bubble-sorts it
    # by size, descending and stable: equal sizes stay in reverse order of addition.
    order = offline + sorted(reversed(online), key=lambda i: -buffers[i].size)

    offsets: dict[int, int] = {}
    by_offset: list[int] = []  # placed buffer ids, by offset; equal offsets in placement order
    for position, buffer_id in enumerate(order):
        wanted = buffers[buffer_id]
        if wanted.offline_offset != _ONLINE:
            candidate = wanted.offline_offset
        elif position == 0:
            candidate = 0
        else:
            candidate = 0
            for other_id in by_offset:
                other = buffers[other_id]
                if other.first > wanted.last or wanted.first > other.last:
                    continue  # not alive at the same time: its bytes are free for us
                if offsets[other_id] - candidate >= wanted.size:
                    break  # the gap before this live buffer is big enough
                candidate = max(candidate, offsets[other_id] + other.size)
        offsets[buffer_id] = candidate
        insert_at = len(by_offset)
        for slot, other_id in enumerate(by_offset):
            if offsets[other_id] > candidate:
                insert_at = slot
                break
        by_offset.insert(insert_at, buffer_id)
    return [dataclasses.replace(b, offset=offsets[i]) for i, b in enumerate(buffers)]
