"""Reading kernel sensor files under a configurable root, with errors that keep the reason.

Every reader in :mod:`edgeserve.profiling` takes a root directory instead of assuming
``/``: point it at a recorded or simulated tree (``--sysfs-root``,
``EDGESERVE_SYSFS_ROOT``) and the same code reads it. Paths are written as the kernel
spells them (``/sys/class/thermal/...``) and joined under the root.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edgeserve.errors import EdgeServeError

#: Environment variable that sets the default sysfs root.
ENV_ROOT = "EDGESERVE_SYSFS_ROOT"


class SensorError(EdgeServeError):
    """A sensor file or command could not be read or parsed; the message says which and why."""


class SourceUnavailable(SensorError):
    """A power or thermal source does not exist (or cannot be used) on this machine."""


def resolve_root(root: str | os.PathLike[str] | None = None) -> Path:
    """The sysfs root: ``root`` if given, else ``$EDGESERVE_SYSFS_ROOT``, else ``/``."""
    if root is not None:
        return Path(root)
    return Path(os.environ.get(ENV_ROOT) or "/")


def under(root: Path, kernel_path: str) -> Path:
    """``/sys/class/x`` under ``root`` (``root / "sys/class/x"``)."""
    return root / kernel_path.lstrip("/")


def read_text(path: Path) -> str:
    """The stripped contents of a sensor file.

    Raises:
        SensorError: naming the file and the OS reason (missing, permission, EIO, ...).
    """
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise SensorError(f"{path}: {reason}") from exc


def read_number(path: Path) -> float:
    """The first token of a sensor file as a number (some drivers append a unit, "32760 ma")."""
    text = read_text(path)
    token = text.split()[0] if text else ""
    try:
        return float(int(token)) if token.lstrip("-").isdigit() else float(token)
    except ValueError:
        raise SensorError(f"{path}: expected a number, read {text[:40]!r}") from None


def short(path: Path, root: Path) -> str:
    """``path`` as the kernel path it stands for (relative to ``root``), for messages."""
    try:
        return "/" + path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def natural_key(text: str) -> tuple[Any, ...]:
    """Sort key that puts ``hwmon10`` after ``hwmon9``."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text))


def hwmon_dirs(root: Path) -> list[Path]:
    """``/sys/class/hwmon/hwmon*`` under ``root``, in natural order."""
    base = under(root, "/sys/class/hwmon")
    if not base.is_dir():
        return []
    return sorted((p for p in base.iterdir() if p.name.startswith("hwmon")), key=lambda p: natural_key(p.name))


def device_name(directory: Path) -> str:
    """A device's ``name`` file, or "" when it has none."""
    try:
        return read_text(directory / "name")
    except SensorError:
        return ""


def run_command(argv: Sequence[str], timeout: float = 3.0) -> str:
    """stdout of a short command (``vcgencmd ...``).

    Raises:
        SourceUnavailable: The command does not exist.
        SensorError: It failed, timed out or exited non-zero (first line of its output).
    """
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise SourceUnavailable(f"{argv[0]} not found") from None
    except (OSError, subprocess.SubprocessError) as exc:
        raise SensorError(f"{' '.join(argv)}: {exc}") from exc
    if done.returncode != 0:
        err = (done.stderr or done.stdout).strip().splitlines()
        raise SensorError(f"{' '.join(argv)} exited {done.returncode}: {err[0] if err else 'no output'}")
    return done.stdout


def find_command(command: str) -> str | None:
    """``command`` resolved on PATH, or as given when it is an existing file."""
    if os.sep in command:
        return command if os.path.isfile(command) else None
    return shutil.which(command)
