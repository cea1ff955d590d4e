"""Everything in a TFLM tensor arena besides the activation plan, computed offline.

TFLM's ``MicroAllocator`` uses one arena from both ends. The *head* (low addresses) ends
up holding the activation plan (:mod:`edgeserve.converters.microcontroller.arena`); the *tail* (high addresses)
holds what lives as long as the interpreter. While ``AllocateTensors()`` runs, the head
side also holds short-lived data that the final plan later overwrites. This module
replays that sequence, allocation by allocation with TFLM's alignment rules, from the
model alone:

1. **Allocator objects** (tail): the arena allocator, the greedy memory planner and the
   ``MicroAllocator`` itself, placed in the arena they manage. The tflite-micro Python
   interpreter uses the *recording* variants (bigger: they count every allocation); a
   firmware build uses the plain ones.
2. **Model structs** (tail): the builtin-data allocator, one ``SubgraphAllocations`` per
   subgraph, a ``TfLiteEvalTensor`` per tensor and a ``NodeAndRegistration`` per
   operator. Meanwhile the head holds room for 12 scratch-buffer requests.
3. **Builtin params** (tail): each operator's parsed options struct.
4. **Kernel Init** (tail): each kernel's OpData, 16-byte aligned.
5. **Kernel Prepare**: tail buffers the kernel keeps (per-channel multipliers and
   shifts, ...), and temporary ``TfLiteTensor`` structs with copies of their
   quantization in the head, all released together after the node; the head's request
   area then grows to (requests so far + 12).
6. **Scratch handles** (tail): one pointer per scratch-buffer request.
7. **Memory plan commit**: variable tensors go to the tail; the head temporarily holds
   an ``AllocationInfo`` per tensor and scratch buffer, and the greedy planner's working
   arrays (40 bytes per planned buffer; "Too many buffers (max is N)" when they do not
   fit). Then the head becomes the plan (``head_bytes``).
8. **Inputs and outputs** (tail): a pointer array and a persistent ``TfLiteTensor``
   (with quantization) per model input and output.

Per-kernel facts are in :mod:`edgeserve.converters.tflm.kernel_data`; the struct sizes below come
from the same measurements (see that module's docstring). The replay was checked against
real TFLM twice: the tflite-micro wheel on x86-64 (tests/test_mcu_persistent.py), and
TFLM built with arm-none-eabi-g++ and run under qemu-arm for the 32-bit figures (the
measurements are pinned in the same test file). Both agree to the byte on the tail, and
``total_bytes`` is never more than 15 bytes above the smallest arena that works.

Assumptions: the arena's end is 16-byte aligned (true for a 16-aligned arena whose size
is a multiple of 16, which ``total_bytes`` is); TFLM's reference kernels, or its CMSIS-NN
kernels with ``kernels="cmsis-nn"`` (other optimized kernels, e.g. ESP-NN, keep different
OpData); one interpreter per arena. Not modelled,
and refused: compressed tensors, offline memory plans, and operators missing from
``kernel_data.KERNELS`` (which includes the resource-variable and control-flow ops).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from edgeserve.errors import ModelFileError, UnsupportedOpError
from edgeserve.converters.microcontroller import arena
from edgeserve.converters.tflm.kernel_data import (
    COLUMNS,
    KERNELS,
    OP_DATA,
    PARAMS,
    Node,
    StructSize,
    kernels_for,
    row,
)
from edgeserve.tflite.model import Subgraph, Tensor, TfliteModel

ALIGNMENT = 16  # MicroArenaBufferAlignment()
_REQUESTS_PER_OP = 12  # kMaxScratchBuffersPerOp: request slots kept free for the next node
_PLANNER_BYTES_PER_BUFFER = 40  # GreedyMemoryPlanner::per_buffer_size(): 16 + 4 + 4 + 12 + 4
# Model metadata that changes what TFLM allocates, in ways this module does not replay.
_UNMODELLED_METADATA = {
    "OfflineMemoryAllocation": "an offline memory plan, which can move variables to the head",
    "COMPRESSION_METADATA": "compressed tensors, which add lookup tables and scratch buffers",
}

#: TFLM's own structs, (size, alignment) per build in kernel_data.COLUMNS order: measured
#: from the TFLM headers at 90b983c2; the x86-64 column reproduces the wheel's printed
#: totals for every shared test model.
CORE: dict[str, tuple[StructSize, ...]] = {
    # Two vtable pointers (persistent and non-persistent interfaces), five pointers, an
    # intptr_t checksum and a count of temp buffers.
    "SingleArenaBufferAllocator": row((72, 8), (36, 4)),
    # ... plus four size_t counters.
    "RecordingSingleArenaBufferAllocator": row((104, 8), (52, 4)),
    "GreedyMemoryPlanner": row((72, 8), (44, 4)),
    "MicroAllocator": row((72, 8), (36, 4)),
    # MicroAllocator plus a pointer and 7 RecordedAllocation{3 x size_t} (8 with
    # compression, which adds a bucket).
    "RecordingMicroAllocator": row((248, 8), (124, 4), (272, 8), (136, 4)),
    "MicroBuiltinDataAllocator": row((16, 8), (8, 4)),  # vtable pointer + allocator pointer
    # Two pointers; compression adds a CompressedTensorList pointer.
    "SubgraphAllocations": row((16, 8), (8, 4), (24, 8), (12, 4)),
    "TfLiteEvalTensor": row((24, 8), (12, 4)),
    "NodeAndRegistration": row((64, 8), (32, 4)),  # TfLiteNode + registration pointer
    "TfLiteTensor": row((64, 8), (32, 4)),  # the TF_LITE_STATIC_MEMORY layout
    "TfLiteAffineQuantization": row((24, 8), (12, 4)),
    "TfLiteIntArray": row((4, 4), (4, 4)),  # header only; + 4 bytes per element
    "ScratchBufferRequest": row((16, 8), (12, 4)),  # size_t bytes, int node, int subgraph
    "ScratchBufferHandle": row((8, 8), (4, 4)),
    "AllocationInfo": row((32, 8), (24, 4)),
    "size_t": row((8, 8), (4, 4)),
    "pointer": row((8, 8), (4, 4)),
    # micro_resource_variable.h: the MicroResourceVariables object (array pointer, two ints)
    # and one MicroResourceVariable per variable (container, shared_name, buffer, size_t
    # bytes, int8 default value).
    "MicroResourceVariables": row((16, 8), (12, 4)),
    "MicroResourceVariable": row((40, 8), (20, 4)),
}


@dataclasses.dataclass(frozen=True)
class ArenaBudget:
    """The tensor arena a model needs, split the way TFLM uses it.

    ``total_bytes = align16(tail_bytes + max(head_bytes, temp_peak_bytes))``: the head
    and the temporary data never coexist, the tail coexists with both.

    ``terms`` has two families. ``tail.*`` entries add up to ``tail_bytes`` exactly, each
    with the alignment padding its allocations caused:

    * ``tail.arena_allocator``, ``tail.memory_planner``, ``tail.micro_allocator``: the
      allocator objects (the ``Recording`` variants when ``recording``);
    * ``tail.builtin_data_allocator``, ``tail.subgraph_allocations``: per-model objects;
    * ``tail.eval_tensors``: a ``TfLiteEvalTensor`` per tensor;
    * ``tail.node_and_registrations``: a ``TfLiteNode`` and registration pointer per op;
    * ``tail.builtin_params``: the parsed options structs;
    * ``tail.op_data``: each kernel's Init struct;
    * ``tail.kernel_buffers``: what kernels keep from Prepare (per-channel arrays, ...);
    * ``tail.scratch_handles``: a pointer per kernel scratch buffer;
    * ``tail.variable_tensors``: the buffers of variable tensors (LSTM/SVDF state);
    * ``tail.io_tensor_pointers``, ``tail.io_tensors``, ``tail.io_quantization``: the
      persistent ``TfLiteTensor`` structs TFLM keeps for the model's inputs and outputs.

    ``temp.*`` entries describe the temporary head-side data (they overlap in time, so
    they do not add up):

    * ``temp.scratch_requests``: the head's scratch-request area at commit time;
    * ``temp.prepare_tensors``: the most temporary ``TfLiteTensor`` bytes one node's
      Prepare needs (structs plus quantization copies);
    * ``temp.prepare_extent`` / ``temp.prepare_tail``: the head-side extent and the tail
      at the worst moment of Prepare;
    * ``temp.allocation_info``: the per-tensor ``AllocationInfo`` array of the commit;
    * ``temp.planner_scratch``: the greedy planner's 40 bytes per planned buffer;
    * ``temp.commit_extent`` / ``temp.commit_tail``: the same pair for the commit.

    ``temp_peak_bytes`` is the largest of ``extent + tail at that moment - tail_bytes``:
    the temporary need expressed against the final tail (the tail still grows after
    these moments, so this is less than the raw extent).
    """

    head_bytes: int
    tail_bytes: int
    temp_peak_bytes: int
    total_bytes: int
    terms: dict[str, int]


@dataclasses.dataclass(frozen=True)
class _Build:
    pointer_bytes: int
    recording: bool
    compression: bool

    @property
    def column(self) -> int:
        abi = {8: "lp64", 4: "arm32"}[self.pointer_bytes]
        return COLUMNS.index(abi + ("+compression" if self.compression else ""))

    def size(self, table: dict[str, tuple[StructSize, ...]], name: str) -> StructSize:
        return table[name][self.column]


def align_up(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


class _Tail:
    """The tail, as bytes used from the (16-aligned) arena end; padding goes to the term."""

    def __init__(self) -> None:
        self.used = 0
        self.terms: dict[str, int] = {}

    def allocate(self, term: str, size: int, alignment: int) -> None:
        # AllocatePersistentBuffer: new tail = AlignPointerDown(tail - size, alignment).
        new = align_up(self.used + size, alignment)
        self.terms[term] = self.terms.get(term, 0) + new - self.used
        self.used = new


class _Head:
    """Bump allocation from the (16-aligned) arena start, as TFLM's temp allocations do."""

    def __init__(self, start: int) -> None:
        self.end = start

    def allocate(self, term: str, size: int, alignment: int) -> None:
        # ``term`` only keeps the signature of _Tail.allocate: temp data is not a tail term.
        self.end = align_up(self.end, alignment) + size


