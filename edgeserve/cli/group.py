"""The ``edgeserve`` command group: how every command reports a problem, and the logging set up
before any of them runs.

stdout carries results only (one JSON document with ``--json``); progress and logs go to
stderr. A problem the user can fix prints one line and exits 1 (``--debug`` adds the
traceback); a usage error exits 2. Heavy frameworks are imported inside commands.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import click

from edgeserve import __version__
from edgeserve.cli.options import emit_json
from edgeserve.errors import EdgeServeError

log = logging.getLogger("edgeserve")


# Flags of the top-level group that mean the same wherever they stand on the line.
_GLOBAL_FLAGS = ("-q", "--quiet", "--debug")


class Group(click.Group):
    """Turns EdgeServeError into one readable line and exit code 1.

    ``-q``/``--debug`` are accepted anywhere on the line (``edgeserve run X -q``), and with
    ``--json`` an error is also a JSON object on stdout, so a script always has JSON to read.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        end = args.index("--") if "--" in args else len(args)
        head, tail = args[:end], args[end:]
        front = [a for a in head if a in _GLOBAL_FLAGS]
        ctx.meta["edgeserve.json"] = "--json" in head
        return super().parse_args(ctx, front + [a for a in head if a not in _GLOBAL_FLAGS] + tail)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except EdgeServeError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            if ctx.meta.get("edgeserve.json"):
                payload: dict[str, Any] = {"error": exc.for_cli(), "kind": type(exc).__name__}
                # A conversion over its accuracy bound still wrote its artifacts and manifest:
                # one JSON document carries both, not the manifest and then the error.
                manifest = getattr(getattr(exc, "result", None), "manifest", None)
                if manifest is not None:
                    payload["manifest"] = manifest
                emit_json(payload)
            click.echo(f"error: {exc.for_cli()}", err=True)
            ctx.exit(1)
        except click.UsageError as exc:
            if ctx.meta.get("edgeserve.json"):
                emit_json({"error": exc.format_message(), "kind": "usage"})
            raise
        except KeyboardInterrupt:
            # Outputs are staged (edgeserve.manifest.staging): an interrupted convert left OUT as it was.
            if ctx.meta.get("edgeserve.json"):
                emit_json({"error": "interrupted", "kind": "interrupted"})
            click.echo("error: interrupted; nothing was changed", err=True)
            ctx.exit(130)


def _setup_logging(debug: bool, quiet: bool) -> None:
    from rich.logging import RichHandler

    from edgeserve.console import ui_stream

    level = logging.DEBUG if debug else (logging.ERROR if quiet else logging.WARNING)
    from rich.console import Console

    handler = RichHandler(console=Console(file=ui_stream(), stderr=True), show_time=False, show_path=debug)
    root = logging.getLogger("edgeserve")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="edgeserve")
@click.option("--debug", is_flag=True, help="Show debug logs (and native library output) and tracebacks.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars; only errors on stderr.")
@click.pass_context
def cli(ctx: click.Context, debug: bool, quiet: bool) -> None:
    """Put one trained model on edge and mobile devices, verified."""
    ctx.obj = {"debug": debug, "quiet": quiet}
    if not debug:
        # TensorFlow's C++ INFO lines (the oneDNN notice, printed once per import path) are
        # not results; --debug keeps them. Set before any command imports TensorFlow.
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    _setup_logging(debug, quiet)
