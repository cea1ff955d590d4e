"""``edgeserve cache``: the targets kept between output folders."""

from __future__ import annotations

import click

from edgeserve.cli.options import emit_json


@click.command("cache")
@click.option("--clear", is_flag=True, help="Remove every cached target.")
@click.option("--json", "json_out", is_flag=True, help="Print JSON on stdout.")
def cache_command(clear: bool, json_out: bool) -> None:
    """Show (or --clear) the targets kept between output folders: where, how many, how big."""
    from edgeserve.conversion import cache

    removed = cache.clear() if clear else None
    info = cache.describe() | ({"removed": removed} if removed is not None else {})
    if json_out:
        emit_json(info)
        return
    if removed is not None:
        click.echo(f"removed {removed} cached target(s) from {info['path']}")
    else:
        state = "" if info["enabled"] else " (off: EDGESERVE_TARGET_CACHE)"
        click.echo(f"{info['path']}: {info['entries']} target(s), {info['bytes']:,} bytes of at most "
                   f"{info['max_bytes']:,} (EDGESERVE_TARGET_CACHE_MAX_BYTES){state}")
