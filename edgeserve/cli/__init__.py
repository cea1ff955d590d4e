"""The ``edgeserve`` command line, one module per command (docs/layout.md).

``edgeserve.cli.main`` is the console script; ``edgeserve.cli.cli`` the click group (the tests
invoke it). Both are looked up when first asked for, so importing one command's module (or
``edgeserve.cli.report_parts``, which the converters' report lines use) does not load the rest.
"""

from __future__ import annotations

from typing import Any


def main() -> None:
    from edgeserve.cli.app import main as run

    run()


def __getattr__(name: str) -> Any:
    if name == "cli":
        from edgeserve.cli.app import cli

        return cli
    raise AttributeError(f"module 'edgeserve.cli' has no attribute {name!r}")
