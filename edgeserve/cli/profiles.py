"""``edgeserve profiles`` and ``profiles show``: the device profiles."""

from __future__ import annotations

import click

from edgeserve.cli.group import Group
from edgeserve.cli.options import emit_json


@click.group(cls=Group, invoke_without_command=True)
@click.option("--json", "json_out", is_flag=True, help="Print JSON on stdout.")
@click.pass_context
def profiles(ctx: click.Context, json_out: bool) -> None:
    """List device profiles, or `profiles show NAME`."""
    if ctx.invoked_subcommand is not None:
        return
    from edgeserve.device_profiles import list_profiles, load_profile

    rows = [load_profile(n) for n in list_profiles()]
    if json_out:
        emit_json([{"name": p.name, "kind": p.kind, "description": p.description} for p in rows])
    else:
        from edgeserve.cli.report import print_profiles

        print_profiles(rows)


@profiles.command("show")
@click.argument("name")
@click.option("--json", "json_out", is_flag=True, help="Print JSON on stdout.")
def profiles_show(name: str, json_out: bool) -> None:
    """Show one profile (a bundled NAME or a path to a .toml file)."""
    from edgeserve.device_profiles import load_profile

    profile = load_profile(name)
    if json_out:
        emit_json(profile.to_dict())
    else:
        from edgeserve.cli.report import print_profile

        print_profile(profile)
