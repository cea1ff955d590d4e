"""Run a job: every cell not already done with the same inputs, on a local process pool or
as Ray tasks, each finished cell put in place as it ends; then each model's folder, the
benches on the job's boards, and the table.

OUT/cells/<model>/<target>/ holds what ``edgeserve convert MODEL -t TARGET`` writes, and
cell.json, the key it was made from. OUT/<model>/ is the model's folder as one ``convert`` of
every target that passed writes it (one manifest: `edgeserve bench OUT/<model>` compares them,
`edgeserve run` serves them), made from the cells through convert's target cache, not built
again (assemble.py). OUT/jobs.json, jobs.md and jobs.html: the table of every cell.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import uuid
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from edgeserve.atomic import write_json
from edgeserve.errors import InputError
from edgeserve.jobs.assemble import assemble_models
from edgeserve.jobs.cells import CELL_RECORD, cell_key, file_digest, place, run_cell
from edgeserve.jobs.jobfile import CELLS, Job, ModelSpec
from edgeserve.jobs.table import TABLE_NAME, write_tables

# What a cell that ends so would end as again with the same inputs: kept, and taken as done.
SETTLED = ("ok", "failed", "refused", "not built")
MAX_OOM_RETRIES = 2  # an out-of-memory kill is retried with twice the memory, at most this often


@dataclasses.dataclass
class Cell:
    model: ModelSpec
    target: str
    key: str
    folder: Path
    memory_mb: int
    tries: int = 0

    @property
    def name(self) -> str:
        return f"{self.model.name} {self.target}"


def run_job(job: Job, out: Path, *, workers: int | None = None, ray_address: str | None = None,
            say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Every cell of ``job`` into ``out``; returns the table ({"cells": rows, ...}).

    Cells whose folder already holds a manifest made from the same key are taken as they are
    ("cached"). ``ray_address``: "auto", "host:port" or "local" (a Ray instance on this machine)
    for Ray tasks; None for a pool of ``workers`` local processes (default: the CPU count).
    """
    say = say or (lambda line: print(line, file=sys.stderr))
    _check_out(out)
    if not (out / TABLE_NAME).is_file():  # marks OUT as this job's at once: a run cut short can go on
        write_tables(out, {"job": str(job.path), "boards": list(job.boards), "models": {}, "cells": []})
    digests: dict[Path, str] = {}
    cells: list[Cell] = []
    for model, target in job.cells():
        files = model.files()
        for path in files.values():
            if path not in digests:
                digests[path] = file_digest(path)
        cells.append(Cell(model, target, cell_key(model.flags, files, target, digests),
                          out / CELLS / model.name / target, job.memory_mb))
    rows: dict[str, dict[str, Any]] = {}
    todo = []
    for cell in cells:
        cached = _cached_row(cell)
        if cached is not None:
            rows[cell.name] = cached | {"cached": True}
        else:
            todo.append(cell)
    say(f"jobs: {len(cells)} cells, {len(cells) - len(todo)} already done with the same inputs, {len(todo)} to run"
        + (f" on Ray ({ray_address})" if ray_address else f" on {workers or os.cpu_count() or 1} local workers"))
    runner = _RayRunner(job, ray_address) if ray_address else _LocalRunner(job, workers or os.cpu_count() or 1)
    staging = out / ".staging"
    try:
        for cell, result in runner.run(todo, staging):
            row = result["row"]
            if row["status"] == "crashed" and row.get("signal") == 9 and cell.tries < MAX_OOM_RETRIES:
                cell.tries += 1
                cell.memory_mb *= 2
                say(f"  {cell.name}: killed (out of memory?); again with {cell.memory_mb} MB")
                runner.resubmit(cell)
                continue
            staged = result.get("staged")
            if row["status"] in SETTLED:  # a crash, a timeout or Ray's own error may not happen again
                if staged is None:  # refused before convert wrote anything: the refusal is kept too
                    staged = staging / uuid.uuid4().hex
                    staged.mkdir(parents=True)
                write_json(staged / CELL_RECORD, {"key": cell.key, "row": row})
                place(staged, cell.folder)
            rows[cell.name] = row | {"cached": False}
            done = sum(1 for r in rows.values() if not r["cached"])
            figure = f"{row['sqnr_db']:.1f} dB" if row.get("sqnr_db") is not None else ""
            say(f"  [{done}/{len(todo)}] {cell.name}: {row['status']} {figure} ({row['seconds']:.0f} s on {row['node']})"
                + (f": {row['error'][:160]}" if row.get("error") and row["status"] != "ok" else ""))
        assembled = assemble_models(job, cells, rows, out, staging, say)
        _bench(job, cells, rows, runner, say)
    finally:
        runner.close()
        shutil.rmtree(staging, ignore_errors=True)
    table = {"job": str(job.path), "boards": list(job.boards), "models": assembled,
             "cells": [_row(cell, rows[cell.name]) for cell in cells if cell.name in rows]}
    write_tables(out, table)
    return table


