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
import shlex
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


def build(flavour: str) -> TflmBuild:
    """The cached ``build.sh FLAVOUR`` output (host, cortex-m4 with CMSIS-NN, cortex-m4-ref),
    building it first if needed. Raises RuntimeError with the reason."""
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
    out = cache_root() / f"{flavour}-{_source_key(src, script)}"
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
        done = subprocess.run(["bash", str(script), flavour, str(out)], env=env, capture_output=True,
                              text=True, timeout=3600, check=False)
        if done.returncode != 0 or not library.is_file():
            raise RuntimeError(f"TFLM {flavour} build failed ({done.returncode}): {done.stderr[-2000:]}")
        return TflmBuild(library, _system((out / "includes").read_text()), time.monotonic() - start)


if __name__ == "__main__":  # `make test` builds it ahead of pytest: python tests/tflm_build.py [FLAVOUR]
    flavour = sys.argv[1] if len(sys.argv) > 1 else "host"
    try:
        result = build(flavour)
    except TflmUnavailable as reason:  # the tests then skip (and fail in CI) with the same reason
        print(f"warning: {reason}", file=sys.stderr)
        sys.exit(1 if os.environ.get("CI") == "true" else 0)
    print(f"TFLM {flavour} build:", result.library, f"built in {result.built_seconds:.0f} s" if result.built_seconds
          else "(cached)")
