"""A host build of real TFLM (tflite-micro's reference kernels) for the tests, made once.

The generated ``main.cc`` and ops header are only proven by compiling them against TFLM
itself. ``../shared/tflm/build.sh host`` builds the pinned sources offline in about three
minutes; the build is cached outside the repository, keyed by the sources it came from,
so later runs (and CI's second test command) reuse it. A lock file keeps two pytest
processes from building into the same folder at once.

``EDGESERVE_TFLM_DIR`` points at another build instead: either a ``build.sh`` output
folder (``lib/libtensorflow-microlite.a`` + ``includes`` + ``tree/``) or a tflite-micro
checkout where ``make -f tensorflow/lite/micro/tools/make/Makefile microlite`` was run.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP_PREFIX = "needs TFLM sources:"
# How the tests compile generated code against TFLM: as strict as a user's build can be.
# TF_LITE_STATIC_MEMORY is how the library was built (build.sh's cxxflags carry it).
STRICT_CXX = ["-std=c++17", "-Wall", "-Wextra", "-Werror", "-pedantic", "-DTF_LITE_STATIC_MEMORY"]
# What build.sh expects to find already downloaded (the makefile would fetch each from the
# network, which CI does not have): relative to tensorflow/lite/micro/tools/make/downloads.
THIRD_PARTY = ("flatbuffers/include/flatbuffers/base.h", "gemmlowp/fixedpoint/fixedpoint.h",
               "ruy/ruy/profiler/instrumentation.h", "kissfft/kiss_fft.h", "pigweed")


class TflmUnavailable(Exception):
    """The TFLM sources are missing or incomplete: the reason starts with SKIP_PREFIX."""


@dataclasses.dataclass(frozen=True)
class TflmBuild:
    """What compiling against a TFLM build needs: the library and the include flags."""

    library: Path
    include_flags: tuple[str, ...]  # "-I..." / "-isystem ..." flags, TFLM's headers as system headers
    built_seconds: float | None  # None when an existing build was reused


def shared_tflm() -> Path:
    return Path(os.environ.get("EDGESERVE_SHARED", ROOT.parent / "shared")) / "tflm"


def _source_key(src: Path, script: Path) -> str:
    """Paths and sizes of every source file plus build.sh: a changed tree rebuilds."""
    digest = hashlib.sha256(script.read_bytes())
    for path in sorted(src.rglob("*")):
        if path.is_file():
            digest.update(f"{path.relative_to(src)}\0{path.stat().st_size}\n".encode())
    return digest.hexdigest()[:16]


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "edgeserve" / "tflm"


def _system(flag_text: str) -> tuple[str, ...]:
    # TFLM's own headers are not -Wextra clean; the generated code must be, so they are
    # included as system headers.
    return tuple(f for p in shlex.split(flag_text) if p.startswith("-I") for f in ("-isystem", p[2:]))


def from_env(directory: Path) -> TflmBuild:
    if (directory / "includes").is_file():
        return TflmBuild(directory / "lib" / "libtensorflow-microlite.a",
                         _system((directory / "includes").read_text()), None)
    downloads = directory / "tensorflow/lite/micro/tools/make/downloads"
    flags = f"-I{directory} -I{downloads / 'flatbuffers/include'} -I{downloads / 'gemmlowp'}"
    return TflmBuild(directory / "gen/linux_x86_64_default_gcc/lib/libtensorflow-microlite.a", _system(flags), None)


def host_build() -> TflmBuild:
    """The cached host build, building it first if needed. Raises RuntimeError with the reason."""
    return build("host")


# build.sh's make arguments per flavour (read to list a flavour's kernel sources).
_MAKE_ARGS = {"host": [], "cortex-m4-ref": ["TARGET=cortex_m_qemu", "TARGET_ARCH=cortex-m4"],
              "cortex-m4": ["TARGET=cortex_m_qemu", "TARGET_ARCH=cortex-m4", "OPTIMIZED_KERNEL_DIR=cmsis_nn"]}
_MAKEFILE = "tensorflow/lite/micro/tools/make/Makefile"
_REGISTRATION = re.compile(r"TFLMRegistration\s*\*?\s*Register_(\w+)\s*\(\s*\)\s*\{")

# The operators of the model tests/test_cortex_m4_side_by_side.py runs (MLPerf Tiny KWS). Its
# two Cortex-M4 builds compile only their kernels: a static library gives the linker the same
# objects either way, so the images are the same, and CI is spared most of two 7-minute builds.
SIDE_BY_SIDE_OPS = ("AVERAGE_POOL_2D", "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "RESHAPE", "SOFTMAX")


def _kernel_sources(tree: Path, flavour: str, ops: tuple[str, ...], env: dict[str, str]) -> list[str]:
    """The kernel sources TFLM's makefile compiles for ``flavour`` (after its optimized-kernel
    substitution), less those registering only operators not in ``ops``."""
    printer = tree.parent / "print-kernels.mk"
    printer.write_text("print-%:\n\t@echo $($*)\n")
    done = subprocess.run(["make", "-s", "-f", _MAKEFILE, *_MAKE_ARGS[flavour], "-f", str(printer),
                           "print-MICROLITE_CC_KERNEL_SRCS"], cwd=tree, env=env, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0 or not done.stdout.strip():
        raise RuntimeError(f"TFLM {flavour}: listing its kernel sources failed ({done.returncode}): "
                           f"{done.stderr[-2000:]}")
    listed = done.stdout.splitlines()[-1].split()
    kept = []
    for source in listed:
        registered = set(_REGISTRATION.findall((tree / source).read_text(errors="replace")))
        if not registered or registered & set(ops):  # helpers every kernel may call stay
            kept.append(source)
    # The signal library's sources serve only the signal kernels.
    if not any(_REGISTRATION.search((tree / k).read_text(errors="replace")) for k in kept if "signal/" in k):
        kept = [k for k in kept if "signal/" not in k]
    return kept


def _prepare_tree(src: Path, out: Path, arm: bool) -> None:
    """What build.sh does before calling make (copy the tree, link the Arm toolchain where TFLM's
    makefile looks for its download), so the makefile can be read before build.sh runs."""
    tree = out / "tree"
    if not (tree / "LICENSE").is_file():
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-a", str(src), str(tree)], check=True)
    if not arm:
        return
    gcc = shutil.which("arm-none-eabi-gcc")
    if gcc is None:
        raise RuntimeError("no arm-none-eabi-gcc on PATH (make toolchain installs it)")
    links = tree / "tensorflow/lite/micro/tools/make/downloads/gcc_embedded/bin"
    links.mkdir(parents=True, exist_ok=True)
    for tool in Path(gcc).parent.glob("arm-none-eabi-*"):
        if not (links / tool.name).exists():
            (links / tool.name).symlink_to(tool)


def build(flavour: str, ops: tuple[str, ...] | None = None) -> TflmBuild:
    """The cached ``build.sh FLAVOUR`` output (host, cortex-m4 with CMSIS-NN, cortex-m4-ref),
    building it first if needed; with ``ops``, only those operators' kernels (and the helpers
    all kernels share) are compiled. Raises RuntimeError with the reason."""
    env_dir = os.environ.get("EDGESERVE_TFLM_DIR") if flavour == "host" else None
    if env_dir:
        build = from_env(Path(env_dir))
        if not build.library.is_file():
            raise RuntimeError(f"EDGESERVE_TFLM_DIR={env_dir} holds no {build.library}")
        return build
    tflm = shared_tflm()
    script, src = tflm / "build.sh", tflm / "src"
    if not script.is_file() or not src.is_dir():
        raise TflmUnavailable(f"{SKIP_PREFIX} no TFLM sources at {tflm} (../shared/tflm)")
    downloads = src / "tensorflow/lite/micro/tools/make/downloads"
    missing = [name for name in THIRD_PARTY if not (downloads / name).exists()]
    if missing:
        raise TflmUnavailable(f"{SKIP_PREFIX} {downloads} lacks {', '.join(missing)}; TFLM's makefile would "
                              "download them, and this machine reaches only package registries")
    subset = "" if ops is None else "-" + hashlib.sha256(" ".join(sorted(ops)).encode()).hexdigest()[:8]
    out = cache_root() / f"{flavour}-{_source_key(src, script)}{subset}"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f"{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        library = out / "lib" / "libtensorflow-microlite.a"
        if library.is_file() and (out / "includes").is_file():
            return TflmBuild(library, _system((out / "includes").read_text()), None)
        # build.sh runs a generator with the python3 on PATH, which needs Pillow: this
        # environment's interpreter has it.
        env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
        start = time.monotonic()
        if ops is not None:
            _prepare_tree(src, out, arm=flavour != "host")
            kernels = _kernel_sources(out / "tree", flavour, ops, env)
            # A variable given in MAKEFLAGS counts as given on make's command line, so it
            # replaces the makefile's own list (build.sh passes no way to add arguments).
            env["MAKEFLAGS"] = "MICROLITE_CC_KERNEL_SRCS=" + "\\ ".join(kernels)
        done = subprocess.run(["bash", str(script), flavour, str(out)], env=env, capture_output=True,
                              text=True, timeout=3600, check=False)
        if done.returncode != 0 or not library.is_file():
            raise RuntimeError(f"TFLM {flavour} build failed ({done.returncode}): {done.stderr[-2000:]}")
        return TflmBuild(library, _system((out / "includes").read_text()), time.monotonic() - start)


if __name__ == "__main__":  # `make test` builds it ahead of pytest: python tests/tflm_build.py [FLAVOUR]
    flavour = sys.argv[1] if len(sys.argv) > 1 else "host"
    try:  # the Cortex-M4 flavours as the side-by-side test asks for them; `--all-kernels` in full
        result = build(flavour, None if flavour == "host" or "--all-kernels" in sys.argv else SIDE_BY_SIDE_OPS)
    except TflmUnavailable as reason:  # the tests then skip (and fail in CI) with the same reason
        print(f"warning: {reason}", file=sys.stderr)
        sys.exit(1 if os.environ.get("CI") == "true" else 0)
    print(f"TFLM {flavour} build:", result.library, f"built in {result.built_seconds:.0f} s" if result.built_seconds
          else "(cached)")
