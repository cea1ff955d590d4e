"""The emulated Cortex-M4 board (qemu-system-arm -M mps2-an386 -icount shift=0): its files and
the inputs header every firmware image embeds (mcu-c's check builds on them too), and what
`-t mcu` generated built against a TFLM Cortex-M4 library, so TFLM is measured the way
mcu-c's C is: the same board files, inputs, SysTick count and stack painting.

``tflm`` is a ``../shared/tflm/build.sh cortex-m4|cortex-m4-ref`` output folder: its
``lib/libtensorflow-microlite.a``, and ``cxxflags``/``includes`` to compile against it.
"""

from __future__ import annotations

import re
import shlex
from importlib import resources
from pathlib import Path

import numpy as np

from edgeserve.converters.microcontroller.toolchain import find_compiler, run_tool


def board_dir() -> Path:
    """The emulated board's files (firmware/boards/mps2_an386): startup, linker script, harnesses."""
    return Path(str(resources.files("edgeserve._firmware").joinpath("boards", "mps2_an386")))


def write_inputs_header(workdir: Path, inputs: np.ndarray) -> None:
    """es_inputs.h: the inputs [N, ...] the firmware runs (int8, or int16 for a 16x8 model), as a
    const array (flash)."""
    workdir.mkdir(parents=True, exist_ok=True)
    rows = [f"  {{{', '.join(str(v) for v in x.reshape(-1).tolist())}}}," for x in inputs]
    ctype = f"{np.dtype(inputs.dtype).name}_t"
    (workdir / "es_inputs.h").write_text(
        f"#define ES_INPUT_COUNT {len(inputs)}\n"
        f"static const {ctype} es_inputs[{len(inputs)}][{inputs[0].size}] = {{\n" + "\n".join(rows) + "\n};\n")


def build_image(mcu_dir: Path, name: str, tflm: Path, inputs: np.ndarray, workdir: Path,
                arena_bytes: int | None = None) -> Path:
    """A semihosted image running ``inputs`` through TFLM with the generated data, op
    resolver and planned (32-bit) arena, or ``arena_bytes`` when given. Raises CompileError
    with the compiler's message."""
    write_inputs_header(workdir, inputs)
    # TFLM's own flags (CPU, FPU and float ABI, defines), without its -Werror: the harness is
    # ours, the flags are theirs.
    # (--specs too: the link below names rdimon.specs once, and gcc refuses it twice).
    flags = [f for f in shlex.split((tflm / "cxxflags").read_text()) if not f.startswith(("-Werror", "--specs"))]
    includes = shlex.split((tflm / "includes").read_text())
    c_flags = [f for f in flags if f.startswith(("-mcpu", "-mthumb", "-mfpu", "-mfloat-abi"))]
    board = board_dir()
    startup = workdir / "startup.o"
    run_tool([str(find_compiler("arm-c")), *c_flags, "-O2", "-c", str(board / "startup.c"), "-o", str(startup)])
    image = workdir / f"{name}_tflm.elf"
    ns = f"{name}_model"
    run_tool([str(find_compiler("arm-c++")), *flags, "-O2", *includes, f"-I{mcu_dir}", f"-I{workdir}",
          *([f"-DES_ARENA_BYTES={arena_bytes}"] if arena_bytes else []), f"-DES_NS={ns}", f"-DES_DATA=g_{ns}_data", f'-DES_DATA_H="{ns}_data.h"', f'-DES_OPS_H="{ns}_ops.h"',
          f'-DES_ARENA_H="{ns}_arena.h"', "--specs=rdimon.specs", "-nostartfiles", "-T", str(board / "mps2_an386.ld"),
          "-Wl,--gc-sections", f"-Wl,-Map={image.with_suffix('.map')}", str(startup), str(board / "tflm_main.cc"), str(mcu_dir / f"{ns}_data.cc"),
          str(tflm / "lib" / "libtensorflow-microlite.a"), "-o", str(image)])
    return image


def weights_symbol(name: str) -> str:
    """The symbol pattern of the model's flatbuffer in the image (for run_cortex_m4)."""
    return rf"g_{re.escape(name)}_model_data"
