"""ThermalGovernor against a simulated RC plant.

The plant tests run real threads — a plant thread rewriting a sysfs tree, the sampler
thread reading it, the inference loop — on a :class:`SimClock`, whose virtual time only
moves when every thread waits: the results do not depend on how loaded this machine is,
and two simulated minutes take a second or two.

Plant: T_amb 25 °C, R 8 °C/W, τ 20 s, 1 W idle, a 0.5 °C sensor step. Workload: 20 ms per
inference at 10 W above idle, i.e. 0.2 J per inference; back to back (50 Hz) it would settle
at 25 + 8·11 = 113 °C. Budget 55 °C: the highest sustainable rate is
(55 − 25 − 8·1) / (8·0.2) = 13.75 Hz.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgeserve.errors import InputError
from edgeserve.device_profiles import load_profile
from edgeserve.profiling.clock import ManualClock, SimClock
from edgeserve.profiling.governor import ThermalGovernor
from edgeserve.profiling.plant import PlantParams, SimulatedPlant, SimulatedSession
from edgeserve.profiling.run import measure
from edgeserve.profiling.sampler import Sampler
from edgeserve.profiling.sysfs import SensorError
from edgeserve.profiling.thermal import ThermalReader
from edgeserve.profiling.thermal_model import LoadModel, ThermalModel

PARAMS = PlantParams(t_amb_c=25.0, r_c_per_w=8.0, tau_s=20.0, idle_w=1.0, resolution_c=0.5)
BUDGET = 55.0
LATENCY, ACTIVE_W = 0.02, 10.0
ENERGY = LATENCY * ACTIVE_W
SUSTAINABLE = PARAMS.sustainable_rate_hz(BUDGET, ENERGY)


def test_the_plant_numbers() -> None:
    assert ENERGY == pytest.approx(0.2) and SUSTAINABLE == pytest.approx(13.75)


def loop(step: Any, clock: Any, seconds: float, frame: Any = None) -> float:
    """Call ``step(frame)`` back to back for ``seconds`` of clock time; returns the start time."""
    t0 = clock.now()
    while clock.now() - t0 < seconds:
        step(frame)
    return t0


def governed_run(root: Path, **governor_kwargs: Any) -> tuple[ThermalGovernor, SimulatedPlant, float, float]:
    clock = SimClock()
    with SimulatedPlant(root, PARAMS, clock, update_hz=10) as plant:
        session = SimulatedSession(plant, latency_s=LATENCY, active_w=ACTIVE_W, clock=clock)
        reader = ThermalReader(root, load_profile("raspberry-pi-5"), vcgencmd=None)
        with Sampler(None, reader, rate_hz=4.0, clock=clock) as sampler:
            gov = ThermalGovernor(session, BUDGET, "pace", temperature=sampler, clock=clock,
                                  control_period_s=0.5, **governor_kwargs)
            t0 = loop(gov.run, clock, 120.0, session.example_input())
            t1 = clock.now()
    return gov, plant, t0, t1


def test_without_a_governor_the_budget_is_exceeded(tmp_path: Path) -> None:
    clock = SimClock()
    with SimulatedPlant(tmp_path, PARAMS, clock, update_hz=10) as plant:
        session = SimulatedSession(plant, latency_s=LATENCY, active_w=ACTIVE_W, clock=clock)
        loop(session.run, clock, 30.0)
    assert plant.max_temp_c > BUDGET + 10  # heading for 113 °C


def test_governor_with_the_profiled_model_holds_the_budget_at_90_percent_of_the_sustainable_rate(
        tmp_path: Path) -> None:
    # 1. Profile the plant: idle baseline, then back to back; power from its hwmon counter.
    clock = SimClock()
    with SimulatedPlant(tmp_path / "profiled", PARAMS, clock, update_hz=10) as plant:
        session = SimulatedSession(plant, latency_s=LATENCY, active_w=ACTIVE_W, clock=clock)
        result = measure(session, load_profile("raspberry-pi-5"), duration_s=30.0, idle_s=10.0,
                         sample_rate_hz=5.0, sysfs_root=tmp_path / "profiled", vcgencmd="/nonexistent",
                         thermal_budget_c=BUDGET, clock=clock)
    s = result.summary
    assert s["power_source"] == "hwmon" and not s["estimated"]
    assert s["energy_mj_per_inference"]["above_idle"] == pytest.approx(200.0, rel=0.03)
    assert s["idle_power_w"] == pytest.approx(1.0, rel=0.03)
    assert result.model is not None and result.model.tau_s == pytest.approx(20.0, rel=0.1)
    assert result.model.r == pytest.approx(8.0, rel=0.05)
    assert s["sustainable_rate_hz"] == pytest.approx(SUSTAINABLE, rel=0.05)
    assert s["sustainable_rate"]["limited_by"] == "thermal"

    # 2. Govern a fresh device with that model, read back from the JSON as a user would.
    model, load = ThermalModel.from_dict(s["thermal_model"]), LoadModel.from_summary(s)
    assert (model.r, model.tau_s) == pytest.approx((result.model.r, result.model.tau_s), rel=1e-4)
    assert load.energy_per_inference_j == pytest.approx(0.2, rel=0.03)
    gov, plant, _, t1 = governed_run(tmp_path / "governed", model=model, load=load)
    rate = gov.mean_rate(t1 - 60.0, t1)
    assert plant.max_temp_c <= BUDGET
    assert rate >= 0.9 * SUSTAINABLE
    assert gov.decisions[0].action == "limit" and gov.decisions[0].reason == "predicted"
    print(f"profiled model: max {plant.max_temp_c:.2f} °C (budget {BUDGET}), last-minute rate {rate:.2f} Hz "
          f"= {rate / SUSTAINABLE:.1%} of {SUSTAINABLE} Hz")


def test_governor_learning_online_holds_the_budget_at_90_percent_of_the_sustainable_rate(tmp_path: Path) -> None:
    gov, plant, _, t1 = governed_run(tmp_path)
    rate = gov.mean_rate(t1 - 60.0, t1)
    assert plant.max_temp_c <= BUDGET
    assert rate >= 0.9 * SUSTAINABLE
    learned = [d for d in gov.decisions if d.action == "model"]
    assert learned and gov.stats()["model"]["source"] == "learned"
    k = gov.stats()["model"]["k_c_per_hz"]
    assert k == pytest.approx(PARAMS.r_c_per_w * ENERGY, rel=0.15)  # 1.6 °C per inference/s
    print(f"learned online: max {plant.max_temp_c:.2f} °C, last-minute rate {rate:.2f} Hz "
          f"= {rate / SUSTAINABLE:.1%}; {len(learned)} model updates")


def test_governor_without_any_model_still_holds_the_budget(tmp_path: Path) -> None:
    gov, plant, _, t1 = governed_run(tmp_path, learn=False)
    assert plant.max_temp_c <= BUDGET
    assert gov.stats()["model"] is None
    assert gov.mean_rate(t1 - 60.0, t1) > 0.5 * SUSTAINABLE  # slope-only control: safe, not optimal


# --------------------------------------------------------------------------- policies
# Single-threaded and deterministic: a ManualClock, the plant advanced by the session after
# every inference, the temperature read from the plant's sysfs tree.


def manual_rig(root: Path, **session_kwargs: Any) -> tuple[ManualClock, SimulatedPlant, SimulatedSession, Any]:
    clock = ManualClock()
    plant = SimulatedPlant(root, PARAMS, clock)
    session = SimulatedSession(plant, clock=clock, synchronous=True, **session_kwargs)
    reader = ThermalReader(root, None, vcgencmd=None)

    def temperature() -> float | None:
        plant.advance()
        return reader.read().temp_c

    return clock, plant, session, temperature


def test_threads_policy_steps_down_with_dwell_and_does_not_flap(tmp_path: Path) -> None:
    # 4 threads: 20 ms, 10 W above idle; n threads: 20·4/n ms at 10·n/4 W. Back to back the
    # device settles at 33 + 20·n/4·... : 4 → 113 °C, 1 → 53 °C; budget 55 °C.
    clock, plant, session, temperature = manual_rig(tmp_path, latency_s=LATENCY, active_w=ACTIVE_W, threads=4)
    gov = ThermalGovernor(session, BUDGET, "threads", temperature=temperature, clock=clock,
                          control_period_s=0.5, fit_in_background=False)
    loop(gov.run, clock, 300.0)
    assert plant.max_temp_c <= BUDGET
    assert session.thread_changes[:3] == [3, 2, 1]  # one step per dwell
    steps = [d for d in gov.decisions if d.action == "threads"]
    assert all(b.t - a.t >= gov._dwell_s() - 1e-9 for a, b in itertools.pairwise(steps))
    assert len(steps) <= 6  # hysteresis, dwell and back-off: no flapping
    assert all("hot: threads" in d.reason or "cool: threads" in d.reason for d in steps)


def test_switch_policy_moves_to_a_lighter_artifact_and_back(tmp_path: Path) -> None:
    heavy, light, lighter = tmp_path / "m_fp32.tflite", tmp_path / "m_int8.tflite", tmp_path / "m_tiny.tflite"
    for path, size in ((heavy, 4000), (light, 1000), (lighter, 300)):
        path.write_bytes(b"\0" * size)
    clock, plant, session, temperature = manual_rig(
        tmp_path / "root", latency_s=0.05, active_w=4.0, artifact=str(heavy), artifact_bytes=4000,
        alternatives=[str(lighter), str(light)])
    built: list[SimulatedSession] = []

    def factory(path: str) -> SimulatedSession:  # the int8 model: 0.08 J instead of 0.2 J per inference
        lighter_session = SimulatedSession(plant, latency_s=0.02, active_w=4.0, artifact=path,
                                           artifact_bytes=Path(path).stat().st_size, clock=clock, synchronous=True)
        built.append(lighter_session)
        return lighter_session

    gov = ThermalGovernor(session, BUDGET, "switch", temperature=temperature, clock=clock,
                          control_period_s=0.5, session_factory=factory, fit_in_background=False)

    def camera(fps: float, until: float) -> None:
        frame_t = clock.now()
        while clock.now() < until:
            frame_t += 1 / fps
            clock.sleep(max(0.0, frame_t - clock.now()))
            gov.run(None)

    # 15 frames/s: fp32 puts 15 × 0.2 J = 3 W above idle (57.4 °C steady, over budget);
    # int8 1.2 W (42.6 °C). The governor moves one step down and, knowing fp32 cannot hold
    # 15 frames/s, stays there.
    camera(15.0, 180.0)
    switches = [d for d in gov.decisions if d.action == "switch"]
    assert [d.reason for d in switches] == ["hot: m_fp32.tflite → m_int8.tflite"]  # the smallest step down
    assert built[0].artifact == str(light) and built[0].calls > 0 and gov.artifact == str(light)
    # The scene gets dark, the camera drops to 8 frames/s: fp32 would settle at 45.7 °C.
    camera(8.0, 300.0)
    switches = [d for d in gov.decisions if d.action == "switch"]
    assert switches[-1].reason == "cool: m_int8.tflite → m_fp32.tflite" and gov.artifact == str(heavy)
    assert built[0].closed  # the governor closes what it opened
    assert plant.max_temp_c <= BUDGET
    assert len(switches) == 2


def test_no_temperature_never_crashes_and_is_logged() -> None:
    clock = ManualClock()
    session = SimulatedSession(latency_s=0.01, clock=clock)
    gov = ThermalGovernor(session, 70.0, temperature=lambda: None, clock=clock, control_period_s=0.1)
    loop(gov.run, clock, 2.0)
    assert session.calls > 100 and gov.rate_limit_hz is None
    assert [d.action for d in gov.decisions] == ["sensor"]
    assert "no temperature" in gov.decisions[0].reason


def test_invalid_policies_are_refused() -> None:
    session = SimulatedSession()
    with pytest.raises(InputError, match='unknown governor policy "slow"'):
        ThermalGovernor(session, 70.0, "slow", temperature=lambda: 40.0)

    class RunOnly:
        def run(self, frame: Any) -> None: ...

    with pytest.raises(InputError, match="set_threads"):
        ThermalGovernor(RunOnly(), 70.0, "threads", temperature=lambda: 40.0)


def test_for_device_needs_a_readable_thermal_zone(tmp_path: Path) -> None:
    with pytest.raises(SensorError, match="cannot keep a thermal budget: no thermal zones"):
        ThermalGovernor.for_device(SimulatedSession(), 70.0, sysfs_root=tmp_path)
    plant = SimulatedPlant(tmp_path, PARAMS)
    with ThermalGovernor.for_device(SimulatedSession(), 70.0, sysfs_root=tmp_path, rate_hz=50.0) as gov:
        gov.run(None)
        assert gov._owned_sampler is not None
    assert gov._owned_sampler is None and np.isfinite(plant.temp_c)
