"""Power sources: one small class each, behind one protocol, and the ``auto`` probe.

A source either reports instantaneous power (``watts``) or a cumulative energy counter
(``joules``, already unwrapped); :mod:`edgeserve.profiling.energy` integrates either.
Sources are probed with :func:`open_power_source`; every source that was skipped keeps
the reason, so a report can say why it used what it used. The board monitors live in
:mod:`~edgeserve.profiling.power_boards`, the rest in :mod:`~edgeserve.profiling.power_host`;
each registers itself with :func:`register` and is imported on first probe.

========================  ==============================================================
name                      reads
========================  ==============================================================
``jetson-ina3221``        INA3221 rails via hwmon (L4T 34+: ``in*_label``, ``in*_input``
                          mV, ``curr*_input`` mA) or iio (L4T 32: ``rail_name_*``,
                          ``in_power*_input`` mW). Only the board's total-input rail.
``jetson-ina238``         INA238 via hwmon (``power1_input`` µW, or ``in1_input`` mV ×
                          ``curr1_input`` mA). Only the total-input (VIN) device.
``vcgencmd-pmic``         Raspberry Pi 5 PMIC: sum of rail current × voltage from
                          ``vcgencmd pmic_read_adc``.
``rapl``                  ``/sys/class/powercap/intel-rapl:N/energy_uj`` with wraparound
                          at ``max_energy_range_uj``.
``hwmon``                 Any other hwmon ``energy*_input`` (µJ) or ``power*_input`` (µW).
``external``              A meter's CSV log (timestamp, watts), aligned by timestamps.
``estimate``              The profile's idle W + (peak − idle) W × utilisation; always
                          ``estimated``.
========================  ==============================================================
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from edgeserve.errors import InputError, did_you_mean
from edgeserve.device_profiles import POWER_SOURCES
from edgeserve.profiling.sysfs import SensorError, SourceUnavailable

if TYPE_CHECKING:
    from edgeserve.device_profiles import Profile

log = logging.getLogger(__name__)

__all__ = [
    "SOURCE_ORDER",
    "TOTAL_RAIL_NAMES",
    "ActivityMeter",
    "PowerReading",
    "PowerSource",
    "ProbeContext",
    "ProbeResult",
    "check_source_name",
    "open_power_source",
    "register",
    "source_class",
]

#: Order in which ``auto`` probes: the profiles' ``POWER_SOURCES``, one list for both.
SOURCE_ORDER: tuple[str, ...] = POWER_SOURCES

#: Names Jetson boards give the module's (or carrier's) total input rail. TX1/TX2/Xavier
#: NX/Orin NX/Orin Nano: VDD_IN; Nano (L4T 32): POM_5V_IN; Thor's INA238: VIN.
TOTAL_RAIL_NAMES: tuple[str, ...] = ("VDD_IN", "POM_5V_IN", "VIN", "5V_IN")


@dataclass(frozen=True)
class PowerReading:
    """One reading: instantaneous ``watts`` or cumulative ``joules`` (unwrapped)."""

    watts: float | None = None
    joules: float | None = None


class PowerSource(Protocol):
    """What every power source provides.

    Attributes:
        name: One of :data:`SOURCE_ORDER`.
        estimated: True when the figure is a model, not a measurement.
        cumulative: True when :meth:`read` returns ``joules`` (a counter), else ``watts``.
        live: False for sources read after the run (the external meter log).
        detail: What exactly is read (files, rail, command), for the report.
    """

    name: str
    estimated: bool
    cumulative: bool
    live: bool
    detail: str

    def read(self, now: float) -> PowerReading:
        """Read once. ``now`` is the sampler's clock. Raises :class:`SensorError`."""
        ...


