"""Energy maths: integrate sampled power (or difference a counter) over a window, with an error bar.

Both kinds of source become one :class:`PowerSeries`: piecewise-constant mean power
``p[k]`` on each sampling interval ``[t[k], t[k+1]]`` and a half-width ``u[k]`` saying how
much that mean could be off because nothing was seen between the two samples.

* Instantaneous power (INA3221, PMIC, hwmon ``power*_input``, a meter log, the estimate):
  the trapezoid rule, ``p[k] = (w[k] + w[k+1]) / 2``, ``u[k] = |w[k+1] − w[k]| / 2`` — half the
  gap between the left and right Riemann sums. Constant power gives ``u = 0``; a load that
  changes between samples gives an error bar that shrinks with the sampling interval.
* Energy counters (RAPL, hwmon ``energy*_input``): ``p[k] = ΔE / Δt`` is exact over whole
  intervals; only the two intervals cut by the window's edges are uncertain (how the energy
  was spread inside them is unknown), by half the change of power around them.

The window's uncertainty is the quadrature sum ``sqrt(Σ (u[k]·overlap[k])²)``. It is the
sampling error only: it does not include the sensor's own accuracy (INA3221 gain error,
RAPL being a model on some CPUs) or the estimate's model error.

Worked numbers (tests check them): 2.98 mJ per inference at 45 ms per inference is
2.98 / 45 = 0.0662 W = 66 mW; a 10 Wh battery holds 36 000 J = 36 000 / 0.00298 ≈ 12.1 M
inferences.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "EnergyWindow",
    "PowerSeries",
    "inferences_per_wh",
    "map_wall_to_clock",
    "mj_per_inference",
    "power_mw",
    "summarize",
]

JOULES_PER_WH = 3600.0


def power_mw(mj_per_inf: float, latency_ms: float) -> float:
    """Average power (mW) of back-to-back inferences: ``mJ / ms`` is W. 2.98 mJ at 45 ms → 66.2 mW."""
    return mj_per_inf / latency_ms * 1000.0


def inferences_per_wh(mj_per_inf: float) -> float:
    """Inferences one watt-hour pays for: ``3600 J / (mJ / 1000)``. 2.98 mJ → 1.208 M per Wh."""
    return JOULES_PER_WH / (mj_per_inf / 1000.0)


def mj_per_inference(joules: float, inferences: int) -> float:
    """Millijoules per inference."""
    return joules / inferences * 1000.0


def _fill_nan(t: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Linear interpolation across missing readings (edges held)."""
    good = ~np.isnan(y)
    if good.all() or not good.any():
        return y
    return np.interp(t, t[good], y[good])


#: A counter flat for more than this share of the run has stalled (see PowerSeries.implausible).
STALL_FRACTION = 0.5


def _longest_zero_stretch(p: np.ndarray, seconds: np.ndarray) -> float:
    """Seconds of the longest run of consecutive intervals with zero power."""
    longest = current = 0.0
    for power, dt in zip(p.tolist(), seconds.tolist()):
        current = current + dt if power == 0 else 0.0
        longest = max(longest, current)
    return longest


@dataclass(frozen=True)
class EnergyWindow:
    """Energy over one window and its sampling uncertainty (one half-width, J)."""

    joules: float
    uncertainty_j: float
    seconds: float
    coverage: float  # fraction of the window with readings on both sides

    @property
    def watts(self) -> float:
        return self.joules / self.seconds if self.seconds > 0 else math.nan


