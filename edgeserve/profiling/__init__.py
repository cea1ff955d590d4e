"""Energy, power sources, thermal sampling and the thermal governor (``edgeserve profile``).

The public names below are imported on first use, so ``import edgeserve.profiling`` is
free until something is used.

Example:
    >>> from edgeserve.profiling import ThermalGovernor, profile_run  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "profile_run": "run",
    "measure": "run",
    "ProfileResult": "run",
    "ThermalGovernor": "governor",
    "Decision": "governor",
    "Sampler": "sampler",
    "Trace": "sampler",
    "ThermalReader": "thermal",
    "open_power_source": "power",
    "ProbeContext": "power",
    "ActivityMeter": "power",
    "PowerSeries": "energy",
    "ThermalModel": "thermal_model",
    "LoadModel": "thermal_model",
    "fit_first_order": "thermal_model",
    "sustainable_rate": "thermal_model",
    "SimulatedPlant": "plant",
    "SimulatedSession": "plant",
    "PlantParams": "plant",
    "ScaledClock": "clock",
    "SimClock": "clock",
    "ManualClock": "clock",
    "SYSTEM_CLOCK": "clock",
    "SensorError": "sysfs",
}

__all__ = [
    "SYSTEM_CLOCK",
    "ActivityMeter",
    "Decision",
    "LoadModel",
    "ManualClock",
    "PlantParams",
    "PowerSeries",
    "ProbeContext",
    "ProfileResult",
    "Sampler",
    "ScaledClock",
    "SensorError",
    "SimClock",
    "SimulatedPlant",
    "SimulatedSession",
    "ThermalGovernor",
    "ThermalModel",
    "ThermalReader",
    "Trace",
    "fit_first_order",
    "measure",
    "open_power_source",
    "profile_run",
    "sustainable_rate",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'edgeserve.profiling' has no attribute {name!r}")
    return getattr(importlib.import_module(f"edgeserve.profiling.{module}"), name)
