"""The tflite-int8 entry of a manifest as `convert` and `inspect` print it (edgeserve.cli.report
collects each target's lines from its own folder): the gate, the scheme and where the
multiply-accumulates run, the operators left float, every attempt the remedies made, and the
worst layers of the per-layer table."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from edgeserve.cli.report_parts import float_layers, macs, metric_line, print_quality, print_unverified


def print_entry(console: Console, entry: dict[str, Any]) -> None:
    status = "[green]ok[/]" if entry["status"] == "ok" else "[bold red]FAILED[/]"
    console.print(f"\n[bold]{entry['target']}[/] → {entry['path']}  {entry['bytes']:,} bytes  {status}")
    print_unverified(console, entry)
    m = entry.get("metrics")
    if m:
        console.print(metric_line(m, "float", "quantized"))
    print_quality(console, entry)
    agree = entry.get("agreement") or {}
    if agree:
        parts = [f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in agree.items()]
        console.print("  agreement: " + ", ".join(parts))
    q = entry.get("quantization")
    if q:
        console.print(f"  scheme {q['scheme']}, io {q['io']}, integer-only {entry.get('integer_only')}"
                      + macs(entry.get("macs"))
                      + (f", float layers: {float_layers(q['float_layers'])}" if q["float_layers"] else ""))
    if entry.get("no_int8_rule"):
        ops = list(entry["no_int8_rule"])
        console.print(f"  mixed model: {', '.join(ops)} computed in float (ai-edge-quantizer has no int8 rule for "
                      f"{'it' if len(ops) == 1 else 'them'}); the microcontroller targets refuse it", soft_wrap=True)
    attempts = entry.get("attempts") or []
    if len(attempts) > 1 or entry["status"] != "ok":
        console.print("  attempts:")
        for i, a in enumerate(attempts, 1):
            drop = f", drop {a['metrics']['drop_points']:.2f}" if a.get("metrics") else ""
            reason = f" ({a['reason']})" if a["reason"] else ""
            console.print(f"    {i}. {a['description']}: {a['status']}{drop}{reason}", soft_wrap=True)
    layers = entry.get("worst_layers") or []
    if layers:
        table = Table("layer", "op", "RMSE/step", "SQNR dB", title="worst layers (rounding noise alone ≈ 0.29 steps)",
                      title_justify="left")
        for l in layers:
            sqnr = "—" if l["sqnr_db"] is None else f"{l['sqnr_db']:.1f}"
            table.add_row(Text(l["layer"][:60]), Text(l["op"]), f"{l['rmse_per_scale']:.3f}", sqnr)
        console.print(table)