def _bench(job: Job, cells: list[Cell], rows: dict[str, dict[str, Any]], runner: Any,
           say: Callable[[str], None]) -> None:
    """Each ok cell's artifact timed on each of the job's boards not timed yet for this cell's
    key (kept in its cell.json), or timed without the operators the job now asks for, one bench
    at a time on a board."""
    from edgeserve.runtime.artifacts import served

    def timed(cell: Cell, board: str) -> bool:
        kept = (rows[cell.name].get("bench") or {}).get(board)
        return kept is not None and (not job.bench_operators or "operators" in kept)

    todo = [(cell, board) for cell in cells for board in job.boards
            if rows.get(cell.name, {}).get("status") == "ok" and served(cell.target) and not timed(cell, board)]
    if not todo:
        return
    say(f"jobs: {len(todo)} bench(es) on {', '.join(job.boards)}")
    for cell, board, result in runner.bench(todo, job):
        row = rows[cell.name]
        row["bench"] = {**(row.get("bench") or {}), board: result}
        if result.get("error") is None:  # a measurement is kept with the cell; a failed one is tried again
            kept = {key: value for key, value in row.items() if key != "cached"}
            write_json(cell.folder / CELL_RECORD, {"key": cell.key, "row": kept | {
                "bench": {b: r for b, r in row["bench"].items() if r.get("error") is None}}})
        figure = f"p50 {result['p50_ms']:.3f} ms" if result.get("p50_ms") is not None else result.get("error", "")
        say(f"  bench {cell.name} on {board}: {figure} ({result.get('node')})")


def _row(cell: Cell, row: dict[str, Any]) -> dict[str, Any]:
    return {"model": cell.model.name, "target": cell.target, **row,
            "folder": str(cell.folder.relative_to(cell.folder.parent.parent.parent))}


def _cached_row(cell: Cell) -> dict[str, Any] | None:
    import json

    record = cell.folder / CELL_RECORD
    try:
        found = json.loads(record.read_text())
    except (OSError, ValueError):
        return None
    if found.get("key") != cell.key or not isinstance(found.get("row"), dict):
        return None
    if found["row"].get("status") == "ok" and not (cell.folder / "manifest.json").is_file():
        return None
    return found["row"]


def _check_out(out: Path) -> None:
    """OUT is a folder a job wrote (its table there), or new, or empty: never a folder of the
    user's own files, which the cells' folders would be mixed into."""
    if out.exists() and not out.is_dir():
        raise InputError(f"-o {out}: expected a folder for the job's results; it is a file")
    if out.is_dir() and any(out.iterdir()) and not (out / TABLE_NAME).is_file():
        raise InputError(f"-o {out}: the folder holds files no job wrote (no {TABLE_NAME}); give a new or empty folder")
    out.mkdir(parents=True, exist_ok=True)


class _LocalRunner:
    """Cells as convert processes on this machine, ``workers`` at a time."""

    def __init__(self, job: Job, workers: int) -> None:
        self.job = job
        self.workers = workers
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cell")
        self.pending: dict[Future, Cell] = {}
        self.staging: Path | None = None

    def _submit(self, cell: Cell) -> None:
        assert self.staging is not None
        staged = self.staging / uuid.uuid4().hex
        files = {str(p): p for p in cell.model.files().values()}
        future = self.pool.submit(run_cell, str(cell.model.path), cell.target, cell.model.flags, files,
                                  self.job.timeout_s, str(staged), self.workers)
        future.staged = staged  # type: ignore[attr-defined]
        self.pending[future] = cell

    def resubmit(self, cell: Cell) -> None:
        self._submit(cell)

    def run(self, cells: list[Cell], staging: Path):  # type: ignore[no-untyped-def]
        self.staging = staging
        staging.mkdir(parents=True, exist_ok=True)
        for cell in cells:
            self._submit(cell)
        while self.pending:
            finished, _ = wait(self.pending, return_when=FIRST_COMPLETED)
            for future in finished:
                cell = self.pending.pop(future)
                result = future.result()
                staged = future.staged  # type: ignore[attr-defined]
                yield cell, result | {"staged": staged if staged.is_dir() else None}

    def bench(self, todo: list[tuple[Cell, str]], job: Job):  # type: ignore[no-untyped-def]
        """One at a time on this machine, the only board a local job reaches."""
        from edgeserve.jobs.bench import LOCAL_BOARD, bench_cell, resource_of

        for cell, board in todo:
            if board != LOCAL_BOARD:
                yield cell, board, {"board": board, "node": None, "error": (
                    f"no machine of this job is a {board}: run it with --ray on a cluster the board joined with "
                    f"the resource {resource_of(board)}")}
                continue
            yield cell, board, bench_cell(cell.folder, cell.target, board, job.bench_frames, job.timeout_s,
                                          job.bench_operators)

    def close(self) -> None:
        for future in self.pending:
            future.cancel()
        self.pool.shutdown(wait=True, cancel_futures=True)