@dataclass(frozen=True)
class PowerSeries:
    """Piecewise-constant power: mean ``p[k]`` ± ``u[k]`` (W) on ``[t[k], t[k+1]]``."""

    t: np.ndarray
    p: np.ndarray
    u: np.ndarray
    valid: np.ndarray  # False where an interval's mean was interpolated over missing reads
    cumulative: bool

    @classmethod
    def from_watts(cls, t: np.ndarray, watts: np.ndarray) -> PowerSeries:
        """From instantaneous readings (trapezoid rule)."""
        t, w = np.asarray(t, float), np.asarray(watts, float)
        valid = ~np.isnan(w)
        w = _fill_nan(t, w)
        p = (w[1:] + w[:-1]) / 2.0
        u = np.abs(w[1:] - w[:-1]) / 2.0
        return cls(t, p, u, valid[1:] & valid[:-1], False)

    @classmethod
    def from_joules(cls, t: np.ndarray, joules: np.ndarray) -> PowerSeries:
        """From a cumulative, already unwrapped energy counter."""
        t, j = np.asarray(t, float), np.asarray(joules, float)
        valid = ~np.isnan(j)
        j = _fill_nan(t, j)
        dt = np.diff(t)
        with np.errstate(divide="ignore", invalid="ignore"):
            p = np.where(dt > 0, np.diff(j) / np.where(dt > 0, dt, 1.0), 0.0)
        # Edge uncertainty of interval k: half the change of power across it (neighbours).
        padded = np.concatenate([p[:1], p, p[-1:]]) if p.size else p
        u = np.abs(padded[2:] - padded[:-2]) / 2.0 if p.size else p
        return cls(t, p, u, valid[1:] & valid[:-1], True)

    def __len__(self) -> int:
        return int(self.p.size)

    def _overlap(self, t0: float, t1: float) -> np.ndarray:
        lo = np.maximum(self.t[:-1], t0)
        hi = np.minimum(self.t[1:], t1)
        return np.clip(hi - lo, 0.0, None)

    def energy(self, t0: float, t1: float) -> EnergyWindow:
        """Energy in ``[t0, t1]`` (clock seconds)."""
        seconds = max(0.0, t1 - t0)
        if self.p.size == 0 or seconds == 0:
            return EnergyWindow(math.nan, math.nan, seconds, 0.0)
        overlap = self._overlap(t0, t1)
        covered = float(overlap.sum())
        joules = float((self.p * overlap).sum())
        if self.cumulative:
            # Whole intervals of a counter are exact; only the cut ones are uncertain.
            whole = np.isclose(overlap, np.diff(self.t))
            u = np.where(whole, 0.0, self.u)
        else:
            u = self.u
        sigma = float(np.sqrt(((u * overlap) ** 2).sum()))
        good = float((overlap * self.valid).sum())
        if covered < seconds and covered > 0:  # the window runs past the samples: extrapolate, say so
            joules *= seconds / covered
            sigma = math.hypot(sigma, joules * (1 - covered / seconds))
        return EnergyWindow(joules, sigma, seconds, good / seconds)

    def implausible(self, t0: float, t1: float) -> str | None:
        """Why the readings in ``[t0, t1]`` cannot be energy (None when they can).

        A device drawing no power while it computes does not exist: a counter that does not
        advance is stuck, one that goes down was reset (or wrapped without being undone), and
        a negative power reading is a sensor fault. Each gives null energy with this reason.
        """
        seconds = self._overlap(t0, t1)
        overlap = seconds > 0
        if not overlap.any():
            return None
        used = overlap & self.valid
        p = self.p[used]
        kind = "energy counter" if self.cumulative else "power readings"
        if (p < 0).any():
            what = "ran backwards (reset, or a wrap that was not undone)" if self.cumulative else "went negative"
            return f"the {kind} {what} during the run: {int((p < 0).sum())} of {p.size} intervals"
        if p.size and not (p > 0).any():
            return f"the {kind} did not change during the run (a stuck sensor): no energy can be measured"
        if self.cumulative:
            # A counter that updates slower than it is sampled is flat between its updates; one
            # flat for over half the run stopped counting, and the energy would be too low.
            flat = _longest_zero_stretch(p, seconds[used])
            run = float(seconds.sum())
            if flat > STALL_FRACTION * run:
                return (f"the {kind} stalled for {flat:.3g} s of the {run:.3g} s run (it stopped counting): "
                        "the energy would be too low")
        return None

    def mean_power_between(self, times: np.ndarray) -> np.ndarray:
        """Mean power on each interval between consecutive ``times`` (from cumulative energy)."""
        cum = np.concatenate([[0.0], np.cumsum(self.p * np.diff(self.t))])
        e = np.interp(times, self.t, cum)
        dt = np.diff(times)
        return np.diff(e) / np.where(dt > 0, dt, np.nan)

    def scatter(self, t0: float, t1: float) -> tuple[float, int]:
        """Standard deviation of the means of the intervals wholly inside the window, and their count."""
        whole = np.isclose(self._overlap(t0, t1), np.diff(self.t)) & (np.diff(self.t) > 0)
        values = self.p[whole]
        return (float(values.std(ddof=1)) if values.size > 1 else 0.0), int(values.size)


