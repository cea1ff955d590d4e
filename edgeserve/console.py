"""Where edgeserve's human-facing output goes, and how native libraries are kept out of it.

stdout carries only results (JSON with ``--json``). Progress bars and log lines go to a
private duplicate of the original stderr, so that :func:`capture_native_stderr` can
point file descriptor 2 somewhere else while TensorFlow's or TFLM's C++ code runs:
their lines are kept (and logged at debug level, or parsed by the caller) without
hiding edgeserve's own progress.
"""

from __future__ import annotations

import contextlib
import logging
import atexit
import os
import time
import sys
import tempfile
from collections.abc import Iterable, Iterator
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


@contextlib.contextmanager
def quiet_libraries() -> Iterator[None]:
    """Silence what conversion libraries print (litert-torch, torch.export, ai-edge-quantizer):
    progress lines on stdout, notices on stderr and through logging and warnings. edgeserve
    reports its own progress; ``--debug`` shows native output through capture_native_stderr."""
    import io
    import warnings

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
            capture_native_stderr(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        previous = logging.root.manager.disable
        logging.disable(logging.WARNING)
        try:
            yield
        finally:
            logging.disable(previous)


@contextlib.contextmanager
def capture_native_stderr() -> Iterator[NativeOutput]:
    """Redirect file descriptor 2 to a temp file for the block; the text is in ``.text`` after.

    Native libraries write to the descriptor, not to ``sys.stderr``, so only a dup2
    catches them. The lines are logged at debug level so ``--debug`` still shows them.
    """
    result = NativeOutput()
    # Native code writes to descriptor 2 whatever sys.stderr is (pytest, Jupyter and
    # loggers replace the Python object), so redirect the descriptor itself.
    fd = 2
    try:
        os.fstat(fd)
    except OSError:  # no descriptor 2 at all (some daemons): nothing to capture
        yield result
        return
    ui_stream()  # make sure the UI keeps the real stderr before it is redirected
    sys.stderr.flush()
    saved = os.dup(fd)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), fd)
        try:
            yield result
        finally:
            sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)
            tmp.seek(0)
            result.text = tmp.read().decode("utf-8", errors="replace")
    for line in result.text.splitlines():
        if line.strip():
            log.debug("native: %s", line)


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

    def _line(self, description: str, start: float, count: str = "") -> None:
        ui_stream().write(f"[{time.monotonic() - start:6.1f} s] {description}{count}\n")

    @contextlib.contextmanager
    def _heartbeat(self, description: str, start: float) -> Iterator[None]:
        """In a log (no spinner), a line every HEARTBEAT_S seconds while a step runs, so a long
        step (a remedy search, a lowering) is never a silent minute."""
        import threading

        every = float(os.environ.get("EDGESERVE_HEARTBEAT_S", HEARTBEAT_S))
        done = threading.Event()

        def beat() -> None:
            while not done.wait(every):
                self._line(description, start, ": still running")

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
            self.timings.append((description, time.monotonic() - start))

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
        task = self._progress.add_task(description, total=total)
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
            self.timings.append((description, time.monotonic() - start))

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
        task = self._progress.add_task(description, total=1)  # its spinner and clock show it is alive
        try:
            yield
        finally:
            self._progress.update(task, completed=1)
