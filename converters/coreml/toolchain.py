"""coremltools, imported once and kept quiet: its output goes into edgeserve's logging.

coremltools announces itself loudly: a warning per framework version it has not tested,
"Failed to load _MLModelProxy" lines on every non-macOS machine, a tqdm progress bar per
conversion pass, and Python warnings from the frontends. None of it belongs on the user's
terminal between edgeserve's own progress lines, and some of it belongs in the manifest
(which framework versions coremltools did not test). This module routes all of it:

- the ``coremltools`` logger → ``edgeserve.converters.coreml.coremltools`` (info lines and known
  noise at debug, its other warnings as warnings);
- tqdm bars and other ``sys.stderr`` writes → debug lines (the final state of each bar);
- Python warnings → debug lines;
- native stderr → debug lines.

Every captured message is also kept in a :class:`Captured` so the converter can write
them into its report.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import platform
import re
import sys
import warnings
from collections.abc import Iterator
from types import ModuleType

from edgeserve.console import NativeOutput, capture_native_stderr, python_stderr, quiet_warnings

log = logging.getLogger("edgeserve.converters.coreml.coremltools")

# Messages that are expected on every run and say nothing about this model.
_NOISE = (
    "has not been tested with coremltools",
    "Failed to load _ML",
    "is not supported. Minimum required version",
    "Disabling scikit-learn conversion API",
)
_TQDM = re.compile(r"(.+?):\s+\d+%\|")
_UNTESTED = re.compile(r"(\S+) version (\S+) has not been tested with coremltools.*?(\S+) is the most recent")

_module: ModuleType | None = None
#: "framework X untested (newest tested Y)" notes seen while importing or converting.
untested_versions: list[str] = []


@dataclasses.dataclass
class Captured:
    """What coremltools said during one :func:`captured` block."""

    messages: list[str] = dataclasses.field(default_factory=list)


_active: list[Captured] = []


class _Forward(logging.Handler):
    """Re-log coremltools' records under edgeserve's logger (noise at debug)."""

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        match = _UNTESTED.search(message)
        if match:
            note = f"{match.group(1)} {match.group(2)} untested by coremltools (newest tested {match.group(3)})"
            if note not in untested_versions:
                untested_versions.append(note)
        noise = any(n in message for n in _NOISE)
        # coremltools' info lines narrate every converted op: debug here, like its noise.
        level = logging.DEBUG if noise or record.levelno < logging.WARNING else record.levelno
        log.log(level, "%s", message)
        if not noise and record.levelno >= logging.WARNING:
            for sink in _active:
                sink.messages.append(f"{record.levelname.lower()}: {message}")


def _route_logger() -> None:
    ct_logger = logging.getLogger("coremltools")
    if not any(isinstance(h, _Forward) for h in ct_logger.handlers):
        ct_logger.handlers[:] = [_Forward()]
        ct_logger.propagate = False
        ct_logger.setLevel(logging.INFO)


def coremltools() -> ModuleType:
    """``import coremltools``, once, with its import-time chatter captured.

    Raises:
        MissingDependencyError: coremltools is not installed.
    """
    global _module
    if _module is None:
        from edgeserve._deps import require

        _route_logger()
        with captured(), _hidden(_FRAMEWORKS_COREML_NEED_NOT):
            _module = require("coremltools", "Core ML conversion")
    return _module


# coremltools imports every framework it has a frontend or a helper for, only to record
# whether it is there (coremltools/_deps): with this project's extras installed that is
# 10 of the 13 s its import takes on 2 cores (TensorFlow 4.6 s, executorch 2.5 s, torchao 1.9
# s, measured with `python -X importtime`), paid again in each isolated child. Those not yet
# imported stay hidden while it is imported: every source but Keras reaches coremltools as a
# torch program, and a Keras source has imported TensorFlow before (isolated.convert_step).
_FRAMEWORKS_COREML_NEED_NOT = ("tensorflow", "executorch", "torchao", "sklearn", "xgboost", "libsvm",
                               "transformers")


@contextlib.contextmanager
def _hidden(names: tuple[str, ...]) -> Iterator[None]:
    """Make ``import NAME`` fail for each name not already imported (a None entry in
    sys.modules is how Python says a module is known to be missing); put them back after."""
    hidden = [name for name in names if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in hidden:
            if sys.modules.get(name, False) is None:
                del sys.modules[name]


def predict_available() -> tuple[bool, str]:
    """Whether Core ML itself can run here (macOS with coremltools' native extension)."""
    if platform.system() != "Darwin":
        return False, f"Core ML predict runs only on macOS; this is {platform.system()}"
    try:
        import coremltools.libcoremlpython  # noqa: F401
    except ImportError as exc:
        return False, f"coremltools' Core ML extension is not available: {exc}"
    return True, ""


@contextlib.contextmanager
def captured() -> Iterator[Captured]:
    """Run coremltools with its progress bars, warnings and native output sent to logging."""
    sink = Captured()
    native = NativeOutput()
    caught: list[warnings.WarningMessage] = []
    printed: list[str] = []
    _route_logger()
    _active.append(sink)
    try:
        # Shared with other targets' blocks (console._Shared): a target side by side with this
        # one must not find sys.stderr or the warnings filters left as this block set them.
        with capture_native_stderr() as native, quiet_warnings() as caught, python_stderr() as printed:
            yield sink
    finally:
        _active.remove(sink)
        for w in caught:
            text = f"{w.category.__name__}: {w.message}"
            log.debug("warning: %s", text)
            if not issubclass(w.category, ResourceWarning):  # coremltools' temp dirs, cleaned anyway
                sink.messages.append(f"warning: {text}")
        for line in _progress_lines("".join(printed)):
            log.debug("%s", line)
            sink.messages.append(line)
        # capture_native_stderr already logged these lines at debug level.
        sink.messages.extend(f"native: {l}" for l in native.text.splitlines() if l.strip())


def _progress_lines(text: str) -> list[str]:
    """The final state of each tqdm bar and every other line coremltools wrote to stderr.

    tqdm redraws a bar with ``\r`` on a terminal and with a new line elsewhere; either way
    only its last state says anything.
    """
    lines: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.split("\r")[-1].strip()
        if not line:
            continue
        bar = _TQDM.match(line)
        lines[bar.group(1) if bar else f"{len(lines)}:{line}"] = line
    return list(lines.values())
