"""Energy maths, checked against numbers worked by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgeserve.profiling.energy import (
    PowerSeries,
    inferences_per_wh,
    map_wall_to_clock,
    mj_per_inference,
    power_mw,
    summarize,
)


def test_issue_examples() -> None:
    # 2.98 mJ per inference at 45 ms per inference: 2.98 mJ / 45 ms = 0.0662 W.
    assert power_mw(2.98, 45.0) == pytest.approx(66.2, abs=0.05)
    # 10 Wh = 36 000 J; 36 000 J / 2.98 mJ = 12.08 M inferences.
    assert 10 * inferences_per_wh(2.98) == pytest.approx(12.08e6, rel=1e-3)
    assert mj_per_inference(0.596, 200) == pytest.approx(2.98)


def test_trapezoid_energy_and_its_sampling_uncertainty() -> None:
    series = PowerSeries.from_watts(np.array([0.0, 1.0, 2.0, 3.0]), np.array([1.0, 3.0, 3.0, 1.0]))
    window = series.energy(0.0, 3.0)
    assert window.joules == pytest.approx(2.0 + 3.0 + 2.0)
    # Per interval half the left/right Riemann gap: (|3-1|/2)·1 s, 0, (|1-3|/2)·1 s, in quadrature.
    assert window.uncertainty_j == pytest.approx(math.sqrt(2.0))
    assert window.coverage == 1.0 and window.watts == pytest.approx(7.0 / 3.0)
    assert series.energy(0.5, 2.5).joules == pytest.approx(2.0 * 0.5 + 3.0 + 2.0 * 0.5)


def test_counter_is_exact_on_whole_intervals_and_uncertain_only_at_cut_edges() -> None:
    # Cumulative joules of 1, 2, 3, 4 W over four 1 s intervals.
    series = PowerSeries.from_joules(np.arange(5.0), np.array([0.0, 1.0, 3.0, 6.0, 10.0]))
    exact = series.energy(1.0, 3.0)
    assert exact.joules == pytest.approx(5.0) and exact.uncertainty_j == 0.0
    cut = series.energy(0.5, 3.5)
    assert cut.joules == pytest.approx(0.5 + 2.0 + 3.0 + 2.0)
    # Cut intervals 0 and 3: half the power change around each (0.5 W) over the 0.5 s inside.
    assert cut.uncertainty_j == pytest.approx(math.hypot(0.25, 0.25))


def test_counter_gap_is_interpolated_and_reported_as_coverage() -> None:
    series = PowerSeries.from_joules(np.arange(5.0), np.array([0.0, 2.0, np.nan, 6.0, 8.0]))
    window = series.energy(0.0, 4.0)
    assert window.joules == pytest.approx(8.0)
    assert window.coverage == pytest.approx(0.5)  # the two intervals around the missing read


def test_uncertainty_shrinks_with_the_sampling_rate_and_covers_the_true_error() -> None:
    # A step from 1 W to 5 W at t = 3.37 s, between samples; truth over 0..10 s = 3.37 + 5·6.63.
    truth = 3.37 * 1.0 + 6.63 * 5.0
    results = {}
    for rate in (2.0, 20.0):
        t = np.arange(0.0, 10.0 + 1e-9, 1.0 / rate)
        w = np.where(t < 3.37, 1.0, 5.0)
        window = PowerSeries.from_watts(t, w).energy(0.0, 10.0)
        assert abs(window.joules - truth) <= window.uncertainty_j
        results[rate] = window.uncertainty_j
    assert results[20.0] == pytest.approx(results[2.0] / 10.0)  # one step: σ ∝ Δt


def test_summary_per_inference_total_above_idle_and_per_wh() -> None:
    # 10 s idle at 2 W, then 10 s at 5 W with 100 inferences, sampled at 10 Hz.
    t = np.arange(0.0, 20.0 + 1e-9, 0.1)
    joules = np.where(t <= 10.0, 2.0 * t, 20.0 + 5.0 * (t - 10.0))
    out = summarize(PowerSeries.from_joules(t, joules), (0.0, 10.0), (10.0, 20.0), 100)
    assert out["idle_power_w"] == pytest.approx(2.0)
    assert out["avg_power_w"] == pytest.approx(5.0)
    e = out["energy_mj_per_inference"]
    assert e["total"] == pytest.approx(500.0)  # 50 J / 100
    assert e["above_idle"] == pytest.approx(300.0)  # (50 J − 2 W·10 s) / 100
    assert e["uncertainty"]["total"] == pytest.approx(0.0, abs=1e-9)
    assert out["inferences_per_wh"] == 7200  # 3600 J / 0.5 J
    assert out["reason"] is None


def test_summary_is_null_with_a_reason_never_zero() -> None:
    t = np.arange(0.0, 10.0, 1.0)
    w = np.full(t.size, np.nan)
    w[:2] = 3.0  # the sensor died after two reads
    out = summarize(PowerSeries.from_watts(t, w), (0.0, 2.0), (2.0, 9.0), 50)
    assert out["energy_mj_per_inference"] is None and out["inferences_per_wh"] is None
    assert out["reason"] == "power readings cover 0% of the run (need 90%)"
    flat = PowerSeries.from_watts(t, np.full(t.size, 3.0))
    assert summarize(flat, None, (0.0, 9.0), 0)["reason"] == "no inference completed"


def test_meter_log_alignment_maps_wall_time_onto_the_clock() -> None:
    # Wall 1000..1010 s is clock 5..25 s (a clock running twice as fast, e.g. a simulation).
    mapped = map_wall_to_clock(np.array([1000.0, 1005.0, 1010.0]), (1000.0, 1010.0), (5.0, 25.0))
    assert mapped.tolist() == [5.0, 15.0, 25.0]


def test_a_stuck_or_backwards_counter_is_null_with_the_reason() -> None:
    """The probe saw 0.0 mJ per inference reported for a counter that did not move."""
    t = np.arange(21.0)
    stuck = summarize(PowerSeries.from_joules(t, np.full(21, 5.0)), None, (0.0, 20.0), 100)
    assert stuck["energy_mj_per_inference"] is None and "did not change" in stuck["reason"]
    backwards = np.concatenate([np.arange(11.0), np.arange(10.0) * 0.5])  # reset half-way
    back = summarize(PowerSeries.from_joules(t, backwards), None, (0.0, 20.0), 100)
    assert back["energy_mj_per_inference"] is None and "ran backwards" in back["reason"]
    negative = summarize(PowerSeries.from_watts(t, np.full(21, -2.0)), None, (0.0, 20.0), 100)
    assert negative["energy_mj_per_inference"] is None and "went negative" in negative["reason"]
    fine = summarize(PowerSeries.from_joules(t, t * 2.0), None, (0.0, 20.0), 100)
    assert fine["energy_mj_per_inference"]["total"] == pytest.approx(400.0)  # 40 J / 100 inferences


def test_a_counter_that_stalls_part_way_is_null_but_a_slow_one_is_measured() -> None:
    t = np.arange(41.0) * 0.5  # sampled every 0.5 s over 20 s
    stalls = np.minimum(t, 8.0) * 2.0  # 2 W, then the counter stops at 8 s: flat for 12 of 20 s
    stalled = summarize(PowerSeries.from_joules(t, stalls), None, (0.0, 20.0), 100)
    assert stalled["energy_mj_per_inference"] is None
    assert "stalled for 12 s of the 20 s run" in stalled["reason"]
    # A counter that updates once a second, sampled twice a second: flat half the intervals,
    # never for long. Its energy is exact: 40 J over 100 inferences.
    slow = np.floor(t) * 2.0
    measured = summarize(PowerSeries.from_joules(t, slow), None, (0.0, 20.0), 100)
    assert measured["reason"] is None
    assert measured["energy_mj_per_inference"]["total"] == pytest.approx(400.0)


def test_a_stuck_idle_baseline_is_not_subtracted() -> None:
    t = np.arange(31.0)
    joules = np.where(t < 10, 0.0, (t - 10) * 3.0)  # flat through the idle window 0..10 s
    out = summarize(PowerSeries.from_joules(t, joules), (0.0, 10.0), (10.0, 30.0), 60)
    assert out["energy_mj_per_inference"]["total"] == pytest.approx(1000.0)  # 60 J / 60
    assert out["energy_mj_per_inference"]["above_idle"] is None and out["idle_power_w"] is None
    assert "did not change" in out["idle_reason"]
