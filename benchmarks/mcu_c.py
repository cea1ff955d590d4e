"""Interpreter-free C (mcu-c) against TFLM, model by model, for the README table.

    python benchmarks/mcu_c.py [--json] [--no-tflm] [--model MODEL ...] [--layers MODEL]

For each full-INT8 model of ../shared/testdata that mcu-c has kernels for, in one run:
RAM: mcu-c's static arena (temporaries included; the input is read from the caller's buffer)
next to TFLM's arena head (activation memory; edgeserve's model of TFLM's planner, equal to
what the tflite-micro interpreter reports, see tests/test_mcu_target.py) and their ratio.
Cortex-M4 (qemu-system-arm -M mps2-an386 -icount shift=0, arm-none-eabi-gcc -O2): instructions
per inference (40 x SysTick ticks), code flash (image text minus weights and the embedded test
input, with newlib's printf and the startup code, and without newlib: its share read from the
link map), RAM (static arena + state + the stack's high-water mark, painted before the run),
and the time to generate the C.

The same C calling CMSIS-NN (`-t mcu-c --cmsis-nn`, the CMSIS-NN under ../shared/tflm's
downloads) runs on the same input, and must print the same outputs; so do the C with kernels
generated for each layer (`--kernels generated`), alone and with CMSIS-NN for the other layers.
`--layers MODEL` (e.g. kws_ref_model) prints that model's instructions operator by operator
instead (SysTick after each kernel): mcu-c + CMSIS-NN against generated + CMSIS-NN.

TFLM itself runs beside it on the same emulated board (unless --no-tflm): what `-t mcu`
generates (model data, exact op resolver, planned arena) is built with
firmware/boards/mps2_an386/tflm_main.cc against `../shared/tflm/build.sh cortex-m4-ref`
(reference kernels) and `cortex-m4` (CMSIS-NN), both cached in ~/.cache/edgeserve/tflm (about
8 minutes each on 2 cores the first time). Same input, same SysTick count, same stack
painting; every build's output must equal mcu-c's (all are bit-exact with TFLM's reference
kernels). Each build gets the arena the generated header picks for it (the CMSIS-NN plan
when CMSIS_NN is defined); were it too small, the run is repeated in a larger arena and the
row says so.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TESTDATA = ROOT.parent / "shared" / "testdata"
MODELS = ("mlperf-tiny/kws_ref_model", "mlperf-tiny/vww_96_int8", "mlperf-tiny/pretrainedResnet_quant",
          "mlperf-tiny/ad01_int8", "mlperf-tiny/str_ww_ref_model", "tflm/person_detect",
          "tflm/micro_speech_quantized", "tflm/hello_world_int8", "tflm/mobilenet_v2_quantized_1x3x224x224")
# The CMSIS-NN TFLM pins: what the "mcu-c + CMSIS-NN" column calls (the project ships none).
CMSIS_NN = ROOT.parent / "shared" / "tflm" / "src" / "tensorflow" / "lite" / "micro" / "tools" / "make" / "downloads" / \
    "cmsis_nn"
# Columns of TFLM's own builds: build.sh flavour per column.
FLAVOURS = {"tflm_ref": "cortex-m4-ref", "tflm_cmsis_nn": "cortex-m4"}


def tflm_builds() -> dict[str, Path]:
    """The cached TFLM Cortex-M4 build folders, built first when missing (tests/tflm_build.py)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from tflm_build import build

    return {column: build(flavour).library.parents[1] for column, flavour in FLAVOURS.items()}


def mcu_files(model_path: Path, out: Path, cmsis_nn: bool = False) -> int:
    """`edgeserve convert -t mcu` into ``out`` (once); the planned arena in bytes for TFLM's
    reference kernels, or for its CMSIS-NN build (the header picks it when CMSIS_NN is set)."""
    if not (out / "manifest.json").is_file():
        subprocess.run([sys.executable, "-m", "edgeserve", "convert", str(model_path), "-t", "mcu", "--name", "model",
                        "-o", str(out), "--no-fit-check"], check=True, capture_output=True, text=True)
    manifest = json.loads((out / "manifest.json").read_text())
    entry = next(a for a in manifest["artifacts"] if a["target"] == "mcu")
    return entry["arena_cmsis_nn"]["bytes"] if cmsis_nn else entry["arena_bytes"]