class _RayRunner:
    """Cells as Ray tasks: each file crosses to a node once (Ray's object store, by reference),
    each task asks for one CPU and the cell's memory, and a task whose node died is run again
    elsewhere (Ray's retries); an out-of-memory kill comes back here, to ask for more."""

    def __init__(self, job: Job, address: str) -> None:
        from edgeserve._deps import require

        ray = require("ray", "running a job on Ray")
        self.ray, self.job = ray, job
        if not ray.is_initialized():
            ray.init(address=None if address == "local" else address, include_dashboard=False,
                     log_to_driver=False, ignore_reinit_error=True)
        from edgeserve.jobs.cells import pack

        self._pack = pack
        self.refs: dict[Path, Any] = {}
        self.pending: dict[Any, Cell] = {}
        from edgeserve.jobs.cells import run_remote_cell

        self.task = ray.remote(run_remote_cell)

    def _submit(self, cell: Cell) -> None:
        paths = list(cell.model.files().values())
        for path in paths:
            if path not in self.refs:
                self.refs[path] = self.ray.put(self._pack(path))
        ref = self.task.options(num_cpus=1, memory=cell.memory_mb * 1024 * 1024, max_retries=2).remote(
            str(cell.model.path), cell.target, cell.model.flags, [str(p) for p in paths], self.job.timeout_s,
            *(self.refs[p] for p in paths))
        self.pending[ref] = cell

    def resubmit(self, cell: Cell) -> None:
        self._submit(cell)

    def run(self, cells: list[Cell], staging: Path):  # type: ignore[no-untyped-def]
        from edgeserve.jobs.cells import unpack

        for cell in cells:
            self._submit(cell)
        while self.pending:
            ready, _ = self.ray.wait(list(self.pending), num_returns=1)
            cell = self.pending.pop(ready[0])
            try:
                result = self.ray.get(ready[0])
            except self.ray.exceptions.OutOfMemoryError:
                result = {"row": {"status": "crashed", "signal": 9, "error": "Ray stopped the task: out of memory",
                                  "seconds": 0.0, "node": "?"}, "archive": None}
            except self.ray.exceptions.RayError as exc:
                result = {"row": {"status": "error", "error": f"Ray: {str(exc).splitlines()[0][:300]}",
                                  "seconds": 0.0, "node": "?", "bytes": None, "sqnr_db": None,
                                  "top1_agreement": None}, "archive": None}
            staged = None
            if result.get("archive"):
                staged = unpack(result["archive"], staging / uuid.uuid4().hex)
            yield cell, result | {"staged": staged}

    def bench(self, todo: list[tuple[Cell, str]], job: Job):  # type: ignore[no-untyped-def]
        """Each bench a task asking for one unit of its board's resource: it runs on a machine
        that joined as that board, one at a time there."""
        from edgeserve.jobs.bench import bench_remote, resource_of
        from edgeserve.jobs.cells import pack

        task = self.ray.remote(bench_remote)
        offered = self.ray.cluster_resources()
        pending: dict[Any, tuple[Cell, str]] = {}
        for cell, board in todo:
            if resource_of(board) not in offered:
                yield cell, board, {"board": board, "node": None, "error": (
                    f"no node of the cluster is a {board}: start one with ray start --address=HEAD --num-cpus=0 "
                    f"--resources='{{\"{resource_of(board)}\": 1}}'")}
                continue
            # No CPU asked: a board joins with --num-cpus=0, so that no conversion cell (one CPU
            # each) is ever scheduled on it, and its one unit of the board resource is what keeps
            # two benches from running there at once.
            ref = task.options(num_cpus=0, resources={resource_of(board): 1}, max_retries=1).remote(
                cell.target, board, job.bench_frames, job.timeout_s, self.ray.put(pack(cell.folder)),
                job.bench_operators)
            pending[ref] = (cell, board)
        self.pending.update({ref: cell for ref, (cell, _) in pending.items()})
        while pending:
            ready, _ = self.ray.wait(list(pending), num_returns=1)
            cell, board = pending.pop(ready[0])
            self.pending.pop(ready[0], None)
            try:
                result = self.ray.get(ready[0])
            except self.ray.exceptions.RayError as exc:
                result = {"board": board, "node": None, "error": f"Ray: {str(exc).splitlines()[0][:300]}"}
            yield cell, board, result

    def close(self) -> None:
        for ref in self.pending:
            self.ray.cancel(ref, force=True)
