"""Injectable time, so a simulated device can run faster than real time.

Everything in :mod:`edgeserve.profiling` that waits or timestamps goes through a
:class:`Clock`. :data:`SYSTEM_CLOCK` is real time. :class:`ScaledClock` runs ``speed``
times faster than real time while still sleeping for real, so background threads (the
sampler, a simulated plant) keep running concurrently. :class:`ManualClock` never
sleeps: ``sleep`` advances it, which makes single-threaded simulations deterministic.
:class:`SimClock` is virtual time for several threads: it advances only when all of them
wait, so a threaded simulation is independent of the machine's speed and load.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """Where time comes from. ``now`` is monotonic seconds (the epoch is arbitrary)."""

    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Wait up to ``seconds`` of this clock's time for ``event``; True if it was set."""
        ...


class SystemClock:
    """Real time: :func:`time.monotonic`."""

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return event.wait(max(0.0, seconds))


class ScaledClock:
    """Real time multiplied by ``speed``: one real second is ``speed`` clock seconds.

    Example:
        >>> clock = ScaledClock(20.0)   # a 60 s thermal time constant passes in 3 s
    """

    def __init__(self, speed: float) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.speed = float(speed)
        self._t0 = time.monotonic()

    def now(self) -> float:
        return (time.monotonic() - self._t0) * self.speed

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds / self.speed)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return event.wait(max(0.0, seconds) / self.speed)


class ManualClock:
    """A clock that only moves when told to; ``sleep`` advances it instantly.

    For single-threaded simulations (no background thread can observe time passing).
    """

    def __init__(self, start: float = 0.0) -> None:
        self._t = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        return self._t

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._t += max(0.0, seconds)

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        if event.is_set():
            return True
        self.advance(seconds)
        return event.is_set()


class SimClock:
    """Virtual time shared by threads: it moves only when every thread using it is waiting.

    Each thread that calls :meth:`sleep` or :meth:`wait` joins the simulation. When all of
    them (that are still alive) are blocked in the clock, time jumps to the earliest
    deadline among them and those threads wake. A thread doing real work — an inference
    loop computing, a sampler reading files, a plant writing them — holds time still, so
    the simulation never depends on how fast or how loaded the machine is, and runs as
    fast as the threads can take turns. Real threads still run concurrently, so a sampler
    thread reading a sysfs tree that a plant thread writes is exercised for real.

    Every thread that joins must keep calling :meth:`sleep`/:meth:`wait` or exit; one that
    spins on :meth:`now` without waiting stops time for everybody.
    """

    def __init__(self, start: float = 0.0, poll_s: float = 0.005) -> None:
        self._t = float(start)
        self._cond = threading.Condition()
        # Participants by id(thread): the creating thread, threads registered before they
        # start, and any thread that waits on the clock.
        self._threads: dict[int, threading.Thread] = {}
        self._deadlines: dict[int, float] = {}
        self._poll = poll_s
        self.register(threading.current_thread())

    def register(self, thread: threading.Thread) -> None:
        """Make ``thread`` a participant now, before it starts (so time waits for it)."""
        with self._cond:
            self._threads[id(thread)] = thread

    def now(self) -> float:
        return self._t

    def sleep(self, seconds: float) -> None:
        self._wait_until(self._t + max(0.0, seconds), None)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return self._wait_until(self._t + max(0.0, seconds), event)

    def _wait_until(self, deadline: float, event: threading.Event | None) -> bool:
        me = threading.current_thread()
        key = id(me)
        with self._cond:
            self._threads[key] = me
            try:
                while True:
                    if event is not None and event.is_set():
                        return True
                    if self._t >= deadline:
                        return False
                    self._deadlines[key] = deadline
                    self._advance()
                    if self._t < deadline and not (event is not None and event.is_set()):
                        # A timeout, not only notify: a participant may have exited, or an
                        # event been set by a thread that never touches this clock.
                        self._cond.wait(self._poll)
            finally:
                self._deadlines.pop(key, None)

    def _advance(self) -> None:
        # Registered threads that have not started yet (ident None) still count.
        alive = {k: t for k, t in self._threads.items() if t.is_alive() or t.ident is None}
        self._threads = alive
        if all(k in self._deadlines for k in alive):
            nxt = min((self._deadlines[k] for k in alive), default=self._t)
            if nxt > self._t:
                self._t = nxt
                self._cond.notify_all()


#: Real time.
SYSTEM_CLOCK: Clock = SystemClock()
