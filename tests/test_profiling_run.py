"""profile_run / measure end to end: a simulated device (sysfs tree + RC plant), no hardware.

Threads are real (plant, sampler, a RAPL counter writer); time is a SimClock, so nothing here
depends on the machine's speed. The plant: T_amb 25 °C, R 8 °C/W, τ 20 s, 1 W idle; the
session: 20 ms per inference at 10 W above idle = 200 mJ per inference above idle.
"""

from __future__ import annotations

import dataclasses
import stat
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgeserve.device_profiles import load_profile
from edgeserve.profiling.clock import SYSTEM_CLOCK, SimClock
from edgeserve.profiling.plant import PlantParams, SimulatedPlant, SimulatedSession
from edgeserve.profiling.run import measure

PARAMS = PlantParams(t_amb_c=25.0, r_c_per_w=8.0, tau_s=20.0, idle_w=1.0, resolution_c=0.1)
PI5 = load_profile("raspberry-pi-5")
NO_VCGENCMD = "/nonexistent/vcgencmd"


def write_tree(root: Path, files: dict[str, object]) -> None:
    for rel, content in files.items():
        path = root / rel.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{content}\n")


RAPL = "sys/class/powercap/intel-rapl:0"
MAX_UJ = 20_000_000  # a 20 J counter range: it wraps every ~2 s under load


def test_rapl_counter_wrapping_during_the_run(tmp_path: Path) -> None:
    clock = SimClock()
    write_tree(tmp_path, {f"{RAPL}/name": "package-0", f"{RAPL}/energy_uj": 7_000_000,
                          f"{RAPL}/max_energy_range_uj": MAX_UJ})
    stop = threading.Event()

    def rapl_counter() -> None:  # the CPU's energy counter: the plant's energy, modulo the range
        while not clock.wait(stop, 0.05):
            uj = (7_000_000 + int(plant.energy_j * 1e6)) % MAX_UJ
            tmp = tmp_path / RAPL / ".energy_uj"
            tmp.write_text(f"{uj}\n")
            tmp.replace(tmp_path / RAPL / "energy_uj")

    with SimulatedPlant(tmp_path, PARAMS, clock, update_hz=20) as plant:
        writer = threading.Thread(target=rapl_counter)
        clock.register(writer)
        writer.start()
        session = SimulatedSession(plant, latency_s=0.02, active_w=10.0, clock=clock)
        result = measure(session, PI5, duration_s=20.0, idle_s=10.0, sample_rate_hz=5.0, power_source="rapl",
                         sysfs_root=tmp_path, vcgencmd=NO_VCGENCMD, clock=clock)
        stop.set()
        writer.join()
    s = result.summary
    assert s["power_source"] == "rapl" and s["power_counter_wraps"] >= 8  # ~230 J through a 20 J range
    assert s["idle_power_w"] == pytest.approx(1.0, rel=0.01)
    assert s["avg_power_w"] == pytest.approx(1.0 + 10.0 * s["rate_hz"] * 0.02, rel=0.02)
    assert s["energy_mj_per_inference"]["above_idle"] == pytest.approx(200.0, rel=0.03)
    assert s["inferences_per_wh"] == pytest.approx(3600 / (s["energy_mj_per_inference"]["total"] / 1000), rel=1e-3)


