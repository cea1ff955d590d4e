"""Host and generic power sources: RAPL, hwmon, an external meter's log, and the profile estimate."""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import ClassVar

from edgeserve.profiling.power import (
    ActivityMeter,
    PowerReading,
    ProbeContext,
    register,
)
from edgeserve.profiling.sysfs import (
    SensorError,
    SourceUnavailable,
    device_name,
    hwmon_dirs,
    natural_key,
    read_number,
    read_text,
    short,
    under,
)

__all__ = ["EstimateSource", "ExternalMeterSource", "HwmonSource", "RaplSource", "read_meter_log"]


# --------------------------------------------------------------------------- RAPL


class _Counter:
    """A wrapping microjoule counter, unwrapped into cumulative joules."""

    def __init__(self, path: Path, max_uj: float) -> None:
        self.path = path
        self.max_uj = max_uj
        self.last: float | None = None
        self.total_uj = 0.0
        self.wraps = 0

    def read_joules(self) -> float:
        raw = read_number(self.path)
        if self.last is not None:
            delta = raw - self.last
            # A wrap goes from near max_uj to near 0: more than half the range down. A smaller
            # step down is a reset (or a broken counter); adding max_uj would turn it into a
            # huge false energy, so the total goes down with it and energy.summarize reports
            # "ran backwards" with null energy.
            if delta < -self.max_uj / 2:
                delta += self.max_uj
                self.wraps += 1
            self.total_uj += delta
        self.last = raw
        return self.total_uj / 1e6


@register
class RaplSource:
    """Intel/AMD RAPL package (or platform) energy counters under ``/sys/class/powercap``.

    ``psys`` (whole platform) is used alone when present, since it contains the packages;
    otherwise every top-level zone (packages, and DRAM where it is its own top zone) is
    summed. Sub-zones (core, uncore) are inside their package and never added.
    """

    name: ClassVar[str] = "rapl"
    estimated = False
    cumulative = True
    live = True

    def __init__(self, counters: list[_Counter], zones: list[str], root: Path) -> None:
        self.counters = counters
        self.detail = "energy_uj of " + ", ".join(
            f"{z} ({short(c.path.parent, root)})" for z, c in zip(zones, counters)
        )

    @classmethod
    def probe(cls, ctx: ProbeContext) -> RaplSource:
        base = under(ctx.root, "/sys/class/powercap")
        zones = sorted(
            (p for p in base.glob("intel-rapl:*") if re.fullmatch(r"intel-rapl:\d+", p.name)),
            key=lambda p: natural_key(p.name),
        ) if base.is_dir() else []
        if not zones:
            raise SourceUnavailable(f"no RAPL zones ({short(base, ctx.root)}/intel-rapl:N missing)")
        named = [(z, device_name(z)) for z in zones]
        psys = [(z, n) for z, n in named if n == "psys"]
        chosen = psys or named
        counters: list[_Counter] = []
        for zone, _ in chosen:
            try:
                max_uj = read_number(zone / "max_energy_range_uj")
                counter = _Counter(zone / "energy_uj", max_uj)
                counter.read_joules()
            except SensorError as exc:
                hint = ""
                if isinstance(exc.__cause__, PermissionError):
                    hint = " (energy_uj is root-only since the 2020 PLATYPUS fix; run as root or relax its mode)"
                raise SourceUnavailable(f"cannot read RAPL: {exc}{hint}") from exc
            counters.append(counter)
        return cls(counters, [n or z.name for z, n in chosen], ctx.root)

    @property
    def wraps(self) -> int:
        return sum(c.wraps for c in self.counters)

    def read(self, now: float) -> PowerReading:
        return PowerReading(joules=sum(c.read_joules() for c in self.counters))


# --------------------------------------------------------------------------- generic hwmon

_POWER_MONITOR_CHIPS = ("ina3221", "ina238", "ina237")  # handled above: never summed as sub-rails


