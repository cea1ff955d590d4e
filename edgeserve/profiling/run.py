"""``profile_run``: idle baseline, then the session under load, then the numbers.

Order of a run: open the power source (``auto`` probes) and the thermal reader, start the
sampler, one warm-up inference, ``idle_s`` of idle baseline, ``duration_s`` of back-to-back
inferences, stop. Then: energy per inference (total and above idle) with its sampling
uncertainty, power, inferences per Wh, temperatures, throttle events, latency drift
(first minute against last), a first-order thermal model fitted to the whole trace, the
steady-state temperature at a rate, and the highest sustainable rate under the budgets.

Nothing a sensor does stops the run: an unreadable sensor makes its figures ``null`` and
the reason is in the result.
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgeserve.errors import InputError
from edgeserve.profiling import energy as emath
from edgeserve.profiling.clock import SYSTEM_CLOCK, Clock
from edgeserve.profiling.power import ActivityMeter, ProbeContext, open_power_source
from edgeserve.profiling.result import ProfileResult
from edgeserve.profiling.sampler import Sampler, Trace
from edgeserve.profiling.sysfs import SensorError, resolve_root
from edgeserve.profiling.thermal import (
    ACTIVE_THROTTLE_MASK,
    ThermalReader,
    decode_throttled,
)
from edgeserve.profiling.thermal_model import (
    LoadModel,
    ThermalFitError,
    ThermalModel,
    fit_first_order,
    rate_coefficients,
    sustainable_rate,
)

if TYPE_CHECKING:
    from edgeserve.device_profiles import Profile

log = logging.getLogger(__name__)

__all__ = ["ProfileResult", "measure", "profile_run"]


def _r(x: float | None, digits: int = 3) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return round(float(x), digits)


def measure(
    session: Any,
    profile: Profile | None,
    *,
    duration_s: float = 60.0,
    idle_s: float = 10.0,
    sample_rate_hz: float = 10.0,
    power_source: str = "auto",
    sysfs_root: str | os.PathLike[str] | None = None,
    rail: str | None = None,
    vcgencmd: str = "vcgencmd",
    meter_log: str | os.PathLike[str] | None = None,
    meter_offset_s: float = 0.0,
    thermal_budget_c: float | None = None,
    power_budget_w: float | None = None,
    at_rate_hz: float | None = None,
    frame: Any = None,
    clock: Clock = SYSTEM_CLOCK,
) -> ProfileResult:
    """Profile ``session`` (see the module docstring for the sequence).

    Args:
        session: Anything with ``run(frame)`` (and optionally ``example_input``,
            ``backend``, ``threads``).
        profile: Device profile: idle/peak watts for the estimate, zones, the rail, and the
            default thermal budget (``[thermal] throttle_c``).
        duration_s: Seconds of inference (clock time).
        idle_s: Seconds of idle baseline before it (0: no baseline, no ``above_idle``).
        sample_rate_hz: Sampler rate.
        power_source: ``"auto"`` or a source name (:data:`~edgeserve.profiling.power.SOURCE_ORDER`).
        sysfs_root: Root of the sysfs tree (default ``$EDGESERVE_SYSFS_ROOT`` or ``/``).
        rail: Power rail / hwmon channel, overriding the profile's.
        vcgencmd: ``vcgencmd`` command (PMIC power and Pi throttle flags).
        meter_log: External meter CSV (timestamp, watts).
        meter_offset_s: Added to the meter's timestamps.
        thermal_budget_c: Budget for the sustainable rate (default: the profile's throttle_c).
        power_budget_w: Power budget for the sustainable rate.
        at_rate_hz: Rate at which to predict the steady-state temperature (default: the
            measured rate).
        frame: Input for ``run`` (default: ``session.example_input()``).
        clock: Time source.
    """
    if duration_s <= 0 or idle_s < 0 or sample_rate_hz <= 0:
        raise InputError("need duration > 0 s, idle >= 0 s and a sampling rate > 0 Hz")
    root = resolve_root(sysfs_root)
    activity = ActivityMeter()
    threads = getattr(session, "threads", None)
    ctx = ProbeContext(root=root, profile=profile, rail=rail, vcgencmd=vcgencmd,
                       meter_log=Path(meter_log) if meter_log else None, meter_offset_s=meter_offset_s,
                       activity=activity, threads=threads)
    probe = open_power_source(power_source, ctx)
    source = probe.source
    thermal = ThermalReader(root, profile, vcgencmd=vcgencmd)
    sampler = Sampler(source, thermal, rate_hz=sample_rate_hz, clock=clock)
    marks, lat = _collect(session, session.example_input() if frame is None else frame, sampler, activity,
                          clock, idle_s, duration_s)
    idle0, run0, run1 = marks
    trace = sampler.trace()
    n = int(lat.shape[0])
    notes: list[str] = []
    summary: dict[str, Any] = {
        "profile": profile.name if profile is not None else None,
        "backend": getattr(session, "backend", None),
        "threads": threads,
        "power_source": source.name if source is not None else None,
        "power_source_detail": source.detail if source is not None else None,
        "estimated": bool(source is not None and source.estimated),
        "power_sources_tried": probe.tried,
        "duration_s": {"idle": _r(run0 - idle0), "run": _r(run1 - run0)},
        "inferences": n,
        "rate_hz": _r(n / (run1 - run0) if run1 > run0 else None),
        "host": _host_against(profile),
    }
    series = _power_series(source, trace, sampler, notes)
    en = _energy(series, source, probe, sampler, marks, n, notes)
    summary.update({key: en[key] for key in ("idle_power_w", "avg_power_w", "energy_mj_per_inference",
                                             "inferences_per_wh")})
    summary["energy_reason"] = en.get("reason") or en.get("idle_reason")
    summary.update(_temperatures(trace, thermal, marks, profile))
    summary["latency_ms"] = _latency(lat, run0, run1)

    # The thermal model, the steady state at a rate, the sustainable rate under the budgets.
    budget = thermal_budget_c if thermal_budget_c is not None else (profile.thermal.throttle_c if profile else None)
    e_above = en["energy_mj_per_inference"]["above_idle"] if en["energy_mj_per_inference"] else None
    load = LoadModel(en["idle_power_w"], e_above / 1000.0 if e_above is not None else None,
                     n / activity.busy_seconds(run1) if n else 0.0)
    model, model_reason = _fit_model(trace, series, lat, marks, estimated=summary["estimated"])
    summary.update(_predictions(model, model_reason, load, budget, power_budget_w,
                                at_rate_hz if at_rate_hz is not None else summary["rate_hz"]))
    if source is not None and hasattr(source, "wraps"):
        summary["power_counter_wraps"] = source.wraps
    summary["sampler"] = sampler.overhead()
    summary["thermal_sensors"] = thermal.describe()
    summary["notes"] = notes
    power_plot = _plot_power(series, max(1.0, 2.0 / sample_rate_hz)) if series is not None else (np.array([]),) * 2
    return ProfileResult(summary, trace, power_plot, lat, model, load, notes)


def _collect(session: Any, frame: Any, sampler: Sampler, activity: ActivityMeter, clock: Clock, idle_s: float,
             duration_s: float) -> tuple[tuple[float, float, float], np.ndarray]:
    """Warm up, idle, run back to back. Returns the (idle, run, end) marks and (start, ms) rows."""
    session.run(frame)  # warm-up: first-call allocations are not the steady state
    latencies: list[tuple[float, float]] = []
    with sampler:
        clock.sleep(min(0.5, 0.1 * idle_s))  # the warm-up's own power tail is not idle
        idle0 = sampler.mark("idle", sample=True)
        clock.sleep(idle_s)
        run0 = sampler.mark("run", sample=True)
        while True:
            t0 = clock.now()
            if t0 - run0 >= duration_s:
                break
            activity.begin(t0)
            session.run(frame)
            t1 = clock.now()
            activity.end(t1)
            latencies.append((t0, (t1 - t0) * 1000.0))
        run1 = sampler.mark("end", sample=True)
    return (idle0, run0, run1), np.array(latencies, dtype=float).reshape(-1, 2)


def _energy(series: emath.PowerSeries | None, source: Any, probe: Any, sampler: Sampler,
            marks: tuple[float, float, float], n: int, notes: list[str]) -> dict[str, Any]:
    idle0, run0, run1 = marks
    if series is None:
        reason = probe.reason or f"power source {source.name if source else '?'} gave no readings"
        if source is not None and sampler.overhead()["errors"]["power"]:
            reason = f"{source.name} failed: {sampler.overhead()['last_errors'].get('power')}"
        return {"idle_power_w": None, "avg_power_w": None, "energy_mj_per_inference": None,
                "inferences_per_wh": None, "reason": reason}
    en = emath.summarize(series, (idle0, run0) if run0 > idle0 else None, (run0, run1), n)
    if source.estimated and en["energy_mj_per_inference"]:
        # The sampling error of a model is zero; its model error is unknown. Say unknown.
        en["energy_mj_per_inference"]["uncertainty"] = {"total": None, "above_idle": None}
        notes.append("energy is the profile's power model x measured busy time, not a measurement; "
                     "its error is unknown")
    return en


def _predictions(model: ThermalModel | None, model_reason: str | None, load: LoadModel, budget: float | None,
                 power_budget_w: float | None, rate: float | None) -> dict[str, Any]:
    out: dict[str, Any] = {"thermal_budget_c": budget, "power_budget_w": power_budget_w,
                           "thermal_model": model.to_dict() if model else None,
                           "thermal_model_reason": model_reason, "steady_state_c": None}
    if model is not None and rate is not None:
        try:
            a, k = rate_coefficients(model, load)
            out["steady_state_c"] = {"rate_hz": _r(rate), "temp_c": _r(a + k * rate, 2)}
        except ThermalFitError as exc:
            out["thermal_model_reason"] = str(exc)
    if budget is None and power_budget_w is None:
        sus: dict[str, Any] = {"rate_hz": None, "limited_by": None, "reason": "no budget (no profile, no --thermal-budget)"}
    else:
        try:
            sus = sustainable_rate(model, load, budget, power_budget_w)
        except ThermalFitError as exc:
            sus = {"rate_hz": None, "limited_by": None, "reason": str(exc)}
        if model is None and budget is not None:
            sus["reason"] = f"no thermal model: {model_reason}"
    out["sustainable_rate_hz"] = sus["rate_hz"]
    out["sustainable_rate"] = sus
    return out


def profile_run(session: Any, profile: Profile | None = None, *, report: str | os.PathLike[str] | None = None,
                **kwargs: Any) -> dict[str, Any]:
    """Run :func:`measure` and return its JSON summary; write the report when asked.

    Keyword arguments are those of :func:`measure`. ``report`` ending in ``.html`` writes
    one self-contained HTML file; ``.md`` writes Markdown with a PNG beside it.
    """
    if report is not None:
        from edgeserve.profiling.report import check_available

        check_available()  # fail before a minute of measuring, not after
    result = measure(session, profile, **kwargs)
    if report is not None:
        from edgeserve.profiling.report import write_report

        written = write_report(result, report)
        result.summary["report"] = [str(p) for p in written]
    return result.summary


# ------------------------------------------------------------------------ pieces


def _power_series(source: Any, trace: Trace, sampler: Sampler, notes: list[str]) -> emath.PowerSeries | None:
    if source is None:
        return None
    if not source.live:  # external meter: read its log now, align by wall-clock time
        try:
            wall, watts = source.samples()
        except SensorError as exc:
            notes.append(f"external meter log unreadable: {exc}")
            return None
        w0, w1 = sampler.wall_marks["start"], sampler.wall_marks["stop"]
        c0, c1 = sampler.marks["start"], sampler.marks["stop"]
        wall_a, watts_a = np.asarray(wall), np.asarray(watts)
        # Keep one reading either side of the run so the edges interpolate, not extrapolate.
        lo = max(int(np.searchsorted(wall_a, w0)) - 1, 0)
        hi = min(int(np.searchsorted(wall_a, w1, side="right")) + 1, wall_a.size)
        wall_a, watts_a = wall_a[lo:hi], watts_a[lo:hi]
        if wall_a.size < 2:
            notes.append(f"the meter log has no readings between {time.ctime(w0)} and {time.ctime(w1)}")
            return None
        if wall_a[0] > w0 or wall_a[-1] < w1:
            notes.append("the meter log does not cover the whole run (check --meter-offset)")
        return emath.PowerSeries.from_watts(emath.map_wall_to_clock(wall_a, (w0, w1), (c0, c1)), watts_a)
    if source.cumulative:
        if np.isfinite(trace.joules).sum() < 2:
            return None
        return emath.PowerSeries.from_joules(trace.t, trace.joules)
    if np.isfinite(trace.watts).sum() < 2:
        return None
    return emath.PowerSeries.from_watts(trace.t, trace.watts)


def _plot_power(series: emath.PowerSeries, bin_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Power for the plot: counters as means over ``bin_s`` bins (a counter updated less often
    than it is read makes per-sample power jitter), instantaneous sources as sampled."""
    if not series.cumulative:
        return (series.t[1:] + series.t[:-1]) / 2, series.p
    edges = np.arange(series.t[0], series.t[-1] + 1e-9, bin_s)
    if edges.size < 2:
        return (series.t[1:] + series.t[:-1]) / 2, series.p
    return (edges[1:] + edges[:-1]) / 2, series.mean_power_between(edges)


def _temperatures(trace: Trace, thermal: ThermalReader, marks: tuple[float, float, float],
                  profile: Profile | None) -> dict[str, Any]:
    idle0, run0, run1 = marks
    temp = trace.temp_c
    good = np.isfinite(temp)
    out: dict[str, Any] = {"temp_c": None, "temp_reason": None, "throttled": None}
    if not good.any():
        out["temp_reason"] = thermal.unavailable_reason or "no temperature could be read during the run"
    else:
        in_run = good & trace.window(run0, run1)
        in_idle = good & trace.window(idle0, run0)
        start = float(temp[in_run][0]) if in_run.any() else float(temp[good][0])
        end = float(temp[in_run][-1]) if in_run.any() else float(temp[good][-1])
        out["temp_c"] = {
            "idle": _r(float(temp[in_idle].mean()), 2) if in_idle.any() else None,
            "start": _r(start, 2),
            "max": _r(float(temp[good].max()), 2),
            "end": _r(end, 2),
            "max_at_s": _r(float(trace.t[good][np.argmax(temp[good])] - run0), 2),
        }
    out["throttled"] = _throttle_events(trace, thermal, run0, run1, profile)
    return out


def _rising_edges(flags: np.ndarray) -> int:
    flags = flags.astype(bool)
    return int((flags[1:] & ~flags[:-1]).sum() + (1 if flags.size and flags[0] else 0))


def _throttle_events(trace: Trace, thermal: ThermalReader, run0: float, run1: float,
                     profile: Profile | None) -> dict[str, Any]:
    """Throttle evidence from three places: Pi flags, the throttle temperature, and CPU clocks."""
    result: dict[str, Any] = {"any": False, "events": 0, "by": {}, "flags": None}
    flags = trace.throttled[trace.throttled >= 0]
    if flags.size:
        active = (flags & ACTIVE_THROTTLE_MASK) != 0
        result["by"]["vcgencmd"] = _rising_edges(active)
        result["flags"] = decode_throttled(int(np.bitwise_or.reduce(flags)))
    if profile is not None and np.isfinite(trace.temp_c).any():
        temps = np.nan_to_num(trace.temp_c, nan=-math.inf)
        result["by"]["temperature"] = _rising_edges(temps >= profile.thermal.throttle_c)
        result["throttle_c"] = profile.thermal.throttle_c
    freq = trace.freq_khz
    if thermal.max_freq_khz and np.isfinite(freq).any():
        # Only under load: an idle CPU clocks down by design.
        in_run = trace.window(run0, run1) & np.isfinite(freq)
        capped = freq[in_run] < 0.9 * thermal.max_freq_khz
        result["by"]["cpufreq"] = _rising_edges(capped)
    if not result["by"]:
        result["reason"] = "no throttle flags, no temperatures and no CPU clocks to look at"
        result["any"] = None
        result["events"] = None
        return result
    result["events"] = max(result["by"].values())
    result["any"] = result["events"] > 0 or bool(result["flags"])
    return result


def _latency(lat: np.ndarray, run0: float, run1: float) -> dict[str, Any] | None:
    if lat.shape[0] == 0:
        return None
    ms = lat[:, 1]
    window = min(60.0, (run1 - run0) / 2)
    first = ms[lat[:, 0] < run0 + window]
    last = ms[lat[:, 0] >= run1 - window]
    p50_first = float(np.median(first)) if first.size else math.nan
    p50_last = float(np.median(last)) if last.size else math.nan
    return {
        "mean": _r(float(ms.mean()), 4),
        "p50": _r(float(np.percentile(ms, 50)), 4),
        "p95": _r(float(np.percentile(ms, 95)), 4),
        "p99": _r(float(np.percentile(ms, 99)), 4),
        "drift": {
            "window_s": _r(window, 2),
            "first_p50": _r(p50_first, 4),
            "last_p50": _r(p50_last, 4),
            "percent": _r((p50_last - p50_first) / p50_first * 100.0, 2) if p50_first > 0 else None,
        },
    }


def _fit_model(trace: Trace, series: emath.PowerSeries | None, lat: np.ndarray,
               marks: tuple[float, float, float], estimated: bool) -> tuple[ThermalModel | None, str | None]:
    idle0, _, run1 = marks
    good = np.isfinite(trace.temp_c) & trace.window(idle0, run1)
    # A marked sample can share its instant with a periodic one: keep one per instant.
    good &= np.concatenate([np.diff(trace.t) > 0, [True]])
    if good.sum() < 8:
        return None, "too few temperature readings" if np.isfinite(trace.temp_c).any() else "no temperature readings"
    t = trace.t[good]
    temp = trace.temp_c[good]
    try:
        if series is not None:
            # Mean power on each interval between temperature samples, from the power series.
            x = series.mean_power_between(t)
            if np.isfinite(x).all():
                return fit_first_order(t, temp, x, input="power_w", estimated=estimated), None
        # No power: drive the model with the inference rate (inferences per second).
        starts = lat[:, 0]
        counts = np.histogram(starts, bins=t)[0] if starts.size else np.zeros(t.size - 1)
        x = counts / np.diff(t)
        return fit_first_order(t, temp, x, input="rate_hz"), None
    except ThermalFitError as exc:
        return None, str(exc)


def _host_against(profile: Any) -> dict[str, Any]:
    """This machine's architecture against the profile's: a profile of another board gives
    this machine's timing with that board's power model, which is no figure for the board."""
    import platform

    machine = platform.machine().lower()
    host = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    wanted = getattr(getattr(profile, "cpu", None), "arch", None)
    # None: the same instruction set, so it may be the device (nothing here can tell more).
    record: dict[str, Any] = {"arch": host, "profile_arch": wanted, "is_the_profiled_device": None}
    if wanted is not None and host != wanted:
        record["is_the_profiled_device"] = False
        record["note"] = (f"this host is {host}, {profile.name} is {wanted}: the timing is this machine's and the "
                          "power the profile's, so neither is the device's")
    return record