def run_tflm(model_path: Path, tflm: Path, x: np.ndarray, work: Path) -> dict[str, Any]:
    """The model through `-t mcu`'s files and TFLM on the emulated Cortex-M4."""
    from edgeserve.converters.microcontroller.cortex_m4 import build_image, weights_symbol
    from edgeserve.converters.mcu_c import check
    from edgeserve.tflite.model import TfliteModel

    planned = mcu_files(model_path, work / "conv", cmsis_nn=not tflm.name.startswith("cortex-m4-ref"))
    graph = TfliteModel.from_file(model_path).subgraphs[0]
    output_bytes = graph.tensors[graph.outputs[0]].nbytes
    arena, note = None, None
    for attempt in range(4):
        image = build_image(work / "conv" / "mcu", "model", tflm, x, work / f"{tflm.name}-{attempt}",
                            arena_bytes=arena)
        try:
            target = check.run_cortex_m4(image, "model", output_bytes, weights=weights_symbol("model"))
            break
        except RuntimeError as exc:
            if "error AllocateTensors" not in str(exc):
                raise
            arena = (arena or planned) * 2
            note = f"the planned {planned:,} B arena is too small for these kernels; ran in {arena:,} B"
    else:
        raise RuntimeError(f"TFLM did not allocate {model_path.name} in {arena:,} B")
    return {"instructions": target.instructions[0], "code_bytes": target.code_bytes,
            "code_bytes_without_newlib": target.code_bytes_without_newlib,
            "ram_bytes": (arena or planned) + (target.stack_bytes or 0),
            "stack_bytes": target.stack_bytes, "arena_used_bytes": target.arena_used_bytes,
            "planned_arena_bytes": planned, "arena_note": note, "outputs": target.outputs[0].tolist()}


def run_with_cmsis_nn(model: Any, rel: str, tree: Any, x: np.ndarray, work: Path, kernels: str = "portable",
                      step_ticks: bool = False) -> dict[str, Any]:
    """The model through `-t mcu-c --cmsis-nn` (``tree`` None: without) and ``--kernels`` on
    the emulated Cortex-M4 (without the test builds' scratch checks, as a product is built)."""
    from edgeserve.converters.mcu_c import check
    from edgeserve.converters.mcu_c.generate import generate

    generated = generate(model, "model", rel, cmsis_nn=tree, kernels=kernels)
    for name, text in generated.files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)
    image = check.build_cortex_m4(work, "model", x, work / "m4", cmsis_nn=tree.root if tree else None, checks=False,
                                  step_ticks=step_ticks)
    target = check.run_cortex_m4(image, "model", generated.output_bytes)
    layers = [c for c in generated.choices if c.library != "portable"]
    return {"instructions": target.instructions[0], "code_bytes": target.code_bytes,
            "code_bytes_without_newlib": target.code_bytes_without_newlib, "stack_bytes": target.stack_bytes,
            "arena_bytes": generated.plan.arena_bytes, "weight_bytes": generated.weight_bytes,
            "ram_bytes": generated.plan.arena_bytes + generated.state_bytes + (target.stack_bytes or 0),
            "layers": f"{len(layers)}/{len(generated.choices)}", "outputs": target.outputs[0].tolist(),
            "steps": {op: instructions for op, instructions in target.step_instructions},
            "ops": {s.index: (s.op, s.params) for s in generated.steps}}


# The C builds beside mcu-c portable, on the same input: (column, kernels, with CMSIS-NN).
BUILDS = (("cmsis_nn", "portable", True), ("generated", "generated", False), ("generated_cmsis_nn", "generated", True))


