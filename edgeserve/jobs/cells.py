"""One cell of a job, a (model, target) pair: its key, its run, and its row in the table.

A cell is a plain ``edgeserve convert MODEL -t TARGET`` in a child process, on whichever
machine runs it, so a native crash, a hang or an out-of-memory kill costs that cell and one line
in the table, never the job. Its output folder is what convert writes, byte for byte.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from edgeserve.errors import ManifestError
from edgeserve.manifest.entry import ArtifactEntry

CELL_RECORD = "cell.json"  # beside the manifest in each cell's folder: the key it was made from
# Tests set this to a folder: a Ray task marks there when it starts a cell, by node id.
STARTED_FOR_TESTS = "EDGESERVE_TEST_CELL_STARTED"


def file_digest(path: Path) -> str:
    """sha256 of a file, or of a folder's files (names and bytes, in sorted order)."""
    digest = hashlib.sha256()
    if path.is_dir():
        for child in sorted(p for p in path.rglob("*") if p.is_file()):
            digest.update(str(child.relative_to(path)).encode() + b"\0")
            digest.update(hashlib.sha256(child.read_bytes()).digest())
    else:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def cell_key(flags: tuple[str, ...], files: dict[str, Path], target: str, digests: dict[Path, str]) -> str:
    """What makes a cell's output: the bytes of every file it reads (not their paths), the
    other flags, the target and edgeserve's version. A change of any of them is a new key."""
    from edgeserve import __version__

    by_path = {str(path): digests[path] for path in files.values()}
    return hashlib.sha256(json.dumps({
        "files": {name: digests[path] for name, path in sorted(files.items())},
        "flags": [by_path.get(f, f) for f in flags],
        "target": target, "edgeserve": __version__,
    }, sort_keys=True).encode()).hexdigest()


def pack(path: Path) -> bytes:
    """A file or folder as an uncompressed tar (what a remote cell receives and returns)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(path, arcname=path.name)
    return buffer.getvalue()


def unpack(data: bytes, into: Path) -> Path:
    """The one member tree of ``pack``'s tar under ``into``. Only plain files and folders with
    relative paths inside it are taken (checked here: tarfile's own ``filter`` argument came
    with Python 3.11.4, and Debian's 3.11 is older)."""
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        members = tar.getmembers()
        for member in members:
            parts = Path(member.name).parts
            if Path(member.name).is_absolute() or ".." in parts or not (member.isfile() or member.isdir()):
                raise ValueError(f"refusing the archive member {member.name!r}: not a plain file or folder inside it")
        top = {Path(m.name).parts[0] for m in members}
        if len(top) != 1:
            raise ValueError(f"expected one file or folder in the archive; got {sorted(top)[:4]}")
        tar.extractall(into, members=members)
    return into / top.pop()


def run_cell(model: str, target: str, flags: tuple[str, ...], files: dict[str, Any], timeout_s: float,
             out_dir: str | None = None, beside: int = 1) -> dict[str, Any]:
    """Convert one cell in a child process and describe it.

    ``files``: the name each file has in ``flags`` (its path on the machine that planned the job)
    -> a path here (same machine), or pack()'s bytes (another machine). ``out_dir``: where
    convert writes (same machine); None: a temporary folder, returned packed as "archive".
    ``beside``: how many cells run on this machine at once (they share its cores).
    """
    from edgeserve.conversion.schedule import shared_cores_env

    with tempfile.TemporaryDirectory(prefix="edgeserve-cell-") as tmp:
        here: dict[str, str] = {}
        for original, value in files.items():
            here[original] = str(unpack(value, Path(tmp) / "in" / str(len(here)))) \
                if isinstance(value, (bytes, bytearray)) else str(value)
        out = Path(out_dir) if out_dir else Path(tmp) / "out"
        command = [sys.executable, "-m", "edgeserve", "-q", "convert", here[model], "-t", target, "-o", str(out),
                   "-j", "1", "--json", *(here.get(f, f) for f in flags)]
        started = time.perf_counter()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                                  env={**os.environ, "PYTHONWARNINGS": "ignore", **shared_cores_env(beside)})
            code, said = done.returncode, done.stderr
        except subprocess.TimeoutExpired as exc:
            code, said = None, (exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr) or ""
        seconds = time.perf_counter() - started
        manifest = out / "manifest.json"
        row = describe(target, code, said, json.loads(manifest.read_text()) if manifest.is_file() else None, timeout_s)
        row |= {"seconds": round(seconds, 1), "node": socket.gethostname()}
        archive = pack(out) if out_dir is None and out.is_dir() else None
        return {"row": row, "archive": archive}