def test_plant_profile_fits_the_model_and_sees_throttling_and_latency_drift(tmp_path: Path) -> None:
    # 50 ms at 4 W above idle: 0.2 J per inference, 5 W back to back (65 °C steady). The
    # clock halves at 60 °C (reached after ~37 s) until 50 °C: inferences then take 100 ms.
    clock = SimClock()
    throttling = dataclasses.replace(PARAMS, throttle_c=60.0, throttle_hysteresis_c=10.0)
    with SimulatedPlant(tmp_path, throttling, clock, update_hz=10) as plant:
        session = SimulatedSession(plant, latency_s=0.05, active_w=4.0, clock=clock)
        result = measure(session, PI5, duration_s=80.0, idle_s=20.0, sample_rate_hz=4.0, sysfs_root=tmp_path,
                         vcgencmd=NO_VCGENCMD, thermal_budget_c=55.0, at_rate_hz=10.0, clock=clock)
    s = result.summary
    assert s["power_source"] == "hwmon" and s["estimated"] is False
    temp = s["temp_c"]
    assert temp["start"] == pytest.approx(33.0, abs=0.3) and temp["idle"] == pytest.approx(33.0, abs=0.3)
    assert temp["max"] == pytest.approx(plant.max_temp_c, abs=0.2) and 60.0 <= temp["max"] < 61.0
    # The clock halved once: cpufreq sees it; the profile's throttle temperature (80 °C) is not reached.
    assert s["throttled"]["by"] == {"cpufreq": 1, "temperature": 0} and s["throttled"]["any"] is True
    # Throttled inferences take twice as long: the last 40 s against the first 40 s.
    drift = s["latency_ms"]["drift"]
    assert drift["window_s"] == pytest.approx(40.0, abs=0.1)
    assert drift["first_p50"] == pytest.approx(50.0, rel=0.01) and drift["last_p50"] == pytest.approx(100.0, rel=0.01)
    assert drift["percent"] == pytest.approx(100.0, abs=2.0)
    # Energy: 0.2 J per inference above idle, throttled or not.
    assert s["energy_mj_per_inference"]["above_idle"] == pytest.approx(200.0, rel=0.03)
    assert s["idle_power_w"] == pytest.approx(1.0, rel=0.01)
    # The model: fitted on measured power, it recovers the plant.
    model = s["thermal_model"]
    assert model["input"] == "power_w" and model["estimated"] is False
    assert model["t_amb_c"] == pytest.approx(25.0, abs=1.0)
    assert model["r_c_per_w"] == pytest.approx(8.0, rel=0.05) and model["tau_s"] == pytest.approx(20.0, rel=0.1)
    # At 10 Hz: 25 + 8·(1 + 0.2·10) = 49 °C. Under 55 °C: (55 − 25 − 8) / (8·0.2) = 13.75 Hz.
    assert s["steady_state_c"] == {"rate_hz": 10.0, "temp_c": pytest.approx(49.0, abs=1.0)}
    assert s["sustainable_rate_hz"] == pytest.approx(13.75, rel=0.05)
    assert s["sampler"]["errors"] == {"power": 0, "thermal": 0}


def test_no_power_source_gives_null_energy_with_the_reasons_never_zero(tmp_path: Path) -> None:
    write_tree(tmp_path, {"sys/class/thermal/thermal_zone0/type": "cpu-thermal",
                          "sys/class/thermal/thermal_zone0/temp": 45000})
    no_estimate = dataclasses.replace(PI5, power=dataclasses.replace(PI5.power, sources=("vcgencmd-pmic",)))
    clock = SimClock()
    session = SimulatedSession(latency_s=0.01, clock=clock)
    s = measure(session, no_estimate, duration_s=5.0, idle_s=1.0, sysfs_root=tmp_path, vcgencmd=NO_VCGENCMD,
                clock=clock).summary
    assert s["power_source"] is None and s["estimated"] is False
    assert s["energy_mj_per_inference"] is None and s["idle_power_w"] is None and s["inferences_per_wh"] is None
    assert s["energy_reason"].startswith("no power source: ")
    assert "rapl: no RAPL zones" in s["energy_reason"] and "vcgencmd-pmic:" in s["energy_reason"]
    assert s["temp_c"]["max"] == 45.0 and s["inferences"] > 0
    # Without power the thermal model is driven by the inference rate; a flat trace cannot identify it.
    assert s["thermal_model"] is None and "changed by only" in s["thermal_model_reason"]
    assert s["sustainable_rate_hz"] is None and "no thermal model" in s["sustainable_rate"]["reason"]


