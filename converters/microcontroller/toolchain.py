"""Find and run the C/C++ compilers that check generated code, and read section sizes.

The converter reports flash use from ``arm-none-eabi-size`` when the GNU Arm toolchain is
installed; the tests compile generated files with the host and the Arm compilers. A
missing tool raises :class:`MissingToolError` naming the Debian package that provides it.

Example:
    >>> obj = compile_object("kws_model_data.cc", CORTEX_M4_FLAGS)  # doctest: +SKIP
    >>> arm_size(obj)  # doctest: +SKIP
    {'text': 53952, 'data': 0, 'bss': 0}
    >>> arm_data_object_size("kws_model_data.cc", "/tmp")["text"]  # doctest: +SKIP
    53952
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from edgeserve.errors import EdgeServeError

# Both Arm compilers come from gcc-arm-none-eabi; C++ code needs the C and C++ libraries'
# headers too, so the fix names all three packages.
_ARM_PACKAGES = ("gcc-arm-none-eabi", "libnewlib-arm-none-eabi", "libstdc++-arm-none-eabi-newlib")


@dataclass(frozen=True)
class Tool:
    """A program edgeserve runs, and the Debian packages that install it."""

    kind: str
    program: str
    packages: tuple[str, ...]


TOOLS: dict[str, Tool] = {
    tool.kind: tool
    for tool in (
        Tool("host-c", "gcc", ("gcc",)),
        Tool("host-c++", "g++", ("g++",)),
        Tool("arm-c", "arm-none-eabi-gcc", _ARM_PACKAGES[:2]),
        Tool("arm-c++", "arm-none-eabi-g++", _ARM_PACKAGES),
        # binutils-arm-none-eabi, pulled in by gcc-arm-none-eabi
        Tool("arm-size", "arm-none-eabi-size", _ARM_PACKAGES[:1]),
    )
}

#: Flags for a Cortex-M4 object as TFLM builds it for small boards (Thumb-2, size-optimized).
CORTEX_M4_FLAGS: tuple[str, ...] = (
    "-std=c++17", "-mcpu=cortex-m4", "-mthumb", "-Os", "-Wall", "-Wextra", "-Werror",
)

# A 4 MB C array takes g++ tens of seconds; anything slower than this is stuck.
COMPILE_TIMEOUT_S = 600


class MissingToolError(EdgeServeError):
    """A compiler or binutils program is not on PATH; the message names the package."""

    def __init__(self, tool: Tool) -> None:
        self.tool = tool
        packages = " ".join(tool.packages)
        super().__init__(
            f"{tool.program} ({tool.kind}) is not on PATH; it comes from the Debian "
            f"package {tool.packages[0]}. Fix: sudo apt-get install {packages} "
            "(or run `make setup` in the edgeserve repository)"
        )


class CompileError(EdgeServeError):
    """The compiler rejected a source file; ``output`` is what it printed."""

    def __init__(self, command: Sequence[str], output: str) -> None:
        self.command = list(command)
        self.output = output
        head = "\n".join(output.strip().splitlines()[:20])
        super().__init__(f"{' '.join(self.command)} failed:\n{head}")


class SectionSizes(TypedDict):
    """Bytes by Berkeley section group: text (code + read-only data, in flash), data
    (initialized RAM, also stored in flash), bss (zeroed RAM)."""

    text: int
    data: int
    bss: int


def find_compiler(kind: str) -> Path:
    """Path of the program for ``kind`` (one of :data:`TOOLS`: "host-c", "arm-c++", ...).

    Raises:
        MissingToolError: the program is not on PATH.
        KeyError: ``kind`` is not one of :data:`TOOLS` (a bug in the caller).
    """
    tool = TOOLS[kind]
    found = shutil.which(tool.program)
    if found is None:
        raise MissingToolError(tool)
    return Path(found)


def compile_object(
    src: str | os.PathLike[str],
    flags: Sequence[str],
    *,
    kind: str | None = None,
    output: str | os.PathLike[str] | None = None,
) -> Path:
    """Compile one source file to an object file (``-c``) and return the object's path.

    Args:
        src: a .c, .cc or .cpp file.
        flags: compiler flags, e.g. :data:`CORTEX_M4_FLAGS` plus ``-I`` directories.
        kind: which compiler; by default the Arm one for the file's language.
        output: the object's path; by default ``src`` with the suffix ``.o``.

    Raises:
        MissingToolError: the compiler is not installed.
        CompileError: the compiler reported an error (its output is in the exception).
    """
    src = Path(src)
    if kind is None:
        kind = "arm-c" if src.suffix == ".c" else "arm-c++"
    obj = Path(output) if output is not None else src.with_suffix(".o")
    command = [str(find_compiler(kind)), *flags, "-c", str(src), "-o", str(obj)]
    run_tool(command)
    return obj


def arm_size(object_path: str | os.PathLike[str]) -> SectionSizes:
    """Section sizes of an Arm object or ELF file, as ``arm-none-eabi-size`` counts them.

    Raises:
        MissingToolError: arm-none-eabi-size is not installed.
        CompileError: the file is not an object file it can read.
    """
    command = [str(find_compiler("arm-size")), "--format=berkeley", str(object_path)]
    out = run_tool(command)
    # "   text    data     bss     dec     hex filename" then one line per file.
    lines = out.strip().splitlines()
    if len(lines) < 2:
        raise CompileError(command, f"unexpected output:\n{out}")
    text, data, bss = (int(field) for field in lines[1].split()[:3])
    return SectionSizes(text=text, data=data, bss=bss)


def arm_data_object_size(
    source: str | os.PathLike[str], workdir: str | os.PathLike[str]
) -> dict[str, Any]:
    """Compile a generated model data file for a Cortex-M4 and report its sections.

    For the converter's report: the flash the model array takes on a real target, from
    the real compiler. The object is written to ``workdir``.

    Returns:
        ``{"compiler", "version", "flags", "text", "data", "bss"}``; ``text`` includes
        ``.rodata``, where the array lives.

    Raises:
        MissingToolError: arm-none-eabi-g++ or arm-none-eabi-size is not installed.
        CompileError: the file did not compile.
    """
    source = Path(source)
    compiler = find_compiler("arm-c++")
    obj = compile_object(
        source, CORTEX_M4_FLAGS, kind="arm-c++", output=Path(workdir) / f"{source.stem}.cortex-m4.o"
    )
    version = run_tool([str(compiler), "-dumpfullversion"]).strip()
    return {
        "compiler": compiler.name,
        "version": version,
        "flags": list(CORTEX_M4_FLAGS),
        **arm_size(obj),
    }


def run_tool(command: list[str]) -> str:
    """Run a compiler or binutils command; its output, or CompileError with its message."""
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise CompileError(command, f"timed out after {COMPILE_TIMEOUT_S} s") from exc
    if done.returncode != 0:
        raise CompileError(command, done.stderr or done.stdout)
    return done.stdout
