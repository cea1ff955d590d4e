"""What one tflite-int8 conversion learns as it goes, handed from step to step.

The converter object holds no state of a run: each route the search tries (the first float
model, the other ONNX route's, the tf2onnx way round a crashed TensorFlow converter) has a
``Run`` of its own, and the one whose attempts are kept is the one written. Trying another
route and going back to the first is keeping the first ``Run``, not restoring fields.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from edgeserve.converters.tflite_int8.attempts import Options


@dataclasses.dataclass
class Run:
    ctx: Any  # edgeserve.converters._base.ConversionContext
    opts: Options
    # The float .tflite the quantizer route starts from (edgeserve.sources.FloatTflite); None on
    # TensorFlow's own route, which starts from the SavedModel.
    floated: Any = None
    # The manifest's "route": the quantizer, the tools, the float model, and what the search did.
    route_record: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Outputs whose float values join ranges one int8 scale cannot hold (found before quantizing).
    mixed: dict[int, dict[str, Any]] = dataclasses.field(default_factory=dict)
    # The source outputs the int8 attempt failed on, and the tensors feeding them: the remedies
    # that follow look there first.
    failed: list[int] = dataclasses.field(default_factory=list)
    focus: set[str] | None = None
    # Operators whose int8 kernel LiteRT refused to run ((operator, output tensor), from its
    # "Node number N (OP) failed to invoke"): the remedy that follows keeps them float.
    refused: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    # Why the per-layer table is missing or empty, for the report.
    layers_note: str | None = None

    def on_route(self, floated: Any) -> Run:
        """A run of the same conversion on another float model: nothing learnt on this one
        (its verdicts, its per-layer table) carries over."""
        return Run(self.ctx, self.opts, floated=floated, mixed=self.mixed)

    def noted(self, **fields: Any) -> None:
        """Add ``fields`` to the route record (a new dict: an earlier copy stays as it was)."""
        self.route_record = self.route_record | fields
