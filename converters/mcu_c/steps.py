"""What the generator knows about one kernel call: :class:`Step` and the pieces it holds.

lower.py makes them from the model's operators, cmsis_nn.py may give a step a library call,
planner.py places their tensors and emit.py writes them out as C.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class ConstArray:
    name: str  # suffix; the generated array is NAME_<name>
    ctype: str  # "int8_t" or "int32_t"
    values: np.ndarray


@dataclasses.dataclass(frozen=True)
class InPlace:
    """How a step's output may share its first input's bytes.

    ``align``: "start" (output begins where the input begins), "end" (the output ends
    where the input ends when it is larger, so it grows downwards ahead of the reads), or
    "either" (both are valid: each output channel only overwrites its own input channel).
    ``kernel``/``temp_bytes``: the variant to call and its scratch buffer, when it needs one.
    """

    align: str
    kernel: str
    temp_bytes: int = 0


@dataclasses.dataclass(frozen=True)
class StructArray:
    """A const array of parameter structs (CONCATENATION's parts), emitted before its user."""

    name: str
    ctype: str
    items: list[dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Ref:
    """A parameter field that points at another generated array: NAME_<name>."""

    name: str


@dataclasses.dataclass
class Step:
    index: int  # the operator's index in the subgraph
    op: str
    kernel: str | None  # None: alias (RESHAPE)
    params_type: str | None
    params: dict[str, Any]
    arrays: list[ConstArray]
    inputs: tuple[int, ...]  # activation tensors read, in the kernel's argument order
    output: int
    inplace: InPlace | None = None
    source: str | None = None
    struct_arrays: list[StructArray] = dataclasses.field(default_factory=list)
    state: int | None = None  # READ_VARIABLE / ASSIGN_VARIABLE: the variable's index
    pack_inputs: bool = False  # the kernel takes its inputs as one array of pointers
    # The kernel's input arguments when some are constant arrays (Ref) rather than tensors;
    # None: ``inputs`` in order.
    call_inputs: tuple[int | Ref, ...] | None = None
    # A library kernel called instead of ``kernel`` (cmsis_nn.py), and the scratch bytes it
    # needs in the arena for this step only.
    library_call: LibraryCall | None = None
    scratch_bytes: int = 0


@dataclasses.dataclass(frozen=True)
class LibraryCall:
    """A call into a kernel library the user supplies (CMSIS-NN), as C text.

    ``declarations`` are file-scope definitions (its parameter structs); ``arguments`` are
    the call's argument expressions. In both, ``@P@`` stands for the model's prefix
    (NAME_), ``@IN0@``/``@IN1@`` for the activation inputs, ``@OUT@`` for the output and
    ``@SCRATCH@`` for the step's scratch buffer (NULL when it has none).
    """

    library: str  # "cmsis-nn", or "generated" (a function of the generated file, specialise.py)
    function: str
    declarations: tuple[str, ...]
    arguments: tuple[str, ...]
    returns_status: bool = True  # an arm_cmsis_nn_status the generated code checks
    scratch_check: str | None = None  # a C expression of the bytes the build asks for (test builds)
    header: str | None = None  # a header of edgeserve's kernels the declarations need (#included)
