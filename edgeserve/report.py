"""Human-readable tables for the CLI (rich). JSON output never goes through here."""

from __future__ import annotations

import collections

import sys
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.text import Text
from rich.table import Table


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
    if entry["target"] == "mcu":
        _print_mcu(console, entry)
        return
    if entry["target"] == "mcu-c":
        _print_mcu_c(console, entry)
        return
    if entry["target"] == "coreml":
        _print_coreml(console, entry)
        return
    if entry["target"] in ("executorch", "executorch-int8"):
        _print_executorch(console, entry)
        return
    if entry["target"] in ("onnx", "onnx-int8"):
        _print_onnx(console, entry)
        return
    status = "[green]ok[/]" if entry["status"] == "ok" else "[bold red]FAILED[/]"
    console.print(f"\n[bold]{entry['target']}[/] → {entry['path']}  {entry['bytes']:,} bytes  {status}")
    _print_unverified(console, entry)
    m = entry.get("metrics")
    if m:
        label = m["metric"] + ("" if m["labelled"] else " vs float")
        unit = " points" if m["metric"] == "top1" else " %"
        console.print(f"  {label}: float {m['float']:.4f}  quantized {m['quantized']:.4f}  {_drop(m, unit)} "
                      f"on {m['samples']} samples")
    _print_quality(console, entry)
    agree = entry.get("agreement") or {}
    if agree:
        parts = [f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in agree.items()]
        console.print("  agreement: " + ", ".join(parts))
    q = entry.get("quantization")
    if q:
        console.print(f"  scheme {q['scheme']}, io {q['io']}, integer-only {entry.get('integer_only')}"
                      + _macs(entry.get("macs"))
                      + (f", float layers: {_float_layers(q['float_layers'])}" if q["float_layers"] else ""))
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


def _print_unverified(console: Console, entry: dict[str, Any]) -> None:
    """Every target says when its check could not fail (constant reference outputs)."""
    reason = (entry.get("verification") or {}).get("degenerate")
    if reason:
        console.print(f"  [bold yellow]NOT VERIFIED[/]: {reason}")


def _drop(m: dict, unit: str) -> str:
    """"drop 0.40 points (max 1.0)" where the drop was the gate on output 0; otherwise the drop
    alone, saying what judged instead (a drop above max_drop read as a failure in a passing run)."""
    judged_by = m.get("judged_by", "metric")
    if judged_by in ("metric", None):
        return f"drop {m['drop_points']:.2f}{unit} (max {m['max_drop']})"
    return f"drop {m['drop_points']:.2f}{unit} (not the gate: {judged_by} judges this output)"


def _macs(macs: dict | None) -> str:
    """", MACs 99.2 % int8, 0.8 % float": where the arithmetic runs (nothing for a model without any)."""
    if not macs or not macs.get("total"):
        return ""
    parts = [f"{100.0 * macs[kind] / macs['total']:.3g} % {kind}" for kind in ("int8", "int16", "float") if macs[kind]]
    return ", MACs " + ", ".join(parts)


def _float_layers(layers: list[str]) -> str:
    """The float layers by name, or for more than a few (a float front: every operator before
    a LOG) how many of each operator, the names being in the manifest."""
    if len(layers) <= 4:
        return ", ".join(layers)
    ops = [layer.split(" ", 1)[0] for layer in layers]
    if not all(op.isupper() for op in ops):  # layer names, not "OPERATOR 'tensor'"
        return f"{', '.join(layers[:4])} and {len(layers) - 4} more (named in the manifest)"
    counts = collections.Counter(ops)
    return f"{len(layers)} ({', '.join(f'{op}x{n}' for op, n in counts.items())}; named in the manifest)"


def _print_quality(console: Console, entry: dict[str, Any]) -> None:
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


def _print_mcu(console: Console, entry: dict[str, Any]) -> None:
    console.print(f"\n[bold]mcu[/] → {entry['path']}/  {entry['name']}_model_*.h/.cc  [green]ok[/]")
    _print_unverified(console, entry)
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


def _print_mcu_c(console: Console, entry: dict[str, Any]) -> None:
    console.print(f"\n[bold]mcu-c[/] → {entry['path']}/  {entry['name']}.h/.c + kernels/  [green]ok[/]")
    _print_unverified(console, entry)
    head = entry.get("tflm_arena_head_bytes")
    versus = f" = {entry['arena_vs_tflm_head']:.2f}x TFLM's arena head ({head:,})" if head else ""
    state = f" + state {entry['state_bytes']:,} bytes (NAME_reset())" if entry.get("state_bytes") else ""
    console.print(f"  static arena {entry['arena_bytes']:,} bytes{versus}{state}; {entry['in_place_steps']} in-place "
                  f"steps; placed by {entry['planner']}" + (" (optimal)" if entry["planner_optimal"] else ""),
                  soft_wrap=True)
    library = entry.get("cmsis_nn")
    portable = f"portable kernels: {', '.join(entry['kernels'])}" if entry["kernels"] else "no portable kernel"
    console.print(f"  weights {entry['weight_bytes']:,} bytes (const, flash); {portable}", soft_wrap=True, markup=False)
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