def map_wall_to_clock(wall: np.ndarray, wall_marks: tuple[float, float], clock_marks: tuple[float, float]) -> np.ndarray:
    """Map UNIX times onto the sampler clock linearly through two marks (start, stop).

    Aligns an external meter's log with the run; works for a scaled clock as well.
    """
    (w0, w1), (c0, c1) = wall_marks, clock_marks
    scale = (c1 - c0) / (w1 - w0) if w1 != w0 else 1.0
    return c0 + (np.asarray(wall, float) - w0) * scale


def _r(x: float | None, digits: int = 6) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return round(x, digits)


def summarize(series: PowerSeries, idle: tuple[float, float] | None, run: tuple[float, float],
              inferences: int, min_coverage: float = 0.9) -> dict[str, object]:
    """Idle and run power, energy per inference (total and above idle) and inferences per Wh.

    Args:
        series: The run's power.
        idle: Idle-baseline window (None: no baseline, ``above_idle`` is null).
        run: Inference window.
        inferences: Inferences completed in ``run``.
        min_coverage: Below this fraction of the run with readings, energy is null.

    Returns:
        A dict of JSON-ready figures; ``reason`` is set when a figure is null.
    """
    out: dict[str, object] = {"idle_power_w": None, "avg_power_w": None, "energy_mj_per_inference": None,
                              "inferences_per_wh": None, "energy_j": None, "reason": None}
    run_e = series.energy(*run)
    if not math.isfinite(run_e.joules) or run_e.coverage < min_coverage:
        out["reason"] = (f"power readings cover {run_e.coverage:.0%} of the run (need {min_coverage:.0%})"
                         if math.isfinite(run_e.coverage) else "no power readings during the run")
        return out
    if inferences <= 0:
        out["reason"] = "no inference completed"
        return out
    problem = series.implausible(*run)
    if problem:  # a counter that stalls or runs backwards would give 0 or negative joules
        out["reason"] = problem
        return out
    out["avg_power_w"] = _r(run_e.watts)
    out["energy_j"] = _r(run_e.joules)
    total = mj_per_inference(run_e.joules, inferences)
    total_u = mj_per_inference(run_e.uncertainty_j, inferences)
    above = above_u = None
    if idle is not None and idle[1] > idle[0]:
        idle_e = series.energy(*idle)
        idle_problem = series.implausible(*idle)
        if idle_problem:  # a baseline from a stuck counter would put every joule "above idle"
            out["idle_reason"] = idle_problem
        elif math.isfinite(idle_e.joules) and idle_e.coverage >= min_coverage:
            p_idle = idle_e.watts
            spread, n = series.scatter(*idle)
            # Baseline error: its own sampling error plus the standard error of its scatter.
            p_idle_u = math.hypot(idle_e.uncertainty_j / idle_e.seconds, spread / math.sqrt(n) if n else 0.0)
            out["idle_power_w"] = _r(p_idle)
            out["idle_power_uncertainty_w"] = _r(p_idle_u)
            above_j = run_e.joules - p_idle * run_e.seconds
            above = mj_per_inference(above_j, inferences)
            above_u = mj_per_inference(math.hypot(run_e.uncertainty_j, p_idle_u * run_e.seconds), inferences)
        else:
            out["idle_reason"] = f"power readings cover {idle_e.coverage:.0%} of the idle baseline"
    out["energy_mj_per_inference"] = {
        "total": _r(total, 4),
        "above_idle": _r(above, 4) if above is not None else None,
        "uncertainty": {"total": _r(total_u, 4), "above_idle": _r(above_u, 4) if above_u is not None else None},
    }
    out["inferences_per_wh"] = round(inferences_per_wh(total)) if total > 0 else None
    out["coverage"] = _r(run_e.coverage, 4)
    return out
