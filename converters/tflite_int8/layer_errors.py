"""Per-layer quantization error from TensorFlow's QuantizationDebugger.

For every quantized activation the debugger runs float and int8 side by side and
records the error. Two figures make the table readable:

* ``rmse_per_scale``: RMS error in units of the layer's quantization step. Pure rounding
  noise is 1/sqrt(12) ≈ 0.29 steps; well above that means the range is badly chosen
  (outliers stretched the scale) or the layer itself is sensitive.
* ``sqnr_db``: signal-to-quantization-noise ratio of the layer's output; lower is worse.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

ROUNDING_NOISE_STEPS = 1 / math.sqrt(12)
# One module in litert-torch's tensor names: "package.module.ClassName" and "_attribute" when
# the module is an attribute of its parent (the root has none).
_TORCH_FRAME = re.compile(r"^[a-z_]\w*(?:\.\w+)*\.([A-Z][A-Za-z0-9]*)(?:_(\w+))?$")


@dataclasses.dataclass(frozen=True)
class LayerError:
    tensor: str  # the full (fused) tensor name, what denylisting takes
    op: str
    elements: int
    rmse_per_scale: float
    sqnr_db: float | None
    max_abs_error: float
    scale: float

    @property
    def short_name(self) -> str:
        """The first of the fused names, without the model prefix (what a user recognises).
        litert-torch names a tensor by the modules it was computed in, each as its class's
        full name and its attribute name ("torch.nn.modules.container.Sequential_features/
        torch.nn.modules.conv.Conv2d_0"): that reads as the module path, "features.0 (Conv2d)"."""
        first, *rest = self.tensor.split(";")
        parts = first.split("/")
        frames = [_TORCH_FRAME.match(part) for part in parts]
        if first and all(frames):
            path = ".".join(f.group(2) for f in frames if f and f.group(2))
            kind = frames[-1].group(1) if frames[-1] else ""
            if path:
                return f"{path} ({kind})"
            # Computed in the root module itself (every tensor of edgeserve's ONNX reader, whose
            # graph is one module): the class names nothing, so the operator and litert-torch's
            # tensor number tell the layers apart ("TANH #62" rather than "OnnxGraph" each time).
            number = next((r for r in reversed(rest) if r.isdigit()), None)
            return f"{self.op} #{number} ({kind})" if number else kind
        return "/".join(parts[1:]) if len(parts) > 2 else first

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["layer"] = self.short_name
        return d


def _sqnr_db(float_values: np.ndarray, quant_values: np.ndarray, scale: float, zero_point: int) -> float:
    """SQNR of one sample's layer output (the debugger calls this per sample, then averages)."""
    with np.errstate(all="ignore"):
        f = np.asarray(float_values, np.float64)
        dq = (np.asarray(quant_values, np.float64) - zero_point) * scale
        finite = np.isfinite(f) & np.isfinite(dq)
        signal = float(np.sum(np.square(f[finite])))
        noise = float(np.sum(np.square(f[finite] - dq[finite])))
    if noise == 0.0 or signal == 0.0:
        return float("nan")  # the debugger's CSV cannot carry None; nanmean skips it, mapped back below
    return 10.0 * math.log10(signal / noise)


def layer_errors(
    make_converter: Callable[[], Any],
    debug_dataset: Callable[[], Iterator[list[np.ndarray]]],
    denylisted_nodes: Sequence[str] = (),
) -> list[LayerError]:
    """Run the debugger; return layers sorted worst first (by RMSE per quantization step)."""
    import tensorflow as tf

    options = tf.lite.experimental.QuantizationDebugOptions(
        layer_direct_compare_metrics={"sqnr_db": _sqnr_db},
        denylisted_nodes=list(denylisted_nodes) or None,
    )
    debugger = tf.lite.experimental.QuantizationDebugger(
        converter=make_converter(), debug_dataset=debug_dataset, debug_options=options
    )
    debugger.run()
    text = io.StringIO()
    debugger.layer_statistics_dump(text)
    rows = list(csv.DictReader(io.StringIO(text.getvalue())))
    layers = [_row_to_layer(r) for r in rows]
    return sorted(layers, key=lambda l: l.rmse_per_scale, reverse=True)


def float_layers_model(make_converter: Callable[[], Any], debug_dataset: Callable[[], Iterator[list[np.ndarray]]],
                       denylisted_nodes: Sequence[str], integer_io: bool) -> bytes:
    """A model with the named layers kept in float and everything else quantized."""
    import tensorflow as tf

    options = tf.lite.experimental.QuantizationDebugOptions(
        denylisted_nodes=list(denylisted_nodes), fully_quantize=integer_io
    )
    debugger = tf.lite.experimental.QuantizationDebugger(
        converter=make_converter(), debug_dataset=debug_dataset, debug_options=options
    )
    return bytes(debugger.get_nondebug_quantized_model())


def _row_to_layer(row: dict[str, str]) -> LayerError:
    scale = float(row["scale"])
    mse = float(row["mean_squared_error"])
    sqnr = float(row.get("sqnr_db") or "nan")
    return LayerError(
        tensor=row["tensor_name"],
        op=row["op_name"],
        elements=int(float(row["num_elements"])),
        rmse_per_scale=round(math.sqrt(mse) / scale, 4) if scale > 0 else 0.0,
        sqnr_db=None if math.isnan(sqnr) else round(sqnr, 2),
        max_abs_error=float(row["max_abs_error"]),
        scale=scale,
    )


class LayerTable:
    """The per-layer error table, measured once, when first asked for."""

    def __init__(self, measure: Callable[[], list[LayerError]]) -> None:
        self._measure = measure
        self._table: list[LayerError] | None = None

    @property
    def measured(self) -> bool:
        return self._table is not None

    def get(self) -> list[LayerError]:
        if self._table is None:
            self._table = self._measure()
        return self._table

    def measured_or_empty(self) -> list[LayerError]:
        return self._table if self._table is not None else []