def run_remote_cell(model: str, target: str, flags: tuple[str, ...], names: list[str], timeout_s: float,
                    *packed: bytes) -> dict[str, Any]:
    """run_cell as a Ray task: each file a top-level argument (Ray hands a task the objects its
    top-level arguments refer to, fetched to the node once; references inside a dict it leaves
    as references)."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    started = os.environ.get(STARTED_FOR_TESTS)
    if started:  # a test waits for this to stop the node while the cell runs on it
        Path(started, f"{node}-{os.getpid()}").touch()
    result = run_cell(model, target, flags, dict(zip(names, packed)), timeout_s, None)
    # Machines of one cluster may share a host name (and a test's nodes all do): the Ray node too.
    result["row"]["node"] += "/" + node[:8]
    return result


def describe(target: str, code: int | None, stderr: str, manifest: dict[str, Any] | None,
             timeout_s: float) -> dict[str, Any]:
    """A cell's row from how convert ended and the manifest it wrote: status (ok, failed,
    refused, not built, crashed, timeout, error), the artifact's size, the gate's figures, and
    the error line."""
    errors = [line.removeprefix("error: ") for line in stderr.splitlines() if line.startswith("error: ")]
    row: dict[str, Any] = {"status": "error", "bytes": None, "sqnr_db": None, "top1_agreement": None,
                           "error": errors[-1] if errors else None}
    if code is None:
        return row | {"status": "timeout", "error": f"stopped after the cell's {timeout_s:.0f} s"}
    if code < 0:  # the convert process itself died: a signal, or the kernel's OOM killer (SIGKILL)
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
        return row | {"status": "crashed", "signal": -code,
                      "error": f"convert died ({name}{': out of memory?' if -code == signal.SIGKILL else ''})"}
    for written in (manifest or {}).get("artifacts", []):
        if written.get("target") == target:
            try:
                entry = ArtifactEntry.read(written, f"{target} artifact")
            except ManifestError as exc:  # a manifest this edgeserve cannot read: the cell's error, not the job's
                return row | {"error": str(exc)}
            sqnr = entry.output_sqnr_db()
            agreement = (entry.agreement or {}).get("top1_agreement")
            return row | {"status": "ok" if entry.ok else "failed", "bytes": entry.size,
                          "path": entry.path, "sqnr_db": min(sqnr) if sqnr else None,
                          "top1_agreement": agreement if isinstance(agreement, (int, float)) else None,
                          "error": None if entry.ok else (entry.reason or row["error"])}
    for kind, status in (("refused", "refused"), ("not_built", "not built")):
        for entry in (manifest or {}).get(kind, []):
            if entry.get("target") == target:
                return row | {"status": status, "error": entry.get("reason") or row["error"]}
    if errors and code == 1:  # refused before anything was written (the source, or the flags)
        return row | {"status": "refused"}
    return row


def place(staged: Path, final: Path) -> None:
    """Move a finished cell's folder into place: the old one is swapped out only once the new
    one is whole, so an interrupted job leaves each cell as it was or as it now is."""
    final.parent.mkdir(parents=True, exist_ok=True)
    old = final.with_name(f".{final.name}.old-{os.getpid()}")
    if final.exists():
        final.rename(old)
    staged.rename(final)
    shutil.rmtree(old, ignore_errors=True)
