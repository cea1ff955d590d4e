"""ONNX ``Loop`` and ``If`` for edgeserve's reader: unrolled, or a branch picked, while tracing.

``If``: a condition computed from constants (silero-vad branches on its sample rate, which
``--input-value sr=16000`` makes a constant) picks its branch while tracing; the branch's
nodes run as if they were the graph's own. A condition that depends on the data (openwakeword's
hey_jarvis runs a second "verifier" network only when its first score reaches 0.5) runs both
branches and selects each output with ``where``: the same values, every branch computed on
every run, as a static graph must. Branches whose outputs differ in shape are refused.

``Loop``:
tf2onnx writes a Keras 3 LSTM or GRU as a ``Loop`` over the time steps (TensorFlow's
while_loop), not as an ONNX LSTM. With a fixed batch-1 sequence its trip count is a
constant and its condition is computed from constants (the step counter against the length),
so the body can run once per step while tracing: torch.export then sees only the body's
operators, repeated. A condition that depends on the data (a loop that stops early on what
it reads) cannot be unrolled so, and is refused naming the node.

Semantics (ONNX operator specification): inputs are the trip count M, the condition and N
loop-carried values; the body takes the iteration number, the condition and the N values and
gives the next condition, the N values and K scan outputs; the node gives the N final values
and the K scan outputs stacked along a new first axis. The body may read any value of the
enclosing graph by name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

Value = Any
# The most steps unrolled: each step repeats the body in the traced graph.
MAX_STEPS = 4096


@dataclasses.dataclass(frozen=True)
class Body:
    inputs: list[str]  # iteration number, condition, N loop-carried values
    outputs: list[str]  # condition, N loop-carried values, K scan outputs
    nodes: list[tuple[str, list[str], list[str], dict[str, Any], str]]
    constants: dict[str, np.ndarray]  # the body's own initializers


def run(run_nodes: Callable[[list, dict[str, Value]], None], args: list[Value], attrs: dict[str, Any],
        outer: dict[str, Value]) -> tuple[Value, ...]:
    """The Loop node's outputs: the body run once per step with the enclosing values in scope."""
    import torch

    from edgeserve.sources.onnx.recurrent import stack_steps

    body: Body = attrs["body"]
    trip, condition, carried = args[0], args[1], list(args[2:])
    if trip is not None and not isinstance(trip, np.ndarray):
        raise NotImplementedError("a trip count computed from the data is not supported (it must be a constant)")
    steps = int(np.asarray(trip).reshape(-1)[0]) if trip is not None else MAX_STEPS
    if steps > MAX_STEPS:
        raise NotImplementedError(f"a loop of {steps} steps is more than the {MAX_STEPS} edgeserve unrolls")
    scans: list[list[Value]] = []
    for i in range(steps):
        if condition is not None:
            if not isinstance(condition, np.ndarray):
                raise NotImplementedError("a loop condition computed from the data is not supported (it must be "
                                          "known before the model runs)")
            if not bool(np.asarray(condition).reshape(-1)[0]):
                break
        env = dict(outer)
        env.update(body.constants)
        env.update(zip(body.inputs, [np.array(i, np.int64), condition, *carried]))
        run_nodes(body.nodes, env)
        results = [env[name] for name in body.outputs]
        condition, carried = results[0], results[1: 1 + len(carried)]
        scans.append(results[1 + len(carried):])
    else:
        if trip is None and condition is not None and bool(np.asarray(condition).reshape(-1)[0]):
            raise NotImplementedError(f"the loop did not end within {MAX_STEPS} steps")
    outputs = list(carried)
    for k in range(len(body.outputs) - 1 - len(carried)):
        column = [step[k] for step in scans]
        if not column:
            raise NotImplementedError("a loop that runs no step has no scan output to give")
        outputs.append(np.stack(column) if all(isinstance(c, np.ndarray) for c in column)
                       else stack_steps([torch.as_tensor(c) for c in column]))
    return tuple(outputs)


def run_if(run_nodes: Callable[[list, dict[str, Value]], None], args: list[Value], attrs: dict[str, Any],
           outer: dict[str, Value]) -> tuple[Value, ...]:
    """The If node's outputs: the branch its constant condition picks, run with the enclosing values; with
    a condition computed from the data, both branches, each output selected by it."""
    condition = args[0]
    if isinstance(condition, np.ndarray):
        return _branch(run_nodes, attrs["then_branch" if bool(condition.reshape(-1)[0]) else "else_branch"], outer)
    import torch

    chosen = condition.reshape(()).bool()
    both = [_branch(run_nodes, attrs[name], outer) for name in ("then_branch", "else_branch")]
    selected = []
    for then_value, else_value in zip(*both):
        a, b = (torch.as_tensor(v) if isinstance(v, np.ndarray) else v for v in (then_value, else_value))
        if tuple(a.shape) != tuple(b.shape):
            raise NotImplementedError(f"a branch condition computed from the data, with branches that give shapes "
                                      f"{list(a.shape)} and {list(b.shape)} (a static graph needs one shape; fix "
                                      "the input it depends on with --input-value)")
        selected.append(torch.where(chosen, a, b.to(a.dtype)))
    return tuple(selected)


def _branch(run_nodes: Callable[[list, dict[str, Value]], None], branch: Body,
            outer: dict[str, Value]) -> tuple[Value, ...]:
    env = dict(outer)
    env.update(branch.constants)
    run_nodes(branch.nodes, env)
    return tuple(env[name] for name in branch.outputs)


def parse(onnx: Any, graph: Any, describe: Callable[[Any], tuple[str, list[str], list[str], dict[str, Any], str]]
          ) -> Body:
    """A body graph as the reader's node tuples (``describe`` does one node, bodies included)."""
    from onnx import numpy_helper

    return Body([v.name for v in graph.input], [v.name for v in graph.output],
                [describe(node) for node in graph.node],
                {i.name: np.array(numpy_helper.to_array(i)) for i in graph.initializer})  # writable copies
