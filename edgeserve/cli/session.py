"""What every command that opens a Session shares (``run``, ``bench``, ``profile``): its
options, how it opens the Session, and how its tables print."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from edgeserve.cli.options import preprocess_options, spec_overrides
from edgeserve.errors import InputError


KINDS = ("npu", "gpu", "cpu")


MAX_THREADS = 256


def session_options(f: Any) -> Any:
    """Options every command that opens a Session shares."""
    opts = [
        click.option("-p", "--profile", help="Device profile: the backend chain, threads, delegate libraries."),
        click.option("--backend", default="auto", show_default=True,
                     help="auto (the profile's chain) or one backend, e.g. litert:xnnpack, onnxruntime:cuda."),
        click.option("--require", type=click.Choice(KINDS),
                     help="Fail unless a backend of this kind runs the model (no fallback to others)."),
        click.option("--threads", type=click.IntRange(min=1, max=MAX_THREADS),
                     help="CPU threads (default: the profile's)."),
        click.option("--target", help="Serve this manifest target only (e.g. tflite-int8)."),
        click.option("--labels", type=click.Path(dir_okay=False, path_type=Path), help="Class names, one per line."),
        click.option("--public-key", type=click.Path(dir_okay=False, path_type=Path),
                     help="Serve only a manifest signed by this Ed25519 public key (PEM)."),
    ]
    for option in reversed(opts):
        f = option(f)
    return preprocess_options(f)


def open_session(artifact: Path, profile: str | None, backend: str, require: str | None, threads: int | None,
                 target: str | None, labels: Path | None, preprocess_file: Path | None,
                 spec_flags: dict[str, Any], public_key: Path | None = None, announce: bool = True) -> Any:
    """The Session the flags describe; ``announce``: say on stderr which preprocessing the flags override."""
    from edgeserve.runtime import Session

    spec = spec_overrides(preprocess_file, spec_flags)
    session = Session(artifact, profile, preprocess=spec, backend=backend, require=require, threads=threads,
                      target=target, labels=labels, public_key=public_key)
    if session.preprocess_overrides and announce and not quiet():
        rest = "the rest as recorded" if session.preprocess_recorded else \
            "the rest from the model's input (the artifact records no preprocessing)"
        click.echo(f"preprocess: {', '.join(session.preprocess_overrides)} overridden, {rest}", err=True)
    return session


def read_toml(path: Path) -> dict[str, Any]:
    import tomllib

    from edgeserve.atomic import read_settings

    try:
        return tomllib.loads(read_settings(path).decode("utf-8", "replace"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"{path}: expected a TOML file of decoder options: {exc}") from exc
    except RecursionError as exc:
        raise InputError(f"{path} nests tables or arrays too deeply to read") from exc


def placement(p: dict[str, Any]) -> str:
    if p["total_ops"] is None or p["accelerated_ops"] is None:
        return p["note"] or "placement unknown"
    return f"{p['accelerated_ops']}/{p['total_ops']} ops on {p['taken_by']}"


def quiet() -> bool:
    ctx = click.get_current_context(silent=True)
    root = ctx.find_root() if ctx else None
    return bool(root and root.obj and root.obj.get("quiet"))
