"""Power sources against directory trees laid out as the kernel lays them out.

No power meter here: every tree is built in tmp_path, copying the layouts of L4T 32
(ina3221x iio), L4T 34+ (mainline ina3221 hwmon), INA238 hwmon, powercap RAPL, generic
hwmon, and a script standing in for ``vcgencmd``. Expected values are worked by hand.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

import pytest

from edgeserve.errors import InputError
from edgeserve.device_profiles import load_profile
from edgeserve.profiling.power import (
    SOURCE_ORDER,
    ActivityMeter,
    ProbeContext,
    open_power_source,
)
from edgeserve.profiling.power_boards import parse_pmic_adc
from edgeserve.profiling.sysfs import SensorError


def write_tree(root: Path, files: dict[str, object]) -> None:
    for rel, content in files.items():
        path = root / rel.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{content}\n")


def link(root: Path, link_path: str, target_path: str) -> None:
    """A sysfs-style symlink (e.g. /sys/class/hwmon/hwmon1 -> the device's directory)."""
    src = root / link_path.lstrip("/")
    src.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(root / target_path.lstrip("/"), src.parent), src)


def probe(root: Path, name: str = "auto", **kwargs: object):
    return open_power_source(name, ProbeContext(root=root, **kwargs))  # type: ignore[arg-type]


ORIN_DEV = "/sys/devices/platform/bus@0/c240000.i2c/i2c-1/1-0040/hwmon/hwmon1"


def orin_nano_tree(root: Path) -> None:
    """Jetson Orin Nano, L4T 36: mainline ina3221 driver, labels from the device tree."""
    write_tree(root, {
        f"{ORIN_DEV}/name": "ina3221",
        f"{ORIN_DEV}/in1_label": "VDD_IN", f"{ORIN_DEV}/in1_input": 5080, f"{ORIN_DEV}/curr1_input": 1240,
        f"{ORIN_DEV}/in2_label": "VDD_CPU_GPU_CV", f"{ORIN_DEV}/in2_input": 5072, f"{ORIN_DEV}/curr2_input": 420,
        f"{ORIN_DEV}/in3_label": "VDD_SOC", f"{ORIN_DEV}/in3_input": 5076, f"{ORIN_DEV}/curr3_input": 560,
        f"{ORIN_DEV}/in7_label": "sum of shunt voltages", f"{ORIN_DEV}/in7_input": 12,
    })
    link(root, "/sys/class/hwmon/hwmon1", ORIN_DEV)


def test_jetson_hwmon_reads_the_total_input_rail_never_the_sum(tmp_path: Path) -> None:
    orin_nano_tree(tmp_path)
    result = probe(tmp_path, "jetson-ina3221", profile=load_profile("jetson-orin-nano"))
    source = result.source
    assert source is not None and not source.estimated and not source.cumulative
    watts = source.read(0.0).watts
    assert watts == pytest.approx(5080 * 1240 / 1e6)  # 6.2992 W: mV x mA / 1e6
    summed = (5080 * 1240 + 5072 * 420 + 5076 * 560) / 1e6  # the double count other tools make
    assert watts < summed - 4.9
    assert "VDD_IN" in source.detail and "/sys/class/hwmon/hwmon1/in1_input" in source.detail


def test_jetson_nano_l4t32_iio_rails_in_milliwatts_seen_once_through_two_links(tmp_path: Path) -> None:
    dev = "/sys/devices/7000c400.i2c/i2c-6/6-0040/iio:device0"
    write_tree(tmp_path, {
        f"{dev}/name": "ina3221x",
        f"{dev}/rail_name_0": "POM_5V_IN", f"{dev}/in_power0_input": 3290,
        f"{dev}/in_current0_input": 658, f"{dev}/in_voltage0_input": 5000,
        f"{dev}/rail_name_1": "POM_5V_GPU", f"{dev}/in_power1_input": 412,
        f"{dev}/rail_name_2": "POM_5V_CPU", f"{dev}/in_power2_input": 1120,
    })
    link(tmp_path, "/sys/bus/iio/devices/iio:device0", dev)
    link(tmp_path, "/sys/bus/i2c/drivers/ina3221x/6-0040", "/sys/devices/7000c400.i2c/i2c-6/6-0040")
    source = probe(tmp_path, profile=load_profile("jetson-nano")).source
    assert source is not None and source.name == "jetson-ina3221"
    assert source.read(0.0).watts == pytest.approx(3.290)  # in_power0_input is mW
    assert "POM_5V_IN" in source.detail


