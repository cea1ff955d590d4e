"""The ``edgeserve`` command line: the group with every command on it."""

from __future__ import annotations

from edgeserve.cli.bench import bench
from edgeserve.cli.cache import cache_command
from edgeserve.cli.convert import convert
from edgeserve.cli.group import cli
from edgeserve.cli.inspect import inspect
from edgeserve.cli.jobs import jobs
from edgeserve.cli.profile import profile
from edgeserve.cli.profiles import profiles
from edgeserve.cli.run import run
from edgeserve.cli.targets import targets
from edgeserve.cli.verify import verify

for _command in (convert, inspect, verify, cache_command, targets, profiles, run, bench, profile, jobs):
    cli.add_command(_command)


def main() -> None:
    cli(prog_name="edgeserve")
