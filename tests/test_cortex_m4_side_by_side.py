"""One model through every Cortex-M4 column of benchmarks/mcu_c.py, so its harness cannot rot:
the interpreter-free C (-t mcu-c), and what -t mcu generates (model data, exact op resolver,
planned arena) built with firmware/boards/mps2_an386/tflm_main.cc against TFLM's own
Cortex-M4 libraries (../shared/tflm/build.sh cortex-m4-ref and cortex-m4, i.e. reference
kernels and CMSIS-NN), all run under qemu-system-arm -M mps2-an386 -icount shift=0 on the
same inputs."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

MODEL = "mlperf-tiny/kws_ref_model.tflite"
SAMPLES = 2


def _require_qemu() -> None:
    from edgeserve.converters.mcu_c import check

    reason = check.qemu_available()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)


def test_the_same_model_in_every_cortex_m4_column(testdata: Path, tflm_cortex_m4: dict[str, Path],
                                                  tmp_path: Path) -> None:
    _require_qemu()
    from edgeserve.converters.mcu.cortex_m4 import build_image, weights_symbol
    from edgeserve.converters.mcu_c import check
    from edgeserve.converters.mcu_c.generate import generate
    from edgeserve.pipeline import convert
    from edgeserve.tflite_model import TfliteModel

    model = TfliteModel.from_file(testdata / MODEL)
    graph = model.subgraphs[0]
    output_bytes = graph.tensors[graph.outputs[0]].nbytes
    x = np.random.default_rng(3).integers(-128, 128, size=(SAMPLES, *graph.tensors[graph.inputs[0]].shape),
                                          dtype=np.int8)

    generated = generate(model, "model", MODEL)
    directory = tmp_path / "mcu-c"
    for rel, text in generated.files.items():
        (directory / rel).parent.mkdir(parents=True, exist_ok=True)
        (directory / rel).write_text(text)
    ours = check.run_cortex_m4(check.build_cortex_m4(directory, "model", x, tmp_path / "m4"), "model", output_bytes)
    assert len(np.unique(ours.outputs, axis=0)) == SAMPLES  # the inputs give different outputs

    result = convert(testdata / MODEL, ["mcu"], tmp_path / "conv", options={"name": "model", "fit_check": False})
    (entry,) = result.manifest["artifacts"]
    planned = entry["arena_bytes"]
    runs = {}
    for flavour, tflm in tflm_cortex_m4.items():
        # The planned arena is computed for the reference kernels; CMSIS-NN's kernels keep
        # other state and scratch (measured on KWS: 36 bytes more), so they get room to spare
        # and report what they used.
        arena = None if flavour == "cortex-m4-ref" else 2 * planned
        image = build_image(tmp_path / "conv" / "mcu", "model", tflm, x, tmp_path / flavour, arena_bytes=arena)
        runs[flavour] = check.run_cortex_m4(image, "model", output_bytes, weights=weights_symbol("model"))
        # Bit-exact: mcu-c follows TFLM's reference kernels, and CMSIS-NN is exact with them.
        np.testing.assert_array_equal(runs[flavour].outputs, ours.outputs, err_msg=flavour)
        assert runs[flavour].weight_bytes >= len(model.file_bytes)  # the flatbuffer is in the image
        assert runs[flavour].stack_bytes is not None and runs[flavour].stack_bytes > 256
    reference, cmsis = runs["cortex-m4-ref"], runs["cortex-m4"]
    # -t mcu's 32-bit arena, in a real 32-bit TFLM: it allocated (the run above used exactly the
    # planned size), and the interpreter's own count is within the 16-byte rounding of it.
    assert reference.arena_used_bytes is not None and planned - 16 < reference.arena_used_bytes <= planned
    assert cmsis.arena_used_bytes is not None
    # ../shared/tflm/README.md measured 199 M (reference) and 7.6 M (CMSIS-NN) on KWS.
    assert 150e6 < reference.instructions[-1] < 250e6 and 4e6 < cmsis.instructions[-1] < 12e6
    # The portable C between the two: fewer than the reference kernels, more than CMSIS-NN.
    assert cmsis.instructions[-1] < ours.instructions[-1] < reference.instructions[-1]
    assert ours.code_bytes < reference.code_bytes