def test_jetson_without_a_total_rail_is_unavailable_and_says_why(tmp_path: Path) -> None:
    dev = "/sys/devices/i2c-1/1-0040/hwmon/hwmon2"
    files: dict[str, object] = {f"{dev}/name": "ina3221"}
    for n, label in enumerate(("GPU", "CPU", "SOC"), start=1):  # AGX Xavier: no total-input rail
        files.update({f"{dev}/in{n}_label": label, f"{dev}/in{n}_input": 19000, f"{dev}/curr{n}_input": 300})
    write_tree(tmp_path, files)
    link(tmp_path, "/sys/class/hwmon/hwmon2", dev)
    result = probe(tmp_path, "jetson-ina3221")
    assert result.source is None
    reason = result.tried[0]["reason"]
    assert "GPU, CPU, SOC" in reason and "no total-input rail" in reason and "double-counts" in reason
    # The user may name one if it really is the board's input.
    named = probe(tmp_path, "jetson-ina3221", rail="SOC").source
    assert named is not None and named.read(0.0).watts == pytest.approx(19000 * 300 / 1e6)
    # And the generic hwmon source never falls back to adding INA3221 sub-rails.
    assert probe(tmp_path, "hwmon").source is None


def test_ina238_vin_in_microwatts(tmp_path: Path) -> None:
    dev = "/sys/devices/i2c-2/2-0044/hwmon/hwmon4"
    write_tree(tmp_path, {f"{dev}/name": "ina238", f"{dev}/label": "VIN", f"{dev}/power1_input": 28_500_000,
                          f"{dev}/in1_input": 19100, f"{dev}/curr1_input": 1490})
    link(tmp_path, "/sys/class/hwmon/hwmon4", dev)
    result = probe(tmp_path)
    assert result.source is not None and result.source.name == "jetson-ina238"
    assert result.source.read(0.0).watts == pytest.approx(28.5)  # hwmon power is µW
    # Without power1_input the driver's mV x mA is used.
    (tmp_path / dev.lstrip("/") / "power1_input").unlink()
    assert probe(tmp_path, "jetson-ina238").source.read(0.0).watts == pytest.approx(19100 * 1490 / 1e6)


PMIC = """\
     3V7_WL_SW_A current(0)=0.00390372A
       3V3_SYS_A current(1)=0.05466300A
     VDD_CORE_A current(7)=0.83378670A
      DDR_VDD2_A current(10)=0.03123000A
     3V7_WL_SW_V volt(8)=3.71462400V
       3V3_SYS_V volt(9)=3.31096000V
     VDD_CORE_V volt(15)=0.72000000V
      DDR_VDD2_V volt(17)=1.11100000V
         EXT5V_V volt(24)=5.12334000V
          BATT_V volt(25)=0.00000000V
"""
PMIC_WATTS = 0.00390372 * 3.714624 + 0.054663 * 3.31096 + 0.8337867 * 0.72 + 0.03123 * 1.111


