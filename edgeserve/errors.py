"""The exceptions edgeserve raises for problems a user can fix.

Every error a user can act on derives from :class:`EdgeServeError`. The CLI turns
these into one readable line and exit code 1; anything else is a bug in edgeserve
and keeps its traceback.
"""

from __future__ import annotations

import difflib
import struct
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any


class EdgeServeError(Exception):
    """Base class of every error edgeserve raises on purpose.

    ``cli`` is the same message worded for the command line (flags instead of Python
    arguments); the CLI prints it when given, the API's ``str()`` is the Python wording.
    """

    def __init__(self, *args: object, cli: str | None = None) -> None:
        super().__init__(*args)
        self.cli_message = cli

    def for_cli(self) -> str:
        return self.cli_message or str(self)

    def __reduce__(self) -> tuple[Any, ...]:
        # Errors cross process boundaries (edgeserve.isolation); subclasses whose __init__
        # takes other arguments than the message cannot be rebuilt from args alone.
        return _restore_error, (type(self), self.args, self.__dict__)


def _restore_error(cls: type[EdgeServeError], args: tuple[Any, ...], state: dict[str, Any]) -> EdgeServeError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


# What a walker bug on hostile input could raise; converted at the API boundary so that
# callers only ever see ModelFileError (the checks are meant to make this unreachable).
_UNEXPECTED = (IndexError, KeyError, ValueError, TypeError, ArithmeticError, struct.error,
               MemoryError, RecursionError)


@contextmanager
def model_file_guard(action: str) -> Iterator[None]:
    """Turn an unexpected exception while reading a model file into :class:`ModelFileError`."""
    try:
        yield
    except _UNEXPECTED as exc:
        raise ModelFileError(f"malformed model while {action} ({type(exc).__name__}: {exc}); "
                             "an edgeserve check missed this, please report it") from exc


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The first non-blank line of an exception's message (its type name when it has none),
    for one-line errors built from a third-party library's multi-line messages. edgeserve's own
    messages are kept whole (their advice comes last, and cutting them cut the advice:
    "Replace LOG in th"); another library's long line is cut between words, marked."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    return lines[0] if isinstance(exc, EdgeServeError) else clip_words(lines[0], limit)


def clip_words(text: str, limit: int) -> str:
    """``text`` if it fits in ``limit`` characters, else cut at the last space before it, with " …"."""
    if len(text) <= limit:
        return text
    head = text[:limit].rsplit(" ", 1)[0] if " " in text[:limit] else text[:limit]
    return head.rstrip(" ,;:") + " …"


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """Return ' Did you mean "x"?' when ``word`` is close to one of ``choices``."""
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f' Did you mean "{close[0]}"?' if close else ""


class MissingDependencyError(EdgeServeError):
    """An optional package is needed for this feature and is not installed."""

    def __init__(self, package: str, extra: str, feature: str = "") -> None:
        self.package = package
        self.extra = extra
        what = f" for {feature}" if feature else ""
        super().__init__(
            f"{package} is needed{what} but is not installed. "
            f"Fix: pip install 'edgeserve[{extra}]'"
        )


class InputError(EdgeServeError):
    """User-supplied data (model, calibration set, options) is not what was expected."""


class SourceModelError(InputError):
    """The source model cannot be loaded or has an unsupported signature."""


class CalibrationDataError(InputError):
    """Calibration or evaluation data is missing, malformed or does not fit the model."""


class ProfileError(InputError):
    """A device profile does not exist or its file is malformed."""


class PreprocessSpecError(InputError):
    """A PreprocessSpec is inconsistent or names an unknown option."""


class ManifestError(EdgeServeError):
    """A manifest is malformed, or an artifact no longer matches what it records."""


class ModelFileError(InputError):
    """A model file (.tflite, ...) is truncated, corrupted or of an unknown kind."""


class UnknownTargetError(InputError):
    """A conversion target name that no converter registered."""

    def __init__(self, name: str, known: Iterable[str]) -> None:
        known = sorted(known)
        super().__init__(
            f'unknown target "{name}".{did_you_mean(name, known)} Known targets: {", ".join(known)}'
        )


class UnsupportedOpError(EdgeServeError):
    """An operator that the chosen target cannot run."""

    def __init__(self, op: str, target: str, supported: Iterable[str], detail: str = "") -> None:
        self.op = op
        self.target = target
        self.supported = sorted(supported)
        extra = f" {detail}" if detail else ""
        listed = f" Supported ops: {', '.join(self.supported)}" if self.supported else ""
        super().__init__(f"operator {op} is not supported by target {target}.{extra}{listed}")


class UnquantizableOpError(UnsupportedOpError):
    """An operator the quantizer of the route leaves in float, so no full-integer model exists."""

    def __init__(self, op: str, target: str, message: str) -> None:
        self.op, self.target, self.supported = op, target, []
        EdgeServeError.__init__(self, message)


class AccuracyError(EdgeServeError):
    """Quantization lost more accuracy than allowed and no remedy recovered it.

    ``result`` carries the written manifest (the artifact is marked failed there) so a
    caller can still show the attempts table.
    """

    def __init__(self, message: str, result: object = None) -> None:
        super().__init__(message)
        self.result = result


class VerificationError(EdgeServeError):
    """A written artifact did not compute what its source computes."""


class DoesNotFitError(EdgeServeError):
    """A microcontroller build needs more flash or RAM than the target device has.

    ``report`` is the memory report (a dict) the message was built from, so a caller can
    show the whole breakdown.
    """

    def __init__(self, message: str, report: object = None) -> None:
        super().__init__(message)
        self.report = report


class BackendError(EdgeServeError):
    """No backend could run the model (or, with ``strict``/``require``, not the one asked for).

    ``attempts`` lists every backend tried, in order, with the reason it failed.
    """

    def __init__(self, message: str, attempts: object = ()) -> None:
        lines = [message] + [f"  - {a}" for a in attempts]  # type: ignore[attr-defined]
        super().__init__("\n".join(lines))
        self.attempts = list(attempts)  # type: ignore[call-overload]


class ConcurrentUseError(EdgeServeError):
    """A StreamStep was called while another thread was inside it or its Session: a stream's
    state belongs to one caller (open one Session per stream or model for each thread)."""


class InferenceError(EdgeServeError):
    """The engine failed while running a model that had opened (and no fallback was left)."""
