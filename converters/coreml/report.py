"""The coreml entry of a manifest as `convert` and `inspect` print it (edgeserve.cli.report collects
each target's lines from its own folder)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from edgeserve.cli.report_parts import macs, metric_line, print_quality, print_unverified


def print_entry(console: Console, entry: dict[str, Any]) -> None:
    status = "[green]ok[/]" if entry["status"] == "ok" else "[bold red]FAILED[/]"
    console.print(f"\n[bold]coreml[/] → {entry['path']}  {entry['bytes']:,} bytes  {status}")
    print_unverified(console, entry)
    q = entry["quantization"]
    console.print(f"  {entry['precision']} for {entry['deployment_target']}+: weights {q['weights']}; "
                  f"activations {q['activations']}" + macs(entry.get("macs")).replace(",", ";", 1), soft_wrap=True)
    stats = q.get("activation_stats")
    if stats:
        console.print(f"  activation ranges: {stats['method']} over {stats['samples']} calibration samples, "
                      f"{q['activation_quantize_ops']} quantize ops")
    for inp in entry["inputs"]:
        if inp["kind"] == "image":
            bias = ", ".join(f"{b:.4g}" for b in inp["bias"])
            extra = "; per-channel affine in the graph" if inp.get("in_graph") else ""
            console.print(f"  input {inp['name']}: image {inp['color_layout']} {inp['shape']}, "
                          f"pixel × {inp['scale']:.6g} + [{bias}]{extra}")
        else:
            console.print(f"  input {inp['name']}: tensor {inp['shape']} {inp['dtype']}")
    if entry.get("classifier"):
        labels = entry["classifier"]["labels"]
        more = ", …" if len(labels) > 5 else ""
        console.print(f"  classifier: {len(labels)} labels ({', '.join(labels[:5])}{more})")
    m = entry.get("metrics")
    if m:
        console.print(metric_line(m, "source", "coreml"))
    print_quality(console, entry)
    v = entry["verification"]
    top1 = f", top-1 agreement {v['top1_agreement']:.2%}" if v.get("top1_agreement") is not None else ""
    console.print(f"  verified by {v['method']}: max |diff| {v['max_abs_diff']:.3g}{top1} on {v['samples']} samples")
    predict = v.get("coreml_predict") or {}
    if "skipped" in predict:
        console.print(f"  Core ML predict not run: {predict['skipped']}")
    if "not_verified" in (v.get("mil_numpy") or {}):
        console.print(f"  numpy MIL evaluator: {v['mil_numpy']['not_verified']}", soft_wrap=True)
    console.print(f"  {sum(entry['ops'].values())} ops: " + ", ".join(f"{op}×{n}" for op, n in entry["ops"].items()),
                  soft_wrap=True)