def estimate_arena(
    model: TfliteModel, head_bytes: int, *, pointer_bytes: int = 4, recording: bool = False,
    compression: bool | None = None, kernels: str = "reference",
) -> ArenaBudget:
    """Compute the tail, the temporary peak and ``kTensorArenaSize`` for ``model``.

    Args:
        model: The parsed model.
        head_bytes: The activation plan's size (what ``print_allocations`` calls head).
        pointer_bytes: 8 for a 64-bit build (x86-64), 4 for a 32-bit Cortex-M build.
        recording: Whether the interpreter uses ``RecordingMicroAllocator`` (the
            tflite-micro Python interpreter does; firmware uses ``MicroAllocator``).
        compression: Whether TFLM was built with ``USE_TFLM_COMPRESSION``, which grows a
            few structs. Default: same as ``recording``, since the wheel is built with it
            and a firmware build by default is not.
        kernels: The kernel library TFLM was built with: "reference" (the wheel's, and
            ``make microlite`` without OPTIMIZED_KERNEL_DIR) or "cmsis-nn" (a Cortex-M build
            with OPTIMIZED_KERNEL_DIR=cmsis_nn); ``head_bytes`` must come from
            ``plan_head`` with the same ``kernels``.

    ``pointer_bytes=8, recording=True`` reproduces the tflite-micro Python interpreter on
    x86-64; ``pointer_bytes=4`` (the default) a firmware build with arm-none-eabi-gcc.

    Example:
        >>> budget = estimate_arena(model, plan_head(model).head_bytes)  # doctest: +SKIP
        >>> budget.total_bytes  # kTensorArenaSize  # doctest: +SKIP
        1104

    Raises:
        UnsupportedOpError: An operator whose kernel edgeserve cannot size.
        ModelFileError: The model uses a TFLM feature this estimate does not model.
    """
    if pointer_bytes not in (4, 8):
        raise ValueError(f"pointer_bytes must be 4 (32-bit MCU) or 8 (64-bit host), not {pointer_bytes}")
    if head_bytes < 0:
        raise ValueError(f"head_bytes must not be negative, not {head_bytes}")
    _check_supported(model)
    build = _Build(pointer_bytes, recording, recording if compression is None else compression)
    return _Replay(model, build, kernels).run(head_bytes)