@dataclass(frozen=True)
class _HwmonChannel:
    device: str
    index: str
    label: str
    energy_uj: Path | None
    power_uw: Path | None

    @property
    def key(self) -> str:
        return f"{self.device}/{self.label}"


@register
class HwmonSource:
    """One hwmon channel: ``energy*_input`` (µJ counter) preferred over ``power*_input`` (µW).

    Several channels are never summed (they may overlap); the profile's rail or ``--rail``
    names one (``LABEL``, ``DEVICE/LABEL`` or ``DEVICE/powerN``) when there is more than one.
    """

    name: ClassVar[str] = "hwmon"
    estimated = False
    live = True

    def __init__(self, channel: _HwmonChannel, root: Path, note: str) -> None:
        self.channel = channel
        self.cumulative = channel.energy_uj is not None
        self._counter = _Counter(channel.energy_uj, 2.0**64) if channel.energy_uj is not None else None
        path = channel.energy_uj or channel.power_uw
        assert path is not None
        self.detail = f"{note}: {short(path, root)}"

    @classmethod
    def probe(cls, ctx: ProbeContext) -> HwmonSource:
        channels: list[_HwmonChannel] = []
        for hw in hwmon_dirs(ctx.root):
            device = device_name(hw) or hw.name
            if device in _POWER_MONITOR_CHIPS:
                continue
            indices = sorted(
                {m.group(2) for f in hw.iterdir() if (m := re.fullmatch(r"(energy|power)(\d+)_(input|average)", f.name))},
                key=int,
            )
            for n in indices:
                energy = hw / f"energy{n}_input"
                power = hw / f"power{n}_input"
                if not power.exists() and (hw / f"power{n}_average").exists():
                    power = hw / f"power{n}_average"
                label = f"power{n}"
                for lf in (hw / f"power{n}_label", hw / f"energy{n}_label"):
                    if lf.exists():
                        try:
                            label = read_text(lf)
                            break
                        except SensorError:
                            pass
                channels.append(_HwmonChannel(device, n, label, energy if energy.exists() else None,
                                              power if power.exists() else None))
        if not channels:
            raise SourceUnavailable("no hwmon power*_input or energy*_input files")
        wanted = ctx.wanted_rail
        if wanted:
            match = [c for c in channels if wanted in (c.label, c.key, f"{c.device}/power{c.index}")]
            if match:
                return cls._checked(match[0], ctx, f"channel {match[0].key} (named)")
        if len(channels) == 1:
            return cls._checked(channels[0], ctx, f"channel {channels[0].key} (the only one)")
        raise SourceUnavailable(
            f"{len(channels)} hwmon power channels ({', '.join(c.key for c in channels)}) and none named; "
            "they may overlap, so edgeserve does not add them. Pick one with --rail DEVICE/LABEL"
        )

    @classmethod
    def _checked(cls, channel: _HwmonChannel, ctx: ProbeContext, note: str) -> HwmonSource:
        source = cls(channel, ctx.root, note)
        source.read(0.0)
        return source

    def read(self, now: float) -> PowerReading:
        if self._counter is not None:
            return PowerReading(joules=self._counter.read_joules())
        assert self.channel.power_uw is not None
        return PowerReading(watts=read_number(self.channel.power_uw) / 1e6)


# --------------------------------------------------------------------------- external meter


def _parse_timestamp(text: str) -> float:
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return stamp.timestamp()  # naive stamps are local time, as a meter's PC clock writes them


