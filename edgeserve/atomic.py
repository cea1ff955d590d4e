"""Atomic file output: a reader sees the old file or the whole new one, never half of it."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``final``; rename it over ``final`` only on success.

    The temp file lives in the same directory so the rename stays on one file system
    (``os.replace`` is atomic there). On any exception the temp file is removed and
    ``final`` is left as it was.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".partial", dir=final.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    # mkstemp makes the file 0600; the result should have the mode open() would give it.
    tmp_path.chmod(0o666 & ~current_umask())
    try:
        yield tmp_path
        os.replace(tmp_path, final)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def current_umask() -> int:
    """The process's umask (read by setting it and back: there is no getter)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes(final: str | os.PathLike[str], data: bytes) -> Path:
    with atomic_path(final) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    return Path(final)


def write_text(final: str | os.PathLike[str], text: str) -> Path:
    return write_bytes(final, text.encode("utf-8"))


def write_json(final: str | os.PathLike[str], obj: Any) -> Path:
    return write_text(final, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def sha256_file(path: str | os.PathLike[str]) -> str:
    """sha256 of a file, or of every file under a directory (sorted relative paths + bytes)."""
    path = Path(path)
    digest = hashlib.sha256()
    if path.is_dir():
        for child in sorted(p for p in path.rglob("*") if p.is_file()):
            digest.update(child.relative_to(path).as_posix().encode())
            digest.update(b"\0")
            _update_from_file(digest, child)
    else:
        _update_from_file(digest, path)
    return digest.hexdigest()


# How every reader refuses a FIFO, socket or device where a file belongs.
NOT_REGULAR = "is not a regular file (a pipe, socket or device)"


class NotRegularFileError(OSError):
    """A path that names a pipe, socket or device where a file belongs: reading it could block
    forever (a FIFO with no writer) or never end (/dev/zero)."""


def special_file(path: str | os.PathLike[str]) -> bool:
    """The path exists and is neither a regular file nor a folder (a FIFO, socket or device);
    stat() opens nothing, so this never blocks."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened for reading if it is a regular file; a FIFO or a device is refused without
    blocking (the open itself is non-blocking, then the descriptor is checked)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(f"{path} is a folder, not a file")
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(f"{path} {NOT_REGULAR}: refused rather than read")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike[str]) -> bytes:
    with open_regular(path) as fh:
        return fh.read()


SETTINGS_LIMIT = 16 << 20  # a profile, key, labels or spec file: kilobytes; far below this


class TooLargeError(OSError):
    """A settings file larger than any settings file is: read whole, it could exhaust memory."""


def read_settings(path: str | os.PathLike[str], limit: int = SETTINGS_LIMIT) -> bytes:
    """A small file read whole (profile, key, labels, spec, decoder options): a FIFO or a device is
    refused without a blocking read (a FIFO hung `-p`, /dev/zero ended in MemoryError), and so is
    a file past ``limit`` bytes. Both are OSErrors, so each caller's own message names the file."""
    with open_regular(path) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise TooLargeError(f"{path} is over {limit >> 20} MB, more than a settings file holds")
    return data


def _update_from_file(digest: "hashlib._Hash", path: Path) -> None:
    with open_regular(path) as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
