"""The background sampler: power and temperature at a set rate, with its own cost measured.

One thread reads the power source and the thermal reader every ``1/rate_hz`` seconds of
the injected clock and appends to a :class:`Trace`. It times every read twice — wall
time (:func:`time.perf_counter`) and its own CPU time (:func:`time.thread_time`) — so
the report can say what watching the device cost: mean and worst read time, and the
fraction of one core the sampler used. Commands it runs (``vcgencmd``) are child
processes; their CPU time is reported separately (``child_cpu_s``).

Example:
    >>> with Sampler(power=None, thermal=reader, rate_hz=4) as sampler:  # doctest: +SKIP
    ...     work()
    >>> sampler.trace().temp_c.max()  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from edgeserve.profiling.clock import SYSTEM_CLOCK, Clock
from edgeserve.profiling.sysfs import SensorError

if TYPE_CHECKING:
    from edgeserve.profiling.power import PowerSource
    from edgeserve.profiling.thermal import ThermalReader

log = logging.getLogger(__name__)

__all__ = ["Sampler", "Trace"]


@dataclass
class Trace:
    """Sampled series on the sampler's clock. Missing readings are NaN (``throttled``: -1).

    Attributes:
        t: Sample times (clock seconds).
        watts: Instantaneous power (power sources), else NaN.
        joules: Cumulative energy (counter sources), else NaN.
        temp_c: Hottest chosen zone.
        freq_khz: Mean CPU clock.
        throttled: ``get_throttled`` bits, -1 when not read.
        zones: Per-zone temperatures.
        marks: Named instants (``"idle"``, ``"run"``, ``"end"``) on the same clock.
        wall_marks: The same instants as UNIX time (to align an external meter's log).
    """

    t: np.ndarray
    watts: np.ndarray
    joules: np.ndarray
    temp_c: np.ndarray
    freq_khz: np.ndarray
    throttled: np.ndarray
    zones: dict[str, np.ndarray] = field(default_factory=dict)
    marks: dict[str, float] = field(default_factory=dict)
    wall_marks: dict[str, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.t.size)

    def window(self, t0: float, t1: float) -> np.ndarray:
        """Boolean mask of samples with t0 <= t <= t1."""
        return (self.t >= t0) & (self.t <= t1)


def _children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


def _nan(value: float | None) -> float:
    return math.nan if value is None else float(value)


class Sampler:
    """Samples a power source and a thermal reader on a background thread.

    Args:
        power: A live :class:`~edgeserve.profiling.power.PowerSource`, or None.
        thermal: A :class:`~edgeserve.profiling.thermal.ThermalReader`, or None.
        rate_hz: Samples per second of ``clock`` time.
        clock: Time source (see :mod:`edgeserve.profiling.clock`).
    """

    def __init__(
        self,
        power: PowerSource | None,
        thermal: ThermalReader | None,
        rate_hz: float = 10.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if not rate_hz > 0:
            raise ValueError("rate_hz must be positive")
        self.power = power if power is not None and power.live else None
        self.thermal = thermal if thermal is not None and thermal.available else None
        self.rate_hz = float(rate_hz)
        self.clock = clock
        self._lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rows: list[tuple[float, float, float, float, float, int]] = []
        self._zones: dict[str, list[float]] = {}
        self.marks: dict[str, float] = {}
        self.wall_marks: dict[str, float] = {}
        self._read_wall: list[float] = []
        self._cpu_s = 0.0
        self._late = 0
        self._errors = {"power": 0, "thermal": 0}
        self._last_error: dict[str, str] = {}
        self._started_perf: float | None = None
        self._stopped_perf: float | None = None
        self._latest_temp: float | None = None
        self._children0 = self._children1 = 0.0

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> Sampler:
        if self._thread is not None:
            raise RuntimeError("sampler already started")
        self._started_perf = time.perf_counter()
        self._children0 = _children_cpu()
        self.mark("start")
        self._thread = threading.Thread(target=self._loop, name="edgeserve-sampler", daemon=True)
        register = getattr(self.clock, "register", None)
        if register is not None:  # a SimClock waits for this thread from now on
            register(self._thread)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread and take one last sample, so the trace covers the end."""
        if self._thread is None or self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()
        self._sample_once()
        self.mark("stop")
        self._stopped_perf = time.perf_counter()
        self._children1 = _children_cpu()

    def __enter__(self) -> Sampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def mark(self, name: str, sample: bool = False) -> float:
        """Record a named instant (clock time and wall time); returns the clock time.

        With ``sample=True`` a reading is taken at that instant too, so a window that
        starts or ends here does not cut a sampling interval (energy counters are then
        exact at the edge).
        """
        if sample and self._thread is not None:
            return self._sample_once(mark=name)
        now = self.clock.now()
        self.marks[name] = now
        self.wall_marks[name] = time.time()
        return now

    # ----------------------------------------------------------------- sampling
    def _loop(self) -> None:
        period = 1.0 / self.rate_hz
        next_t = self.clock.now()
        while not self._stop.is_set():
            self._sample_once()
            next_t += period
            delay = next_t - self.clock.now()
            if delay < 0:  # fell behind (slow sensor, busy machine): skip, don't burst
                self._late += 1
                next_t = self.clock.now()
                delay = 0.0
            if self.clock.wait(self._stop, delay):
                break

    def _sample_once(self, mark: str | None = None) -> float:
        # Serialised: a marked sample from the caller's thread must not interleave with the
        # sampler thread's (sources keep counter state between reads).
        with self._read_lock:
            return self._sample_locked(mark)

    def _sample_locked(self, mark: str | None) -> float:
        wall0 = time.perf_counter()
        cpu0 = time.thread_time()
        t = self.clock.now()
        if mark is not None:
            self.marks[mark] = t
            self.wall_marks[mark] = time.time()
        watts = joules = math.nan
        if self.power is not None:
            try:
                reading = self.power.read(t)
                watts, joules = _nan(reading.watts), _nan(reading.joules)
            except (SensorError, OSError, ValueError) as exc:
                self._error("power", exc)
        temp = freq = math.nan
        throttled = -1
        zones: dict[str, float | None] = {}
        if self.thermal is not None:
            reading_t = self.thermal.read()
            temp, freq = _nan(reading_t.temp_c), _nan(reading_t.freq_khz)
            throttled = -1 if reading_t.throttled is None else reading_t.throttled
            zones = reading_t.zones
            for err in reading_t.errors:
                self._error("thermal", err)
        cpu = time.thread_time() - cpu0
        wall = time.perf_counter() - wall0
        with self._lock:
            n = len(self._rows)
            self._rows.append((t, watts, joules, temp, freq, throttled))
            for key, value in zones.items():
                self._zones.setdefault(key, [math.nan] * n).append(_nan(value))
            for series in self._zones.values():
                if len(series) < n + 1:
                    series.append(math.nan)
            self._read_wall.append(wall)
            self._cpu_s += cpu
            if not math.isnan(temp):
                self._latest_temp = temp
        return t

    def _error(self, what: str, exc: object) -> None:
        self._errors[what] += 1
        self._last_error[what] = str(exc)
        if self._errors[what] == 1:
            log.warning("%s sensor read failed (continuing): %s", what, exc)

    # ----------------------------------------------------------------- results
    def latest_temp(self) -> float | None:
        """The most recent temperature read (None before the first good one)."""
        return self._latest_temp

    def __call__(self) -> float | None:
        """A sampler is a temperature function (for :class:`~edgeserve.profiling.governor.ThermalGovernor`)."""
        return self._latest_temp

    def trace(self) -> Trace:
        """A snapshot of everything sampled so far."""
        with self._lock:
            rows = np.array(self._rows, dtype=float).reshape(-1, 6)
            zones = {k: np.array(v, dtype=float) for k, v in self._zones.items()}
        return Trace(
            t=rows[:, 0], watts=rows[:, 1], joules=rows[:, 2], temp_c=rows[:, 3],
            freq_khz=rows[:, 4], throttled=rows[:, 5].astype(int), zones=zones, marks=dict(self.marks),
            wall_marks=dict(self.wall_marks),
        )

    def overhead(self) -> dict[str, Any]:
        """What sampling cost: reads, their wall time, and the sampler's share of one core."""
        with self._lock:
            reads = np.array(self._read_wall, dtype=float)
            cpu = self._cpu_s
            t = [r[0] for r in self._rows]
        end = self._stopped_perf if self._stopped_perf is not None else time.perf_counter()
        elapsed = end - self._started_perf if self._started_perf is not None else 0.0
        span = (t[-1] - t[0]) if len(t) > 1 else 0.0
        return {
            "rate_hz": self.rate_hz,
            "samples": int(reads.size),
            "achieved_rate_hz": round((len(t) - 1) / span, 3) if span > 0 else None,
            "late_samples": self._late,
            "mean_read_ms": round(float(reads.mean()) * 1e3, 4) if reads.size else None,
            "max_read_ms": round(float(reads.max()) * 1e3, 4) if reads.size else None,
            "cpu_s": round(cpu, 6),
            "cpu_fraction": round(cpu / elapsed, 6) if elapsed > 0 else None,
            # Commands the sampler runs (vcgencmd) are child processes: their CPU is not in
            # cpu_s. This is every child reaped meanwhile, so only the sampler's in a profile run.
            "child_cpu_s": round(max(0.0, self._children1 - self._children0), 6),
            "errors": dict(self._errors),
            "last_errors": dict(self._last_error),
        }