def fake_vcgencmd(tmp_path: Path, throttled: str = "throttled=0x0") -> Path:
    script = tmp_path / "vcgencmd"
    (tmp_path / "pmic.txt").write_text(PMIC)
    script.write_text(
        "#!/bin/sh\n"
        f'case "$1" in\n  pmic_read_adc) cat "{tmp_path / "pmic.txt"}" ;;\n'
        f'  get_throttled) echo "{throttled}" ;;\n  *) echo "bad command" >&2; exit 2 ;;\nesac\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_pmic_rails_pair_current_and_voltage_by_name() -> None:
    rails = parse_pmic_adc(PMIC)
    assert set(rails) == {"3V7_WL_SW", "3V3_SYS", "VDD_CORE", "DDR_VDD2"}  # EXT5V/BATT: voltage only
    assert rails["VDD_CORE"] == (0.8337867, 0.72)


def test_vcgencmd_pmic_source_sums_current_times_voltage(tmp_path: Path) -> None:
    script = fake_vcgencmd(tmp_path)
    result = probe(tmp_path / "empty", profile=load_profile("raspberry-pi-5"), vcgencmd=str(script))
    assert result.source is not None and result.source.name == "vcgencmd-pmic"
    assert result.source.read(0.0).watts == pytest.approx(PMIC_WATTS)  # 0.8141 W
    assert "excludes PMIC losses" in result.source.detail
    missing = probe(tmp_path / "empty", "vcgencmd-pmic", vcgencmd=str(tmp_path / "nope"))
    assert missing.source is None and "not found" in missing.tried[0]["reason"]


RAPL = "/sys/devices/virtual/powercap/intel-rapl/intel-rapl:0"
MAX_UJ = 262143328850


def rapl_tree(root: Path, energy_uj: int, psys: bool = False) -> None:
    write_tree(root, {
        f"{RAPL}/name": "package-0", f"{RAPL}/energy_uj": energy_uj, f"{RAPL}/max_energy_range_uj": MAX_UJ,
        f"{RAPL}/intel-rapl:0:0/name": "core", f"{RAPL}/intel-rapl:0:0/energy_uj": 5,
        f"{RAPL}/intel-rapl:0:0/max_energy_range_uj": MAX_UJ,
    })
    link(root, "/sys/class/powercap/intel-rapl:0", RAPL)
    link(root, "/sys/class/powercap/intel-rapl:0:0", f"{RAPL}/intel-rapl:0:0")
    if psys:
        write_tree(root, {"/sys/devices/virtual/powercap/intel-rapl/intel-rapl:1/name": "psys",
                          "/sys/devices/virtual/powercap/intel-rapl/intel-rapl:1/energy_uj": 1000,
                          "/sys/devices/virtual/powercap/intel-rapl/intel-rapl:1/max_energy_range_uj": MAX_UJ})
        link(root, "/sys/class/powercap/intel-rapl:1", "/sys/devices/virtual/powercap/intel-rapl/intel-rapl:1")


def test_rapl_counter_unwraps_at_max_energy_range(tmp_path: Path) -> None:
    rapl_tree(tmp_path, MAX_UJ - 328850)
    source = probe(tmp_path, "rapl").source
    assert source is not None and source.cumulative and source.read(0.0).joules == 0.0
    energy = tmp_path / RAPL.lstrip("/") / "energy_uj"
    energy.write_text("1000000\n")  # wrapped: 328850 µJ to the top, then 1 J more
    assert source.read(1.0).joules == pytest.approx(1.32885)
    energy.write_text("3000000\n")
    assert source.read(2.0).joules == pytest.approx(3.32885)
    assert source.wraps == 1
    assert "package-0" in source.detail and "core" not in source.detail  # sub-zones are inside the package


def test_rapl_uses_psys_alone_when_present(tmp_path: Path) -> None:
    rapl_tree(tmp_path, 10, psys=True)
    source = probe(tmp_path, "rapl").source
    assert source is not None and "psys" in source.detail and "package-0" not in source.detail


def test_rapl_unreadable_counter_is_a_reason_not_a_crash(tmp_path: Path) -> None:
    rapl_tree(tmp_path, 10)
    energy = tmp_path / RAPL.lstrip("/") / "energy_uj"
    energy.unlink()
    energy.mkdir()  # reading it now fails with EISDIR, as an unreadable file would
    result = probe(tmp_path, "rapl")
    assert result.source is None and "cannot read RAPL" in result.tried[0]["reason"]


def test_hwmon_prefers_the_energy_counter_and_refuses_to_guess_between_channels(tmp_path: Path) -> None:
    dev = "/sys/devices/platform/power_meter/hwmon/hwmon3"
    write_tree(tmp_path, {f"{dev}/name": "power_meter", f"{dev}/power1_input": 7_250_000,
                          f"{dev}/energy1_input": 2_000_000})
    link(tmp_path, "/sys/class/hwmon/hwmon3", dev)
    source = probe(tmp_path, "hwmon").source
    assert source is not None and source.cumulative and "energy1_input" in source.detail
    assert source.read(0.0).joules == 0.0
    (tmp_path / dev.lstrip("/") / "energy1_input").write_text("2500000\n")
    assert source.read(1.0).joules == pytest.approx(0.5)
    # Only power: µW.
    (tmp_path / dev.lstrip("/") / "energy1_input").unlink()
    assert probe(tmp_path, "hwmon").source.read(0.0).watts == pytest.approx(7.25)
    # A second device: ambiguous unless named.
    other = "/sys/devices/platform/amdgpu/hwmon/hwmon5"
    write_tree(tmp_path, {f"{other}/name": "amdgpu", f"{other}/power1_average": 15_000_000,
                          f"{other}/power1_label": "PPT"})
    link(tmp_path, "/sys/class/hwmon/hwmon5", other)
    result = probe(tmp_path, "hwmon")
    assert result.source is None
    assert "power_meter/power1" in result.tried[0]["reason"] and "amdgpu/PPT" in result.tried[0]["reason"]
    assert "--rail" in result.tried[0]["reason"]
    assert probe(tmp_path, "hwmon", rail="amdgpu/PPT").source.read(0.0).watts == pytest.approx(15.0)


def test_auto_probes_in_order_and_records_every_source(tmp_path: Path) -> None:
    rapl_tree(tmp_path, 10)
    write_tree(tmp_path, {"/sys/class/hwmon/hwmon0/name": "meter", "/sys/class/hwmon/hwmon0/power1_input": 1})
    result = probe(tmp_path, profile=load_profile("host"), activity=ActivityMeter())
    assert result.source is not None and result.source.name == "rapl"
    status = {t["name"]: t["status"] for t in result.tried}
    assert [t["name"] for t in result.tried] == list(SOURCE_ORDER)
    assert status == {"jetson-ina3221": "unavailable", "jetson-ina238": "unavailable", "vcgencmd-pmic": "unavailable",
                      "rapl": "used", "hwmon": "not tried", "external": "skipped", "estimate": "not tried"}


def test_estimate_is_marked_and_needs_the_profile_to_allow_it(tmp_path: Path) -> None:
    host = load_profile("host")
    activity = ActivityMeter()
    result = probe(tmp_path, profile=host, activity=activity, threads=2)
    source = result.source
    assert source is not None and source.name == "estimate" and source.estimated
    assert source.read(0.0).joules == 0.0
    activity.begin(0.0)
    activity.end(1.0)  # busy one second of two; 2 threads of 4 cores: half the active power
    assert source.read(2.0).joules == pytest.approx(10.0 * 2 + (65.0 - 10.0) * 0.5 * 1.0)
    no_estimate = dataclasses.replace(host, power=dataclasses.replace(host.power, sources=("rapl", "hwmon")))
    result = probe(tmp_path, profile=no_estimate, activity=activity)
    assert result.source is None
    assert result.reason is not None and result.reason.startswith("no power source: ")
    assert 'does not list "estimate"' in result.reason and "rapl: no RAPL zones" in result.reason


def test_auto_order_is_the_profiles_power_source_vocabulary() -> None:
    from edgeserve.device_profiles import POWER_SOURCES

    assert SOURCE_ORDER == POWER_SOURCES


def test_unknown_source_name_suggests_the_close_one(tmp_path: Path) -> None:
    with pytest.raises(InputError, match='unknown power source "rapel". Did you mean "rapl"?'):
        probe(tmp_path, "rapel")


def test_source_that_breaks_after_probing_raises_sensor_error(tmp_path: Path) -> None:
    orin_nano_tree(tmp_path)
    source = probe(tmp_path, "jetson-ina3221").source
    (tmp_path / ORIN_DEV.lstrip("/") / "curr1_input").write_text("N/A\n")
    with pytest.raises(SensorError, match="curr1_input: expected a number"):
        source.read(0.0)


def test_rapl_counter_reset_is_a_step_down_not_a_wrap(tmp_path: Path) -> None:
    """A counter that restarts low (a reset) was added a whole range: 262 kJ of false energy."""
    rapl_tree(tmp_path, 50_000_000)
    source = probe(tmp_path, "rapl").source
    assert source is not None and source.read(0.0).joules == 0.0
    energy = tmp_path / RAPL.lstrip("/") / "energy_uj"
    energy.write_text("52000000\n")
    assert source.read(1.0).joules == pytest.approx(2.0)
    energy.write_text("1000000\n")  # far from the top of the range: reset, not wrapped
    assert source.read(2.0).joules == pytest.approx(-49.0)  # goes down; energy.summarize says "ran backwards"
    assert source.wraps == 0