def run(with_tflm: bool, only: list[str] | None = None) -> list[dict[str, Any]]:
    from edgeserve.converters.microcontroller.arena import plan_head
    from edgeserve.converters.microcontroller.toolchain import CompileError
    from edgeserve.converters.mcu_c import check
    from edgeserve.converters.mcu_c.generate import generate
    from edgeserve.tflite.model import TfliteModel

    from edgeserve.converters.mcu_c.cmsis_nn_tree import locate

    missing = check.qemu_available()
    builds = tflm_builds() if with_tflm and not missing else {}
    tree = locate(CMSIS_NN) if CMSIS_NN.is_dir() else None
    rows = []
    for rel in MODELS:
        if only and Path(rel).name not in only:
            continue
        print(f"... {rel}", file=sys.stderr, flush=True)
        model = TfliteModel.from_file(TESTDATA / f"{rel}.tflite")
        start = time.perf_counter()
        generated = generate(model, "model", rel)
        seconds = time.perf_counter() - start
        head = plan_head(model, pointer_bytes=4).head_bytes
        row: dict[str, Any] = {"model": Path(rel).name, "tflm_head_bytes": head, "arena_bytes": generated.plan.arena_bytes,
                               "ratio": round(generated.plan.arena_bytes / head, 3), "planner": generated.plan.method,
                               "optimal": generated.plan.optimal, "generate_s": round(seconds, 2),
                               "weight_bytes": generated.weight_bytes}
        if not missing:
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp)
                for name, text in generated.files.items():
                    (out / name).parent.mkdir(parents=True, exist_ok=True)
                    (out / name).write_text(text)
                graph = model.subgraphs[0]
                shape = graph.tensors[graph.inputs[0]].shape
                x = np.random.default_rng(0).integers(-128, 128, size=(1, *shape), dtype=np.int8)
                image = check.build_cortex_m4(out, "model", x, out / "m4")
                target = check.run_cortex_m4(image, "model", graph.tensors[graph.outputs[0]].nbytes)
                row.update(instructions=target.instructions[0], code_bytes=target.code_bytes,
                           code_bytes_without_newlib=target.code_bytes_without_newlib,
                           stack_bytes=target.stack_bytes,
                           ram_bytes=generated.plan.arena_bytes + generated.state_bytes + (target.stack_bytes or 0))
                for column, kernels, library in BUILDS:
                    if library and tree is None:
                        continue
                    try:
                        row[column] = run_with_cmsis_nn(model, rel, tree if library else None, x, out / column,
                                                        kernels)
                    except CompileError as exc:
                        if "will not fit in region" not in str(exc):
                            raise
                        # MobileNetV2 generated: its weights widened to int16 pass the 4 MB.
                        row[column] = {"skipped": "the image does not fit the board's 4 MB code memory"}
                        continue
                    for key in ("steps", "ops"):
                        row[column].pop(key)
                    if row[column].pop("outputs") != target.outputs[0].tolist():
                        raise RuntimeError(f"{rel}: mcu-c {column} and portable mcu-c differ on the same input")
                for column, tflm in builds.items():
                    try:
                        theirs = run_tflm(TESTDATA / f"{rel}.tflite", tflm, x, out / "tflm")
                    except CompileError as exc:
                        if "will not fit in region" not in str(exc):
                            raise
                        # MobileNetV2: the flatbuffer (3.6 MB of weights plus its tables), the
                        # interpreter and the test input pass the board's 4 MB of code memory.
                        row[column] = {"skipped": "the image does not fit the board's 4 MB code memory"}
                        continue
                    if theirs.pop("outputs") != target.outputs[0].tolist():
                        raise RuntimeError(f"{rel}: TFLM ({column}) and mcu-c differ on the same input")
                    row[column] = theirs
        rows.append(row)
    return rows


