"""The quality gate's bounds as a target reads them from the convert flags: GateOptions, made
once from the flags (from_mapping) and read by attribute, with the defaults the gate applies."""

from __future__ import annotations

import dataclasses
from typing import Any

DEFAULT_MIN_SQNR_DB = 10.0
#: Percent of samples whose top-1 must equal the float model's, for a classifier judged without
#: labels. Measured on the corpus (benchmarks/corpus.py): INT8 classifiers that work agree on
#: 87.5-100 % of their calibration-like inputs (fer's emotion model, PaddleOCR's direction
#: classifier on crops that are mostly not text, PP-LCNet's orientation classifier); a classifier
#: with half its answers moved agrees on about 50 % (tests/test_quality_gate.py).
DEFAULT_MIN_AGREEMENT = 85.0


@dataclasses.dataclass(frozen=True)
class GateOptions:
    """The gate's bounds as a target reads them from the convert options (CLI flags)."""

    max_drop: float = 1.0
    min_sqnr_db: float = DEFAULT_MIN_SQNR_DB
    min_agreement: float = DEFAULT_MIN_AGREEMENT
    metric: str | None = None
    # A recorded decoder (--decoder: the OutputSpec as a dict) judges detections, with these bounds
    # (--min-detection-match, --max-score-error; None: the detection gate's defaults).
    output: Any = None
    min_detection_match: float | None = None
    max_score_error: float | None = None

    @classmethod
    def from_mapping(cls, options: Any) -> Any:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in options.items() if k in known and v is not None})
