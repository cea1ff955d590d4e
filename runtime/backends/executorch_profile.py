"""Per-operator times of a .pte from ExecuTorch's own event tracer (ETDump), for `bench --operators`.

A program loaded with ``enable_etdump`` records, for each ``execute``, a profile event per
operator the XNNPACK delegate runs (named by XNNPACK, e.g. "Convolution (NHWC, F32) IGEMM #3")
and per kernel call outside it ("native_call_upsample_nearest2d.vec_out"), besides events that
wrap others (the whole method, each delegate call, each operator call's dispatch); only the
innermost are kept, so no time is counted twice. Ticks are nanoseconds on Linux (ExecuTorch's
POSIX platform layer); the test checks the sum against the wall time of the runs.
"""

from __future__ import annotations

from typing import Any

# A kernel called outside the delegate. Every other named event contains others or is not one
# run's work: "Method::execute", "DELEGATE_CALL", "OPERATOR_CALL", "Method::init", "Program::load_method".
KERNEL_CALL = "native_call_"
NS_PER_TICK = 1.0


def operator_times(etdump: Any) -> list[dict[str, Any]]:
    """[{"node", "op", "placed_on", "us"}] from a deserialized ETDump: each operator's mean time
    over the runs it holds (blocks with a ``Method::execute`` event), in the order they ran."""
    runs = [block for block in etdump.run_data
            if any(e.profile_event is not None and e.profile_event.name == "Method::execute" for e in block.events)]
    if not runs:
        raise NotImplementedError("ExecuTorch recorded no run in its ETDump (was the program built with devtools?)")
    totals: list[dict[str, Any]] = []
    for block in runs:
        # The same program runs the same operators in the same order every time: the k-th
        # operator of one run is the k-th of the next.
        for k, event in enumerate(e.profile_event for e in block.events if _innermost(e.profile_event)):
            if k == len(totals):
                op, placed_on, node = _describe(event)
                totals.append({"node": node, "op": op, "placed_on": placed_on, "us": 0.0})
            totals[k]["us"] += (event.end_time - event.start_time) * NS_PER_TICK / 1000.0
    seen: dict[str, int] = {}
    for found in totals:
        found["us"] = round(found["us"] / len(runs), 2)
        # XNNPACK numbers its operators per delegate call: names can repeat across calls.
        seen[found["node"]] = seen.get(found["node"], 0) + 1
        if seen[found["node"]] > 1:
            found["node"] = f"{found['node']} ({seen[found['node']]})"
    return totals


def _innermost(event: Any) -> bool:
    if event is None:
        return False
    if event.delegate_debug_id_str:
        return True
    return bool(event.name) and event.name.startswith(KERNEL_CALL)


def _describe(event: Any) -> tuple[str, str, str]:
    """(operator type, where it ran, node name) of an innermost event."""
    if event.delegate_debug_id_str:
        node = event.delegate_debug_id_str
        return node.split(" #")[0].strip(), "XNNPACK", node
    op = event.name.removeprefix(KERNEL_CALL)
    return op, "portable", op