def layers(name: str) -> None:
    """One model's instructions per operator: mcu-c + CMSIS-NN, then generated + CMSIS-NN."""
    from edgeserve.converters.mcu_c.cmsis_nn_tree import locate
    from edgeserve.tflite.model import TfliteModel

    rel = next(r for r in MODELS if Path(r).name == name)
    model = TfliteModel.from_file(TESTDATA / f"{rel}.tflite")
    graph = model.subgraphs[0]
    x = np.random.default_rng(0).integers(-128, 128, size=(1, *graph.tensors[graph.inputs[0]].shape), dtype=np.int8)
    tree = locate(CMSIS_NN)
    with tempfile.TemporaryDirectory() as tmp:
        base = run_with_cmsis_nn(model, rel, tree, x, Path(tmp) / "cmsis", "portable", step_ticks=True)
        ours = run_with_cmsis_nn(model, rel, tree, x, Path(tmp) / "generated", "generated", step_ticks=True)
    if base["outputs"] != ours["outputs"]:
        raise RuntimeError(f"{rel}: the generated kernels and CMSIS-NN differ on the same input")
    print("| operator | shape | MACs | mcu-c + CMSIS-NN | generated + CMSIS-NN | ratio | instructions per MAC |")
    print("|---|---|---|---|---|---|---|")
    for op, theirs in base["steps"].items():
        if op not in ours["steps"]:  # a depthwise streamed into the 1x1 before it: counted there
            print(f"| {op} {base['ops'][op][0]} | | | {theirs:,} | (in the row above) | | |")
            continue
        kind, p = ours["ops"][op]
        mine = ours["steps"][op]
        conv = kind in ("CONV_2D", "DEPTHWISE_CONV_2D", "CONV_2D+DEPTHWISE_CONV_2D")
        macs = p["out_h"] * p["out_w"] * p["out_c"] * p["k_h"] * p["k_w"] * p["k_c"] if conv else 0
        shape = (f"{p['k_h']}x{p['k_w']}/{p['stride_h']}, {p['in_c']}->{p['out_c']}, {p['out_h']}x{p['out_w']}"
                 if conv else "")
        if kind == "FULLY_CONNECTED":
            macs = p["batches"] * p["in_depth"] * p["out_depth"]
            shape = f"{p['batches']} x {p['in_depth']}->{p['out_depth']}"
        per_mac = f"{theirs / macs:.2f} -> {mine / macs:.2f}" if macs else ""
        print(f"| {op} {kind} | {shape} | {macs:,} | {theirs:,} | {mine:,} | {mine / theirs:.2f} | {per_mac} |")
    print(f"| total (SysTick between operators adds a few dozen each) | | | {base['instructions']:,} | "
          f"{ours['instructions']:,} | {ours['instructions'] / base['instructions']:.3f} | |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-tflm", action="store_true", help="skip TFLM's own Cortex-M4 builds")
    parser.add_argument("--layers", metavar="MODEL", help="one model's instructions per operator")
    parser.add_argument("--model", action="append", choices=[Path(r).name for r in MODELS],
                        help="only this model (repeatable; default: all)")
    args = parser.parse_args()
    if args.layers:
        layers(args.layers)
        return
    rows = run(with_tflm=not args.no_tflm, only=args.model)
    if args.json:
        print(json.dumps({"models": rows}, indent=2))
        return
    print(f"{'model':26} {'TFLM head':>10} {'mcu-c arena':>12} {'ratio':>6} {'M4 instr.':>13} {'code B':>8} "
          f"{'stack B':>8} {'weights B':>10} {'gen s':>6}  planner")
    for r in rows:
        print(f"{r['model']:26} {r['tflm_head_bytes']:>10,} {r['arena_bytes']:>12,} {r['ratio']:>6.2f} "
              f"{r.get('instructions', 0):>13,} {r.get('code_bytes', 0):>8,} {r.get('stack_bytes') or 0:>8,} "
              f"{r['weight_bytes']:>10,} {r['generate_s']:>6.2f}  {r['planner']}{' (optimal)' if r['optimal'] else ''}")
    if any("cmsis_nn" in r for r in rows):
        print(f"\n{'model':26} {'M4 instr. mcu-c+CMSIS-NN':>25} {'vs portable':>11} {'vs TFLM+CMSIS-NN':>17} "
              f"{'RAM vs TFLM':>11} {'code vs TFLM (no newlib)':>25} {'layers':>7}")
        for r in rows:
            c, t = r.get("cmsis_nn"), r.get("tflm_cmsis_nn")
            if not c or "skipped" in c:
                continue
            versus = lambda key: f"{c[key] / t[key]:.2f}" if t and key in t and t[key] else "-"  # noqa: E731
            print(f"{r['model']:26} {c['instructions']:>25,} {c['instructions'] / r['instructions']:>11.2f} "
                  f"{versus('instructions'):>17} {versus('ram_bytes'):>11} {versus('code_bytes_without_newlib'):>25} "
                  f"{c['layers']:>7}")
    if any("generated" in r for r in rows):
        print(f"\n{'model':26} {'generated':>12} {'vs portable':>11} {'gen+CMSIS-NN':>13} {'vs TFLM+CMSIS-NN':>17} "
              f"{'RAM vs TFLM':>11} {'code vs TFLM':>12} {'weights B':>10}")
        for r in rows:
            g, gc, t = r.get("generated"), r.get("generated_cmsis_nn"), r.get("tflm_cmsis_nn")
            if not g or "skipped" in g:
                continue
            gc = None if gc and "skipped" in gc else gc
            versus = lambda key: f"{gc[key] / t[key]:.2f}" if gc and t and t.get(key) else "-"  # noqa: E731
            print(f"{r['model']:26} {g['instructions']:>12,} {g['instructions'] / r['instructions']:>11.2f} "
                  f"{gc['instructions'] if gc else 0:>13,} {versus('instructions'):>17} {versus('ram_bytes'):>11} "
                  f"{versus('code_bytes_without_newlib'):>12} {g['weight_bytes']:>10,}")
    if any(column in r for r in rows for column in FLAVOURS):
        print(f"\n{'model':26} {'TFLM kernels':14} {'M4 instr.':>13} {'mcu-c/TFLM':>10} {'code B':>8} "
              f"{'arena B':>9} {'stack B':>8}  note")
        for r in rows:
            for column in FLAVOURS:
                t = r.get(column)
                if t and "skipped" in t:
                    print(f"{r['model']:26} {column:14} {t['skipped']}")
                elif t:
                    print(f"{r['model']:26} {column:14} {t['instructions']:>13,} "
                          f"{r['instructions'] / t['instructions']:>10.2f} {t['code_bytes']:>8,} "
                          f"{t['arena_used_bytes'] or 0:>9,} {t['stack_bytes'] or 0:>8,}  {t['arena_note'] or ''}")


if __name__ == "__main__":
    main()