def read_meter_log(path: Path) -> tuple[list[float], list[float]]:
    """(UNIX timestamps, watts) from a CSV log; a header row and blank lines are skipped."""
    times: list[float] = []
    watts: list[float] = []
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            for lineno, row in enumerate(csv.reader(fh), start=1):
                if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
                    continue
                if len(row) < 2:
                    raise SensorError(f"{path}:{lineno}: expected 'timestamp,watts', got {','.join(row)!r}")
                try:
                    t, w = _parse_timestamp(row[0]), float(row[1])
                except ValueError:
                    if not times:  # the header
                        continue
                    raise SensorError(f"{path}:{lineno}: cannot parse {','.join(row)!r} as timestamp,watts") from None
                times.append(t)
                watts.append(w)
    except OSError as exc:
        raise SensorError(f"{path}: {exc.strerror or exc}") from exc
    return times, watts


@register
class ExternalMeterSource:
    """A power meter's own log (CSV: timestamp, watts), read after the run.

    Timestamps are UNIX seconds or ISO 8601; ``meter_offset_s`` is added to them (for a
    meter whose clock is off). The run records its wall-clock start and end, and the log
    is cut and aligned to the run with them.
    """

    name: ClassVar[str] = "external"
    estimated = False
    cumulative = False
    live = False

    def __init__(self, path: Path, offset_s: float) -> None:
        self.path = path
        self.offset_s = offset_s
        self.detail = f"meter log {path} (offset {offset_s:+g} s)"

    @classmethod
    def probe(cls, ctx: ProbeContext) -> ExternalMeterSource:
        if ctx.meter_log is None:
            raise SourceUnavailable("no meter log given (--meter-log FILE.csv)")
        times, _ = read_meter_log(ctx.meter_log)
        if len(times) < 2:
            raise SourceUnavailable(f"{ctx.meter_log} holds fewer than 2 readings")
        return cls(ctx.meter_log, ctx.meter_offset_s)

    def read(self, now: float) -> PowerReading:
        raise SensorError("the external meter log is read after the run, not sampled")

    def samples(self) -> tuple[list[float], list[float]]:
        """All (UNIX time + offset, watts) readings, sorted by time."""
        times, watts = read_meter_log(self.path)
        pairs = sorted(zip((t + self.offset_s for t in times), watts))
        return [p[0] for p in pairs], [p[1] for p in pairs]


# --------------------------------------------------------------------------- estimate


@register
class EstimateSource:
    """The profile's power model: idle W + (peak − idle) W × utilisation. Always estimated.

    Utilisation is the fraction of time the workload was inside ``run()``, scaled by
    threads/cores when the thread count is known (``peak_w`` in a profile means every core
    busy). The source reads as an energy counter — ``idle·t + (peak − idle)·share·busy`` —
    which integrates the model exactly, with no sampling error at the window edges.
    """

    name: ClassVar[str] = "estimate"
    estimated = True
    cumulative = True
    live = True

    def __init__(self, idle_w: float, peak_w: float, activity: ActivityMeter, core_share: float, profile: str) -> None:
        self.idle_w = idle_w
        self.peak_w = peak_w
        self.activity = activity
        self.core_share = core_share
        self._t0: float | None = None
        self.detail = (
            f"profile {profile}: {idle_w:g} W idle + {peak_w - idle_w:g} W x utilisation"
            + (f" x {core_share:.2f} (threads/cores)" if core_share < 1 else "")
        )

    @classmethod
    def probe(cls, ctx: ProbeContext) -> EstimateSource:
        if ctx.profile is None:
            raise SourceUnavailable("no profile to estimate from")
        if ctx.activity is None:
            raise SourceUnavailable("no activity meter (the estimate needs the workload's busy time)")
        power = ctx.profile.power
        share = 1.0
        if ctx.threads and ctx.profile.cpu.cores:
            share = min(1.0, ctx.threads / ctx.profile.cpu.cores)
        return cls(power.idle_w, power.peak_w, ctx.activity, share, ctx.profile.name)

    def read(self, now: float) -> PowerReading:
        if self._t0 is None:
            self._t0 = now
        busy = self.activity.busy_seconds(now)
        active_w = (self.peak_w - self.idle_w) * self.core_share
        return PowerReading(joules=self.idle_w * (now - self._t0) + active_w * busy)
