"""``python -m edgeserve``: the same command line as the ``edgeserve`` script."""

from edgeserve.cli import main

main()