class _BreaksSensor(SimulatedSession):
    """Unplugs the power monitor (its file becomes garbage) after the fifth inference."""

    def __init__(self, power_file: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.power_file = power_file

    def run(self, frame: Any) -> Any:
        if self.calls == 5:
            self.power_file.write_text("N/A\n")
        return super().run(frame)


def test_a_sensor_failing_mid_run_never_crashes_it(tmp_path: Path) -> None:
    write_tree(tmp_path, {"sys/class/hwmon/hwmon0/name": "meter", "sys/class/hwmon/hwmon0/power1_input": 3_000_000,
                          "sys/class/thermal/thermal_zone0/type": "cpu-thermal",
                          "sys/class/thermal/thermal_zone0/temp": 41000})
    clock = SimClock()
    session = _BreaksSensor(tmp_path / "sys/class/hwmon/hwmon0/power1_input", latency_s=0.05, clock=clock)
    s = measure(session, PI5, duration_s=10.0, idle_s=2.0, sample_rate_hz=10.0, sysfs_root=tmp_path,
                vcgencmd=NO_VCGENCMD, clock=clock).summary
    assert s["power_source"] == "hwmon" and s["inferences"] == pytest.approx(200, abs=2)
    assert s["energy_mj_per_inference"] is None
    assert s["energy_reason"].startswith("power readings cover ") and "of the run (need 90%)" in s["energy_reason"]
    assert s["sampler"]["errors"]["power"] > 90
    assert "expected a number" in s["sampler"]["last_errors"]["power"]
    assert s["temp_c"]["max"] == 41.0


def test_external_meter_log_is_aligned_by_wall_clock_timestamps(tmp_path: Path) -> None:
    # A meter that logs a ramp, 2 W + 1 W/s, every 50 ms, from 5 s before now to 30 s after;
    # its clock runs 100 s behind (fixed with meter_offset_s).
    t0 = time.time()
    stamps = np.arange(t0 - 5.0, t0 + 30.0, 0.05)
    log = tmp_path / "meter.csv"
    log.write_text("timestamp,watts\n" + "".join(f"{t - 100.0:.3f},{2.0 + (t - t0):.4f}\n" for t in stamps))
    session = SimulatedSession(latency_s=0.005)
    result = measure(session, PI5, duration_s=1.0, idle_s=0.5, sample_rate_hz=20.0, power_source="external",
                     meter_log=log, meter_offset_s=100.0, sysfs_root=tmp_path, vcgencmd=NO_VCGENCMD,
                     clock=SYSTEM_CLOCK)
    s, w = result.summary, result.trace.wall_marks
    assert s["power_source"] == "external" and "offset +100 s" in s["power_source_detail"]
    ramp = lambda a, b: 2.0 + ((a + b) / 2 - t0)
    assert s["idle_power_w"] == pytest.approx(ramp(w["idle"], w["run"]), abs=0.02)
    assert s["avg_power_w"] == pytest.approx(ramp(w["run"], w["end"]), abs=0.02)
    # Without the offset the log is 100 s off: no reading falls in the run.
    off = measure(session, PI5, duration_s=0.2, idle_s=0.1, power_source="external", meter_log=log,
                  sysfs_root=tmp_path, vcgencmd=NO_VCGENCMD)
    assert off.summary["energy_mj_per_inference"] is None
    assert any("no readings between" in n for n in off.summary["notes"])


def test_pi5_pmic_and_throttle_flags_through_a_vcgencmd_script(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    calls.write_text("0\n")
    script = tmp_path / "vcgencmd"
    # PMIC: VDD_CORE at 1.5 A x 0.8 V = 1.2 W plus 3V3_SYS at 0.5 A x 3.3 V = 1.65 W.
    # get_throttled: soft temperature limit active from the 6th call on.
    script.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        "  pmic_read_adc) printf '  VDD_CORE_A current(7)=1.50000000A\\n  3V3_SYS_A current(1)=0.50000000A\\n"
        "  VDD_CORE_V volt(15)=0.80000000V\\n  3V3_SYS_V volt(9)=3.30000000V\\n' ;;\n"
        f'  get_throttled) n=$(cat "{calls}"); echo $((n+1)) > "{calls}";'
        ' if [ "$n" -ge 5 ]; then echo throttled=0x80008; else echo throttled=0x0; fi ;;\n'
        "esac\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    write_tree(tmp_path, {"sys/class/thermal/thermal_zone0/type": "cpu-thermal",
                          "sys/class/thermal/thermal_zone0/temp": 62000})
    clock = SimClock()
    s = measure(SimulatedSession(latency_s=0.05, clock=clock), PI5, duration_s=3.0, idle_s=1.0, sample_rate_hz=5.0,
                sysfs_root=tmp_path, vcgencmd=str(script), clock=clock).summary
    assert s["power_source"] == "vcgencmd-pmic" and s["avg_power_w"] == pytest.approx(2.85)
    assert s["energy_mj_per_inference"]["total"] == pytest.approx(2.85 * 50.0, rel=0.01)  # W x ms = mJ
    assert s["throttled"]["by"]["vcgencmd"] == 1 and s["throttled"]["any"] is True
    assert s["throttled"]["flags"] == ["soft temperature limit active", "soft temperature limit has occurred"]


