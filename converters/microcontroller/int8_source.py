"""What both microcontroller targets (mcu: TFLM; mcu-c: plain C) build from: the full-INT8
model of this run, the C name of the model, and the options they share (--name, --no-fit-check)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from edgeserve.converters._base import ConversionContext
from edgeserve.converters.microcontroller.names import c_identifier
from edgeserve.errors import InputError, VerificationError


@dataclasses.dataclass(frozen=True)
class Options:
    """The microcontroller targets' options (CLI: --name, --no-fit-check)."""

    name: str | None = None
    fit_check: bool = True

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> "Options":
        name = options.get("name")
        return cls(name=c_identifier(name) if name else None, fit_check=bool(options.get("fit_check", True)))


def full_int8_model(ctx: ConversionContext, target: str) -> tuple[bytes, str]:
    """The full-INT8 model a microcontroller target builds from: the .tflite source, or the
    tflite-int8 artifact of this run; its bytes and where they came from."""
    if ctx.source.kind == "tflite":
        return ctx.source.path.read_bytes(), ctx.source.path.name
    entry = ctx.artifacts.get("tflite-int8")
    if entry is None or entry.get("status") != "ok":
        raise VerificationError(f"the {target} target is built from tflite-int8's artifact, which this run did not produce")
    no_rule = entry.get("no_int8_rule") or {}
    if no_rule:
        op, where = next(iter(no_rule.items()))
        raise InputError(
            f"the {target} target needs a full-integer model, and tflite-int8's artifact computes {', '.join(no_rule)} "
            f"in float (ai-edge-quantizer has no int8 rule for {'it' if len(no_rule) == 1 else 'them'}; {op} at {where}). "
            f"Replace {op} in the source model with operators that quantize")
    quantization = entry.get("quantization") or {}
    floated = quantization.get("float_layers") or []
    # A float tail is split off into integer outputs (split_tail.py); other float layers stay float.
    if floated and quantization.get("scheme") != "float-tail":
        raise InputError(
            f"the {target} target needs a full-integer model, and tflite-int8 met its quality gate only by keeping "
            f"{len(floated)} layer(s) in float ({', '.join(floated[:4])}{', ...' if len(floated) > 4 else ''}); "
            f"all-INT8 it missed {_missed_bound(entry)}. Give calibration data closer to what the model sees, or "
            "accept that error with the bound named")
    return (ctx.out_dir / entry["path"]).read_bytes(), entry["path"]


def _missed_bound(entry: dict[str, Any]) -> str:
    """The bound the all-INT8 attempt missed, with its flag ("... < min 10 dB (--min-sqnr)")."""
    first = next((a for a in entry.get("attempts") or [] if a.get("remedy") == "int8"), None)
    reason = (first or {}).get("reason") or "its bound"
    flag = "--min-agreement" if "agreement" in reason else "--min-sqnr" if "SQNR" in reason else "--max-drop"
    return f"{reason} ({flag})"


def default_name(stem: str) -> str:
    """A C identifier from a file name: ``vww_96-int8`` → ``vww_96_int8``, ``1x`` → ``m_1x``."""
    from edgeserve.converters.microcontroller.names import MAX_NAME

    from edgeserve.converters.microcontroller.names import untaken

    name = re.sub(r"_+", "_", re.sub(r"[^a-z0-9_]+", "_", stem.lower())).strip("_")[:MAX_NAME].rstrip("_") or "model"
    name = name if not name[0].isdigit() else f"m_{name}"[:MAX_NAME].rstrip("_")
    return untaken(name)  # main.tflite -> main_model
