"""An output folder that changes all at once: as it was, or complete with the new build.

A conversion writes into a staging folder beside OUT (same file system, so the final
renames are cheap and do not copy), which starts as a copy of OUT when OUT exists, so entries
of other targets carry over. Only when the conversion finished does the staging folder
replace OUT. An error, Ctrl-C or a kill leaves OUT untouched; what a killed run left beside
it is removed by the next run for the same OUT.

Files get the user's umask (temporary files start private; the build is not).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

from edgeserve.atomic import current_umask
from edgeserve.errors import InputError

_STAGING = "staging"
_REPLACED = "replaced"


def check_output_path(out: Path) -> None:
    """Refuse, before any work, an OUT that cannot be a folder."""
    for path in (out, *out.parents):
        if path.exists() and not path.is_dir():
            where = "is a file" if path == out else f"cannot hold folders: {path} is a file"
            raise InputError(f"output folder {out} {where}; expected a folder (new or existing)")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sibling(out: Path, kind: str) -> Path:
    return out.parent / f".{out.name}.{kind}-{os.getpid()}-{secrets.token_hex(4)}"


def clean_leftovers(out: Path) -> list[Path]:
    """Remove staging folders of runs that no longer exist, and put back an OUT a run was
    killed in the middle of replacing. Returns what was removed or restored."""
    done: list[Path] = []
    if not out.parent.is_dir():
        return done
    for path in sorted(out.parent.glob(f".{out.name}.*-*-*")):
        kind, _, rest = path.name[len(out.name) + 2 :].partition("-")
        pid = rest.split("-")[0]
        if kind not in (_STAGING, _REPLACED) or not pid.isdigit() or _pid_alive(int(pid)):
            continue
        if kind == _REPLACED and not out.exists():
            os.replace(path, out)  # killed between the two renames of publish()
        else:
            shutil.rmtree(path, ignore_errors=True)
        done.append(path)
    return done


def _apply_umask(root: Path) -> None:
    mask = current_umask()
    for path in (root, *root.rglob("*")):
        if path.is_symlink():
            continue
        path.chmod((0o777 if path.is_dir() else 0o666) & ~mask)


def _publish(staging: Path, out: Path) -> None:
    _apply_umask(staging)
    if not out.exists():
        os.replace(staging, out)
        return
    replaced = _sibling(out, _REPLACED)
    os.replace(out, replaced)
    try:
        os.replace(staging, out)
    except BaseException:
        os.replace(replaced, out)
        raise
    shutil.rmtree(replaced, ignore_errors=True)


@contextlib.contextmanager
def staged_output(out: Path) -> Iterator[Path]:
    """Yield the folder to write into; it becomes ``out`` when the block ends normally."""
    out = Path(out)
    check_output_path(out)
    clean_leftovers(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = _sibling(out, _STAGING)
    try:
        if out.exists():
            # Carry the other targets' files over; half-written files of old runs stay behind.
            shutil.copytree(out, staging, symlinks=True, ignore=shutil.ignore_patterns("*.partial"))
        else:
            staging.mkdir()
        yield staging
        _publish(staging, out)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
