"""A simulated device: an RC thermal plant that writes a sysfs tree, and a session that heats it.

For tests and for dry runs of a governor before it meets hardware. :class:`SimulatedPlant`
integrates ``C·dT/dt = P − (T − T_amb)/R`` exactly for piecewise-constant power and writes
what a kernel would: ``/sys/class/thermal/thermal_zone0/{type,temp}`` (m°C), a hwmon device
``edgeserve_plant`` with ``power1_input`` (µW) and ``energy1_input`` (µJ), and
``/sys/devices/system/cpu/cpuN/cpufreq/scaling_cur_freq`` (halved above ``throttle_c``).
Files are replaced atomically, so a reader never sees half a number.

:class:`SimulatedSession` is session-shaped (``run``, ``threads``, ``set_threads``,
``alternatives``, ...): each ``run()`` takes ``latency_s`` of the clock and deposits
``active_w × latency`` joules into the plant. Fewer threads: proportionally longer latency
and lower power, so the energy per inference stays the same.

Example:
    >>> clock = ScaledClock(20)                                          # doctest: +SKIP
    >>> with SimulatedPlant(tmp / "sys-root", PlantParams(), clock) as plant:  # doctest: +SKIP
    ...     session = SimulatedSession(plant, latency_s=0.05, active_w=4.0, clock=clock)
    ...     profile_run(session, profile=..., sysfs_root=tmp / "sys-root", clock=clock)
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgeserve.profiling.clock import SYSTEM_CLOCK, Clock
from edgeserve.profiling.thermal_model import LoadModel, ThermalModel

__all__ = ["PlantParams", "SimulatedPlant", "SimulatedSession"]


@dataclass(frozen=True)
class PlantParams:
    """Physical constants of the simulated device.

    Attributes:
        t_amb_c: Ambient temperature.
        r_c_per_w: Thermal resistance to ambient (°C/W).
        tau_s: Time constant R·C (s).
        idle_w: Power drawn with no inference running.
        resolution_c: Sensor step (°C); real sensors report 0.5-1 °C steps.
        throttle_c: At this the CPU clock halves (None: never) ...
        throttle_hysteresis_c: ... until the temperature is this much lower again.
        zone_type: ``thermal_zone0/type``.
        cpus: Number of ``cpuN/cpufreq`` directories.
        max_freq_khz: Nominal clock.
    """

    t_amb_c: float = 25.0
    r_c_per_w: float = 8.0
    tau_s: float = 20.0
    idle_w: float = 1.0
    resolution_c: float = 0.1
    throttle_c: float | None = None
    throttle_hysteresis_c: float = 10.0
    zone_type: str = "cpu-thermal"
    cpus: int = 2
    max_freq_khz: int = 2_400_000

    def model(self) -> ThermalModel:
        """The exact model of this plant (what a perfect fit would find)."""
        return ThermalModel(self.t_amb_c, self.r_c_per_w, self.tau_s, "power_w")

    def sustainable_rate_hz(self, budget_c: float, energy_per_inference_j: float) -> float:
        """Highest inference rate whose steady state is ``budget_c``: (B − T_amb − R·P_idle)/(R·E)."""
        return (budget_c - self.t_amb_c - self.r_c_per_w * self.idle_w) / (self.r_c_per_w * energy_per_inference_j)

    def load(self, energy_per_inference_j: float, max_rate_hz: float) -> LoadModel:
        return LoadModel(self.idle_w, energy_per_inference_j, max_rate_hz)


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text + "\n")
    os.replace(tmp, path)


class SimulatedPlant:
    """An RC plant heated by deposited energy, exposed as a sysfs tree under ``root``.

    Args:
        root: Directory that plays ``/`` (pass it as ``sysfs_root``).
        params: The physics.
        clock: Time source (a :class:`~edgeserve.profiling.clock.ScaledClock` to run fast).
        update_hz: How often the background thread integrates and rewrites the files.
        temp0_c: Start temperature (default: idle equilibrium).
    """

    def __init__(self, root: str | os.PathLike[str], params: PlantParams = PlantParams(),
                 clock: Clock = SYSTEM_CLOCK, update_hz: float = 50.0, temp0_c: float | None = None) -> None:
        self.root = Path(root)
        self.params = params
        self.clock = clock
        self.update_hz = update_hz
        self.temp_c = params.t_amb_c + params.r_c_per_w * params.idle_w if temp0_c is None else temp0_c
        self.energy_j = 0.0
        self._pending_j = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t = clock.now()
        self.history: list[tuple[float, float, float]] = []  # (t, true temperature, mean power)
        zone = self.root / "sys/class/thermal/thermal_zone0"
        zone.mkdir(parents=True, exist_ok=True)
        (zone / "type").write_text(params.zone_type + "\n")
        self._temp_file = zone / "temp"
        hw = self.root / "sys/class/hwmon/hwmon0"
        hw.mkdir(parents=True, exist_ok=True)
        (hw / "name").write_text("edgeserve_plant\n")
        (hw / "power1_label").write_text("total\n")
        self._power_file, self._energy_file = hw / "power1_input", hw / "energy1_input"
        self._freq_files = []
        self._written: dict[Path, str] = {}
        self._throttled = False
        for cpu in range(params.cpus):
            d = self.root / f"sys/devices/system/cpu/cpu{cpu}/cpufreq"
            d.mkdir(parents=True, exist_ok=True)
            (d / "cpuinfo_max_freq").write_text(f"{params.max_freq_khz}\n")
            self._freq_files.append(d / "scaling_cur_freq")
        self._publish(params.idle_w)

    # ----------------------------------------------------------------- physics
    def deposit(self, joules: float) -> None:
        """Add heat from work done (called by the session after each inference)."""
        with self._lock:
            self._pending_j += joules

    @property
    def updated_at(self) -> float:
        """Clock time the plant was last integrated to."""
        return self._t

    @property
    def throttled(self) -> bool:
        """Whether the simulated CPU clock is halved now (latched, with hysteresis)."""
        return self._throttled

    def _update_throttle(self) -> None:
        limit = self.params.throttle_c
        if limit is None:
            return
        if self.temp_c >= limit:
            self._throttled = True
        elif self.temp_c <= limit - self.params.throttle_hysteresis_c:
            self._throttled = False

    def advance(self, now: float | None = None) -> float:
        """Integrate up to ``now`` (default: the clock) and rewrite the files; returns °C."""
        now = self.clock.now() if now is None else now
        with self._lock:
            dt = now - self._t
            if dt <= 0:
                return self.temp_c
            work, self._pending_j = self._pending_j, 0.0
            self._t = now
            p = self.params
            power = p.idle_w + work / dt
            ss = p.t_amb_c + p.r_c_per_w * power
            self.temp_c = ss + (self.temp_c - ss) * math.exp(-dt / p.tau_s)
            self.energy_j += power * dt
            self._update_throttle()
            self.history.append((now, self.temp_c, power))
        self._publish(power)
        return self.temp_c

    def _publish(self, power_w: float) -> None:
        p = self.params
        step = p.resolution_c if p.resolution_c > 0 else 0.001
        shown = math.floor(self.temp_c / step + 0.5) * step
        self._write_if_changed(self._temp_file, str(round(shown * 1000)))
        self._write_if_changed(self._power_file, str(round(power_w * 1e6)))
        self._write_if_changed(self._energy_file, str(round(self.energy_j * 1e6)))
        freq = str(p.max_freq_khz // 2 if self.throttled else p.max_freq_khz)
        for f in self._freq_files:
            self._write_if_changed(f, freq)

    def _write_if_changed(self, path: Path, text: str) -> None:
        if self._written.get(path) != text:
            _write(path, text)
            self._written[path] = text

    @property
    def max_temp_c(self) -> float:
        return max((h[1] for h in self.history), default=self.temp_c)

    def trace(self) -> np.ndarray:
        """Rows of (time, true temperature, mean power over the step)."""
        with self._lock:
            return np.array(self.history, dtype=float).reshape(-1, 3)

    # ----------------------------------------------------------------- thread
    def start(self) -> SimulatedPlant:
        self._t = self.clock.now()
        self._thread = threading.Thread(target=self._loop, name="edgeserve-plant", daemon=True)
        register = getattr(self.clock, "register", None)
        if register is not None:  # a SimClock waits for this thread from now on
            register(self._thread)
        self._thread.start()
        return self

    def _loop(self) -> None:
        period = 1.0 / self.update_hz
        while not self.clock.wait(self._stop, period):
            self.advance()

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self.advance()

    def __enter__(self) -> SimulatedPlant:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class SimulatedSession:
    """A session-shaped workload that heats a :class:`SimulatedPlant` (or nothing).

    Args:
        plant: Where the heat goes (None: a pure timing stand-in).
        latency_s: Time per inference with ``max_threads`` threads.
        active_w: Power above idle while an inference runs with ``max_threads`` threads.
        threads: Starting thread count.
        max_threads: Thread count that ``latency_s`` and ``active_w`` describe.
        artifact: Path reported for this model.
        artifact_bytes: Size of the model.
        alternatives: Other artifact paths, lightest first.
        clock: Time source; ``run`` sleeps on it.
        synchronous: Advance the plant from ``run`` (at most every ``sync_step_s``), for
            :class:`ManualClock` simulations that have no plant thread.
        sync_step_s: Integration step in synchronous mode.
    """

    backend = "simulated"
    profile = None

    def __init__(self, plant: SimulatedPlant | None = None, *, latency_s: float = 0.05, active_w: float = 4.0,
                 threads: int = 4, max_threads: int = 4, artifact: str = "simulated.tflite",
                 artifact_bytes: int = 1_000_000, alternatives: list[str] | None = None,
                 clock: Clock = SYSTEM_CLOCK, synchronous: bool = False, sync_step_s: float = 0.1) -> None:
        self.plant = plant
        self.latency_s = latency_s
        self.active_w = active_w
        self.threads: int | None = threads
        self.max_threads = max_threads
        self.artifact = artifact
        self.artifact_bytes = artifact_bytes
        self._alternatives = list(alternatives or [])
        self.clock = clock
        self.synchronous = synchronous
        self.sync_step_s = sync_step_s
        self.calls = 0
        self.thread_changes: list[int] = []
        self.closed = False

    @property
    def energy_per_inference_j(self) -> float:
        return self.active_w * self.latency_s

    def current_latency_s(self) -> float:
        share = (self.threads or self.max_threads) / self.max_threads
        slow = 2.0 if self.plant is not None and self.plant.throttled else 1.0
        return self.latency_s / share * slow

    def run(self, frame: Any) -> list[np.ndarray]:
        latency = self.current_latency_s()
        self.clock.sleep(latency)
        if self.plant is not None:
            self.plant.deposit(self.energy_per_inference_j)
            if self.synchronous and self.clock.now() - self.plant.updated_at >= self.sync_step_s:
                self.plant.advance()
        self.calls += 1
        return [np.zeros((1, 2), np.float32)]

    def example_input(self) -> np.ndarray:
        return np.zeros((8, 8, 3), np.uint8)

    def set_threads(self, n: int) -> None:
        self.threads = max(1, min(int(n), self.max_threads))
        self.thread_changes.append(self.threads)

    def alternatives(self) -> list[str]:
        return list(self._alternatives)

    def close(self) -> None:
        self.closed = True
