"""The mcu entry of a manifest as `convert` and `inspect` print it (edgeserve.cli.report collects each
target's lines from its own folder)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from edgeserve.cli.report_parts import print_unverified


def print_entry(console: Console, entry: dict[str, Any]) -> None:
    console.print(f"\n[bold]mcu[/] → {entry['path']}/  {entry['name']}_model_*.h/.cc  [green]ok[/]")
    print_unverified(console, entry)
    console.print(
        f"  kTensorArenaSize {entry['arena_bytes']:,} bytes (32-bit): head {entry['arena_head_bytes']:,} "
        f"+ tail {entry['arena_tail_bytes']:,}; 64-bit host {entry['arena_bytes_host']:,}"
        + (f"; with CMSIS-NN {entry['arena_cmsis_nn']['bytes']:,}" if entry.get("arena_cmsis_nn") else "")
    )
    console.print(f"  model {entry['model_bytes']:,} bytes; {len(entry['ops'])} operators: "
                  + ", ".join(f"{op}×{n}" for op, n in entry["ops"].items()), soft_wrap=True)
    fits, memory = entry["fits"], entry["memory"]
    if fits["profile"]:
        verdict = {True: "[green]fits[/]", False: "[bold red]does not fit[/]", None: "unknown"}
        region = memory.get("arena_region")
        where = f" (in {region})" if region and (memory.get("regions") or 0) > 1 else ""
        console.print(f"  {fits['profile']}: flash {memory['flash_bytes']:,} B {verdict[fits['flash']]}, "
                      f"RAM {memory['ram_bytes']:,} B {verdict[fits['ram']]}{where}")
    else:
        console.print(f"  flash {memory['flash_bytes']:,} B, RAM {memory['ram_bytes']:,} B (no -p profile: no fit check)")
    check = entry.get("verification") or {}
    if check.get("method") == "tflm-vs-litert-reference":
        diff = check["max_abs_diff"]
        steps = " int16 steps" if check.get("output_steps") == "int16" else ""
        against = "LiteRT reference kernels: " + ("bit-exact" if diff == 0 else f"max diff {diff:g}{steps}") \
            if diff is not None else check["litert_note"]
        console.print(f"  TFLM ran it in the planned {check['arena_bytes']:,}-byte host arena; {against}")
        stream = check.get("stream")
        if stream:
            constant = " (outputs constant on random frames: that comparison could not fail)" \
                if stream["distinct_outputs"] <= 1 else ""
            console.print(f"  streamed {stream['frames']} frames with state carried, reset, streamed again: "
                          f"bit-exact with LiteRT{constant}")
    elif check:
        console.print(f"  not run in TFLM: {check.get('note')}")
    size = entry.get("arm_none_eabi_size") or {}
    if "text" in size:
        console.print(f"  arm-none-eabi-size of the model array: text {size['text']:,} data {size['data']:,} "
                      f"bss {size['bss']:,} ({size['flags']})")
