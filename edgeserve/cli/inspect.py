"""``edgeserve inspect``: what a model file or a manifest holds."""

from __future__ import annotations

from pathlib import Path

import click

from edgeserve.cli.options import emit_json


@click.command()
@click.argument("artifact", type=click.Path(path_type=Path))
@click.option("--json", "json_out", is_flag=True, help="Print JSON on stdout.")
def inspect(artifact: Path, json_out: bool) -> None:
    """Show what ARTIFACT (.tflite, .mlpackage or manifest.json) holds: tensors, quantization, ops."""
    from edgeserve.inspect import inspect_path

    info = inspect_path(artifact)
    if json_out:
        emit_json(info)
    else:
        from edgeserve.cli.report import print_inspection

        print_inspection(info)
