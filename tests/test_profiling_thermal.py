"""Thermal zones, CPU clocks, Pi throttle flags, the sampler thread and the first-order model."""

from __future__ import annotations

import math
import stat
import threading
from pathlib import Path

import numpy as np
import pytest

from edgeserve.device_profiles import load_profile
from edgeserve.profiling.clock import SimClock
from edgeserve.profiling.power import PowerReading
from edgeserve.profiling.sampler import Sampler
from edgeserve.profiling.sysfs import SensorError
from edgeserve.profiling.thermal import ThermalReader, decode_throttled, parse_throttled
from edgeserve.profiling.thermal_model import (
    LoadModel,
    ThermalFitError,
    ThermalModel,
    fit_first_order,
    sustainable_rate,
)


def write_tree(root: Path, files: dict[str, object]) -> None:
    for rel, content in files.items():
        path = root / rel.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{content}\n")


def pi5_tree(root: Path) -> None:
    """Raspberry Pi 5: one cpu-thermal zone; plus an rp1_adc zone; four cpufreq policies."""
    files: dict[str, object] = {
        "/sys/class/thermal/thermal_zone0/type": "cpu-thermal",
        "/sys/class/thermal/thermal_zone0/temp": 51350,
        "/sys/class/thermal/thermal_zone1/type": "rp1_adc",
        "/sys/class/thermal/thermal_zone1/temp": 47000,
    }
    for cpu, khz in enumerate((2400000, 2400000, 1500000, 1500000)):
        files[f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq"] = khz
        files[f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/cpuinfo_max_freq"] = 2400000
    write_tree(root, files)


def test_reader_uses_the_profile_zones_in_millidegrees(tmp_path: Path) -> None:
    pi5_tree(tmp_path)
    reader = ThermalReader(tmp_path, load_profile("raspberry-pi-5"), vcgencmd=None)
    reading = reader.read()
    assert reading.temp_c == pytest.approx(51.35) and list(reading.zones) == ["cpu-thermal"]
    assert reading.freq_khz == pytest.approx((2 * 2400000 + 2 * 1500000) / 4)
    assert reader.max_freq_khz == 2400000 and reading.errors == ()


def test_jetson_orin_zones_by_profile_name_hottest_wins(tmp_path: Path) -> None:
    zones = {"cpu-thermal": 48500, "gpu-thermal": 47200, "cv0-thermal": 60000, "soc0-thermal": 49100,
             "tj-thermal": 49900}
    files: dict[str, object] = {}
    for n, (ztype, milli) in enumerate(zones.items()):
        files[f"/sys/class/thermal/thermal_zone{n}/type"] = ztype
        files[f"/sys/class/thermal/thermal_zone{n}/temp"] = milli
    write_tree(tmp_path, files)
    reader = ThermalReader(tmp_path, load_profile("jetson-orin-nano"), vcgencmd=None)
    # The profile's zones, in its order; cv0-thermal is not one of them.
    assert [z.type for z in reader.chosen] == ["tj-thermal", "cpu-thermal", "gpu-thermal", "soc0-thermal"]
    assert reader.read().temp_c == pytest.approx(49.9)


def test_reader_falls_back_to_every_zone_and_says_so(tmp_path: Path) -> None:
    pi5_tree(tmp_path)
    reader = ThermalReader(tmp_path, load_profile("host"), vcgencmd=None)
    assert [z.type for z in reader.chosen] == ["cpu-thermal", "rp1_adc"]
    assert any("none of the zones x86_pkg_temp, acpitz exist" in n for n in reader.notes)
    assert reader.read().temp_c == pytest.approx(51.35)  # the hottest


def test_unreadable_zone_is_dropped_and_a_zone_failing_later_gives_none(tmp_path: Path) -> None:
    pi5_tree(tmp_path)
    bad = tmp_path / "sys/class/thermal/thermal_zone1/temp"
    bad.unlink()
    bad.mkdir()  # e.g. a Wi-Fi zone that returns EIO/ENODATA with the radio off
    reader = ThermalReader(tmp_path, None, vcgencmd=None)
    assert [z.type for z in reader.chosen] == ["cpu-thermal"]
    assert any("rp1_adc unreadable" in n for n in reader.notes)
    (tmp_path / "sys/class/thermal/thermal_zone0/temp").write_text("garbage\n")
    reading = reader.read()
    assert reading.temp_c is None and reading.zones == {"cpu-thermal": None}
    assert "expected a number" in reading.errors[0]


def test_no_thermal_zones_is_a_reason(tmp_path: Path) -> None:
    reader = ThermalReader(tmp_path, load_profile("host"), vcgencmd=None)
    assert not reader.available
    assert reader.unavailable_reason == "no thermal zones (/sys/class/thermal/thermal_zone*/type missing)"
    assert reader.read().temp_c is None


def test_get_throttled_bits(tmp_path: Path) -> None:
    assert parse_throttled("throttled=0x50005\n") == 0x50005
    assert decode_throttled(0x50005) == [
        "under-voltage detected", "currently throttled", "under-voltage has occurred", "throttling has occurred"]
    with pytest.raises(SensorError):
        parse_throttled("error=1")
    script = tmp_path / "vcgencmd"
    script.write_text('#!/bin/sh\n[ "$1" = get_throttled ] && echo throttled=0x80008\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    pi5_tree(tmp_path)
    reader = ThermalReader(tmp_path, load_profile("raspberry-pi-5"), vcgencmd=str(script))
    assert reader.has_throttle_flags and reader.read().throttled == 0x80008


class _FlakyPower:
    """A power source that fails every third read."""

    name = "hwmon"
    estimated = False
    cumulative = False
    live = True
    detail = "test"

    def __init__(self) -> None:
        self.calls = 0

    def read(self, now: float) -> PowerReading:
        self.calls += 1
        if self.calls % 3 == 0:
            raise SensorError("power1_input: Input/output error")
        return PowerReading(watts=2.0)


def test_sampler_thread_samples_at_its_rate_survives_failures_and_measures_itself(tmp_path: Path) -> None:
    pi5_tree(tmp_path)
    clock = SimClock()
    reader = ThermalReader(tmp_path, load_profile("raspberry-pi-5"), vcgencmd=None)
    sampler = Sampler(_FlakyPower(), reader, rate_hz=10.0, clock=clock)
    with sampler:
        clock.sleep(5.0)  # virtual seconds: the sampler thread runs 50 times meanwhile
        sampler.mark("half", sample=True)
        clock.sleep(5.0)
    trace = sampler.trace()
    assert 100 <= len(trace) <= 103  # 10 Hz for 10 s, plus the marked and final samples
    assert np.allclose(np.diff(trace.t)[:40], 0.1)
    assert trace.marks["half"] == pytest.approx(5.0) and 5.0 in trace.t
    assert np.isnan(trace.watts).sum() == len(trace) // 3
    assert np.all(trace.temp_c == pytest.approx(51.35))
    overhead = sampler.overhead()
    assert overhead["samples"] == len(trace) and overhead["errors"]["power"] == len(trace) // 3
    assert overhead["last_errors"]["power"] == "power1_input: Input/output error"
    assert overhead["achieved_rate_hz"] == pytest.approx(10.0, rel=0.05)
    assert overhead["mean_read_ms"] > 0 and 0 < overhead["cpu_fraction"] < 1
    assert sampler.latest_temp() == pytest.approx(51.35) and sampler() == sampler.latest_temp()


def test_simclock_holds_time_while_a_thread_works() -> None:
    clock = SimClock()
    seen: list[float] = []
    stop = threading.Event()

    def ticker() -> None:
        while not clock.wait(stop, 1.0):
            seen.append(clock.now())

    thread = threading.Thread(target=ticker)
    thread.start()
    clock.sleep(3.5)
    stop.set()
    thread.join()
    assert seen == [1.0, 2.0, 3.0] and clock.now() == 3.5


# --------------------------------------------------------------------------- thermal model

def _trace(model: ThermalModel, noise: float = 0.0, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """60 s idle at 1 W then 240 s at 5 W, sampled at 2 Hz; 1 °C quantisation optional."""
    t = np.arange(0.0, 300.0, 0.5)
    power = np.where(t[:-1] < 60.0, 1.0, 5.0)
    temp = model.simulate(t, power, model.steady_state_c(1.0))
    temp = temp + np.random.default_rng(seed).normal(0.0, noise, t.size)
    return t, temp, power


def test_fit_recovers_the_plant_from_an_idle_then_load_trace() -> None:
    truth = ThermalModel(t_amb_c=25.0, r=8.0, tau_s=40.0)
    t, temp, power = _trace(truth, noise=0.2)
    fit = fit_first_order(t, temp, power)
    assert fit.t_amb_c == pytest.approx(25.0, abs=0.5)
    assert fit.r == pytest.approx(8.0, rel=0.03)
    assert fit.tau_s == pytest.approx(40.0, rel=0.05)
    assert fit.rmse_c == pytest.approx(0.2, rel=0.2) and not fit.extrapolated
    assert fit.c == pytest.approx(fit.tau_s / fit.r)
    # The same trace driven by the inference rate (no power meter): T_ss = a + k·f.
    rate = (power - 1.0) / 0.2  # 20 Hz at 0.2 J per inference above idle
    by_rate = fit_first_order(t, temp, rate, input="rate_hz")
    assert by_rate.t_amb_c == pytest.approx(25.0 + 8.0 * 1.0, abs=0.5)  # ambient plus idle heat
    assert by_rate.r == pytest.approx(8.0 * 0.2, rel=0.03)


def test_fit_refuses_traces_that_cannot_identify_it() -> None:
    truth = ThermalModel(25.0, 8.0, 40.0)
    t, temp, power = _trace(truth)
    with pytest.raises(ThermalFitError, match="input never changed"):
        fit_first_order(t, temp, np.full(power.size, 5.0))
    with pytest.raises(ThermalFitError, match="changed by only"):
        fit_first_order(t, np.full(t.size, 40.0), power)
    with pytest.raises(ThermalFitError, match="not positive"):
        fit_first_order(t, 80.0 - temp, power)  # cools under load: something else heats it
    with pytest.raises(ThermalFitError, match="at least 8"):
        fit_first_order(t[:5], temp[:5], power[:4])


def test_short_trace_is_flagged_as_an_extrapolation() -> None:
    truth = ThermalModel(25.0, 8.0, 400.0)
    t, temp, power = _trace(truth, noise=0.05)
    assert fit_first_order(t, temp, power).extrapolated


def test_steady_state_and_sustainable_rate_by_hand() -> None:
    model = ThermalModel(t_amb_c=25.0, r=8.0, tau_s=20.0)
    load = LoadModel(idle_power_w=1.0, energy_per_inference_j=0.2, max_rate_hz=20.0)
    # T_ss(10 Hz) = 25 + 8·(1 + 0.2·10) = 49 °C.
    assert model.steady_state_c(load.power_at(10.0)) == pytest.approx(49.0)
    assert model.predict(33.0, 3.0, 20.0) == pytest.approx(49.0 + (33.0 - 49.0) * math.exp(-1.0))
    # Budget 55 °C: (55 − 25 − 8·1) / (8·0.2) = 13.75 Hz.
    out = sustainable_rate(model, load, 55.0)
    assert out["rate_hz"] == pytest.approx(13.75) and out["limited_by"] == "thermal"
    # A 3 W budget: (3 − 1) / 0.2 = 10 Hz binds first.
    out = sustainable_rate(model, load, 55.0, power_budget_w=3.0)
    assert out["rate_hz"] == pytest.approx(10.0) and out["limited_by"] == "power"
    # A generous budget: the device's own speed is the limit.
    assert sustainable_rate(model, load, 90.0)["limited_by"] == "throughput"
    assert sustainable_rate(None, load, 55.0)["reason"] == "no thermal model"


@pytest.mark.parametrize("millidegrees", [10**21, -273150, 250000])
def test_impossible_temperatures_are_not_readings(tmp_path: Path, millidegrees: int) -> None:
    pi5_tree(tmp_path)
    write_tree(tmp_path, {"/sys/class/thermal/thermal_zone0/temp": millidegrees})
    reading = ThermalReader(tmp_path, load_profile("raspberry-pi-5"), vcgencmd=None).read()
    assert reading.temp_c is None and reading.zones == {"cpu-thermal": None}
    assert len(reading.errors) == 1 and "outside -60..200 °C" in reading.errors[0]
