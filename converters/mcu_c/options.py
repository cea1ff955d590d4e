"""mcu-c's options: the microcontroller targets' (--name, --no-fit-check) and its own --cmsis-nn."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from edgeserve.converters.microcontroller.int8_source import Options as MicrocontrollerOptions


@dataclasses.dataclass(frozen=True)
class Options(MicrocontrollerOptions):
    cmsis_nn: Any = None  # --cmsis-nn: a CMSIS-NN source tree to call (None: CMSIS_NN_DIR, or the C kernels)
    kernels: str = "portable"  # --kernels: "generated" specialises the layers specialise.py covers

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> "Options":
        shared = MicrocontrollerOptions.from_mapping(options)
        return cls(name=shared.name, fit_check=shared.fit_check, cmsis_nn=options.get("cmsis_nn"),
                   kernels=options.get("kernels") or "portable")
