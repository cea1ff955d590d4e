"""Human-readable tables for the CLI (rich). JSON output never goes through here."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.text import Text
from rich.table import Table

from edgeserve.cli.report_parts import metric_line, plain, print_quality, print_unverified


def _console() -> Console:
    if sys.stdout.isatty():
        return Console(highlight=False, soft_wrap=False, width=120)
    # A pipe or a file: no terminal to fit, and a script reading lines must not find one
    # result broken over two.
    return Console(highlight=False, soft_wrap=True, width=10_000)


def print_conversion(manifest: dict[str, Any]) -> None:
    console = _console()
    src = manifest["source"]
    console.print(f"source  {src['path']}  ({src['kind']}, {src['framework_version']})")
    calib = manifest.get("calibration")
    if calib:  # a .tflite source is already quantized: no calibration
        judged = calib.get("evaluation") or {}
        held = (f" (and {judged['samples']} held back, judged on)" if judged.get("samples")
                else f" (judged on them too: {judged['why']})" if judged.get("why") else "")
        console.print(f"calib   {calib.get('path') or calib.get('origin')}: {calib.get('samples')} samples{held}"
                      + ("  [bold red]RANDOM DATA[/]" if calib.get("random") else ""))
    for entry in manifest["artifacts"]:
        _print_artifact(console, entry, src.get("outputs"))
    for refused in manifest.get("refused") or []:
        console.print(f"\n[bold]{escape(refused['target'])}[/]  [bold red]REFUSED[/]: {escape(refused['reason'])}",
                      soft_wrap=True)
    for skipped in manifest.get("not_built") or []:
        console.print(f"\n[bold]{escape(skipped['target'])}[/]  [bold red]NOT BUILT[/]: {escape(skipped['reason'])}",
                      soft_wrap=True)


def _print_artifact(console: Console, entry: dict[str, Any], source_outputs: list[str] | None = None) -> None:
    _print_one(console, entry)
    labels = [o.get("source_output") for o in entry.get("outputs") or [] if isinstance(o, dict)]
    if source_outputs and labels and None not in labels and labels != source_outputs:
        console.print("  outputs in another order than the source's: "
                      + ", ".join(f"{i} is {label}" for i, label in enumerate(labels))
                      + " (each output's source_output in the manifest)", soft_wrap=True)
    if entry.get("reused"):
        console.print("  kept from the previous run into this folder: same source, data, options and tools "
                      "(--no-reuse builds it again)", soft_wrap=True)


def _print_one(console: Console, entry: dict[str, Any]) -> None:
    own = _target_lines(entry["target"])
    if own is not None:
        own(console, entry)
        return
    # A target this edgeserve does not know (another version's manifest): the lines every entry has.
    status = "[green]ok[/]" if entry.get("status") == "ok" else "[bold red]FAILED[/]"
    size = f"  {entry['bytes']:,} bytes" if isinstance(entry.get("bytes"), int) else ""
    console.print(f"\n[bold]{plain(entry.get('target'))}[/] → {plain(entry.get('path'))}{size}  {status}")
    print_unverified(console, entry)
    if entry.get("metrics"):
        console.print(metric_line(entry["metrics"], "float", "quantized"))
    print_quality(console, entry)


def _target_lines(target: str) -> Callable[[Console, dict[str, Any]], None] | None:
    """The target's own printer (``report_lines`` of its converter: a module with print_entry),
    or None for a target this edgeserve does not know (read from another version's manifest)."""
    from edgeserve.converters import get_converter
    from edgeserve.errors import UnknownTargetError

    try:
        module = get_converter(target).report_lines
    except UnknownTargetError:
        return None
    return None if module is None else importlib.import_module(module).print_entry


def print_inspection(info: dict[str, Any]) -> None:
    console = _console()
    if info["kind"] == "manifest":
        manifest = info["manifest"]
        console.print(f"manifest {plain(info['path'])}  schema {plain(manifest['schema'])}  "
                      f"edgeserve {plain(manifest['edgeserve_version'])}")
        for entry in manifest["artifacts"]:
            _print_artifact(console, entry, (manifest.get("source") or {}).get("outputs"))
        return
    if info["kind"] == "coreml":
        _print_coreml_package(console, info)
        return
    if info["kind"] == "source":
        _print_source(console, info)
        return
    console.print(f"{plain(info['path'])}: {info['bytes']:,} bytes, {info['operators']} operators, "
                  f"{info['tensors']} tensors, {info['constant_bytes']:,} constant bytes")
    table = Table("io", "name", "shape", "dtype", "scale", "zero point")
    for kind in ("inputs", "outputs"):
        for t in info[kind]:
            table.add_row(kind[:-1], Text(t["name"]), str(t["shape"]), t["dtype"], _short(t["scale"]),
                          _short(t["zero_point"]))
    console.print(table)
    ops = Table("op", "count", "version")
    for name, count in info["ops"].items():
        ops.add_row(Text(name), str(count), str(info["op_versions"].get(name, "")))
    console.print(ops)
    console.print(f"integer-only: {info['integer_only']}" + (f" ({len(info['float_ops'])} float op(s))" if info["float_ops"] else ""))
    if info.get("subgraphs", 1) > 1:
        for g in info["subgraph_ops"]:
            console.print(Text(f"subgraph {g['index']} {g['name']}: " + ", ".join(f"{n}×{c}" for n, c in g["ops"].items())))
    if info.get("resource_variables"):
        table = Table("resource variable", "dtype", "shape", "bytes",
                      title=f"state kept between invocations: {info['state_bytes']:,} bytes", title_justify="left")
        for v in info["resource_variables"]:
            table.add_row(Text(v["name"]), v["dtype"], str(v["shape"]), f"{v['bytes']:,}")
        console.print(table)
    if info.get("routes"):
        _print_routes(console, info["routes"])
    if info.get("edgeserve"):
        e = info["edgeserve"]
        console.print(f"made by edgeserve {e.get('edgeserve_version')} ({e.get('target')}, {e.get('remedy')}), "
                      f"calibration {e.get('calibration_origin')} {str(e.get('calibration_sha256'))[:12]}")


def _print_source(console: Console, info: dict[str, Any]) -> None:
    console.print(f"{plain(info['path'])}: {info['source_kind']} source ({plain(info['framework'])})")
    table = Table("io", "name", "shape", "dtype")
    for kind in ("inputs", "outputs"):
        for t in info[kind]:
            table.add_row(kind[:-1], Text(t["name"]), str(t["shape"]), t["dtype"])
    console.print(table)
    console.print(Text(f"{sum(info['ops'].values())} operators: "
                       + ", ".join(f"{n}×{c}" for n, c in info["ops"].items())))
    _print_routes(console, info["routes"])


def _print_routes(console: Console, routes: list[dict[str, Any]]) -> None:
    table = Table("target", "route", "status")
    for r in routes:
        if not r["exists"]:
            status = f"no route: {r['reason']}"
        elif r["missing"]:
            status = "needs " + ", ".join(r["missing"])
        else:
            status = "ready"
        table.add_row(r["target"], Text(r["route"] or "-"), Text(status))
    console.print(table)


def _print_coreml_package(console: Console, info: dict[str, Any]) -> None:
    console.print(f"{plain(info['path'])}: Core ML ML program, {info['bytes']:,} bytes, specification "
                  f"{info['specification_version']}, opset {info['opset']}")
    table = Table("io", "name", "kind", "detail")
    for kind in ("inputs", "outputs"):
        for f in info[kind]:
            detail = {k: v for k, v in f.items() if k not in ("name", "kind")}
            table.add_row(kind[:-1], Text(f["name"]), f["kind"], Text(", ".join(f"{k} {v}" for k, v in detail.items())))
    console.print(table)
    console.print("ops: " + ", ".join(f"{name}×{count}" for name, count in info["ops"].items()))
    console.print("weights: " + (", ".join(f"{k}×{v}" for k, v in info["weights"].items()) or "none"))
    if info["classifier"]:
        console.print(f"classifier: label {info['classifier']['label']}")
    meta = {k: v for k, v in info["metadata"].items() if v}
    if meta:
        console.print(f"metadata: {meta}")


def print_profiles(profiles: list[Any]) -> None:
    table = Table("name", "kind", "description")
    for p in profiles:
        table.add_row(p.name, p.kind, p.description)
    _console().print(table)


def print_profile(profile: Any) -> None:
    import json

    _console().print_json(json.dumps(profile.to_dict()))


def _short(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, list):
        return f"per-channel ({len(value)})"
    return f"{value:.6g}" if isinstance(value, float) else str(value)
