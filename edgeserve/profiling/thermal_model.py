"""A first-order thermal model: fit it to a trace, predict steady state, find the sustainable rate.

The device is one thermal capacitance ``C`` behind one resistance ``R`` to ambient:

    C·dT/dt = P − (T − T_amb)/R      so, for a step to constant power P from ambient,
    T(t) = T_amb + P·R·(1 − e^(−t/RC))

:func:`fit_first_order` fits ``T_amb``, ``R`` and ``τ = RC`` to any measured power profile
(idle baseline then load, pacing, ...), not just a step: for a fixed ``τ`` the temperature is
linear in ``(T_amb, T_0, R)`` — ``T_k = T_amb·(1−d_k) + T_0·d_k + R·y_k`` with
``d_k = e^(−(t_k−t_0)/τ)`` and ``y`` the input passed through the first-order filter — so
each ``τ`` is a linear least-squares problem, and ``τ`` itself is found by a log-spaced
scan refined by golden-section search.

The input may be power in watts (``input="power_w"``, ``R`` in °C/W) or, with no power
meter, the inference rate (``input="rate_hz"``, ``R`` in °C per inference/s, ``T_amb``
then includes the idle heat). Either way, with idle power ``P_idle`` and energy per
inference above idle ``E``, the steady state at rate ``f`` is
``T_ss(f) = T_amb + R·(P_idle + E·f)`` and the highest rate that keeps ``T_ss`` at the
budget ``B`` is ``f = (B − T_amb − R·P_idle) / (R·E)``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from edgeserve.errors import EdgeServeError

__all__ = ["LoadModel", "ThermalFitError", "ThermalModel", "fit_first_order", "sustainable_rate"]


class ThermalFitError(EdgeServeError):
    """The trace cannot identify a thermal model (the message says why)."""


@dataclass(frozen=True)
class ThermalModel:
    """``T_ss = t_amb_c + r · x`` with time constant ``tau_s``; ``x`` is W or inferences/s.

    Attributes:
        t_amb_c: Ambient (rate-domain models: ambient plus the idle heat).
        r: Thermal resistance, °C per unit of ``input``.
        tau_s: Time constant R·C in seconds.
        input: ``"power_w"`` or ``"rate_hz"``.
        rmse_c: Fit residual.
        points: Samples used.
        span_s: Length of the fitted trace.
        extrapolated: True when the trace is shorter than τ (the steady state was never
            approached, so predictions of it are extrapolations).
        estimated: True when the input power was itself an estimate.
    """

    t_amb_c: float
    r: float
    tau_s: float
    input: str = "power_w"
    rmse_c: float = 0.0
    points: int = 0
    span_s: float = 0.0
    extrapolated: bool = False
    estimated: bool = False

    @property
    def c(self) -> float:
        """Heat capacity (J/°C for power models)."""
        return self.tau_s / self.r

    def steady_state_c(self, x: float) -> float:
        """Temperature reached after a long time at constant input ``x``."""
        return self.t_amb_c + self.r * x

    def input_for(self, temp_c: float) -> float:
        """The constant input whose steady state is ``temp_c``."""
        return (temp_c - self.t_amb_c) / self.r

    def predict(self, temp_now_c: float, x: float, horizon_s: float) -> float:
        """Temperature ``horizon_s`` from now if the input stays at ``x``."""
        ss = self.steady_state_c(x)
        return ss + (temp_now_c - ss) * math.exp(-horizon_s / self.tau_s)

    def simulate(self, t: np.ndarray, x_interval: np.ndarray, temp0_c: float) -> np.ndarray:
        """Temperatures at ``t`` with input ``x_interval[k]`` on ``[t[k], t[k+1]]``."""
        out = np.empty(len(t))
        out[0] = temp = temp0_c
        for k in range(len(t) - 1):
            temp = self.predict(temp, float(x_interval[k]), float(t[k + 1] - t[k]))
            out[k + 1] = temp
        return out

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> ThermalModel:
        """The model back from :meth:`to_dict` (``edgeserve profile --json``'s ``thermal_model``)."""
        d = dict(data)
        d["r"] = d.pop("r_c_per_w") if "r_c_per_w" in d else d.pop("r_c_per_hz")
        return cls(**d)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        unit = "c_per_w" if self.input == "power_w" else "c_per_hz"
        d[f"r_{unit}"] = round(d.pop("r"), 6)
        for key in ("t_amb_c", "tau_s", "rmse_c", "span_s"):
            d[key] = round(d[key], 4)
        return d


def _as_intervals(t: np.ndarray, x: np.ndarray) -> np.ndarray:
    if x.size == t.size - 1:
        return x
    if x.size != t.size:
        raise ValueError("input must have one value per sample or per interval")
    return (x[1:] + x[:-1]) / 2.0


_MAX_POINTS = 1500


def _decimate(t: np.ndarray, temp: np.ndarray, xi: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Keep every m-th sample; the input becomes the time-weighted mean over merged intervals."""
    idx = np.arange(0, t.size, m)
    if idx[-1] != t.size - 1:
        idx = np.append(idx, t.size - 1)
    dt = np.diff(t)
    cum = np.concatenate([[0.0], np.cumsum(np.nan_to_num(xi) * dt)])
    span = np.diff(t[idx])
    x_new = np.diff(cum[idx]) / np.where(span > 0, span, 1.0)
    return t[idx], temp[idx], x_new


def _sse(t: np.ndarray, temp: np.ndarray, x: np.ndarray, good: np.ndarray, taus: np.ndarray,
         equilibrium: bool, x0: float | None) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares fit for every τ in ``taus`` at once: (SSE per τ, coefficients per τ).

    For a fixed τ the model is linear: columns ``[1−d, d, y]`` (free start) or
    ``[1, x0·d + y]`` (equilibrium start), ``d = e^(−(t−t0)/τ)``, ``y`` the input through
    the first-order filter from zero.
    """
    dt = np.diff(t)
    a = np.exp(-dt[:, None] / taus[None, :])  # (n-1, m)
    y = np.zeros((t.size, taus.size))
    for k in range(dt.size):  # the filter is a recursion in time, vectorised over τ
        y[k + 1] = y[k] * a[k] + x[k] * (1.0 - a[k])
    d = np.exp(-(t - t[0])[:, None] / taus[None, :])
    if equilibrium:
        start = x[0] if x0 is None else x0
        cols = [np.ones_like(d), start * d + y]
    else:
        cols = [1.0 - d, d, y]
    A = np.stack(cols, axis=-1)[good]  # (n_good, m, p)
    T = temp[good]
    gram = np.einsum("nmp,nmq->mpq", A, A)
    rhs = np.einsum("nmp,n->mp", A, T)
    sse = np.full(taus.size, np.inf)
    coef = np.zeros((taus.size, A.shape[-1]))
    ok = np.linalg.cond(gram) < 1e10
    if ok.any():
        coef[ok] = np.linalg.solve(gram[ok], rhs[ok][..., None])[..., 0]
        resid = np.einsum("nmp,mp->nm", A[:, ok], coef[ok]) - T[:, None]
        sse[ok] = (resid**2).sum(axis=0)
    return sse, coef


def fit_first_order(t: np.ndarray, temp_c: np.ndarray, x: np.ndarray, *, input: str = "power_w",
                    equilibrium_start: bool = False, initial_input: float | None = None,
                    estimated: bool = False, tau_bounds: tuple[float, float] | None = None) -> ThermalModel:
    """Fit ``T_amb``, ``R`` and ``τ`` to a temperature trace driven by input ``x``.

    Args:
        t: Sample times (s), increasing.
        temp_c: Temperatures at ``t`` (NaN where a read failed).
        x: Input per sample (``len(t)``) or per interval (``len(t) − 1``): W or inferences/s.
        input: ``"power_w"`` or ``"rate_hz"`` (recorded in the model).
        equilibrium_start: Assume the device was at steady state when the trace began
            (one parameter fewer; use for short traces).
        initial_input: The input it was at steady state with (default: the first input).
        estimated: Mark the model estimated (the power was a model, not a measurement).
        tau_bounds: Search range for τ; default from the sampling interval to 20× the trace.

    Raises:
        ThermalFitError: Too few temperatures, no change in input or temperature, or a
            fit that makes no physical sense (R ≤ 0).
    """
    t = np.asarray(t, float)
    temp = np.asarray(temp_c, float)
    xi = _as_intervals(t, np.asarray(x, float))
    if t.size > _MAX_POINTS:
        t, temp, xi = _decimate(t, temp, xi, -(-t.size // _MAX_POINTS))
    good = np.isfinite(temp)
    if good.sum() < 8:
        raise ThermalFitError(f"only {int(good.sum())} temperature readings; the fit needs at least 8")
    if not np.isfinite(xi).all():
        xi = np.nan_to_num(xi, nan=float(np.nanmean(xi)) if np.isfinite(xi).any() else 0.0)
    seen = np.append(xi, initial_input) if equilibrium_start and initial_input is not None else xi
    if np.ptp(seen) <= 1e-9 * max(1.0, float(np.abs(seen).max())):
        raise ThermalFitError("the input never changed, so ambient and R cannot be told apart "
                              "(measure an idle baseline before the load)")
    if np.ptp(temp[good]) < 0.2:
        raise ThermalFitError(f"temperature changed by only {np.ptp(temp[good]):.2f} °C; run longer or under more load")
    span = float(t[good][-1] - t[good][0])
    dt_med = float(np.median(np.diff(t)))
    lo, hi = tau_bounds or (max(dt_med, 1e-3), max(20.0 * span, 10.0 * dt_med))
    grid = np.geomspace(lo, hi, 64)
    sse, _ = _sse(t, temp, xi, good, grid, equilibrium_start, initial_input)
    best = int(np.argmin(sse))
    if not math.isfinite(sse[best]):
        raise ThermalFitError("the trace does not identify the model (degenerate input)")
    # Refine on a fine grid between the neighbours of the best coarse point.
    fine = np.geomspace(grid[max(best - 1, 0)], grid[min(best + 1, grid.size - 1)], 48)
    sse_f, coefs_f = _sse(t, temp, xi, good, fine, equilibrium_start, initial_input)
    j = int(np.argmin(sse_f))
    tau, err, coef = float(fine[j]), float(sse_f[j]), coefs_f[j]
    t_amb, r = (coef[0], coef[1]) if equilibrium_start else (coef[0], coef[2])
    if not r > 0:
        raise ThermalFitError(f"fitted R = {r:.3g} is not positive: temperature does not follow the load "
                              "(another heat source, a fan changing speed, or too short a trace)")
    rmse = math.sqrt(err / good.sum())
    return ThermalModel(
        t_amb_c=float(t_amb), r=float(r), tau_s=tau, input=input, rmse_c=rmse, points=int(good.sum()),
        span_s=span, extrapolated=bool(tau > span or tau >= 0.95 * hi), estimated=estimated,
    )


@dataclass(frozen=True)
class LoadModel:
    """What running inferences costs.

    Attributes:
        idle_power_w: Idle power (W); ignored by rate-domain models.
        energy_per_inference_j: Energy per inference above idle (J); ignored by rate models.
        max_rate_hz: Highest rate the device reaches back to back (1 / latency).
    """

    idle_power_w: float | None
    energy_per_inference_j: float | None
    max_rate_hz: float

    @classmethod
    def from_summary(cls, summary: dict[str, object]) -> LoadModel:
        """From ``edgeserve profile --json`` output (idle power, energy above idle, busy rate)."""
        energy = summary.get("energy_mj_per_inference") or {}
        above = energy.get("above_idle") if isinstance(energy, dict) else None
        latency = summary.get("latency_ms") or {}
        mean_ms = latency.get("mean") if isinstance(latency, dict) else None
        return cls(summary.get("idle_power_w"), above / 1000.0 if above is not None else None,  # type: ignore[arg-type]
                   1000.0 / mean_ms if mean_ms else math.inf)

    def power_at(self, rate_hz: float) -> float | None:
        if self.idle_power_w is None or self.energy_per_inference_j is None:
            return None
        return self.idle_power_w + self.energy_per_inference_j * rate_hz


def rate_coefficients(model: ThermalModel, load: LoadModel | None) -> tuple[float, float]:
    """``(a, k)`` with ``T_ss(f) = a + k·f`` for inference rate ``f``.

    Raises:
        ThermalFitError: A power model without idle power and energy per inference.
    """
    if model.input == "rate_hz":
        return model.t_amb_c, model.r
    if load is None or load.idle_power_w is None or load.energy_per_inference_j is None:
        raise ThermalFitError("a power-domain model needs idle power and energy per inference")
    return model.t_amb_c + model.r * load.idle_power_w, model.r * load.energy_per_inference_j


def sustainable_rate(model: ThermalModel | None, load: LoadModel, budget_c: float | None,
                     power_budget_w: float | None = None) -> dict[str, object]:
    """Highest inference rate whose steady state stays within the budgets.

    Returns:
        ``rate_hz`` (capped at ``load.max_rate_hz``), ``limited_by`` ("thermal", "power" or
        "throughput"), the per-budget rates, and ``reason`` when a figure is null.
    """
    out: dict[str, object] = {"rate_hz": None, "limited_by": None, "thermal_rate_hz": None,
                              "power_rate_hz": None, "reason": None}
    limits: list[tuple[float, str]] = [(load.max_rate_hz, "throughput")]
    reasons = []
    if budget_c is not None:
        if model is None:
            reasons.append("no thermal model")
        else:
            a, k = rate_coefficients(model, load)
            f = (budget_c - a) / k if k > 0 else math.inf
            out["thermal_rate_hz"] = round(max(0.0, f), 4) if math.isfinite(f) else None
            limits.append((max(0.0, f), "thermal"))
    if power_budget_w is not None:
        if load.idle_power_w is None or not load.energy_per_inference_j:
            reasons.append("no power figures for the power budget")
        else:
            f = (power_budget_w - load.idle_power_w) / load.energy_per_inference_j
            out["power_rate_hz"] = round(max(0.0, f), 4)
            limits.append((max(0.0, f), "power"))
    if reasons and len(limits) == 1:
        out["reason"] = "; ".join(reasons)
        return out
    rate, by = min(limits, key=lambda p: p[0])
    out["rate_hz"] = round(rate, 4)
    out["limited_by"] = by
    if reasons:
        out["reason"] = "; ".join(reasons)
    return out
