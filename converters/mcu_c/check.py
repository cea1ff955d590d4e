"""Build the generated C and run it: on the host (gcc), and on an emulated Cortex-M4
(arm-none-eabi-gcc + qemu-system-arm -M mps2-an386) when those are installed.

The host build uses the warnings the issue of record asks for (-std=c99 -O2 -Wall -Wextra
-Werror); the sanitizer build adds AddressSanitizer, UBSan and the generated code's region
check, so a kernel touching bytes outside its own tensors stops the run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path

import numpy as np

from edgeserve.converters.microcontroller.cortex_m4 import board_dir, write_inputs_header
from edgeserve.converters.microcontroller.toolchain import TOOLS, CompileError, MissingToolError, find_compiler, run_tool

HOST_FLAGS = ("-std=c99", "-O2", "-Wall", "-Wextra", "-Werror")
SANITIZE_FLAGS = ("-std=c99", "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                  "-fno-omit-frame-pointer", "-DES_REGION_CHECK", "-Wall", "-Wextra", "-Werror")
# -mgeneral-regs-only: the model's code is integer only, and with the FPU enabled GCC 12 spills
# integer registers to the FPU's (VMOV there and back): measured 1.5% more instructions in
# CMSIS-NN's 1x1 convolution and depthwise kernels on KWS. The hard-float ABI is unchanged,
# so the objects link with an application that uses the FPU.
CORTEX_M4_C_FLAGS = ("-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-mcpu=cortex-m4", "-mthumb",
                     "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16", "-mgeneral-regs-only", "-ffunction-sections",
                     "-fdata-sections")
QEMU = "qemu-system-arm"
QEMU_PACKAGE = "qemu-system-arm"
INSTRUCTIONS_PER_TICK = 40  # SysTick under -icount shift=0 (../shared/tflm/README.md)
RUN_TIMEOUT_S = 600


def _board_file(*parts: str) -> Path:
    return Path(str(resources.files("edgeserve._firmware").joinpath("boards", *parts)))


def _model_defines(name: str, directory: Path) -> list[str]:
    up = name.upper()
    stateful = f"void {name}_reset(void);" in (directory / f"{name}.h").read_text()
    return [f'-DES_HEADER="{name}.h"', f"-DES_INVOKE={name}_invoke", f"-DES_INPUT_BYTES={up}_INPUT_BYTES",
            f"-DES_INPUT_TYPE={up}_INPUT_TYPE",
            f"-DES_OUTPUT_BYTES={up}_OUTPUT_BYTES", f"-DES_OUTPUT_TYPE={up}_OUTPUT_TYPE",
            *([f"-DES_RESET={name}_reset"] if stateful else [])]


def _sources(directory: Path, name: str) -> list[str]:
    return [str(directory / f"{name}.c"), *sorted(str(p) for p in (directory / "kernels").glob("*.c"))]


# The user's CMSIS-NN is built with its own rules, not the generated code's -Werror; the
# sanitizer build keeps AddressSanitizer on it (its plain C path shifts negative values,
# which UBSan would stop although every compiler here does what CMSIS-NN means).
LIBRARY_HOST_FLAGS = ("-std=c11", "-O2")
LIBRARY_SANITIZE_FLAGS = ("-std=c11", "-O1", "-g", "-fsanitize=address", "-fno-omit-frame-pointer")
CHECK_DEFINES = ("-DES_SCRATCH_CHECK",)


def _library(directory: Path, compiler: Path, flags: Sequence[str],
             cmsis_nn: Path | None) -> tuple[list[str], list[str]]:
    """(include flags, object files) of the CMSIS-NN sources the generated code lists.

    Objects are kept under ~/.cache/edgeserve/cmsis-nn-objects (EDGESERVE_CACHE moves it),
    keyed by the compiler, the flags, the tree's headers and the source's bytes, so a
    conversion's host, sanitizer and probe builds, and the next conversion, compile each
    file once."""
    listing = directory / "cmsis_nn_sources.txt"
    if not listing.is_file():
        return [], []
    if cmsis_nn is None:
        raise CompileError(["cc"], f"{directory} calls CMSIS-NN; give the CMSIS-NN folder it was generated against")
    include = f"-I{cmsis_nn / 'Include'}"
    cache = Path(os.environ.get("EDGESERVE_CACHE") or Path.home() / ".cache" / "edgeserve") / "cmsis-nn-objects"
    cache.mkdir(parents=True, exist_ok=True)
    stat = compiler.stat()
    common = hashlib.sha256(repr((str(compiler), stat.st_size, stat.st_mtime_ns, tuple(flags))).encode())
    for header in sorted((cmsis_nn / "Include").rglob("*.h")):
        common.update(header.read_bytes())
    objects, jobs = [], []
    for rel in listing.read_text().split():
        key = common.copy()
        key.update((cmsis_nn / rel).read_bytes())
        obj = cache / f"{Path(rel).stem}-{key.hexdigest()[:20]}.o"
        objects.append(str(obj))
        if not obj.is_file():
            jobs.append((cmsis_nn / rel, obj))

    def compile_one(job: tuple[Path, Path]) -> None:
        source, obj = job
        partial = obj.with_name(f"{obj.name}.{os.getpid()}.partial")
        run_tool([str(compiler), *flags, include, "-c", str(source), "-o", str(partial)])
        os.replace(partial, obj)  # whole objects only, even with two builds at once

    if jobs:
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            list(pool.map(compile_one, jobs))
    return [include], objects


def build_host(directory: Path, name: str, out: Path, sanitize: bool = False, cmsis_nn: Path | None = None) -> Path:
    """The host harness around OUT/mcu-c's files; raises MissingToolError or CompileError."""
    gcc = find_compiler("host-c")
    flags = SANITIZE_FLAGS if sanitize else HOST_FLAGS
    include, objects = _library(directory, gcc, LIBRARY_SANITIZE_FLAGS if sanitize else LIBRARY_HOST_FLAGS, cmsis_nn)
    command = [str(gcc), *flags, *CHECK_DEFINES, f"-I{directory}", f"-I{directory / 'kernels'}", *include,
               *_model_defines(name, directory), *_sources(directory, name), str(_board_file("host", "es_harness.c")),
               *objects, "-o", str(out)]
    run_tool(command)
    return out


