"""``edgeserve targets``: the conversion targets."""

from __future__ import annotations

import click

from edgeserve.cli.options import emit_json


@click.command()
@click.option("--json", "json_out", is_flag=True, help="Print JSON on stdout.")
def targets(json_out: bool) -> None:
    """List the conversion targets."""
    from edgeserve.converters import get_converter, target_names

    rows = [{"name": n, "summary": get_converter(n).summary} for n in target_names()]
    if json_out:
        emit_json(rows)
    else:
        width = max(len(r["name"]) for r in rows)
        for r in rows:
            click.echo(f"{r['name']:<{width}}  {r['summary']}")
