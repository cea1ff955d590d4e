"""``edgeserve verify``: every artifact of a manifest checked again."""

from __future__ import annotations

from pathlib import Path

import click

from edgeserve.cli.options import emit_json


@click.command()
@click.argument("manifest", type=click.Path(path_type=Path))
@click.option("--public-key", type=click.Path(dir_okay=False, path_type=Path),
              help="Refuse the manifest unless it is signed by this Ed25519 public key (PEM).")
@click.option("--json", "json_out", is_flag=True, help="Print JSON on stdout.")
@click.pass_context
def verify(ctx: click.Context, manifest: Path, public_key: Path | None, json_out: bool) -> None:
    """Re-check every artifact in MANIFEST: hashes, then its verification run. Exit 1 on any failure."""
    from edgeserve.manifest.verify import verify_manifest

    results = verify_manifest(manifest, public_key)
    ok = all(results)
    if json_out:
        emit_json({"ok": ok, "artifacts": [r.to_dict() for r in results]})
    else:
        for r in results:
            click.echo(str(r))
    if not ok:
        if not json_out:
            click.echo("error: verification failed", err=True)
        ctx.exit(1)