def run_host(executable: Path, inputs: np.ndarray, output_shape: tuple[int, ...], dtype: str = "int8",
             reset_every: int = 0) -> np.ndarray:
    """Raw outputs [N, *output_shape] (int8, or uint8 for such models) for int8 ``inputs`` [N, ...],
    run as one stream; ``reset_every`` K calls NAME_reset() after every K inputs."""
    done = subprocess.run([str(executable), str(len(inputs)), str(reset_every)],
                          input=np.ascontiguousarray(inputs).tobytes(),
                          capture_output=True, timeout=RUN_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the generated code failed on the host (exit {done.returncode}): "
                           + done.stderr.decode("utf-8", "replace")[-3000:])
    return np.frombuffer(done.stdout, np.dtype(dtype)).reshape(len(inputs), *output_shape)


# What AddressSanitizer prints when it cannot start or runs out of room itself: under an
# address-space limit (ulimit -v) its shadow memory cannot be mapped. That is no finding about
# a kernel, and was reported as one ("a kernel read or wrote outside its tensors").
_SANITIZER_COULD_NOT_RUN = ("ReserveShadowMemoryRange failed", "Perhaps you're using ulimit -v",
                            "AddressSanitizer failed to allocate", "ERROR: AddressSanitizer: out of memory",
                            "ERROR: AddressSanitizer: allocator is out of memory", "failed to mmap")


def sanitizer_could_not_run(text: str) -> str | None:
    """Why the sanitizer build could not check anything (a limit on this machine), or None when
    ``text`` is something else: a finding, or another failure."""
    for mark in _SANITIZER_COULD_NOT_RUN:
        if mark in text:
            line = next((l.strip() for l in text.splitlines() if mark in l), mark)
            return (f"not run: AddressSanitizer could not start here ({line[:200]}); an address-space limit "
                    "(ulimit -v) leaves it no room for its shadow memory. The host build's bit-exact check stands")
    return None


@dataclasses.dataclass(frozen=True)
class TargetRun:
    outputs: np.ndarray  # [N, output bytes], int64 (int8 or uint8 values)
    instructions: list[int]  # per inference, 40 x SysTick ticks
    text_bytes: int
    data_bytes: int
    bss_bytes: int
    weight_bytes: int  # const arrays of the model (in .text: flash)
    test_input_bytes: int  # the inputs embedded for the run (in .text, not part of a product)
    stack_bytes: int | None = None  # high-water mark of the stack (painted before the run)
    arena_used_bytes: int | None = None  # TFLM's harness only: the interpreter's arena_used_bytes()
    newlib_bytes: int | None = None  # code and constants linked from newlib (printf for the harness)
    # build_cortex_m4(step_ticks=True): the last inference's instructions per operator, in
    # the order they ran ((operator index, instructions); 40 x SysTick ticks, as above).
    step_instructions: list[tuple[int, int]] = dataclasses.field(default_factory=list)

    @property
    def code_bytes(self) -> int:
        """Image text minus weights and test inputs: code, kernel parameters, newlib, startup."""
        return self.text_bytes - self.weight_bytes - self.test_input_bytes

    @property
    def code_bytes_without_newlib(self) -> int | None:
        """code_bytes less newlib's share (the harness's printf, memcpy, ...), from the link map."""
        return None if self.newlib_bytes is None else self.code_bytes - self.newlib_bytes


