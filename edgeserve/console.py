"""Where edgeserve's human-facing output goes, and how native libraries are kept out of it.

stdout carries only results (JSON with ``--json``). Progress bars and log lines go to a
private duplicate of the original stderr, so that :func:`capture_native_stderr` can
point file descriptor 2 somewhere else while TensorFlow's or TFLM's C++ code runs:
their lines are kept (and logged at debug level, or parsed by the caller) without
hiding edgeserve's own progress.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import atexit
import os
import time
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)

_ui_stream: IO[str] | None = None


def ui_stream() -> IO[str]:
    """A text stream on a duplicate of the process's original stderr (made once)."""
    global _ui_stream
    if _ui_stream is None:
        try:
            sys.stderr.flush()
            _ui_stream = os.fdopen(os.dup(sys.stderr.fileno()), "w", buffering=1)
            # Closed at exit, so the interpreter does not warn about an unclosed file in every
            # program that used the console (a ResourceWarning under -X dev or -W default).
            atexit.register(_ui_stream.close)
        except (AttributeError, OSError, ValueError):
            # sys.stderr has no descriptor (click's CliRunner, an embedding app): use it as
            # it is now, and do not cache it, since it may be swapped or closed later.
            return sys.stderr
    return _ui_stream


class NativeOutput:
    """What native code wrote to file descriptor 2 inside :func:`capture_native_stderr`."""

    text: str = ""


class _Shared:
    """One redirection of something the whole process has (file descriptor 2, ``sys.stdout``,
    ``sys.stderr``, the warnings filters), shared by the blocks that overlap: the first block in
    makes it, the last one out undoes it, and each block gets what was written while it was
    open. Targets built side by side (--jobs) each saving and restoring such a thing on their
    own would leave it pointing at the first one's scratch for good; a block beside another
    thread's also sees that thread's lines, which is the price of sharing."""

    def __init__(self, install: Callable[[contextlib.ExitStack], tuple[Callable[[], Any], Callable[[Any], Any]]]):
        self.install = install  # (undo) -> (mark(), since(mark)), set up under ``undo``
        self.lock = threading.Lock()
        self.depth = 0
        self.undo: contextlib.ExitStack | None = None
        self.reader: tuple[Callable[[], Any], Callable[[Any], Any]] | None = None

    @contextlib.contextmanager
    def block(self) -> Iterator[list[Any]]:
        """Yields a list that holds, after the block, what was written while it was open."""
        got: list[Any] = []
        with self.lock:
            if self.depth == 0:
                self.undo = contextlib.ExitStack()
                self.reader = self.install(self.undo)
            self.depth += 1
            assert self.reader is not None
            mark, since = self.reader
            start = mark()
        try:
            yield got
        finally:
            with self.lock:
                got.append(since(start))
                self.depth -= 1
                if self.depth == 0 and self.undo is not None:
                    self.undo.close()
                    self.undo = self.reader = None


def _python_stream(name: str) -> Callable[[contextlib.ExitStack], tuple[Callable[[], Any], Callable[[Any], Any]]]:
    def install(undo: contextlib.ExitStack) -> tuple[Callable[[], Any], Callable[[Any], Any]]:
        import io

        buffer = io.StringIO()
        undo.enter_context(contextlib.redirect_stderr(buffer) if name == "stderr" else contextlib.redirect_stdout(buffer))
        return (lambda: len(buffer.getvalue())), (lambda start: [buffer.getvalue()[start:]])
    return install


def _native_stderr(undo: contextlib.ExitStack) -> tuple[Callable[[], Any], Callable[[Any], Any]]:
    fd = 2
    sys.stderr.flush()
    scratch = undo.enter_context(tempfile.TemporaryFile(mode="w+b")).fileno()
    saved = os.dup(fd)
    undo.callback(os.close, saved)
    undo.callback(os.dup2, saved, fd)
    undo.callback(sys.stderr.flush)
    os.dup2(scratch, fd)

    def mark() -> int:
        sys.stderr.flush()
        return os.fstat(scratch).st_size

    def since(start: int) -> str:
        end = mark()
        return os.pread(scratch, end - start, start).decode("utf-8", errors="replace") if end > start else ""
    return mark, since


