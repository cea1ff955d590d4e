"""Board power monitors: Jetson INA3221 / INA238 rails and the Raspberry Pi 5 PMIC.

Jetson boards carry INA3221 (and, on Thor, INA238) monitors on several rails. Only the
board's total-input rail is read (``VDD_IN``, ``POM_5V_IN`` on the Nano, ``VIN``): the
sub-rails (CPU/GPU/SOC) overlap it, so adding them double-counts — a known error of tools
that print a "total" as the sum of every rail. Units are the kernel's: the L4T 32 iio
driver writes mW (``in_power*_input``), the mainline hwmon driver mV (``in*_input``) and mA
(``curr*_input``), and hwmon power is µW (``power*_input``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from edgeserve.profiling.power import (
    TOTAL_RAIL_NAMES,
    PowerReading,
    ProbeContext,
    register,
)
from edgeserve.profiling.sysfs import (
    SensorError,
    SourceUnavailable,
    device_name,
    find_command,
    hwmon_dirs,
    natural_key,
    read_number,
    read_text,
    run_command,
    short,
    under,
)

__all__ = ["JetsonIna238Source", "JetsonIna3221Source", "VcgencmdPmicSource", "parse_pmic_adc"]


# --------------------------------------------------------------------------- Jetson INA3221


@dataclass(frozen=True)
class _Rail:
    label: str
    # hwmon: millivolt and milliamp files; iio: a milliwatt file (or mV/mA files).
    power_mw: Path | None = None
    volt_mv: Path | None = None
    curr_ma: Path | None = None

    def read_watts(self) -> float:
        if self.power_mw is not None:
            return read_number(self.power_mw) / 1000.0
        assert self.volt_mv is not None and self.curr_ma is not None
        return read_number(self.volt_mv) * read_number(self.curr_ma) / 1e6


def _ina3221_rails(root: Path) -> list[_Rail]:
    rails: list[_Rail] = []
    # L4T 34+ (JetPack 5/6): mainline ina3221 hwmon driver, channels 1..3 with labels;
    # in7 is "sum of shunt voltages" and unconnected channels are labelled "NC".
    for hw in hwmon_dirs(root):
        if device_name(hw) != "ina3221":
            continue
        for label_file in sorted(hw.glob("in*_label"), key=lambda p: natural_key(p.name)):
            n = label_file.name[2:].split("_")[0]
            try:
                label = read_text(label_file)
            except SensorError:
                continue
            if label.upper() == "NC" or "sum of shunt" in label.lower():
                continue
            rails.append(_Rail(label, volt_mv=hw / f"in{n}_input", curr_ma=hw / f"curr{n}_input"))
    # L4T 32 (JetPack 4): NVIDIA's ina3221x iio driver, rail_name_N and in_power N_input (mW).
    seen: set[str] = set()
    for pattern in ("/sys/bus/iio/devices", "/sys/bus/i2c/drivers/ina3221x"):
        base = under(root, pattern)
        if not base.is_dir():
            continue
        for dev in sorted(base.glob("**/iio:device*")):
            real = os.path.realpath(dev)
            if real in seen or not dev.is_dir():
                continue
            seen.add(real)
            name = device_name(dev)
            if name and not name.startswith("ina3221"):
                continue
            for label_file in sorted(dev.glob("rail_name_*"), key=lambda p: natural_key(p.name)):
                n = label_file.name.rsplit("_", 1)[1]
                try:
                    label = read_text(label_file)
                except SensorError:
                    continue
                power = dev / f"in_power{n}_input"
                if power.exists():
                    rails.append(_Rail(label, power_mw=power))
                else:
                    rails.append(_Rail(label, volt_mv=dev / f"in_voltage{n}_input", curr_ma=dev / f"in_current{n}_input"))
    return rails


def _choose_total(labels: Sequence[str], wanted: str | None, what: str) -> tuple[str, str]:
    """Pick the total-input rail among ``labels``; returns (label, note)."""
    if wanted and wanted in labels:
        return wanted, f"rail {wanted} from the profile/--rail"
    for name in TOTAL_RAIL_NAMES:
        if name in labels:
            note = f"rail {name} (board total input)"
            if wanted:
                note += f"; the requested rail {wanted} is not present"
            return name, note
    raise SourceUnavailable(
        f"{what} rails {', '.join(labels)} include no total-input rail ({'/'.join(TOTAL_RAIL_NAMES)}). "
        "edgeserve does not add sub-rails: they overlap, so their sum double-counts (or misses the rest "
        "of the board). If one of them is this board's total input, name it with --rail or [power] rail."
    )


@register
class JetsonIna3221Source:
    """The INA3221 total-input rail of a Jetson board (never a sum of sub-rails)."""

    name: ClassVar[str] = "jetson-ina3221"
    estimated = False
    cumulative = False
    live = True

    def __init__(self, rail: _Rail, root: Path, note: str) -> None:
        self.rail = rail
        files = [p for p in (rail.power_mw, rail.volt_mv, rail.curr_ma) if p is not None]
        self.detail = f"{note}: " + ", ".join(short(p, root) for p in files)

    @classmethod
    def probe(cls, ctx: ProbeContext) -> JetsonIna3221Source:
        rails = _ina3221_rails(ctx.root)
        if not rails:
            raise SourceUnavailable("no INA3221 found (no hwmon device named ina3221, no ina3221x iio device)")
        label, note = _choose_total([r.label for r in rails], ctx.wanted_rail, "INA3221")
        rail = next(r for r in rails if r.label == label)
        rail.read_watts()  # fail the probe now, not on every sample
        return cls(rail, ctx.root, note)

    def read(self, now: float) -> PowerReading:
        return PowerReading(watts=self.rail.read_watts())


@register
class JetsonIna238Source:
    """An INA238 monitor on the board input (Jetson Thor carrier VIN), through hwmon."""

    name: ClassVar[str] = "jetson-ina238"
    estimated = False
    cumulative = False
    live = True

    def __init__(self, hw: Path, root: Path, note: str) -> None:
        self.hw = hw
        self.power_uw = hw / "power1_input"
        files = [self.power_uw] if self.power_uw.exists() else [hw / "in1_input", hw / "curr1_input"]
        self.detail = f"{note}: " + ", ".join(short(p, root) for p in files)

    @classmethod
    def probe(cls, ctx: ProbeContext) -> JetsonIna238Source:
        devices: dict[str, Path] = {}
        unlabelled: list[Path] = []
        for hw in hwmon_dirs(ctx.root):
            if device_name(hw) not in ("ina238", "ina237"):
                continue
            label = ""
            for candidate in (hw / "label", hw / "in1_label", hw / "power1_label"):
                if candidate.exists():
                    try:
                        label = read_text(candidate)
                        break
                    except SensorError:
                        pass
            if label:
                devices[label] = hw
            else:
                unlabelled.append(hw)
        if not devices and not unlabelled:
            raise SourceUnavailable("no hwmon device named ina238")
        if devices:
            label, note = _choose_total(sorted(devices), ctx.wanted_rail, "INA238")
            hw = devices[label]
        elif len(unlabelled) == 1:
            hw, note = unlabelled[0], "the only INA238 (unlabelled; taken as the board input)"
        else:
            raise SourceUnavailable(
                f"{len(unlabelled)} unlabelled INA238 devices; cannot tell which is the board input"
            )
        source = cls(hw, ctx.root, note)
        source.read(0.0)
        return source

    def read(self, now: float) -> PowerReading:
        if self.power_uw.exists():
            return PowerReading(watts=read_number(self.power_uw) / 1e6)  # hwmon power is µW
        return PowerReading(watts=read_number(self.hw / "in1_input") * read_number(self.hw / "curr1_input") / 1e6)


# --------------------------------------------------------------------------- Raspberry Pi 5

_PMIC_LINE = re.compile(r"^\s*(?P<rail>\S+?)_(?P<kind>[AV])\s+(?:current|volt)\((?P<idx>\d+)\)=(?P<value>[-+0-9.eE]+)(?P<unit>[AV])\s*$")


def parse_pmic_adc(text: str) -> dict[str, tuple[float, float]]:
    """Rails with both a current and a voltage reading: ``{rail: (amps, volts)}``.

    ``vcgencmd pmic_read_adc`` prints ``VDD_CORE_A current(7)=0.83A`` and
    ``VDD_CORE_V volt(15)=0.72V``; rails are paired by name, not position. Rails with only a
    voltage (``EXT5V_V``, ``BATT_V``) carry no power of their own and are left out.
    """
    amps: dict[str, float] = {}
    volts: dict[str, float] = {}
    for line in text.splitlines():
        m = _PMIC_LINE.match(line)
        if not m:
            continue
        (amps if m["kind"] == "A" else volts)[m["rail"]] = float(m["value"])
    return {rail: (amps[rail], volts[rail]) for rail in amps if rail in volts}


@register
class VcgencmdPmicSource:
    """Raspberry Pi 5 PMIC rails: Σ current × voltage.

    The PMIC sees the SoC, memory and on-board rails after its own regulators, not the
    USB-C input: it misses conversion losses and 5 V loads (USB, fan, HATs), so it reads
    below a wall meter.
    """

    name: ClassVar[str] = "vcgencmd-pmic"
    estimated = False
    cumulative = False
    live = True

    def __init__(self, command: str, rails: int) -> None:
        self.command = command
        self.detail = f"{command} pmic_read_adc: sum of {rails} rails (current x voltage); excludes PMIC losses and 5 V loads"

    @classmethod
    def probe(cls, ctx: ProbeContext) -> VcgencmdPmicSource:
        command = find_command(ctx.vcgencmd)
        if command is None:
            raise SourceUnavailable(f"{ctx.vcgencmd} not found (Raspberry Pi firmware tool)")
        rails = parse_pmic_adc(run_command([command, "pmic_read_adc"]))
        if not rails:
            raise SourceUnavailable(f"{command} pmic_read_adc printed no rail current/voltage pairs (not a Pi 5?)")
        return cls(command, len(rails))

    def read(self, now: float) -> PowerReading:
        rails = parse_pmic_adc(run_command([self.command, "pmic_read_adc"]))
        if not rails:
            raise SensorError(f"{self.command} pmic_read_adc printed no rails")
        return PowerReading(watts=sum(a * v for a, v in rails.values()))
