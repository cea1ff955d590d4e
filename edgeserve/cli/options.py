"""Pieces every ``edgeserve`` command shares: JSON output, progress, the PreprocessSpec flags.

Kept apart from the command group (group.py) so each command's module can import them
without importing the group or the other commands.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


def progress_for(ctx: click.Context) -> Any:
    from edgeserve.console import Progress

    # In a terminal, bars; in a log file or a CI job's pipe, one line per finished stage. A
    # stderr with no descriptor (click's CliRunner, an embedding app) gets neither.
    try:
        real = sys.stderr.fileno() >= 0
    except (AttributeError, OSError, ValueError):
        real = False
    return Progress(enabled=not ctx.obj["quiet"] and real, plain=not sys.stderr.isatty())


def _parse_floats(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[float, ...] | None:
    if value is None:
        return None
    try:
        return tuple(float(v) for v in value.split(","))
    except ValueError:
        raise click.BadParameter(f"expected comma-separated numbers, e.g. 0.485,0.456,0.406; got {value!r}")


def _parse_size(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    try:
        h, w = (int(v) for v in value.lower().split("x"))
        return (h, w)
    except ValueError:
        raise click.BadParameter(f"expected HEIGHTxWIDTH, e.g. 224x224; got {value!r}")


def _scale(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        if "/" in value:
            num, den = value.split("/")
            return float(num) / float(den)
        return float(value)
    except (ValueError, ZeroDivisionError):
        raise click.BadParameter(f"expected a number or a fraction such as 1/255; got {value!r}")


def preprocess_options(f: Any) -> Any:
    """The PreprocessSpec flags, shared by every command that reads images."""
    from edgeserve.preprocess import COLORS, CROPS, INTERPOLATIONS, LAYOUTS, RESIZE_MODES

    opts = [
        click.option("--preprocess", "preprocess_file", type=click.Path(dir_okay=False, path_type=Path),
                     help="PreprocessSpec TOML file; the flags below override its values."),
        click.option("--size", callback=_parse_size, help="Model input HEIGHTxWIDTH (default: from the model)."),
        click.option("--color", type=click.Choice(COLORS), help="Channel order the model expects."),
        click.option("--layout", type=click.Choice(LAYOUTS), help="Input tensor layout."),
        click.option("--resize-mode", type=click.Choice(RESIZE_MODES), help="stretch, or letterbox (keep aspect, pad)."),
        click.option("--crop", type=click.Choice(CROPS), help="Centre-crop to the input aspect ratio before resizing."),
        click.option("--crop-fraction", type=float, help="Fraction kept by --crop center (ImageNet: 0.875)."),
        click.option("--interpolation", type=click.Choice(INTERPOLATIONS), help="Resize filter."),
        click.option("--scale", callback=_scale, help="Multiply raw pixels by this first (default 1/255)."),
        click.option("--mean", callback=_parse_floats, help="Per-channel mean subtracted after scaling, e.g. 0.485,0.456,0.406."),
        click.option("--std", callback=_parse_floats, help="Per-channel std divided after the mean."),
    ]
    for option in reversed(opts):
        f = option(f)
    return f


_SPEC_FLAGS = ("size", "color", "layout", "resize_mode", "crop", "crop_fraction", "interpolation", "scale", "mean", "std")


def spec_overrides(preprocess_file: Path | None, flags: dict[str, Any]) -> Any:
    """What `run` and `bench` pass as ``Session(preprocess=...)``: a whole spec from a TOML file
    (flags applied on top), else only the fields given as flags (the rest stays as recorded),
    else None."""
    if preprocess_file is not None:
        return spec_from_flags(preprocess_file, flags)
    given = {k: flags[k] for k in _SPEC_FLAGS if flags.get(k) is not None}
    if isinstance(given.get("size"), tuple):
        given["size"] = list(given["size"])
    return given or None


def spec_from_flags(preprocess_file: Path | None, flags: dict[str, Any]) -> Any:
    """A PreprocessSpec from a TOML file and/or flags, or None when neither was given."""
    import dataclasses

    from edgeserve.preprocess import PreprocessSpec

    given = {k: flags[k] for k in _SPEC_FLAGS if flags.get(k) is not None}
    if preprocess_file is None and not given:
        return None
    base = PreprocessSpec.from_toml(preprocess_file) if preprocess_file else PreprocessSpec()
    if given.get("color") == "gray" and "mean" not in given and len(base.mean) > 1:
        given["mean"], given["std"] = (0.0,), (1.0,)
    return dataclasses.replace(base, **given)