def _warnings(undo: contextlib.ExitStack) -> tuple[Callable[[], Any], Callable[[Any], Any]]:
    import warnings

    recording = undo.enter_context(warnings.catch_warnings(record=True))
    assert recording is not None
    warnings.simplefilter("always")
    return (lambda: len(recording)), (lambda start: list(recording[start:]))


def _logging_off(undo: contextlib.ExitStack) -> tuple[Callable[[], Any], Callable[[Any], Any]]:
    undo.callback(logging.disable, logging.root.manager.disable)
    logging.disable(logging.WARNING)
    return (lambda: None), (lambda start: None)


_NATIVE = _Shared(_native_stderr)
_STDOUT = _Shared(_python_stream("stdout"))
_STDERR = _Shared(_python_stream("stderr"))
_WARNINGS = _Shared(_warnings)
_LOGGING_OFF = _Shared(_logging_off)


@contextlib.contextmanager
def quiet_libraries() -> Iterator[None]:
    """Silence what conversion libraries print (litert-torch, torch.export, ai-edge-quantizer):
    progress lines on stdout, notices on stderr and through logging and warnings. edgeserve
    reports its own progress; ``--debug`` shows native output through capture_native_stderr."""
    with _STDOUT.block(), _STDERR.block(), capture_native_stderr(), _WARNINGS.block(), _LOGGING_OFF.block():
        yield


@contextlib.contextmanager
def _written(shared: _Shared) -> Iterator[list[Any]]:
    """A list that holds, after the block, what ``shared`` saw written while the block was open."""
    written: list[Any] = []
    got: list[Any] = []
    try:
        with shared.block() as got:
            yield written
    finally:
        written.extend(got[0] if got else [])


def quiet_warnings() -> contextlib.AbstractContextManager[list[Any]]:
    """Warnings raised in the block are recorded, not shown (``warnings.WarningMessage`` items in
    the list after the block): ``warnings.catch_warnings`` made thread-safe for blocks that overlap."""
    return _written(_WARNINGS)


def python_stderr() -> contextlib.AbstractContextManager[list[Any]]:
    """``sys.stderr`` into a buffer for the block (tqdm's bars); the text is in the list after."""
    return _written(_STDERR)


@contextlib.contextmanager
def capture_native_stderr() -> Iterator[NativeOutput]:
    """Redirect file descriptor 2 to a temp file for the block; the text is in ``.text`` after.

    Native libraries write to the descriptor, not to ``sys.stderr``, so only a dup2
    catches them. The lines are logged at debug level so ``--debug`` still shows them.
    """
    result = NativeOutput()
    # Native code writes to descriptor 2 whatever sys.stderr is (pytest, Jupyter and
    # loggers replace the Python object), so redirect the descriptor itself.
    try:
        os.fstat(2)
    except OSError:  # no descriptor 2 at all (some daemons): nothing to capture
        yield result
        return
    ui_stream()  # make sure the UI keeps the real stderr before it is redirected
    got: list[Any] = []
    try:
        with _NATIVE.block() as got:
            yield result
    finally:
        result.text = got[0] if got else ""
        for line in result.text.splitlines():
            if line.strip():
                log.debug("native: %s", line)


# The steps of the target whose thread records them (targets run side by side with --jobs, so
# the order of Progress.timings alone no longer tells whose step is whose).
_COLLECTING: contextvars.ContextVar[list[tuple[str, float]] | None] = contextvars.ContextVar(
    "edgeserve_steps", default=None)
_SHOWN_UNDER: contextvars.ContextVar[str | None] = contextvars.ContextVar("edgeserve_target", default=None)

HEARTBEAT_S = 30.0  # seconds between "still running" lines of a long step in a log


