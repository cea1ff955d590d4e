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
import glob
import json
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from edgeserve.atomic import current_umask
from edgeserve.errors import InputError

_STAGING = "staging"
_REPLACED = "replaced"


def check_output_path(out: Path) -> None:
    """Refuse, before any work, an OUT that edgeserve must not replace or cannot write.

    OUT is replaced whole when a conversion ends (copied, swapped): so it must be missing,
    empty, or an earlier edgeserve output (its manifest.json says so). Anything else (a home
    folder, a source tree, a mount point) is refused naming what is in it, and so is a folder
    holding the current directory, a symbolic link, a file that is not a regular file, folder
    or link (reading a FIFO or a device would hang or fill the disk), and a place this user
    cannot write (found now, not after the conversion has run).
    """
    try:
        _check_output_path(out)
    except PermissionError as exc:  # a folder on the way this user may not look into
        raise InputError(f"cannot reach the output folder {out}: permission denied on "
                         f"{exc.filename or out}; choose a folder you can write with -o") from exc
    except OSError as exc:  # a name too long, links in a loop on the way
        raise InputError(f"cannot use {out} as the output folder: {exc.strerror or exc}; choose another with -o") from exc


# What _sibling adds to OUT's name at most: ".", ".replaced-" (the longer of its two kinds), a pid
# (up to 7 digits), "-", 8 hex digits.
_SIBLING_EXTRA = len(f"..{_REPLACED}--") + 7 + 8


def _check_output_path(out: Path) -> None:
    limit = _name_max(out)
    if len(os.fsencode(out.name)) + _SIBLING_EXTRA > limit:
        raise InputError(f"output folder name {out.name[:40]}... is {len(os.fsencode(out.name))} bytes long; edgeserve "
                         f"stages it beside itself under a name {_SIBLING_EXTRA} bytes longer, and this file system "
                         f"allows {limit}: choose a shorter name with -o")
    for path in (out, *out.parents):
        if path.is_symlink() and path == out:
            raise InputError(f"output folder {out} is a symbolic link (to {os.readlink(out)}); edgeserve replaces "
                             "its output folder whole, so give the folder itself or a new one")
        if path.exists() and not path.is_dir():
            where = "is a file" if path == out else f"cannot hold folders: {path} is a file"
            raise InputError(f"output folder {out} {where}; expected a folder (new or existing)")
    absolute = Path(os.path.abspath(out))
    here = Path(os.getcwd())
    if absolute == here or absolute in here.parents:
        raise InputError(f"output folder {out} holds the current folder ({here}); edgeserve replaces its "
                         "output folder whole: give a new folder, e.g. -o out")
    if out.exists():
        _check_replaceable(out)
    _check_writable(absolute)


def _name_max(out: Path) -> int:
    """The longest file name the file system holding OUT allows (255 on Linux's own)."""
    place = next((p for p in Path(os.path.abspath(out)).parents if p.is_dir()), Path("/"))
    try:
        return os.pathconf(place, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def _check_replaceable(out: Path) -> None:
    entries = sorted(os.listdir(out))
    if not entries:
        return
    if not _is_edgeserve_output(out):
        shown = ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")
        raise InputError(f"output folder {out} is not empty and is not an edgeserve output (no edgeserve "
                         f"manifest.json in it; it holds {shown}); edgeserve replaces its output folder whole, "
                         "so give a new or empty folder, or an earlier edgeserve output, with -o")
    for root, folders, files in os.walk(out):
        for name in folders + files:
            path = Path(root, name)
            mode = path.lstat().st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
                raise InputError(f"output folder {out} holds {path}, which is {_kind(mode)}, not a file or folder "
                                 "edgeserve wrote; move it out of the folder (edgeserve never opens one)")


def _is_edgeserve_output(out: Path) -> bool:
    from edgeserve.manifest.record import MANIFEST_NAME, SCHEMA

    manifest = out / MANIFEST_NAME
    try:
        info = manifest.lstat()
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MANIFEST_BYTES:
            return False
        with open(manifest, "rb") as f:
            return json.loads(f.read(_MANIFEST_BYTES)).get("schema") == SCHEMA
    except (OSError, ValueError, AttributeError):
        return False


_MANIFEST_BYTES = 64 << 20  # far above any manifest written (a few kB to a few MB)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "a special file"


def _check_writable(out: Path) -> None:
    """The staging folder is made beside OUT and renamed over it: both need OUT's parent
    writable (and OUT itself, whose old files the staging copy replaces)."""
    parent = next((p for p in out.parents if p.exists()), None)
    place = out.parent if out.parent.exists() else parent
    for where in (place, out if out.exists() else None):
        if where is not None and not os.access(where, os.W_OK | os.X_OK):
            raise InputError(f"cannot write in {where}: the output folder {out} is staged beside it and then "
                             "moved into place; choose a folder you can write with -o")


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (one of another user's counts as alive)."""
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
    # The name is escaped: -o '?' must not match another output's leftovers.
    for path in sorted(out.parent.glob(f".{glob.escape(out.name)}.*-*-*")):
        kind, _, rest = path.name[len(out.name) + 2 :].partition("-")
        pid = rest.split("-")[0]
        if kind not in (_STAGING, _REPLACED) or not pid.isdigit() or pid_alive(int(pid)):
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
