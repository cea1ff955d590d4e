"""``edgeserve profile``: energy per inference and thermal behaviour of an artifact (issue 5, in progress)."""

from __future__ import annotations

import click


@click.command()
def profile() -> None:
    """Measure energy per inference and temperature (not implemented yet)."""
    raise click.UsageError("edgeserve profile is not implemented yet")
