"""tflite-int8's options and the record of each attempt: the remedy tried, its model and the
gate's verdict (shared with the mcu target, which judges its TFLM rewrites the same way)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from edgeserve.converters.tflite_int8.layer_errors import LayerError
from edgeserve.errors import InputError
from edgeserve.quality.metrics import MetricResult
from edgeserve.quality.gate import Verdict
from edgeserve.quality.options import GateOptions

IO_TYPES = ("int8", "uint8", "float")


@dataclasses.dataclass(frozen=True)
class Options(GateOptions):
    """tflite-int8 options: the gate's bounds every target reads (GateOptions: --max-drop,
    --min-sqnr, --metric, ...) and its own (--io, --debug-samples, --per-layer, --remedy-budget,
    --max-float-macs)."""

    io: str = "int8"
    debug_samples: int = 32
    per_layer: bool = False  # measure the per-layer error table even when no remedy needs it
    # Seconds the quantization attempts (int8, then each remedy, with the per-layer table) may
    # take together; past them the search stops and keeps the best attempt so far.
    remedy_budget_s: float = 900.0
    # The largest share (percent) of multiply-accumulates an attempt may compute in float and
    # still be called a tflite-int8 success.
    max_float_macs: float = 50.0

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> "Options":
        known = {f.name for f in dataclasses.fields(cls)}
        opts = cls(**{k: v for k, v in options.items() if k in known and v is not None})
        if opts.io not in IO_TYPES:
            raise InputError(f"--io must be one of {', '.join(IO_TYPES)}; got {opts.io!r}")
        if opts.max_drop < 0:
            raise InputError(f"--max-drop must be >= 0 percentage points; got {opts.max_drop}")
        if not 0 <= opts.max_float_macs <= 100:
            raise InputError(f"--max-float-macs is a percentage, 0 to 100; got {opts.max_float_macs}")
        if not opts.remedy_budget_s > 0:
            raise InputError(f"--remedy-budget must be a number of seconds above 0; got {opts.remedy_budget_s}")
        return opts


@dataclasses.dataclass(frozen=True)
class Remedy:
    name: str  # "int8", "float-refused", "float-tail", "int16x8", "float-front" or "float-layers"
    description: str
    float_layers: tuple[LayerError, ...] = ()
    # (operator, output tensor) kept float: at an output (float-tail), or feeding an operator
    # the quantizer has no int8 rule for (float-front)
    float_tail: tuple[tuple[str, str], ...] = ()

    @property
    def keep_float(self) -> list[str]:
        """The tensors whose operators stay float, as the quantizer names them."""
        return [l.tensor for l in self.float_layers] + [tensor for _, tensor in self.float_tail]

    @property
    def float_names(self) -> list[str]:
        return [l.short_name for l in self.float_layers] + [f"{op} '{tensor}'" for op, tensor in self.float_tail]


@dataclasses.dataclass
class Attempt:
    remedy: Remedy
    status: str  # "ok", "drop too large", "error", "skipped"
    reason: str = ""
    model: bytes | None = None
    metrics: MetricResult | None = None
    agreement: dict[str, float | None] | None = None
    integer_problems: list[str] = dataclasses.field(default_factory=list)
    io_dtype: str | None = None
    output_sqnr_db: dict[str, float | None] | None = None  # per output, against the float source
    verdict: Verdict | None = None  # the quality gate on every output
    outputs: list[np.ndarray] | None = None  # dequantized, on the evaluation set, in the artifact's order
    # Operators left float because the quantizer has no int8 rule for them (operator -> where).
    no_int8_rule: dict[str, str] = dataclasses.field(default_factory=dict)
    stopped: bool = False  # killed when the remedy budget ran out: no later remedy is tried
    macs: dict[str, Any] | None = None  # edgeserve.mac_share: multiply-accumulates by activation type

    def to_dict(self) -> dict[str, Any]:
        return {
            "remedy": self.remedy.name,
            "description": self.remedy.description,
            "status": self.status,
            "reason": self.reason,
            "float_layers": self.remedy.float_names,
            "metrics": self.metrics.to_dict() if self.metrics else None,
            "agreement": self.agreement,
            "output_sqnr_db": self.output_sqnr_db,
            "quality": self.verdict.to_dict() if self.verdict else None,
            "integer_only": not self.integer_problems if self.model else None,
        }
