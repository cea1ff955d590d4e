"""``edgeserve jobs run``: a job file's models through its targets, locally or on Ray."""

from __future__ import annotations

from pathlib import Path

import click

from edgeserve.cli.options import emit_json


@click.group()
def jobs() -> None:
    """Many models through many targets: `jobs run JOB.toml -o OUT` (see examples/jobs/)."""


@jobs.command("run")
@click.argument("job_file", metavar="JOB.toml", type=click.Path(path_type=Path))
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Results: OUT/<model>/<target>/ (what convert writes) and the table OUT/jobs.{json,md,html}.")
@click.option("--ray", "ray_address", metavar="ADDRESS",
              help="Run the cells as Ray tasks: auto (RAY_ADDRESS or a running local cluster), host:port, or "
                   "local (start Ray on this machine). Default: a pool of local processes.")
@click.option("-j", "--jobs", "workers", type=click.IntRange(min=1, max=256), metavar="N",
              help="Local cells at a time (default: the CPU count). With --ray, Ray places the cells.")
@click.option("--json", "json_out", is_flag=True, help="Print the table as JSON on stdout.")
@click.pass_context
def run_job_command(ctx: click.Context, job_file: Path, out_dir: Path, ray_address: str | None, workers: int | None,
                    json_out: bool) -> None:
    """Convert every (model, target) cell of JOB.toml that is not already done with the same inputs.

    Exit 1 when a cell ends other than ok or refused by name (the table says which)."""
    from edgeserve.jobs.jobfile import read_job
    from edgeserve.jobs.run import run_job

    job = read_job(job_file)
    quiet = bool(ctx.find_root().obj and ctx.find_root().obj.get("quiet"))
    try:
        table = run_job(job, out_dir, workers=workers, ray_address=ray_address,
                        say=(lambda line: None) if quiet else (lambda line: click.echo(line, err=True)))
    except KeyboardInterrupt:
        # Not the group's "nothing was changed": every cell that finished was put in place.
        click.echo(f"error: interrupted; each cell that finished is in {out_dir} (run the job again to go on)",
                   err=True)
        ctx.exit(130)
    if json_out:
        emit_json(table)
    else:
        from edgeserve.jobs.table import markdown

        click.echo(markdown(table).split("\n", 2)[2].strip())
        click.echo(f"\ntable: {out_dir / 'jobs.html'}", err=True)
    bad = [c for c in table["cells"] if c["status"] not in ("ok", "refused", "not built")]
    if bad:
        click.echo(f"error: {len(bad)} of {len(table['cells'])} cells did not end ok or refused by name "
                   f"(first: {bad[0]['model']} {bad[0]['target']}: {bad[0]['status']})", err=True)
        ctx.exit(1)
