"""The result of one profiling run: what ``measure`` produces and ``report`` draws.

Its own module so that the measuring code and the report writer both depend on it and
not on each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgeserve.profiling.sampler import Trace
from edgeserve.profiling.thermal_model import LoadModel, ThermalModel

__all__ = ["ProfileResult"]


@dataclass
class ProfileResult:
    """Everything one profiling run produced.

    Attributes:
        summary: The JSON document (``edgeserve profile --json``).
        trace: Sampled power and temperature.
        power_w: Interval power for plots: (times, watts), empty without a source.
        latencies: Rows of (start time, latency ms) on the trace's clock.
        model: The fitted thermal model, if any.
    """

    summary: dict[str, Any]
    trace: Trace
    power_w: tuple[np.ndarray, np.ndarray]
    latencies: np.ndarray
    model: ThermalModel | None = None
    load: LoadModel | None = None
    notes: list[str] = field(default_factory=list)
