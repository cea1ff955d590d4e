"""Interpreter-free C (mcu-c) against TFLM, model by model, for the README table.

    python benchmarks/mcu_c.py [--json]

For each full-INT8 model of ../shared/testdata that mcu-c has kernels for, in one run:
RAM: mcu-c's static arena (temporaries included; the input is read from the caller's buffer)
next to TFLM's arena head (activation memory; edgeserve's model of TFLM's planner, equal to
what the tflite-micro interpreter reports, see tests/test_mcu_target.py) and their ratio.
Cortex-M4 (qemu-system-arm -M mps2-an386 -icount shift=0, arm-none-eabi-gcc -O2): instructions
per inference (40 x SysTick ticks) and code flash (image text minus weights and the embedded
test input; newlib's printf and the startup code included), and the time to generate the C.

TFLM itself cannot be built here (../shared/tflm lacks the third-party downloads its makefile
needs, and the machine reaches only package registries), so its Cortex-M4 figures are the ones
measured with a plain TFLM harness and quoted in ../shared/tflm/README.md (KWS only).
"""

from __future__ import annotations

import argparse
import json
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
# ../shared/tflm/README.md: a plain 16-operator TFLM harness on KWS, Cortex-M4 under QEMU.
TFLM_KWS = {"instructions_reference": 199_000_000, "instructions_cmsis_nn": 7_600_000,
            "code_bytes_reference": 117_000, "code_bytes_cmsis_nn": 163_000}


def run() -> list[dict[str, Any]]:
    from edgeserve.converters.mcu.arena import plan_head
    from edgeserve.converters.mcu_c import check
    from edgeserve.converters.mcu_c.generate import generate
    from edgeserve.tflite_model import TfliteModel

    missing = check.qemu_available()
    rows = []
    for rel in MODELS:
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
                row.update(instructions=target.instructions[0], code_bytes=target.code_bytes)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = run()
    if args.json:
        print(json.dumps({"models": rows, "tflm_kws_published": TFLM_KWS}, indent=2))
        return
    print(f"{'model':26} {'TFLM head':>10} {'mcu-c arena':>12} {'ratio':>6} {'M4 instr.':>12} {'code B':>8} "
          f"{'weights B':>10} {'gen s':>6}  planner")
    for r in rows:
        print(f"{r['model']:26} {r['tflm_head_bytes']:>10,} {r['arena_bytes']:>12,} {r['ratio']:>6.2f} "
              f"{r.get('instructions', 0):>12,} {r.get('code_bytes', 0):>8,} {r['weight_bytes']:>10,} "
              f"{r['generate_s']:>6.2f}  {r['planner']}{' (optimal)' if r['optimal'] else ''}")
    print(f"TFLM on KWS (../shared/tflm/README.md): {TFLM_KWS['instructions_reference']:,} instructions with reference "
          f"kernels, {TFLM_KWS['instructions_cmsis_nn']:,} with CMSIS-NN; code {TFLM_KWS['code_bytes_reference']:,} "
          f"/ {TFLM_KWS['code_bytes_cmsis_nn']:,} B")


if __name__ == "__main__":
    main()