class Progress:
    """Progress bars on the UI stream; with ``plain`` (stderr is a log file or a CI job, not a
    terminal) one line per finished stage instead; silent when disabled (tests, ``--quiet``)."""

    def __init__(self, enabled: bool = True, plain: bool = False) -> None:
        self.enabled = enabled
        self.plain = enabled and plain
        self._progress: Any = None
        self.started = time.monotonic()
        # (description, seconds) of every step and tracked loop, in order: the manifest's timing.
        self.timings: list[tuple[str, float]] = []

    def _record(self, description: str, seconds: float) -> None:
        self.timings.append((description, seconds))
        own = _COLLECTING.get()
        if own is not None:
            own.append((description, seconds))

    @contextlib.contextmanager
    def collecting(self, target: str | None = None) -> Iterator[list[tuple[str, float]]]:
        """The steps recorded in this block by this thread (and the threads it hands its context).
        With ``target``, each step shown in the block is shown under that name (targets side by
        side interleave their lines: "verifying with LiteRT" must say whose)."""
        own: list[tuple[str, float]] = []
        token, named = _COLLECTING.set(own), _SHOWN_UNDER.set(target)
        try:
            yield own
        finally:
            _COLLECTING.reset(token)
            _SHOWN_UNDER.reset(named)

    @staticmethod
    def _shown(description: str) -> str:
        target = _SHOWN_UNDER.get()
        return description if not target or description.startswith(f"{target}:") else f"{target}: {description}"

    def _line(self, description: str, start: float, count: str = "") -> None:
        ui_stream().write(f"[{time.monotonic() - start:6.1f} s] {self._shown(description)}{count}\n")

    @contextlib.contextmanager
    def _heartbeat(self, description: str, start: float) -> Iterator[None]:
        """In a log (no spinner), a line every HEARTBEAT_S seconds while a step runs, so a long
        step (a remedy search, a lowering) is never a silent minute."""
        every = float(os.environ.get("EDGESERVE_HEARTBEAT_S", HEARTBEAT_S))
        done = threading.Event()
        shown = self._shown(description)  # the beating thread does not see this one's target

        def beat() -> None:
            while not done.wait(every):
                self._line(shown, start, ": still running")

        beating = threading.Thread(target=beat, name="edgeserve-heartbeat", daemon=True)
        beating.start()
        try:
            yield
        finally:
            done.set()
            beating.join()

    def __enter__(self) -> "Progress":
        if self.enabled and not self.plain:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress
            from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

            console = Console(file=ui_stream(), stderr=True)
            self._progress = RichProgress(
                SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=False,
            )
            self._progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)
            self._progress = None

    def track(self, items: Iterable[T], total: int, description: str) -> Iterator[T]:
        start = time.monotonic()
        try:
            yield from self._shown_track(items, total, description)
        finally:
            self._record(description, time.monotonic() - start)

    def _shown_track(self, items: Iterable[T], total: int, description: str) -> Iterator[T]:
        if self.plain:
            start, done = time.monotonic(), 0
            for done, item in enumerate(items, 1):
                yield item
            self._line(description, start, f": {done} of {total}")
            return
        if self._progress is None:
            yield from items
            return
        task = self._progress.add_task(self._shown(description), total=total)
        for item in items:
            yield item
            self._progress.advance(task)

    @contextlib.contextmanager
    def step(self, description: str) -> Iterator[None]:
        """A one-step task (spinner, then done) for work without a count, e.g. a TF conversion.
        Its time goes into :attr:`timings` whether or not anything is shown."""
        start = time.monotonic()
        try:
            with self._shown_step(description):
                yield
        finally:
            self._record(description, time.monotonic() - start)

    @contextlib.contextmanager
    def _shown_step(self, description: str) -> Iterator[None]:
        if self.plain:
            start = time.monotonic()
            with self._heartbeat(description, start):
                yield
            self._line(description, start)
            return
        if self._progress is None:
            yield
            return
        task = self._progress.add_task(self._shown(description), total=1)  # its spinner and clock show it is alive
        try:
            yield
        finally:
            self._progress.update(task, completed=1)
