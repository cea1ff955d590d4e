"""Temperatures, CPU clocks and throttle flags: thermal zones, cpufreq, ``vcgencmd get_throttled``.

:class:`ThermalReader` finds what this machine exposes once (under a sysfs root) and then
reads it cheaply on every sample. Nothing here raises during a run: a zone that fails to
read gives ``None`` for that sample and its reason is kept.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from edgeserve.profiling.sysfs import (
    SensorError,
    find_command,
    natural_key,
    read_number,
    read_text,
    run_command,
    short,
    under,
)

if TYPE_CHECKING:
    from edgeserve.device_profiles import Profile

__all__ = ["THROTTLE_BITS", "ThermalReader", "ThermalReading", "ThermalZone", "decode_throttled", "parse_throttled"]

#: ``vcgencmd get_throttled`` bits (Raspberry Pi documentation, "get_throttled").
THROTTLE_BITS: dict[int, str] = {
    0: "under-voltage detected",
    1: "arm frequency capped",
    2: "currently throttled",
    3: "soft temperature limit active",
    16: "under-voltage has occurred",
    17: "arm frequency capping has occurred",
    18: "throttling has occurred",
    19: "soft temperature limit has occurred",
}

#: Bits meaning "slowed down right now" (frequency capped, throttled, soft limit).
ACTIVE_THROTTLE_MASK = (1 << 1) | (1 << 2) | (1 << 3)

# What a thermal zone of a working device can report; outside it the sensor is broken or
# unconnected (some drivers report -273 °C or 1e21 millidegrees).
PLAUSIBLE_C = (-60.0, 200.0)


def parse_throttled(text: str) -> int:
    """``throttled=0x50005`` → ``0x50005``.

    Raises:
        SensorError: the text is not in that form.
    """
    m = re.search(r"throttled=(0x[0-9a-fA-F]+|\d+)", text)
    if not m:
        raise SensorError(f"unexpected get_throttled output {text.strip()[:60]!r}")
    return int(m.group(1), 0)


def decode_throttled(bits: int) -> list[str]:
    """The meanings of the set bits, lowest first."""
    return [meaning for bit, meaning in THROTTLE_BITS.items() if bits & (1 << bit)]


@dataclass(frozen=True)
class ThermalZone:
    """One ``/sys/class/thermal/thermal_zoneN``."""

    index: int
    type: str
    temp_path: Path


@dataclass(frozen=True)
class ThermalReading:
    """One sample. ``temp_c`` is the hottest of the chosen zones (None when none could be read)."""

    temp_c: float | None
    zones: dict[str, float | None]
    freq_khz: float | None = None
    throttled: int | None = None
    errors: tuple[str, ...] = ()


@dataclass
class ThermalReader:
    """Reads the zones a profile names (or all zones), CPU clocks and Pi throttle flags.

    Args:
        root: sysfs root.
        profile: Its ``[thermal] zones`` choose the zones, in order; when none of them
            exists every readable zone is used instead, and :attr:`notes` says so.
        zones: Explicit zone types, overriding the profile.
        vcgencmd: Command for ``get_throttled``; None or not found = no throttle flags.
    """

    root: Path
    profile: Profile | None = None
    zones: Sequence[str] | None = None
    vcgencmd: str | None = "vcgencmd"
    chosen: list[ThermalZone] = field(init=False, default_factory=list)
    cpufreq: list[Path] = field(init=False, default_factory=list)
    max_freq_khz: float | None = field(init=False, default=None)
    notes: list[str] = field(init=False, default_factory=list)
    unavailable_reason: str | None = field(init=False, default=None)
    _vcgencmd: str | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self._find_zones()
        self._find_cpufreq()
        self._find_vcgencmd()

    # ----------------------------------------------------------------- discovery
    def _find_zones(self) -> None:
        base = under(self.root, "/sys/class/thermal")
        found: list[ThermalZone] = []
        if base.is_dir():
            for zdir in sorted(base.glob("thermal_zone*"), key=lambda p: natural_key(p.name)):
                try:
                    ztype = read_text(zdir / "type")
                except SensorError as exc:
                    self.notes.append(f"skipped {zdir.name}: {exc}")
                    continue
                found.append(ThermalZone(int(zdir.name[len("thermal_zone"):] or 0), ztype, zdir / "temp"))
        if not found:
            self.unavailable_reason = f"no thermal zones ({short(base, self.root)}/thermal_zone*/type missing)"
            return
        wanted = list(self.zones) if self.zones is not None else list(self.profile.thermal.zones if self.profile else ())
        chosen = [z for name in wanted for z in found if z.type == name]
        if wanted and not chosen:
            self.notes.append(
                f"none of the zones {', '.join(wanted)} exist; using every zone: {', '.join(z.type for z in found)}"
            )
        self.chosen = chosen or found
        # Drop zones that cannot be read at all now (e.g. a Wi-Fi zone with the radio off):
        # they would only add errors to every sample. Keep them if that leaves nothing.
        readable = []
        for zone in self.chosen:
            try:
                read_number(zone.temp_path)
                readable.append(zone)
            except SensorError as exc:
                self.notes.append(f"zone {zone.type} unreadable: {exc}")
        if readable:
            self.chosen = readable
        else:
            self.unavailable_reason = "no thermal zone could be read: " + "; ".join(self.notes[-len(self.chosen):])

    def _find_cpufreq(self) -> None:
        base = under(self.root, "/sys/devices/system/cpu")
        if not base.is_dir():
            self.notes.append("no cpufreq (no /sys/devices/system/cpu)")
            return
        self.cpufreq = sorted(base.glob("cpu[0-9]*/cpufreq/scaling_cur_freq"), key=lambda p: natural_key(str(p)))
        if not self.cpufreq:
            self.notes.append("no cpufreq scaling_cur_freq files")
            return
        maxima = []
        for cur in self.cpufreq:
            for name in ("cpuinfo_max_freq", "scaling_max_freq"):
                try:
                    maxima.append(read_number(cur.parent / name))
                    break
                except SensorError:
                    continue
        self.max_freq_khz = max(maxima) if maxima else None

    def _find_vcgencmd(self) -> None:
        if self.vcgencmd is None:
            return
        command = find_command(self.vcgencmd)
        if command is None:
            self.notes.append(f"no throttle flags: {self.vcgencmd} not found")
            return
        try:
            parse_throttled(run_command([command, "get_throttled"]))
        except SensorError as exc:
            self.notes.append(f"no throttle flags: {exc}")
            return
        self._vcgencmd = command

    # ----------------------------------------------------------------- reading
    @property
    def available(self) -> bool:
        return bool(self.chosen) and self.unavailable_reason is None

    @property
    def has_throttle_flags(self) -> bool:
        return self._vcgencmd is not None

    def describe(self) -> dict[str, object]:
        return {
            "zones": [f"{z.type} ({short(z.temp_path.parent, self.root)})" for z in self.chosen],
            "cpufreq_cpus": len(self.cpufreq),
            "max_freq_khz": self.max_freq_khz,
            "throttle_flags": self._vcgencmd is not None,
            "reason": self.unavailable_reason,
            "notes": list(self.notes),
        }

    def read(self) -> ThermalReading:
        """One reading; never raises. Failures are in ``errors`` and give ``None`` values."""
        errors: list[str] = []
        zones: dict[str, float | None] = {}
        for zone in self.chosen:
            key = zone.type if zone.type not in zones else f"{zone.type}#{zone.index}"
            try:
                celsius = read_number(zone.temp_path) / 1000.0  # millidegree Celsius
            except SensorError as exc:
                zones[key] = None
                errors.append(str(exc))
                continue
            if not PLAUSIBLE_C[0] <= celsius <= PLAUSIBLE_C[1]:  # a broken sensor, not a temperature
                zones[key] = None
                errors.append(f"{zone.temp_path}: {celsius:g} °C is outside {PLAUSIBLE_C[0]:g}..{PLAUSIBLE_C[1]:g} °C, "
                              "not a reading")
                continue
            zones[key] = celsius
        temps = [v for v in zones.values() if v is not None]
        freq = None
        if self.cpufreq:
            values = []
            for path in self.cpufreq:
                try:
                    values.append(read_number(path))
                except SensorError as exc:
                    errors.append(str(exc))
            freq = sum(values) / len(values) if values else None
        throttled = None
        if self._vcgencmd is not None:
            try:
                throttled = parse_throttled(run_command([self._vcgencmd, "get_throttled"]))
            except SensorError as exc:
                errors.append(str(exc))
        return ThermalReading(max(temps) if temps else None, zones, freq, throttled, tuple(errors))