class _CountsThenResets(SimulatedSession):
    """Adds 10 mJ to a RAPL counter per inference; at inference ``reset_at`` the counter restarts
    from a small value (a reset, not a wrap: far below the 20 J range)."""

    def __init__(self, counter: Path, reset_at: int | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.counter, self.reset_at, self.uj = counter, reset_at, 7_000_000

    def run(self, frame: Any) -> Any:
        self.uj = 1_000_000 if self.calls == self.reset_at else self.uj + 10_000
        tmp = self.counter.with_name(".energy_uj")  # replaced whole: the sampler thread never reads half a write
        tmp.write_text(f"{self.uj}\n")
        tmp.replace(self.counter)
        return super().run(frame)


def _rapl(tmp_path: Path) -> Path:
    write_tree(tmp_path, {f"{RAPL}/name": "package-0", f"{RAPL}/energy_uj": 7_000_000,
                          f"{RAPL}/max_energy_range_uj": MAX_UJ, "sys/class/thermal/thermal_zone0/type": "cpu-thermal",
                          "sys/class/thermal/thermal_zone0/temp": 45000})
    return tmp_path / RAPL / "energy_uj"


def test_a_stuck_energy_counter_is_null_with_the_reason_not_zero(tmp_path: Path) -> None:
    """The probe saw 0.0 mJ per inference, with no reason, from a counter that never moved."""
    _rapl(tmp_path)
    clock = SimClock()
    session = SimulatedSession(latency_s=0.01, clock=clock)
    s = measure(session, PI5, duration_s=5.0, idle_s=1.0, sample_rate_hz=10.0, power_source="rapl",
                sysfs_root=tmp_path, vcgencmd=NO_VCGENCMD, clock=clock).summary
    assert s["power_source"] == "rapl" and s["inferences"] > 0
    assert s["energy_mj_per_inference"] is None and s["inferences_per_wh"] is None
    assert "did not change during the run (a stuck sensor)" in s["energy_reason"]


def test_an_energy_counter_that_runs_backwards_is_null_with_the_reason(tmp_path: Path) -> None:
    counter = _rapl(tmp_path)
    clock = SimClock()
    session = _CountsThenResets(counter, reset_at=100, latency_s=0.02, clock=clock)
    s = measure(session, PI5, duration_s=5.0, idle_s=1.0, sample_rate_hz=10.0, power_source="rapl",
                sysfs_root=tmp_path, vcgencmd=NO_VCGENCMD, clock=clock).summary
    assert s["power_counter_wraps"] == 0  # a 6 J step down in a 20 J range is not a wrap
    assert s["energy_mj_per_inference"] is None
    assert "energy counter ran backwards" in s["energy_reason"]
    # The same counter without the reset: 10 mJ per inference, measured.
    counter.write_text("7000000\n")
    clock = SimClock()
    steady = _CountsThenResets(counter, reset_at=None, latency_s=0.02, clock=clock)
    s = measure(steady, PI5, duration_s=5.0, idle_s=1.0, sample_rate_hz=10.0, power_source="rapl",
                sysfs_root=tmp_path, vcgencmd=NO_VCGENCMD, clock=clock).summary
    assert s["energy_mj_per_inference"]["total"] == pytest.approx(10.0, rel=0.05)


def test_an_impossible_temperature_is_no_reading_and_says_why(tmp_path: Path) -> None:
    """The probe saw 1e21 °C reported as a temperature."""
    write_tree(tmp_path, {"sys/class/thermal/thermal_zone0/type": "cpu-thermal",
                          "sys/class/thermal/thermal_zone0/temp": 10**24})  # millidegrees: 1e21 °C
    clock = SimClock()
    s = measure(SimulatedSession(latency_s=0.01, clock=clock), PI5, duration_s=3.0, idle_s=1.0,
                sample_rate_hz=10.0, sysfs_root=tmp_path, vcgencmd=NO_VCGENCMD, clock=clock).summary
    assert s["temp_c"] is None
    assert "outside -60..200 °C, not a reading" in s["sampler"]["last_errors"]["thermal"]
    assert s["sampler"]["errors"]["thermal"] > 20
