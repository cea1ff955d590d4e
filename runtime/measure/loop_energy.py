"""Energy per inference over a timed loop, from a power sensor (``bench OUT``'s energy column).

``edgeserve profile`` measures one artifact with an idle window, a power trace and a thermal
model; comparing formats needs less and must stay quick, so each artifact's timed loop is
bracketed by readings of the same sensor. A cumulative source (RAPL's energy counters, an
INA238's energy register) is read before and after; a source that gives watts (hwmon, a
Jetson's INA3221, the Pi 5's PMIC) is sampled on a thread every ``interval_s`` and integrated
with the trapezoid rule. The figure is the whole rail or package over the loop divided by
the inferences in it, idle power included, which is what a battery pays per inference when
the device does nothing else; `profile` separates the idle share. The power-model estimate
(``estimate`` source) is never used here: with no sensor the column says so.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class LoopEnergy:
    """A measured power source, or the reason there is none."""

    source: Any  # a PowerSource with estimated False, or None
    reason: str | None = None  # why there is no source
    interval_s: float = 0.02

    @classmethod
    def open(cls, profile: Any = None) -> "LoopEnergy":
        from edgeserve.profiling.power import ProbeContext, open_power_source
        from edgeserve.profiling.sysfs import resolve_root

        # $EDGESERVE_SYSFS_ROOT, as `edgeserve profile` reads it (a recorded tree, or a container's mount)
        probe = open_power_source("auto", ProbeContext(root=resolve_root(), profile=profile))
        if probe.source is not None and not probe.source.estimated:
            return cls(probe.source)
        tried = [f"{t['name']}: {t['reason']}" for t in probe.tried if t["status"] in ("unavailable", "failed")]
        return cls(None, "no power sensor on this machine (" + "; ".join(tried)[:300] + ")" if tried
                   else "no power sensor on this machine")

    @property
    def name(self) -> str | None:
        return getattr(self.source, "name", None)

    def measure(self, loop: Callable[[], T]) -> tuple[T, float | None, str | None]:
        """``loop()``'s result, the joules the source saw while it ran, and why there is no
        figure (no source, or a reading that failed: the loop's result is kept either way)."""
        from edgeserve.profiling.sysfs import SensorError

        if self.source is None:
            return loop(), None, self.reason
        if self.source.cumulative:
            try:
                before = self._read("joules")
            except SensorError as exc:
                return loop(), None, f"{self.name}: {exc}"
            result = loop()
            try:
                return result, self._read("joules") - before, None
            except SensorError as exc:
                return result, None, f"{self.name}: {exc}"
        samples: list[tuple[float, float]] = []
        failures: list[str] = []
        stop = threading.Event()

        def sample() -> None:
            while not failures:
                try:
                    samples.append((time.perf_counter(), self._read("watts")))
                except SensorError as exc:
                    failures.append(f"{self.name}: {exc}")
                if stop.wait(self.interval_s):
                    return

        thread = threading.Thread(target=sample, name="edgeserve-loop-energy", daemon=True)
        thread.start()
        try:
            result = loop()
        finally:
            stop.set()
            thread.join()
        if failures or len(samples) < 2:
            return result, None, failures[0] if failures else f"{self.name}: fewer than two readings in the loop"
        return result, integrate(samples), None

    def _read(self, kind: str) -> float:
        value = getattr(self.source.read(time.perf_counter()), kind)
        if value is None:
            from edgeserve.profiling.sysfs import SensorError

            raise SensorError(f"the source gave no {kind}")
        return float(value)


def integrate(samples: list[tuple[float, float]]) -> float:
    """Joules from (seconds, watts) samples in time order: the trapezoid rule."""
    return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in zip(samples, samples[1:]))


# The shortest loop measured: a sensor that gives watts is sampled every ``interval_s`` (20 ms), so
# a small model's --frames runs (a millisecond for TFLM's sine model) would fall between two readings.
MIN_WINDOW_S = 0.5


def per_inference(energy: LoopEnergy, run_once: Callable[[], Any], frames: int) -> dict[str, Any]:
    """Millijoules per inference over at least ``frames`` more calls of ``run_once`` and at least
    MIN_WINDOW_S, bracketed by the sensor's readings (a loop of its own: a timed loop also counts
    allocations): {"mj_per_inference", "energy"}; None and the reason without a sensor, at no cost
    in time."""
    if energy.source is None:
        return {"mj_per_inference": None, "energy": energy.reason}

    def loop() -> int:
        done, started = 0, time.perf_counter()
        while done < frames or time.perf_counter() - started < MIN_WINDOW_S:
            run_once()
            done += 1
        return done

    runs, joules, problem = energy.measure(loop)
    if joules is None:
        return {"mj_per_inference": None, "energy": problem}
    return {"mj_per_inference": round(1e3 * joules / runs, 4),
            "energy": f"{energy.name}: {getattr(energy.source, 'detail', '')}"[:200]}