# The emulated board's memories (firmware/boards/mps2_an386/mps2_an386.ld), and what the
# harness, the kernels and the test inputs take of them besides the model's own.
BOARD_FLASH_BYTES = BOARD_RAM_BYTES = 4 * 1024 * 1024
BOARD_HARNESS_BYTES = 256 * 1024


def board_room(arena_bytes: int, weight_bytes: int, input_bytes: int) -> str | None:
    """None when the model fits the emulated board's memories, else why not (the run is skipped:
    a real board with that much memory is the user's to run it on)."""
    if arena_bytes + BOARD_HARNESS_BYTES > BOARD_RAM_BYTES:
        return (f"the arena ({arena_bytes:,} bytes) does not fit the emulated board's "
                f"{BOARD_RAM_BYTES // 1024 // 1024} MB of RAM (qemu mps2-an386)")
    if weight_bytes + input_bytes + BOARD_HARNESS_BYTES > BOARD_FLASH_BYTES:
        return (f"the weights ({weight_bytes:,} bytes) and the test input do not fit the emulated board's "
                f"{BOARD_FLASH_BYTES // 1024 // 1024} MB of flash (qemu mps2-an386)")
    return None


def qemu_available() -> str | None:
    """None when the Cortex-M4 run can happen here, else why not (with the fix)."""
    for kind in ("arm-c", "arm-size"):
        try:
            find_compiler(kind)
        except MissingToolError as exc:
            return str(exc)
    if shutil.which(QEMU) is None:
        return f"{QEMU} is not on PATH; it comes from the Debian package {QEMU_PACKAGE}"
    return None


def cortex_m4_library(directory: Path, cmsis_nn: Path | None) -> tuple[list[str], list[str]]:
    """(include flags, objects) of the CMSIS-NN sources in a Cortex-M4 build: the firmware's
    flags without its warnings (the library is the user's, not ours to -Werror)."""
    library_flags = [f for f in CORTEX_M4_C_FLAGS if not f.startswith(("-W", "-std"))]
    return _library(directory, find_compiler("arm-c"), ["-std=c11", *library_flags], cmsis_nn)


def build_cortex_m4(directory: Path, name: str, inputs: np.ndarray, workdir: Path, cmsis_nn: Path | None = None,
                    checks: bool = True, step_ticks: bool = False) -> Path:
    """A semihosted firmware image for mps2-an386 running ``inputs`` (embedded as const).

    ``checks``: compare CMSIS-NN's scratch requests with the reserved sizes on the board
    (a few instructions per layer; benchmarks build without). ``step_ticks``: the harness
    also times each operator (TargetRun.step_instructions; reading SysTick between them adds
    a few dozen instructions per operator to the total)."""
    write_inputs_header(workdir, inputs)
    image = workdir / f"{name}.elf"
    board = board_dir()
    gcc = find_compiler("arm-c")
    include, objects = cortex_m4_library(directory, cmsis_nn)
    command = [str(gcc), *CORTEX_M4_C_FLAGS, *(CHECK_DEFINES if checks else ()),
               *(("-DES_STEP_TICKS",) if step_ticks else ()), "--specs=rdimon.specs",
               "-nostartfiles", f"-I{directory}", f"-I{directory / 'kernels'}", f"-I{workdir}", *include,
               *_model_defines(name, directory), "-T", str(board / "mps2_an386.ld"), "-Wl,--gc-sections",
               f"-Wl,-Map={image.with_suffix('.map')}",
               str(board / "startup.c"), str(board / "es_main.c"), *_sources(directory, name), *objects,
               "-o", str(image)]
    run_tool(command)
    return image


def qemu_command(image: Path) -> list[str]:
    """qemu-system-arm running ``image`` on mps2-an386, its semihosted printf on our stdout.

    Not -nographic: that puts QEMU's stdio in non-blocking mode, and semihosting writes to
    the same file descriptor, so a reader that falls behind (a loaded machine) makes a write
    fail with EAGAIN and the firmware's lines lose bytes (seen in CI: "out ... stack 600")."""
    return [QEMU, "-M", "mps2-an386", "-display", "none", "-monitor", "none", "-serial", "none", "-semihosting",
            "-icount", "shift=0", "-kernel", str(image)]


