"""What every target's report lines share (edgeserve.cli.report and each target's own
converters/<target>/report.py): the gate's line, a drop, the MAC shares, the float layers, the
line a check that could not fail adds, and text that is never read as markup."""

from __future__ import annotations

import collections
from typing import Any

from rich.console import Console
from rich.markup import escape


def print_unverified(console: Console, entry: dict[str, Any]) -> None:
    """Every target says when its check could not fail (constant reference outputs)."""
    reason = (entry.get("verification") or {}).get("degenerate")
    if reason:
        console.print(f"  [bold yellow]NOT VERIFIED[/]: {reason}")


def drop_text(m: dict, unit: str) -> str:
    """"drop 0.40 points (max 1.0)" where the drop was the gate on output 0; otherwise the drop
    alone, saying what judged instead (a drop above max_drop read as a failure in a passing run)."""
    judged_by = m.get("judged_by", "metric")
    if judged_by in ("metric", None):
        return f"drop {m['drop_points']:.2f}{unit} (max {m['max_drop']})"
    return f"drop {m['drop_points']:.2f}{unit} (not the gate: {judged_by} judges this output)"


def metric_line(m: dict, reference: str, artifact: str, tail: str = "") -> str:
    """"  top1 vs float: source 0.9806  coreml 0.9806  drop 0.00 points (max 1.0) on 10 samples":
    the task metric of the reference and of the artifact, and the drop."""
    label = m["metric"] + ("" if m["labelled"] else " vs float")
    unit = " points" if m["metric"] == "top1" else " %"
    return (f"  {label}: {reference} {m['float']:.4f}  {artifact} {m['quantized']:.4f}  {drop_text(m, unit)} "
            f"on {m['samples']} samples{tail}")


def macs(macs: dict | None) -> str:
    """", MACs 99.2 % int8, 0.8 % float": where the arithmetic runs (nothing for a model without any)."""
    if not macs or not macs.get("total"):
        return ""
    parts = [f"{100.0 * macs[kind] / macs['total']:.3g} % {kind}" for kind in ("int8", "int16", "float") if macs[kind]]
    return ", MACs " + ", ".join(parts)


def float_layers(layers: list[str]) -> str:
    """The float layers by name, or for more than a few (a float front: every operator before
    a LOG) how many of each operator, the names being in the manifest."""
    if len(layers) <= 4:
        return ", ".join(layers)
    ops = [layer.split(" ", 1)[0] for layer in layers]
    if not all(op.isupper() for op in ops):  # layer names, not "OPERATOR 'tensor'"
        return f"{', '.join(layers[:4])} and {len(layers) - 4} more (named in the manifest)"
    counts = collections.Counter(ops)
    return f"{len(layers)} ({', '.join(f'{op}x{n}' for op, n in counts.items())}; named in the manifest)"


def print_quality(console: Console, entry: dict[str, Any]) -> None:
    """One line for the gate on every output: what judged it and the figure."""
    quality = entry.get("quality")
    if not quality:
        return
    parts = []
    for o in quality["outputs"]:
        mark = "ok" if o["ok"] else "[bold red]FAILED[/]"
        if o["judged_by"] == "metric":
            parts.append(f"{escape(o['name'])} by the task metric {mark}")
            continue
        if o["judged_by"] == "agreement":
            agreed = (entry.get("metrics") or {}).get("quantized")
            figure = f" {100 * agreed:.1f} %" if isinstance(agreed, (int, float)) else ""
            parts.append(f"{escape(o['name'])} top-1 agreement{figure} (min {quality.get('min_agreement', 0):g} %) {mark}")
            continue
        if o["judged_by"] == "detections":
            parts.append(f"{escape(o['name'])} read by the decoder {mark}")
            continue
        sqnr = "exact" if o["sqnr_db"] is None and o["ok"] else f"{o['sqnr_db']} dB"
        parts.append(f"{escape(o['name'])} SQNR {sqnr} {mark}")
    console.print(f"  outputs vs float (min SQNR {quality['min_sqnr_db']:g} dB): " + ", ".join(parts), soft_wrap=True)
    found = quality.get("detections")
    if found:
        if found["degenerate"]:
            console.print(f"  detections ({escape(found['decoder'])}): neither model detects anything on these "
                          f"{found['samples']} inputs, so this check cannot fail; judged by SQNR", soft_wrap=True)
        else:
            console.print(f"  detections ({escape(found['decoder'])}): {found['match_percent']:g} % matched the float "
                          f"model's (min {found['min_match']:g} %): finds {found['found']} of "
                          f"{found['float_detections']} float, {found['confirmed']} of its {found['artifact_detections']} "
                          f"confirmed; mean score error {found['mean_score_error']}, mean IoU {found['mean_iou']}",
                          soft_wrap=True)


def plain(value: Any) -> str:
    """A name or path from a model file or a manifest, as text: never read as markup."""
    return escape(str(value))
