"""The mcu-c entry of a manifest as `convert` and `inspect` print it (edgeserve.cli.report collects
each target's lines from its own folder)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from edgeserve.cli.report_parts import print_unverified


def print_entry(console: Console, entry: dict[str, Any]) -> None:
    console.print(f"\n[bold]mcu-c[/] → {entry['path']}/  {entry['name']}.h/.c + kernels/  [green]ok[/]")
    print_unverified(console, entry)
    head = entry.get("tflm_arena_head_bytes")
    versus = f" = {entry['arena_vs_tflm_head']:.2f}x TFLM's arena head ({head:,})" if head else ""
    state = f" + state {entry['state_bytes']:,} bytes (NAME_reset())" if entry.get("state_bytes") else ""
    console.print(f"  static arena {entry['arena_bytes']:,} bytes{versus}{state}; {entry['in_place_steps']} in-place "
                  f"steps; placed by {entry['planner']}" + (" (optimal)" if entry["planner_optimal"] else ""),
                  soft_wrap=True)
    library = entry.get("cmsis_nn")
    portable = f"kernel files: {', '.join(entry['kernels'])}" if entry["kernels"] else "no kernel file"
    console.print(f"  weights {entry['weight_bytes']:,} bytes (const, flash); {portable}", soft_wrap=True, markup=False)
    generated = entry.get("generated_kernels")
    if generated:
        kept = generated.get("not_generated") or {}
        narrow = generated.get("int8_weights") or []
        console.print(f"  kernels generated for {generated['layers']} of {generated['of']} layers "
                      f"({', '.join(generated['kernels']) or 'none fit'})"
                      + (f"; {len(narrow)} of them with int8 weights, to fit the flash" if narrow else "")
                      + (f"; {len(kept)} kept theirs: " + "; ".join(f"operator {k}: {why}" for k, why in kept.items())
                         if kept else ""), soft_wrap=True, markup=False)
        streams = generated.get("streamed") or []
        on = [s for s in streams if s["streamed"]]
        if streams:
            console.print(f"  {len(on)} of {len(streams)} expanding 1x1s streamed row by row into the stride-2 "
                          "depthwise after them (nothing recomputed)"
                          + "".join(f"; operator {s['conv']}: its {s['tensor_bytes']:,} B output never whole "
                                    f"({s['ring_bytes']:,} B of rows), arena {s['arena_bytes']:,} B instead of "
                                    f"{s['arena_bytes_whole']:,}" for s in on), soft_wrap=True, markup=False)
    if library:
        console.print(f"  CMSIS-NN on {library['layers']} of {library['of']} layers ({', '.join(library['functions'])}); "
                      f"{len(library['sources'])} of its sources, listed in {entry['name']}.cmake", soft_wrap=True,
                      markup=False)
    if entry.get("profile"):
        where = f"arena in {entry['arena_region']}" if entry.get("arena_region") else "no RAM region holds the arena"
        verdict = "[green]fits[/]" if entry.get("fits") else "[bold red]does not fit[/]"
        console.print(f"  {entry['profile']}: {verdict}; RAM {entry['ram_bytes']:,} B, {where}")
    check = entry.get("verification") or {}
    if check.get("bit_exact"):
        console.print(f"  host build: bit-exact with {check['reference']} on {check['samples']} random inputs"
                      + ("; sanitizers clean" if (check.get("sanitizers") or {}).get("ok") else ""))
    elif check:
        console.print(f"  not compared: {check.get('note')}")
    m4 = check.get("cortex_m4") or {}
    if "instructions" in m4:
        console.print(f"  Cortex-M4 ({m4['board']}): same outputs as the host; {m4['instructions']:,} instructions "
                      f"per inference; code {m4['code_bytes']:,} B + weights {m4['weight_bytes']:,} B"
                      + (f"; stack {m4['stack_bytes']:,} B at its deepest" if m4.get("stack_bytes") else ""))
        clock = m4.get("at_profile_clock")
        if clock:
            console.print(f"  {clock['profile']} at {clock['freq_mhz']} MHz: at least {clock['min_ms']:g} ms per "
                          "inference (one instruction per cycle: a lower bound, not a measurement)")
    elif m4:
        console.print(f"  Cortex-M4 run skipped: {m4.get('skipped')}")
