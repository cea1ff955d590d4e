"""The executorch and executorch-int8 entry of a manifest as `convert` and `inspect` print it
(edgeserve.cli.report collects each target's lines from its own folder)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from edgeserve.cli.report_parts import macs, plain, print_quality


def print_entry(console: Console, entry: dict[str, Any]) -> None:
    status = "[green]ok[/]" if entry["status"] == "ok" else "[bold red]FAILED[/]"
    console.print(f"\n[bold]{entry['target']}[/] → {entry['path']}  {entry['bytes']:,} bytes  {status}")
    print_quality(console, entry)
    d = entry["delegation"]
    share = f"{100 * d['delegated_share']:.1f} %" if d.get("delegated_share") is not None else "-"
    console.print(f"  XNNPACK: {d['delegated_nodes']} of {d['delegated_nodes'] + d['portable_nodes']} nodes "
                  f"({share}) in {d['delegated_subgraphs']} delegated subgraph(s)", soft_wrap=True)
    if d.get("portable_ops"):
        console.print(f"  on ExecuTorch's portable kernels: {plain(', '.join(d['portable_ops']))}", soft_wrap=True)
    if d.get("xnnpack_error"):
        console.print(f"  [yellow]note[/]: XNNPACK could not take the graph ({plain(d['xnnpack_error'])}); "
                      "lowered without a delegate", soft_wrap=True)
    q = entry.get("quantization")
    if q:
        console.print(f"  weights {q['weights']}, activations {q['activations']}, {q['int8_layers']} int8 layer(s)"
                      + (f", {q['float_convolutions_behind_pads']} convolution(s) behind a pad left float"
                         if q.get("float_convolutions_behind_pads") else "") + macs(entry.get("macs")),
                      soft_wrap=True)
    attempts = entry.get("attempts") or []
    if len(attempts) > 1 or entry["status"] != "ok":
        console.print("  attempts:")
        for i, a in enumerate(attempts, 1):
            reason = f" ({plain(a['reason'])})" if a.get("reason") else ""
            console.print(f"    {i}. {a['activations']} activations: {a['status']}{reason}", soft_wrap=True)
    v = entry["verification"]
    console.print(f"  verified by {v['method']} on {v['samples']} samples; route: {entry['route']['export']}",
                  soft_wrap=True)