def _print_coreml(console: Console, entry: dict[str, Any]) -> None:
    status = "[green]ok[/]" if entry["status"] == "ok" else "[bold red]FAILED[/]"
    console.print(f"\n[bold]coreml[/] → {entry['path']}  {entry['bytes']:,} bytes  {status}")
    _print_unverified(console, entry)
    q = entry["quantization"]
    console.print(f"  {entry['precision']} for {entry['deployment_target']}+: weights {q['weights']}; "
                  f"activations {q['activations']}" + _macs(entry.get("macs")).replace(",", ";", 1), soft_wrap=True)
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
        label = m["metric"] + ("" if m["labelled"] else " vs float")
        unit = " points" if m["metric"] == "top1" else " %"
        console.print(f"  {label}: source {m['float']:.4f}  coreml {m['quantized']:.4f}  "
                      f"{_drop(m, unit)} on {m['samples']} samples")
    _print_quality(console, entry)
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


def _e(value: Any) -> str:
    """A name or path from a model file or a manifest, as text: never read as markup."""
    return escape(str(value))


def print_inspection(info: dict[str, Any]) -> None:
    console = _console()
    if info["kind"] == "manifest":
        manifest = info["manifest"]
        console.print(f"manifest {_e(info['path'])}  schema {_e(manifest['schema'])}  "
                      f"edgeserve {_e(manifest['edgeserve_version'])}")
        for entry in manifest["artifacts"]:
            _print_artifact(console, entry, (manifest.get("source") or {}).get("outputs"))
        return
    if info["kind"] == "coreml":
        _print_coreml_package(console, info)
        return
    if info["kind"] == "source":
        _print_source(console, info)
        return
    console.print(f"{_e(info['path'])}: {info['bytes']:,} bytes, {info['operators']} operators, "
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


def _print_executorch(console: Console, entry: dict[str, Any]) -> None:
    status = "[green]ok[/]" if entry["status"] == "ok" else "[bold red]FAILED[/]"
    console.print(f"\n[bold]{entry['target']}[/] → {entry['path']}  {entry['bytes']:,} bytes  {status}")
    _print_quality(console, entry)
    d = entry["delegation"]
    share = f"{100 * d['delegated_share']:.1f} %" if d.get("delegated_share") is not None else "-"
    console.print(f"  XNNPACK: {d['delegated_nodes']} of {d['delegated_nodes'] + d['portable_nodes']} nodes "
                  f"({share}) in {d['delegated_subgraphs']} delegated subgraph(s)", soft_wrap=True)
    if d.get("portable_ops"):
        console.print(f"  on ExecuTorch's portable kernels: {_e(', '.join(d['portable_ops']))}", soft_wrap=True)
    if d.get("xnnpack_error"):
        console.print(f"  [yellow]note[/]: XNNPACK could not take the graph ({_e(d['xnnpack_error'])}); "
                      "lowered without a delegate", soft_wrap=True)
    q = entry.get("quantization")
    if q:
        console.print(f"  weights {q['weights']}, activations {q['activations']}, {q['int8_layers']} int8 layer(s)"
                      + (f", {q['float_convolutions_behind_pads']} convolution(s) behind a pad left float"
                         if q.get("float_convolutions_behind_pads") else "") + _macs(entry.get("macs")),
                      soft_wrap=True)
    attempts = entry.get("attempts") or []
    if len(attempts) > 1 or entry["status"] != "ok":
        console.print("  attempts:")
        for i, a in enumerate(attempts, 1):
            reason = f" ({_e(a['reason'])})" if a.get("reason") else ""
            console.print(f"    {i}. {a['activations']} activations: {a['status']}{reason}", soft_wrap=True)
    v = entry["verification"]
    console.print(f"  verified by {v['method']} on {v['samples']} samples; route: {entry['route']['export']}",
                  soft_wrap=True)


def _print_onnx(console: Console, entry: dict[str, Any]) -> None:
    status = "[green]ok[/]" if entry["status"] == "ok" else "[bold red]FAILED[/]"
    console.print(f"\n[bold]{entry['target']}[/] → {entry['path']}  {entry['bytes']:,} bytes  {status}")
    _print_unverified(console, entry)
    m = entry["metrics"]
    label = m["metric"] + ("" if m["labelled"] else " vs float")
    unit = " points" if m["metric"] == "top1" else " %"
    console.print(f"  {label}: source {m['float']:.4f}  {entry['target']} {m['quantized']:.4f}  "
                  f"{_drop(m, unit)} on {m['samples']} samples, ONNX Runtime CPU")
    _print_quality(console, entry)
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
                      f"{q['calibration']}" + _macs(entry.get("macs"))
                      + (f", in float: {_e(', '.join(q['float_nodes']))}" if q["float_nodes"] else ""))
        if q.get("note"):
            console.print(f"  [yellow]note[/]: {_e(q['note'])}", soft_wrap=True)
    attempts = entry.get("attempts") or []
    if len(attempts) > 1 or entry["status"] != "ok":
        console.print("  attempts:")
        for i, a in enumerate(attempts, 1):
            kept = _e(", ".join(a["float_nodes"])) or "none"
            what = f"{a.get('activations', 'int8')} activations, nodes in float: {kept}"
            if a.get("remedy") == "float-tail":
                what = f"output's final Concat in float: {kept}"
            if a["status"] == "skipped":
                console.print(f"    {i}. {what}: skipped ({_e(a['reason'])})", soft_wrap=True)
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


def _print_source(console: Console, info: dict[str, Any]) -> None:
    console.print(f"{_e(info['path'])}: {info['source_kind']} source ({_e(info['framework'])})")
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
    console.print(f"{_e(info['path'])}: Core ML ML program, {info['bytes']:,} bytes, specification "
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
