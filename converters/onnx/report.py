"""The onnx and onnx-int8 entry of a manifest as `convert` and `inspect` print it (edgeserve.cli.report
collects each target's lines from its own folder)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from edgeserve.cli.report_parts import macs, metric_line, plain, print_quality, print_unverified


def print_entry(console: Console, entry: dict[str, Any]) -> None:
    status = "[green]ok[/]" if entry["status"] == "ok" else "[bold red]FAILED[/]"
    console.print(f"\n[bold]{entry['target']}[/] → {entry['path']}  {entry['bytes']:,} bytes  {status}")
    print_unverified(console, entry)
    m = entry["metrics"]
    console.print(metric_line(m, "source", entry["target"], ", ONNX Runtime CPU"))
    print_quality(console, entry)
    note = (entry.get("host_kernels") or {}).get("note")
    if note:
        console.print(f"  [yellow]note[/]: {note}", soft_wrap=True)
    agree = entry.get("agreement") or {}
    if agree:
        console.print("  agreement: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                                  for k, v in agree.items()))
    route = entry.get("route") or {}
    if route.get("export"):
        console.print(f"  route: {route['export']}" + (f" ({'; '.join(route['notes'])})" if route.get("notes") else ""))
    q = entry.get("quantization")
    if q:
        console.print(f"  {q['format']}: activations {q['activations']}, weights {q['weights']}, ranges "
                      f"{q['calibration']}" + macs(entry.get("macs"))
                      + (f", in float: {plain(', '.join(q['float_nodes']))}" if q["float_nodes"] else ""))
        if q.get("note"):
            console.print(f"  [yellow]note[/]: {plain(q['note'])}", soft_wrap=True)
    attempts = entry.get("attempts") or []
    if len(attempts) > 1 or entry["status"] != "ok":
        console.print("  attempts:")
        for i, a in enumerate(attempts, 1):
            kept = plain(", ".join(a["float_nodes"])) or "none"
            what = f"{a.get('activations', 'int8')} activations, nodes in float: {kept}"
            if a.get("remedy") == "float-tail":
                what = f"output's final Concat in float: {kept}"
            if a["status"] == "skipped":
                console.print(f"    {i}. {what}: skipped ({plain(a['reason'])})", soft_wrap=True)
                continue
            console.print(f"    {i}. {what}: {a['status']}, drop {a['metrics']['drop_points']:.2f}", soft_wrap=True)
    nodes = entry.get("worst_nodes") or []
    if nodes:
        table = Table("node", "op", "SQNR dB", title="worst nodes (float vs QDQ activations)", title_justify="left")
        for n in nodes:
            table.add_row(Text(n["node"][:60]), Text(n["op"]), f"{n['sqnr_db']:.1f}")
        console.print(table)
    placement = entry.get("placement") or {}
    taken = [f"{name.split(':')[1]} ({p['accelerated_ops']} of {p['total_ops']} nodes)"
             for name, p in placement.items() if p.get("opened")]
    missing = [name.split(":")[1] for name, p in placement.items() if not p.get("available")]
    if taken:
        console.print("  placement: " + ", ".join(taken) + (f"; not in this onnxruntime: {', '.join(missing)}"
                                                            if missing else ""))