def _check_supported(model: TfliteModel) -> None:
    for graph in model.subgraphs:
        for op in graph.operators:
            if op.op_name not in KERNELS:
                raise UnsupportedOpError(
                    op.op_name, "mcu", KERNELS,
                    "edgeserve does not know what its TFLM kernel keeps in the arena.")
    for name, why in _UNMODELLED_METADATA.items():
        if name in model.metadata:
            raise ModelFileError(f"the model has {name} metadata ({why}); edgeserve cannot "
                                 "size its tensor arena yet")


class _Replay:
    """One pass over AllocateTensors(): the tail, and the moments that can run out."""

    def __init__(self, model: TfliteModel, build: _Build, kernels: str = "reference") -> None:
        self.model = model
        self.build = build
        self.library = kernels
        self.kernels = kernels_for(kernels)
        self.tail = _Tail()
        # The worst moment of each phase: (head-side extent, tail used at that moment).
        self.moments: dict[str, tuple[int, int]] = {}
        self.requests = 0  # scratch-buffer requests so far
        self.temp_terms: dict[str, int] = {}

    def core(self, name: str) -> StructSize:
        return self.build.size(CORE, name)

    def note(self, phase: str, extent: int) -> None:
        """Remember this moment if it needs more arena than ``phase``'s worst so far."""
        worst = self.moments.get(phase)
        if worst is None or extent + self.tail.used > sum(worst):
            self.moments[phase] = (extent, self.tail.used)

    def request_area(self) -> int:
        # The head's resizable buffer: room for the requests so far plus 12 more.
        return self.core("ScratchBufferRequest").size * (self.requests + _REQUESTS_PER_OP)

    def nodes(self) -> Iterable[Node]:
        for graph in self.model.subgraphs:
            for op in graph.operators:
                yield Node(graph, op)

    def run(self, head_bytes: int) -> ArenaBudget:
        recording = self.build.recording
        self.tail.allocate("tail.arena_allocator", *self.core(
            "RecordingSingleArenaBufferAllocator" if recording else "SingleArenaBufferAllocator"))
        self.tail.allocate("tail.memory_planner", *self.core("GreedyMemoryPlanner"))
        self.tail.allocate("tail.micro_allocator", *self.core(
            "RecordingMicroAllocator" if recording else "MicroAllocator"))
        self.resource_variables()
        self.model_structs()
        self.kernel_init()
        self.kernel_prepare()
        self.commit()
        self.io_tensors()
        return self.budget(head_bytes)

    def resource_variables(self) -> None:
        """MicroResourceVariables::Create(allocator, N) before the interpreter exists, as the
        generated main.cc and the tflite-micro wheel both do, with N = the model's distinct
        VAR_HANDLE shared names: the object, then the array, each a persistent buffer."""
        count = len(variable_names(self.model))
        if count:
            ALIGN = ALIGNMENT  # AllocatePersistentBuffer aligns to MicroArenaBufferAlignment()
            self.tail.allocate("tail.resource_variables", self.core("MicroResourceVariables").size, ALIGN)
            self.tail.allocate("tail.resource_variables", self.core("MicroResourceVariable").size * count, ALIGN)
        self.assigned: set[str] = set()

    def variable_buffer(self, node: Node) -> None:
        """ASSIGN_VARIABLE's Prepare allocates the variable's buffer the first time that
        variable is assigned (MicroResourceVariables::Allocate), its value's size."""
        handle = node.op.inputs[0]
        name = next((op.options.get("shared_name", "") for op in node.graph.operators
                     if op.op_name == "VAR_HANDLE" and op.outputs and op.outputs[0] == handle), None)
        value = node.input(1)
        if name is None or value is None or name in self.assigned:
            return
        self.assigned.add(name)
        self.tail.allocate("tail.variable_buffers", _tflm_bytes(value), ALIGNMENT)

    def model_structs(self) -> None:
        """StartModelAllocation, then the builtin params parsed for every node."""
        tail, graphs = self.tail, self.model.subgraphs
        tail.allocate("tail.builtin_data_allocator", *self.core("MicroBuiltinDataAllocator"))
        allocations = self.core("SubgraphAllocations")
        tail.allocate("tail.subgraph_allocations", allocations.size * len(graphs), allocations.align)
        eval_tensor, node = self.core("TfLiteEvalTensor"), self.core("NodeAndRegistration")
        for graph in graphs:
            tail.allocate("tail.eval_tensors", eval_tensor.size * len(graph.tensors), eval_tensor.align)
        for graph in graphs:
            tail.allocate("tail.node_and_registrations", node.size * len(graph.operators), node.align)
        for each in self.nodes():
            name = self.kernels[each.op.op_name].params
            if name is not None:
                tail.allocate("tail.builtin_params", *self.build.size(PARAMS, name))

    def kernel_init(self) -> None:
        for node in self.nodes():
            name = self.kernels[node.op.op_name].op_data
            size = self.build.size(OP_DATA, name).size if name is not None else 0
            if size:  # size 0: this build's kernel has no Init
                self.tail.allocate("tail.op_data", size, ALIGNMENT)
        self.note("init", self.request_area())

    def kernel_prepare(self) -> None:
        worst_temps = 0
        for node in self.nodes():
            kernel = self.kernels[node.op.op_name]
            head = _Head(self.request_area())
            for kind, position in kernel.temps(node):
                tensor = node.input(position) if kind == "i" else node.output(position)
                if tensor is not None:  # an omitted optional input costs nothing
                    self.tensor_struct(tensor, head.allocate)
            worst_temps = max(worst_temps, head.end - self.request_area())
            for nbytes in kernel.prepare(node):
                self.tail.allocate("tail.kernel_buffers", nbytes, ALIGNMENT)
            if node.op.op_name == "ASSIGN_VARIABLE":
                self.variable_buffer(node)
            # The temps and the node's tail buffers only grow during Prepare: the end of
            # Prepare is its worst moment.
            self.note("prepare", head.end)
            self.requests += len(arena.scratch_requests(node.graph, node.op, self.build.pointer_bytes, self.library))
            self.note("prepare", self.request_area())  # the request area grows for the next node
        self.temp_terms["temp.prepare_tensors"] = worst_temps

    def tensor_struct(self, tensor: Tensor, allocate: Callable[[str, int, int], None]) -> None:
        """A TfLiteTensor and its copy of the quantization (InitializeTfLiteTensorFromFlatbuffer)."""
        allocate("tail.io_tensors", *self.core("TfLiteTensor"))
        quant = tensor.quantization
        if quant is not None and quant.scale and quant.zero_point:
            params, header = self.core("TfLiteAffineQuantization"), self.core("TfLiteIntArray")
            allocate("tail.io_quantization", params.size, params.align)
            # The zero points, one per scale (the scales stay in the model).
            allocate("tail.io_quantization", header.size + 4 * len(quant.scale), header.align)

    def commit(self) -> None:
        """FinishModelAllocation: scratch handles, then the plan (CommitStaticMemoryPlan)."""
        tail, graphs = self.tail, self.model.subgraphs
        if self.requests:
            handle = self.core("ScratchBufferHandle")
            tail.allocate("tail.scratch_handles", handle.size * self.requests, handle.align)
        head = _Head(self.request_area())
        offsets, info = self.core("size_t"), self.core("AllocationInfo")
        head.allocate("", offsets.size * len(graphs), offsets.align)
        head.allocate("", info.size * (sum(len(g.tensors) for g in graphs) + self.requests), info.align)
        self.temp_terms["temp.scratch_requests"] = self.request_area()
        self.temp_terms["temp.allocation_info"] = head.end - self.request_area()
        for graph in graphs:  # AllocateVariables, while the AllocationInfo array is live
            for tensor in graph.tensors:
                if tensor.is_variable:
                    tail.allocate("tail.variable_tensors", _tflm_bytes(tensor), ALIGNMENT)
        # The planner gets everything between the 16-aligned end of the temp data and the
        # 16-aligned tail, and needs 40 bytes for each buffer it places.
        planned = sum(_planned(g) for g in graphs) + self.requests
        planner = _PLANNER_BYTES_PER_BUFFER * planned
        self.temp_terms["temp.planner_scratch"] = planner
        tail_pad = align_up(tail.used, ALIGNMENT) - tail.used
        self.note("commit", align_up(head.end, ALIGNMENT) + planner + tail_pad)

    def io_tensors(self) -> None:
        """The persistent TfLiteTensor structs MicroInterpreter keeps for inputs and outputs."""
        graph, pointer = self.model.subgraphs[0], self.core("pointer")
        for indices in (graph.inputs, graph.outputs):
            self.tail.allocate("tail.io_tensor_pointers", pointer.size * len(indices), ALIGNMENT)
            for index in indices:
                self.tensor_struct(graph.tensors[index], self.tail.allocate)

    def budget(self, head_bytes: int) -> ArenaBudget:
        tail = self.tail.used
        # Each moment's need, against the final tail: the tail still grows after it.
        temp_peak = max([0] + [extent + used - tail for extent, used in self.moments.values()])
        total = align_up(tail + max(head_bytes, temp_peak), ALIGNMENT)
        terms = dict(self.tail.terms)
        terms.update(self.temp_terms)
        for phase in ("prepare", "commit"):
            terms[f"temp.{phase}_extent"], terms[f"temp.{phase}_tail"] = self.moments.get(phase, (0, 0))
        return ArenaBudget(head_bytes, tail, temp_peak, total, terms)


def variable_names(model: TfliteModel) -> list[str]:
    """The distinct VAR_HANDLE shared names, in order of first appearance: one resource
    variable each (what the wheel counts for MicroResourceVariables::Create)."""
    names: list[str] = []
    for graph in model.subgraphs:
        for op in graph.operators:
            name = op.options.get("shared_name", "") if op.op_name == "VAR_HANDLE" else None
            if name is not None and name not in names:
                names.append(name)
    return names


def _tflm_bytes(tensor: Tensor) -> int:
    # TfLiteEvalTensorByteLength: elements x bytes per element (int4 counts as one byte).
    count = 1
    for dim in tensor.shape:
        count *= dim
    return count * tensor.element_size


def _planned(graph: Subgraph) -> int:
    """Tensors the memory planner places: no data in the file, not variable, not empty."""
    return sum(1 for t in graph.tensors
               if not t.is_constant and not t.is_variable and _tflm_bytes(t) > 0)