class ActivityMeter:
    """How long the workload has been busy; the ``estimate`` source turns it into utilisation.

    Thread-safe: the inference loop marks busy spans, the sampler thread reads totals.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy = 0.0
        self._since: float | None = None

    def begin(self, now: float) -> None:
        with self._lock:
            self._since = now

    def end(self, now: float) -> None:
        with self._lock:
            if self._since is not None:
                self._busy += max(0.0, now - self._since)
                self._since = None

    @contextmanager
    def busy(self, clock_now: Callable[[], float]) -> Iterator[None]:
        self.begin(clock_now())
        try:
            yield
        finally:
            self.end(clock_now())

    def busy_seconds(self, now: float) -> float:
        """Busy time so far, counting an inference still in progress up to ``now``."""
        with self._lock:
            extra = max(0.0, now - self._since) if self._since is not None else 0.0
            return self._busy + extra


@dataclass
class ProbeContext:
    """Everything a source may need to find itself.

    Attributes:
        root: sysfs root (``/`` on a device; a recorded tree in tests).
        profile: Device profile (rail name, idle/peak watts for the estimate).
        rail: Rail or channel to use, overriding the profile's ``[power] rail``.
        vcgencmd: Command used for ``vcgencmd`` (a path, so tests can supply a script).
        meter_log: External meter CSV (timestamp, watts); the ``external`` source needs it.
        meter_offset_s: Seconds to add to the meter's timestamps (clock skew).
        activity: Busy-time meter of the workload (``estimate`` needs it).
        threads: Inference threads in use (``estimate`` scales active power by threads/cores).
    """

    root: Path = Path("/")
    profile: Profile | None = None
    rail: str | None = None
    vcgencmd: str = "vcgencmd"
    meter_log: Path | None = None
    meter_offset_s: float = 0.0
    activity: ActivityMeter | None = None
    threads: int | None = None

    @property
    def wanted_rail(self) -> str | None:
        if self.rail:
            return self.rail
        return self.profile.power.rail if self.profile is not None else None


_REGISTRY: dict[str, Any] = {}
#: Modules that hold the sources; imported on first use, when they register themselves.
_SOURCE_MODULES = ("edgeserve.profiling.power_boards", "edgeserve.profiling.power_host")


def register(cls: Any) -> Any:
    """Class decorator: make a source (with ``name`` and ``probe(ctx)``) known to the probe."""
    _REGISTRY[cls.name] = cls
    return cls


def _registry() -> dict[str, Any]:
    for module in _SOURCE_MODULES:
        importlib.import_module(module)
    return _REGISTRY


def source_class(name: str) -> Any:
    """The class registered as ``name`` (``"rapl"`` → :class:`~edgeserve.profiling.power_host.RaplSource`)."""
    return _registry()[name]


# --------------------------------------------------------------------------- probe


@dataclass
class ProbeResult:
    """The chosen source (or None) and what happened to every source tried."""

    source: PowerSource | None
    tried: list[dict[str, str]] = field(default_factory=list)

    @property
    def reason(self) -> str | None:
        """Why there is no source (None when there is one)."""
        if self.source is not None:
            return None
        return "no power source: " + "; ".join(f"{t['name']}: {t['reason']}" for t in self.tried)


def check_source_name(name: str) -> None:
    """Raise :class:`InputError` (with a suggestion) unless ``name`` is ``auto`` or a known source."""
    if name != "auto" and name not in _registry():
        raise InputError(
            f'unknown power source "{name}".{did_you_mean(name, _REGISTRY)} '
            f"Known: auto, {', '.join(SOURCE_ORDER)}"
        )


def open_power_source(name: str, ctx: ProbeContext) -> ProbeResult:
    """Open the source called ``name``, or probe in :data:`SOURCE_ORDER` for ``"auto"``.

    ``auto`` tries every measured source in order. ``external`` is tried only when a
    meter log is given, and ``estimate`` only when the profile lists ``"estimate"`` in
    ``[power] sources`` (every bundled profile does). An unavailable source never raises:
    it is recorded with its reason, and with no source the energy figures are null.

    Raises:
        InputError: ``name`` is not a known source.
    """
    check_source_name(name)
    result = ProbeResult(None)
    if name == "auto":
        order: list[str] = list(SOURCE_ORDER)
        if ctx.meter_log is None:
            order.remove("external")
            result.tried.append({"name": "external", "status": "skipped", "reason": "no --meter-log given"})
        if ctx.profile is not None and "estimate" not in ctx.profile.power.sources:
            order.remove("estimate")
            result.tried.append({"name": "estimate", "status": "skipped",
                                 "reason": f'profile {ctx.profile.name} does not list "estimate" in [power] sources'})
    else:
        order = [name]
    for candidate in order:
        try:
            source = _registry()[candidate].probe(ctx)
        except SensorError as exc:
            status = "unavailable" if isinstance(exc, SourceUnavailable) else "failed"
            result.tried.append({"name": candidate, "status": status, "reason": str(exc)})
            log.debug("power source %s: %s", candidate, exc)
            continue
        result.tried.append({"name": candidate, "status": "used", "reason": source.detail})
        result.source = source
        for later in order[order.index(candidate) + 1:]:
            result.tried.append({"name": later, "status": "not tried",
                                 "reason": f"{candidate} was found first (choose with --power-source {later})"})
        break
    # Keep the table in probe order for the report.
    rank = {n: i for i, n in enumerate(SOURCE_ORDER)}
    result.tried.sort(key=lambda t: rank.get(t["name"], 99))
    return result
