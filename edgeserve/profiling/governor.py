"""ThermalGovernor: keep a running application under a temperature budget.

The governor wraps anything with ``run(frame)`` (a :class:`~edgeserve.runtime.Session`)
and, every ``control_period_s``, compares the measured temperature — and what a
first-order model predicts — with the budget, then acts, with hysteresis:

``pace``     Limit the inference rate. With a model (from ``edgeserve profile``, or learned
             online from the governor's own trace) it holds the rate whose steady state is
             ``budget − margin``; while the device is still cool it allows the faster rate
             that reaches that temperature only after ``horizon_s``; an observer corrects the
             model's offset. Without a model it steers by the measured slope: cut in
             proportion to how soon the target would be hit, halve when past it, creep
             back (×1.1) when cooling.
``threads``  Lower the session's thread count one step at a time while hot (``dwell_s``
             between steps, so each step's effect shows), raise it when cool and — with a
             model — only when one more thread would still settle below the budget.
``switch``   Swap to the next lighter artifact of the manifest (``session.alternatives()``,
             judged by file size), swap back when cool. Each artifact keeps its own model.

``threads`` and ``switch`` keep pacing as the last resort: when the levers are exhausted,
or the measured temperature reaches ``budget − margin`` anyway, the rate is limited too.
A step up that is followed by a step down within two dwell times doubles the wait before
the next step up (up to 16×), so a lever cannot flap. Every decision is logged (INFO on
``edgeserve.profiling.governor``) and kept in :attr:`ThermalGovernor.decisions`.

Example:
    >>> gov = ThermalGovernor.for_device(session, budget_c=70, policy="pace",
    ...                                  profile=load_profile("raspberry-pi-5"))  # doctest: +SKIP
    >>> for frame in camera:                                                     # doctest: +SKIP
    ...     outputs = gov.run(frame)
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from edgeserve.errors import InputError
from edgeserve.profiling.clock import SYSTEM_CLOCK, Clock
from edgeserve.profiling.rate_model import ArtifactState, RateModel, learn
from edgeserve.profiling.sysfs import SensorError

if TYPE_CHECKING:
    from edgeserve.device_profiles import Profile
    from edgeserve.profiling.sampler import Sampler
    from edgeserve.profiling.thermal_model import LoadModel, ThermalModel

log = logging.getLogger(__name__)

__all__ = ["POLICIES", "Decision", "ThermalGovernor"]

POLICIES: tuple[str, ...] = ("pace", "switch", "threads")

_MAX_CATCH_UP = 4  # periods of lag the pacer makes up by running back to back
_MAX_BACKOFF = 16.0


@dataclass(frozen=True)
class Decision:
    """One thing the governor did, and why."""

    t: float
    action: str  # limit, rate, release, threads, switch, model, sensor
    temp_c: float | None
    predicted_c: float | None
    rate_limit_hz: float | None
    threads: int | None
    artifact: str | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for key in ("t", "temp_c", "predicted_c", "rate_limit_hz"):
            if d[key] is not None:
                d[key] = round(d[key], 3)
        return d


def _default_factory(session: Any) -> Callable[[str], Any]:
    def build(path: str) -> Any:
        from edgeserve.runtime import (
            Session,  # lazy: the runtime imports an interpreter
        )

        return Session(path, profile=getattr(session, "profile", None))

    return build


class ThermalGovernor:
    """Keeps a session under ``budget_c`` by pacing, switching artifacts or lowering threads.

    Args:
        session: Anything with ``run(frame)``; ``threads``/``set_threads`` for
            ``policy="threads"``, ``alternatives()``/``artifact_bytes`` for ``"switch"``.
        budget_c: Temperature the device must stay at or below (°C).
        policy: ``"pace"``, ``"switch"`` or ``"threads"``.
        temperature: Returns the current temperature or None (a started
            :class:`~edgeserve.profiling.sampler.Sampler` is one).
        model: A fitted thermal model of ``session``'s artifact (``edgeserve profile``); a
            power-domain model needs ``load`` too.
        load: Idle power and energy per inference for a power-domain ``model``.
        margin_c: Hold the steady state this far below the budget.
        approach_c: Start acting when the measured temperature is this close to the budget.
        hysteresis_c: Release only when this much cooler than where acting starts.
        control_period_s: How often to decide (clock seconds).
        horizon_s: Prediction horizon (default: τ/3, at least 4 control periods).
        dwell_s: Least time between two thread/artifact changes (default: τ/2, or 10 s).
        learn: Fit (and refit) the rate model online from the governor's own trace
            (default: only when no ``model`` is given).
        session_factory: Builds a lighter session from an artifact path (``switch``);
            default ``Session(path, profile=session.profile)``.
        min_threads: Lowest thread count for ``threads``.
        fit_in_background: Learn on a worker thread (False: inline; deterministic, for
            single-threaded simulations).
        clock: Time source.
        on_decision: Called with every :class:`Decision`.
    """

    def __init__(
        self,
        session: Any,
        budget_c: float,
        policy: str = "pace",
        *,
        temperature: Callable[[], float | None],
        model: ThermalModel | None = None,
        load: LoadModel | None = None,
        margin_c: float = 1.0,
        approach_c: float = 3.0,
        hysteresis_c: float = 2.0,
        control_period_s: float = 1.0,
        horizon_s: float | None = None,
        dwell_s: float | None = None,
        learn: bool | None = None,
        session_factory: Callable[[str], Any] | None = None,
        min_threads: int = 1,
        fit_in_background: bool = True,
        clock: Clock = SYSTEM_CLOCK,
        on_decision: Callable[[Decision], None] | None = None,
    ) -> None:
        if policy not in POLICIES:
            raise InputError(f'unknown governor policy "{policy}". Known: {", ".join(POLICIES)}')
        if policy == "threads" and not hasattr(session, "set_threads"):
            raise InputError('policy "threads" needs a session with set_threads()')
        if policy == "switch" and not hasattr(session, "alternatives"):
            raise InputError('policy "switch" needs a session with alternatives()')
        if margin_c < 0 or approach_c < margin_c or hysteresis_c < 0 or control_period_s <= 0:
            raise InputError("need 0 <= margin_c <= approach_c, hysteresis_c >= 0 and control_period_s > 0")
        self.budget_c = float(budget_c)
        self.policy = policy
        self.temperature = temperature
        self.margin_c, self.approach_c, self.hysteresis_c = margin_c, approach_c, hysteresis_c
        self.control_period_s = control_period_s
        self.learn = (model is None) if learn is None else learn
        self.min_threads = max(1, min_threads)
        self.fit_in_background = fit_in_background
        self.clock = clock
        self.on_decision = on_decision
        self.decisions: list[Decision] = []
        self.max_temp_c: float | None = None
        self._horizon, self._dwell = horizon_s, dwell_s
        self._factory = session_factory or _default_factory(session)
        self._original = session
        self._session = session
        self._artifact = str(getattr(session, "artifact", None) or "original")
        self._stack: list[tuple[Any, str]] = []
        self._orig_threads = getattr(session, "threads", None)
        self._states: dict[str, ArtifactState] = {}
        self._state = ArtifactState(RateModel.from_thermal(model, load) if model is not None else None)
        # Pacing.
        self._limit_hz: float | None = None
        self._limiting = False
        self._guarding = False
        self._next_start: float | None = None
        self._latency_ema: float | None = None
        # Control bookkeeping.
        self._count = 0
        self._interval_count = 0
        self._recent_rate = 0.0
        self._last_control: float | None = None
        self._prev_temp: float | None = None
        self._no_temp = 0
        self._hist: deque[tuple[float, float, float]] = deque(maxlen=20000)
        self._hist_t0 = -math.inf  # learning uses history from here (reset by a switch)
        # Levers.
        self._last_change = -math.inf
        self._last_up = -math.inf
        self._backoff = 1.0
        # Learning.
        self._last_fit = -math.inf
        self._fit_job: threading.Thread | None = None
        self._fit_result: tuple[str, ThermalModel | None] | None = None
        self._owned_sampler: Sampler | None = None

    # ------------------------------------------------------------------ construction helper
    @classmethod
    def for_device(cls, session: Any, budget_c: float, policy: str = "pace", *, profile: Profile | None = None,
                   sysfs_root: str | os.PathLike[str] | None = None, rate_hz: float = 4.0,
                   vcgencmd: str | None = None, clock: Clock = SYSTEM_CLOCK, **kwargs: Any) -> ThermalGovernor:
        """A governor reading this device's thermal zones on its own background sampler.

        Raises:
            SensorError: No thermal zone can be read, so no budget can be kept.
        """
        from edgeserve.profiling.sampler import Sampler
        from edgeserve.profiling.sysfs import resolve_root
        from edgeserve.profiling.thermal import ThermalReader

        reader = ThermalReader(resolve_root(sysfs_root), profile, vcgencmd=vcgencmd)
        if not reader.available:
            raise SensorError(f"cannot keep a thermal budget: {reader.unavailable_reason}")
        sampler = Sampler(None, reader, rate_hz=rate_hz, clock=clock).start()
        if clock is SYSTEM_CLOCK:
            # The first reading is taken by the sampler's thread; wait for it (briefly), so
            # the governor knows the starting temperature before the first inference.
            deadline = time.monotonic() + 1.0
            while sampler.latest_temp() is None and time.monotonic() < deadline:
                time.sleep(0.002)
        gov = cls(session, budget_c, policy, temperature=sampler, clock=clock, **kwargs)
        gov._owned_sampler = sampler
        return gov

    # ------------------------------------------------------------------ public API
    @property
    def session(self) -> Any:
        """The session currently serving (a lighter one after a switch)."""
        return self._session

    @property
    def rate_limit_hz(self) -> float | None:
        return self._limit_hz

    @property
    def threads(self) -> int | None:
        return getattr(self._session, "threads", None)

    @property
    def artifact(self) -> str:
        return self._artifact

    def run(self, frame: Any) -> Any:
        """One inference, paced if needed; runs the control step when it is due."""
        now = self.clock.now()
        if self._last_control is None:  # first call: where the device starts from
            self._last_control = now
            temp = self.temperature()
            self._hist.append((now, math.nan if temp is None else temp, 0.0))
            self._hist_t0 = now
            self._prev_temp = temp
            if temp is not None:  # the starting temperature counts too (a short run may see no other)
                self.max_temp_c = temp
        elif now - self._last_control >= self.control_period_s:
            self.control()
        self._pace()
        t0 = self.clock.now()
        out = self._session.run(frame)
        latency = self.clock.now() - t0
        self._latency_ema = latency if self._latency_ema is None else 0.9 * self._latency_ema + 0.1 * latency
        self._count += 1
        self._interval_count += 1
        return out

    def history(self) -> np.ndarray:
        """Control history: rows of (time, temperature °C or NaN, achieved rate over the interval before)."""
        return np.array(self._hist, dtype=float).reshape(-1, 3)

    def mean_rate(self, t0: float, t1: float) -> float:
        """Achieved inference rate between two clock times (from the control history)."""
        h = self.history()
        if h.shape[0] < 2:
            return math.nan
        ends = h[:, 0]
        starts = np.concatenate([[ends[0]], ends[:-1]])
        overlap = np.clip(np.minimum(ends, t1) - np.maximum(starts, t0), 0, None)
        return float((h[:, 2] * overlap).sum() / overlap.sum()) if overlap.sum() > 0 else math.nan

    def stats(self) -> dict[str, Any]:
        h = self.history()
        m = self._state.model
        return {
            "policy": self.policy,
            "budget_c": self.budget_c,
            "inferences": self._count,
            "max_temp_c": self.max_temp_c,
            "rate_limit_hz": self._limit_hz,
            "threads": self.threads,
            "artifact": self._artifact,
            "model": None if m is None else {"a_c": m.a, "k_c_per_hz": m.k, "tau_s": m.tau, "source": m.source,
                                             "bias_c": self._state.bias},
            "mean_rate_hz": self.mean_rate(h[0, 0], h[-1, 0]) if h.shape[0] > 1 else None,
            "decisions": len(self.decisions),
        }

    def close(self) -> None:
        """Stop the governor's own sampler and close the sessions it opened (not the caller's)."""
        if self._owned_sampler is not None:
            self._owned_sampler.stop()
            self._owned_sampler = None
        while self._stack:
            self._close_current()
            self._session, self._artifact = self._stack.pop()

    def __enter__(self) -> ThermalGovernor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ control step
    @property
    def _model(self) -> RateModel | None:
        return self._state.model

    @property
    def _full_rate(self) -> float:
        return 1.0 / self._latency_ema if self._latency_ema else math.inf

    @property
    def _demand(self) -> float:
        """The rate the application asks for: observed while unlimited, else back to back."""
        d = self._state.demand_hz
        return d if d is not None else self._full_rate

    def _horizon_s(self) -> float:
        if self._horizon is not None:
            return self._horizon
        tau = self._model.tau if self._model else 0.0
        return max(4 * self.control_period_s, tau / 3)

    def _dwell_s(self) -> float:
        if self._dwell is not None:
            return self._dwell
        return max(3 * self.control_period_s, (self._model.tau / 2) if self._model else 10.0)

    def control(self) -> None:
        """One control step (called by :meth:`run` every ``control_period_s``)."""
        now = self.clock.now()
        dt = now - (self._last_control if self._last_control is not None else now)
        rate = self._interval_count / dt if dt > 0 else 0.0
        self._interval_count = 0
        self._last_control = now
        self._recent_rate = rate
        if self._limit_hz is None and rate > 0:  # unlimited: this is what the application wants
            d = self._state.demand_hz
            self._state.demand_hz = rate if d is None else 0.7 * d + 0.3 * rate
        temp = self.temperature()
        self._hist.append((now, math.nan if temp is None else temp, rate))
        if temp is None:
            self._no_temp += 1
            if self._no_temp == 3:
                self._decide(now, "sensor", None, None, "no temperature for 3 control periods: keeping the last limit")
            return
        self._no_temp = 0
        self.max_temp_c = temp if self.max_temp_c is None else max(self.max_temp_c, temp)
        self._update_model(now, temp, rate, dt)
        self._prev_temp = temp
        predicted = self._predict(temp, self._demand)
        if self.policy == "pace":
            self._pace_step(now, temp, predicted)
        else:
            self._lever_step(now, temp, predicted)

    def _predict(self, temp: float, rate: float) -> float | None:
        m = self._model
        if m is None or not math.isfinite(rate):
            # No model: extrapolate the measured slope over a short horizon.
            if len(self._hist) < 3:
                return None
            return temp + max(0.0, self._slope()) * self._free_horizon()
        return m.predict(temp, rate, self._state.bias, self._horizon_s())

    def _update_model(self, now: float, temp: float, rate: float, dt: float) -> None:
        job = self._fit_job
        if job is not None and not job.is_alive():
            self._fit_job = None
            if self._fit_result is not None:
                artifact, fit = self._fit_result
                self._fit_result = None
                if fit is not None and artifact == self._artifact:  # not stale after a switch
                    self._adopt(now, fit)
        m = self._model
        if m is not None and self._prev_temp is not None and dt > 0:
            # Offset observer: the innovation of a one-step prediction, with a small gain.
            predicted = m.predict(self._prev_temp, rate, self._state.bias, dt)
            self._state.bias += 0.2 * (temp - predicted)
        if not self.learn or self._fit_job is not None:
            return
        if now - self._last_fit < max(5 * self.control_period_s, (m.tau / 2) if m else 0.0):
            return
        h = self.history()
        h = h[h[:, 0] >= self._hist_t0]
        good = np.isfinite(h[:, 1])
        if good.sum() < 20 or np.ptp(h[good, 1]) < 1.0:
            return
        self._last_fit = now
        # Only the governor's first trace starts with the device at rest.
        at_rest = bool(self._hist and self._hist_t0 <= self._hist[0][0])
        if not self.fit_in_background:
            fit = learn(h, at_rest)
            if fit is not None:
                self._adopt(now, fit)
            return
        artifact = self._artifact

        def work() -> None:  # tens of milliseconds of numpy: off the inference thread
            self._fit_result = (artifact, learn(h, at_rest))

        self._fit_job = threading.Thread(target=work, name="edgeserve-governor-fit", daemon=True)
        self._fit_job.start()

    def _adopt(self, now: float, fit: ThermalModel) -> None:
        old = self._state.model
        self._state.model = RateModel(fit.t_amb_c, fit.r, fit.tau_s, "learned")
        self._state.bias = 0.0
        reason = (f"learned T_ss(f) = {fit.t_amb_c:.1f} + {fit.r:.3f}·f °C, τ = {fit.tau_s:.0f} s "
                  f"(rmse {fit.rmse_c:.2f} °C over {fit.points} points)")
        if old is not None and abs(fit.t_amb_c - old.a) < 0.5 and abs(fit.r - old.k) < 0.05 * old.k \
                and abs(fit.tau_s - old.tau) < 0.1 * old.tau:
            log.debug("governor refit, no material change: %s", reason)  # not a decision
            return
        self._decide(now, "model", self._prev_temp, None, reason)

    def _slope(self) -> float:
        """°C/s over the last few control periods (least squares), 0 with too few points."""
        h = self.history()[-5:]
        h = h[np.isfinite(h[:, 1])]
        if h.shape[0] < 3 or np.ptp(h[:, 0]) <= 0:
            return 0.0
        return float(np.polyfit(h[:, 0], h[:, 1], 1)[0])

    def _free_horizon(self) -> float:
        return 4 * self.control_period_s

    # --------------------------------------------------------------- pace
    def _pace_step(self, now: float, temp: float, predicted: float | None) -> None:
        target = self.budget_c - self.margin_c
        hot = temp >= self.budget_c - self.approach_c or (predicted is not None and predicted >= target)
        cool = temp <= self.budget_c - self.approach_c - self.hysteresis_c and (
            predicted is None or predicted <= target - self.hysteresis_c)
        if not self._limiting:
            if hot:
                self._limiting = True
                first = self._next_rate(temp)
                self._set_rate(now, temp, predicted, max(self._min_rate(), first or self._current_rate()), "limit",
                               "measured" if predicted is None or predicted < target else "predicted")
            return
        if cool and (self._limit_hz is None or self._limit_hz >= 0.95 * min(self._demand, self._full_rate)):
            self._limiting = False
            self._set_rate(now, temp, predicted, None, "release", "cool again")
            return
        allowed = self._next_rate(temp)
        if allowed is None:
            return
        allowed = max(self._min_rate(), allowed)
        if self._limit_hz is None or abs(allowed - self._limit_hz) > 0.02 * self._limit_hz:
            self._set_rate(now, temp, predicted, allowed, "rate", "tracking the budget", quiet=True)

    def _current_rate(self) -> float:
        if self._limit_hz is not None:
            return self._limit_hz
        if self._recent_rate > 0:
            return self._recent_rate
        full = self._full_rate
        return full if math.isfinite(full) else 1.0

    def _next_rate(self, temp: float) -> float | None:
        """The next rate limit, or None to keep the current one."""
        current = self._current_rate()
        m = self._model
        target = self.budget_c - self.margin_c
        if m is not None:
            # The steady state that brings `temp` to the target in one horizon, no sooner.
            e = math.exp(-self._horizon_s() / m.tau)
            allowed = m.rate_for((target - temp * e) / (1 - e), self._state.bias)
            if temp >= self.budget_c - self.margin_c / 2:  # the model says fine, the sensor disagrees
                allowed = min(allowed, current * 0.8)
            return allowed
        # No (credible) model: steer by the measured slope.
        slope = self._slope()
        horizon = self._free_horizon()
        room = target - temp
        if room <= 0:
            return current * 0.5
        if slope > 0 and room < slope * horizon:
            return current * max(0.3, room / (slope * horizon))
        if temp <= target - self.hysteresis_c and slope <= 0:
            return current * 1.1
        return None

    def _min_rate(self) -> float:
        full = self._full_rate
        return 0.01 * full if math.isfinite(full) else 0.01

    # --------------------------------------------------------------- threads / switch
    def _lever_step(self, now: float, temp: float, predicted: float | None) -> None:
        target = self.budget_c - self.margin_c
        hot = temp >= self.budget_c - self.approach_c or (predicted is not None and predicted >= target)
        cool = temp <= self.budget_c - self.approach_c - self.hysteresis_c
        since = now - self._last_change
        # Pacing guard: the levers are coarse; never let the measured temperature pass target.
        if temp >= target or self._guarding:
            self._guarding = True
            self._pace_step(now, temp, predicted)
            if not self._limiting:
                self._guarding = False
        if hot and since >= self._dwell_s():
            if self._step_down(now, temp, predicted):
                # Hot again soon after stepping up: wait longer before the next step up.
                if now - self._last_up < 2 * self._dwell_s() * self._backoff:
                    self._backoff = min(_MAX_BACKOFF, self._backoff * 2)
                return
            if not self._limiting:  # levers exhausted: pace
                self._guarding = True
                self._pace_step(now, temp, predicted)
        elif (cool and not self._limiting and since >= self._dwell_s() * self._backoff and self._up_is_safe()
              and self._step_up(now, temp, predicted)):
            self._last_up = now

    def _up_is_safe(self) -> bool:
        """Would one step up still settle below the budget? (True when it cannot be told.)"""
        limit = self.budget_c - self.margin_c - self.hysteresis_c
        demand, full = self._demand, self._full_rate
        # Held to a camera's rate (well below back to back) the application keeps that rate
        # after a step up; back to back it runs as fast as the new setting allows.
        paced_by_input = math.isfinite(full) and demand < 0.9 * full
        if self.policy == "threads":
            m, n = self._model, self._session.threads
            if m is None or not n or not math.isfinite(full):
                return True
            rate = demand if paced_by_input else full * (n + 1) / n  # linear scaling: errs towards staying
            return m.ss(rate, self._state.bias) <= limit
        if not self._stack:
            return False
        up = self._states.get(self._stack[-1][1])
        if up is None or up.model is None:
            return True  # never modelled there: try it (the back-off stops a flap)
        rate = demand if paced_by_input else (up.demand_hz or demand)
        return up.model.ss(rate, up.bias) <= limit

    def _step_down(self, now: float, temp: float, predicted: float | None) -> bool:
        if self.policy == "threads":
            n = self._session.threads
            if n is None or n <= self.min_threads:
                return False
            self._session.set_threads(n - 1)
            self._after_change(now, temp, predicted, "threads", f"hot: threads {n} → {n - 1}")
            return True
        path = self._lighter_alternative()
        if path is None:
            return False
        new = self._factory(path)
        old = self._artifact
        self._stack.append((self._session, self._artifact))
        self._enter_artifact(new, path, now)
        self._after_change(now, temp, predicted, "switch", f"hot: {os.path.basename(old)} → {os.path.basename(path)}")
        return True

    def _step_up(self, now: float, temp: float, predicted: float | None) -> bool:
        if self.policy == "threads":
            n = self._session.threads
            if n is None or self._orig_threads is None or n >= self._orig_threads:
                return False
            self._session.set_threads(n + 1)
            self._after_change(now, temp, predicted, "threads", f"cool: threads {n} → {n + 1}")
            return True
        if not self._stack:
            return False
        old = self._artifact
        self._close_current()
        session, artifact = self._stack.pop()
        self._enter_artifact(session, artifact, now)
        self._after_change(now, temp, predicted, "switch",
                           f"cool: {os.path.basename(old)} → {os.path.basename(artifact)}")
        return True

    def _enter_artifact(self, session: Any, artifact: str, now: float) -> None:
        """Serve ``artifact`` now: its own model, demand and learning history."""
        self._states[self._artifact] = self._state
        self._session, self._artifact = session, artifact
        self._state = self._states.get(artifact) or ArtifactState()
        self._hist_t0 = now
        self._last_fit = now

    def _after_change(self, now: float, temp: float, predicted: float | None, action: str, reason: str) -> None:
        self._last_change = now
        self._latency_ema = None  # a new speed: re-measure the unpaced rate
        self._next_start = None
        self._decide(now, action, temp, predicted, reason)

    def _lighter_alternative(self) -> str | None:
        """The heaviest alternative lighter than the current artifact (the smallest step down)."""
        current = getattr(self._session, "artifact_bytes", None)
        found = []
        for path in self._original.alternatives():
            if path == self._artifact or any(path == a for _, a in self._stack):
                continue
            try:
                size = os.path.getsize(path)
            except OSError:
                log.debug("governor: %s has no readable size; not a switch candidate", path)
                continue
            if current is None or size < current:
                found.append((size, path))
        return max(found)[1] if found else None

    def _close_current(self) -> None:
        if self._session is not self._original and hasattr(self._session, "close"):
            self._session.close()

    # --------------------------------------------------------------- pacing
    def _set_rate(self, now: float, temp: float, predicted: float | None, rate: float | None, action: str,
                  reason: str, quiet: bool = False) -> None:
        self._limit_hz = rate
        if rate is None:
            self._next_start = None
        self._decide(now, action, temp, predicted, reason, quiet=quiet)

    def _pace(self) -> None:
        if self._limit_hz is None:
            return
        period = 1.0 / self._limit_hz
        now = self.clock.now()
        # A schedule, not a fixed sleep: late starts (a slow inference, a busy machine) are
        # made up by the next ones, but never more than _MAX_CATCH_UP periods' worth: after
        # a real stall the schedule restarts instead of bursting.
        if self._next_start is None or self._next_start < now - _MAX_CATCH_UP * period:
            self._next_start = now
        if self._next_start > now:
            self.clock.sleep(self._next_start - now)
        self._next_start += period

    def _decide(self, now: float, action: str, temp: float | None, predicted: float | None, reason: str,
                quiet: bool = False) -> None:
        d = Decision(now, action, temp, predicted, self._limit_hz, self.threads, self._artifact, reason)
        self.decisions.append(d)
        (log.debug if quiet else log.info)(
            "governor %s: %s (T=%s, predicted=%s, limit=%s Hz, threads=%s, artifact=%s)", action, reason,
            None if temp is None else f"{temp:.1f}", None if predicted is None else f"{predicted:.1f}",
            None if self._limit_hz is None else f"{self._limit_hz:.2f}", d.threads, d.artifact)
        if self.on_decision is not None:
            self.on_decision(d)
