"""The governor's view of the device: steady-state temperature as a function of inference rate.

``T_ss(f) = a + k·f`` with time constant ``τ``: ``a`` is ambient plus idle heat, ``k`` is
thermal resistance times energy per inference. A power-domain
:class:`~edgeserve.profiling.thermal_model.ThermalModel` plus idle power and energy per
inference reduces to it; without one, :func:`learn` fits it to the governor's own history
of (time, temperature, achieved rate).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

from edgeserve.profiling.thermal_model import (
    LoadModel,
    ThermalFitError,
    ThermalModel,
    fit_first_order,
    rate_coefficients,
)

log = logging.getLogger(__name__)

__all__ = ["ArtifactState", "RateModel", "learn"]


@dataclass
class RateModel:
    """``T_ss(f) = a + bias + k·f``; ``bias`` is corrected online by the governor."""

    a: float
    k: float
    tau: float
    source: str  # "given" or "learned"

    @classmethod
    def from_thermal(cls, model: ThermalModel, load: LoadModel | None) -> RateModel:
        a, k = rate_coefficients(model, load)
        return cls(a, k, model.tau_s, "given")

    def ss(self, rate: float, bias: float) -> float:
        return self.a + bias + self.k * rate

    def rate_for(self, temp: float, bias: float) -> float:
        return (temp - self.a - bias) / self.k

    def predict(self, temp_now: float, rate: float, bias: float, horizon: float) -> float:
        ss = self.ss(rate, bias)
        return ss + (temp_now - ss) * math.exp(-horizon / self.tau)


@dataclass
class ArtifactState:
    """What the governor knows about one artifact (models differ in energy per inference)."""

    model: RateModel | None = None
    bias: float = 0.0
    demand_hz: float | None = None  # the rate the application ran at when not limited


def learn(h: np.ndarray, at_rest: bool) -> ThermalModel | None:
    """Fit the rate model to history rows (time, °C, rate over the interval before the row).

    With ``at_rest`` (the history starts where the governor started) the device is first
    assumed to have been at equilibrium with zero rate — one parameter fewer, so far better
    conditioned — and the free-start fit replaces that only when it explains the trace
    clearly better. A fit whose τ exceeds the trace is not used: before the trace is as long
    as τ, R and τ cannot be told apart, and the steady state is a guess.
    """
    t, temp, rate = h[:, 0], h[:, 1], h[1:, 2]
    varied = rate.size > 1 and np.ptp(rate) > 0.1 * max(float(np.mean(rate)), 1e-9)
    attempts = []
    if at_rest:
        attempts.append({"equilibrium_start": True, "initial_input": 0.0})
    if varied:
        attempts.append({})
    fits = []
    for kwargs in attempts:
        try:
            fits.append(fit_first_order(t, temp, rate, input="rate_hz", **kwargs))
        except ThermalFitError as exc:
            log.debug("governor model fit: %s", exc)
    if not fits:
        return None
    fit = fits[1] if len(fits) == 2 and fits[1].rmse_c < 0.7 * fits[0].rmse_c else fits[0]
    if fit.extrapolated:
        log.debug("governor model fit not used yet: τ %.0f s > trace %.0f s", fit.tau_s, fit.span_s)
        return None
    return fit
