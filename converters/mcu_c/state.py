"""Resource variables (streaming models' state) for mcu-c: static buffers outside the arena.

A streaming model such as microWakeWord keeps state in resource variables: VAR_HANDLE
names a variable, READ_VARIABLE gives its value, ASSIGN_VARIABLE replaces it, and a
CALL_ONCE at the start runs an initialisation subgraph that assigns each variable its
first value (constants). In the generated C each variable is a static buffer that
persists between NAME_invoke() calls; NAME_reset() copies the initial values back (the
first invoke does it too). A READ_VARIABLE costs nothing: its tensor *is* the buffer,
which is sound as long as everything reading it runs before the variable's next
ASSIGN_VARIABLE; the lowering checks that and refuses the model otherwise.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from edgeserve.errors import InputError
from edgeserve.tflite.model import TfliteModel


@dataclasses.dataclass(frozen=True)
class Variable:
    index: int  # NAME_state_<index>
    name: str  # shared_name
    initial: np.ndarray  # int8 values assigned by the initialisation subgraph

    @property
    def nbytes(self) -> int:
        return int(self.initial.nbytes)


OPERATORS = ("CALL_ONCE", "VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE")


class StateError(InputError):
    """A stateful model whose state mcu-c cannot keep in static buffers."""


def read_variables(model: TfliteModel) -> dict[str, Variable]:
    """Variables by shared_name, from the CALL_ONCE initialisation subgraph; {} for a
    stateless single-subgraph model. Raises StateError for any other multi-subgraph form."""
    if len(model.subgraphs) == 1:
        return {}
    main = model.subgraphs[0]
    calls = [op for op in main.operators if op.op_name == "CALL_ONCE"]
    init_indices = {op.options.get("init_subgraph_index") for op in calls}
    if len(model.subgraphs) != 2 or init_indices != {1}:
        raise StateError(
            f"the mcu-c target takes one subgraph, or two where the second only initialises variables "
            f"(CALL_ONCE); this model has {len(model.subgraphs)} (control flow?); -t mcu builds it for TFLM instead")
    init = model.subgraphs[1]
    handles: dict[int, str] = {}
    variables: dict[str, Variable] = {}
    for op in init.operators:
        if op.op_name == "VAR_HANDLE":
            handles[op.outputs[0]] = op.options.get("shared_name", "")
        elif op.op_name == "ASSIGN_VARIABLE":
            handle, value = op.inputs
            tensor = init.tensors[value]
            if handle not in handles or not tensor.is_constant or tensor.dtype_name != "int8":
                raise StateError("the initialisation subgraph assigns something other than int8 constants "
                                 "to its variables; -t mcu builds this model for TFLM instead")
            name = handles[handle]
            variables[name] = Variable(len(variables), name, model.tensor_data(1, value).copy())
        else:
            raise StateError(f"the initialisation subgraph runs {op.op_name}; mcu-c initialises variables "
                             "from constants only; -t mcu builds this model for TFLM instead")
    return variables


def check_reads_precede_assigns(steps: list, aliases_of: dict[int, set[int]]) -> None:
    """Every reader of a READ_VARIABLE tensor (or an alias of it) runs before the next
    ASSIGN_VARIABLE of that variable, so the tensor can be the state buffer itself."""
    for position, step in enumerate(steps):
        if step.op != "READ_VARIABLE":
            continue
        later_assigns = [p for p in range(position + 1, len(steps))
                         if steps[p].op == "ASSIGN_VARIABLE" and steps[p].state == step.state]
        if not later_assigns:
            continue
        tensors = aliases_of.get(step.output, set()) | {step.output}
        readers = [p for p, s in enumerate(steps) if p > position and set(s.inputs) & tensors]
        if readers and max(readers) > later_assigns[0]:
            raise StateError(
                f"variable {step.params.get('name')!r} is read (operator {step.index}) after it is reassigned "
                f"(operator {steps[later_assigns[0]].index}); mcu-c keeps one copy of each variable, so this "
                "model needs -t mcu")