def firmware_lines(stdout: str) -> dict[str, list[list[int]]]:
    """The harness's lines ("out 1 -2 ...", "ticks N", "stack N", "arena_used N") by their
    first word; a line that is not a word and integers is a broken run, said as one."""
    printed: dict[str, list[list[int]]] = {}
    for line in stdout.splitlines():
        words = line.split()
        if not words or words[0] not in ("out", "ticks", "stack", "arena_used", "step"):
            continue
        try:
            values = [int(v) for v in words[1:]]
        except ValueError:
            raise RuntimeError(f"unexpected firmware output line: {line[:200]!r}") from None
        if words[0] not in ("out", "step") and len(values) != 1 or words[0] == "step" and len(values) != 2:
            raise RuntimeError(f"unexpected firmware output line: {line[:200]!r}")
        printed.setdefault(words[0], []).append(values)
    return printed


def run_cortex_m4(image: Path, name: str, output_bytes: int, weights: str | None = None) -> TargetRun:
    """Run an image built by build_cortex_m4 (or the TFLM harness: ``weights`` then names the
    symbol pattern of its model data) under QEMU and read what it printed."""
    done = subprocess.run(qemu_command(image), capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the firmware failed under {QEMU} (exit {done.returncode}): {done.stdout[-2000:]}"
                           f"{done.stderr[-2000:]}")
    printed = firmware_lines(done.stdout)
    outputs, ticks = printed.get("out", []), [t[0] for t in printed.get("ticks", [])]
    stack = [s[0] for s in printed.get("stack", [])]
    every_step = printed.get("step", [])
    per_run = len(every_step) // len(ticks) if ticks else 0
    steps = every_step[len(every_step) - per_run:]  # the last inference's
    arena = [a[0] for a in printed.get("arena_used", [])]
    if any(len(o) != output_bytes for o in outputs) or len(outputs) != len(ticks):
        raise RuntimeError(f"unexpected firmware output: {done.stdout[-2000:]}")
    size = subprocess.run([shutil.which(TOOLS["arm-size"].program) or "arm-none-eabi-size", "-A", str(image)],
                          capture_output=True, text=True, check=True).stdout
    sections = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\.\S+)\s+(\d+)", size, re.M)}
    text = sum(v for k, v in sections.items() if k in (".text", ".ARM.extab", ".ARM.exidx", ".preinit_array",
                                                        ".init_array", ".fini_array"))
    return TargetRun(np.array(outputs, np.int64), [t * INSTRUCTIONS_PER_TICK for t in ticks], text,
                     sections.get(".data", 0), sections.get(".bss", 0),
                     _symbol_bytes(image, weights or rf"{re.escape(name)}_([wblmsrktvq]\d+(_\d+)?|init_\d+)"),
                     _symbol_bytes(image, "es_inputs"),
                     stack[-1] if stack else None, arena[-1] if arena else None,
                     newlib_bytes(image.with_suffix(".map")) if image.with_suffix(".map").is_file() else None,
                     [(op, t * INSTRUCTIONS_PER_TICK) for op, t in steps])


# newlib's archives, as a link map names them: libc.a(lib_a-printf.o), librdimon_nano.a(...)
_NEWLIB = re.compile(r"/lib(c|g|m|nosys|rdimon)(_nano)?\.a\(")
_TEXT_SECTIONS = (".text", ".rodata", ".glue", ".ARM.extab", ".ARM.exidx")


def newlib_bytes(link_map: Path) -> int:
    """Bytes of code and constants the link took from newlib, read from GNU ld's -Map output
    (an input section's size follows its name, on the same line or the next)."""
    total, section = 0, None
    in_memory_map = False
    for line in link_map.read_text(errors="replace").splitlines():
        if not in_memory_map:
            in_memory_map = line.startswith("Linker script and memory map")
            continue
        fields = line.split()
        if line.startswith(" .") and len(fields) == 1:
            section = fields[0]  # the address, size and file are on the next line
            continue
        if line.startswith(" .") and len(fields) >= 4:
            section, fields = fields[0], fields[1:]
        elif section is None or len(fields) < 3 or not fields[0].startswith("0x"):
            section = None
            continue
        if section.startswith(_TEXT_SECTIONS) and fields[1].startswith("0x") and _NEWLIB.search(fields[2]):
            total += int(fields[1], 16)
        section = None
    return total


def _symbol_bytes(image: Path, symbol_pattern: str) -> int:
    """Total size of the read-only symbols matching ``symbol_pattern`` in the image."""
    nm = shutil.which("arm-none-eabi-nm") or "arm-none-eabi-nm"
    listing = subprocess.run([nm, "-S", "--size-sort", str(image)], capture_output=True, text=True,
                             check=True).stdout
    pattern = re.compile(rf"^[0-9a-f]+ ([0-9a-f]+) [rRtT] {symbol_pattern}$")
    return sum(int(m.group(1), 16) for m in map(pattern.match, listing.splitlines()) if m)
