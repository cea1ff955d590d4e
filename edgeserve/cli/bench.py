"""``edgeserve bench``: latency of an artifact, or of every artifact of a manifest side by side."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from edgeserve.cli.options import emit_json
from edgeserve.cli.session import open_session, placement, quiet, session_options
from edgeserve.errors import InputError


# bench keeps one latency per frame (--frames 10**12 asked for 7.28 TiB), and a thread count far
# past any board's cores only starts threads the runtime then cannot use.
MAX_FRAMES = 1_000_000


@click.command()
@click.argument("artifact", type=click.Path(path_type=Path))
@click.option("--input", "input_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Benchmark on this image (or .npy tensor).")
@click.option("--synthetic", metavar="WxH", help="Benchmark on a synthetic WIDTHxHEIGHT camera frame, e.g. 640x480.")
@click.option("--frames", type=click.IntRange(min=1, max=MAX_FRAMES), default=500, show_default=True,
              help="Timed frames.")
@click.option("--pipeline", is_flag=True, help="Also time pipelined video (Session.stream: the next frame is "
                                                "preprocessed while this one runs) against bare invoke() in the same run.")
@click.option("--operators", is_flag=True, help="Also each operator's time and where it ran, from the engine's own "
                                                 "profiler (ONNX Runtime), over --frames more runs.")
@click.option("--warmup", type=click.IntRange(min=0, max=MAX_FRAMES), default=20, show_default=True,
              help="Untimed frames first.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path),
              help="A conversion folder: also draw latency against size on disk into this PNG.")
@session_options
@click.option("--json", "json_out", is_flag=True, help="Print JSON on stdout.")
def bench(artifact: Path, input_path: Path | None, synthetic: str | None, frames: int, pipeline: bool, operators: bool,
          warmup: int,
          plot: Path | None, profile: str | None, backend: str, require: str | None, threads: int | None,
          target: str | None, labels: Path | None, public_key: Path | None, preprocess_file: Path | None,
          json_out: bool, **spec_flags: Any) -> None:
    """Measure cold start, end-to-end latency (p50/p95/p99), stage times and allocations of ARTIFACT.

    ARTIFACT a conversion folder (OUT, without --target): every artifact in it that this
    machine can run, on the same input, side by side in one table."""
    from edgeserve.runtime.measure.bench import benchmark, synthetic_frame
    from edgeserve.runtime.io.inputs import iter_inputs

    if input_path is not None and synthetic is not None:
        raise click.UsageError("give either --input or --synthetic, not both")
    if artifact.is_dir() and (artifact / "manifest.json").is_file() and target is None:
        chosen = [flag for flag, on in (("--input", input_path), ("--synthetic", synthetic), ("--pipeline", pipeline),
                                        ("--operators", operators),
                                        ("--backend", backend != "auto"), ("--require", require)) if on]
        if chosen:
            raise click.UsageError(f"{', '.join(chosen)} apply to one artifact: add --target NAME (a conversion "
                                   "folder without --target benchmarks every artifact side by side)")
        _compare(artifact / "manifest.json", frames, warmup, threads, profile, public_key, json_out, plot)
        return
    if plot is not None:
        raise click.UsageError("--plot draws the artifacts of a conversion folder side by side: give the folder "
                               "(OUT) without --target")
    from edgeserve.runtime.measure.memory import PeakMemory

    opened = (artifact, profile, backend, require, threads, target, labels, preprocess_file, spec_flags, public_key)
    memory = PeakMemory().start()  # what opening and running the model adds, up to the end of the timed runs
    t0 = time.perf_counter()
    session = open_session(*opened)
    first_load_ms = (time.perf_counter() - t0) * 1e3
    with session:
        if input_path is not None:
            frame = next(iter(iter_inputs([input_path])))[1]
        elif synthetic is not None:
            w, h = _parse_wxh(synthetic)
            if session.preprocess is None:
                # Nothing turns a camera frame into this model's input: say so rather than time
                # a raw tensor and call it a frame.
                raise InputError(f"--synthetic {synthetic} needs a PreprocessSpec to turn a frame into the model's "
                                 "input, and this model has none recorded; give --size/--mean/--std (or "
                                 "--preprocess spec.toml), or drop --synthetic to time the bare model input")
            frame = synthetic_frame(w, h)
        else:
            frame = session.example_input()
        session.run(frame)
        cold_ms = (time.perf_counter() - t0) * 1e3
        timed = benchmark(session, frame, frames=frames, warmup=warmup)
        memory.stop()
        result = {"backend": session.backend, "attempts": [a.to_dict() for a in session.attempts],
                  "input": "frame" if frame.ndim == 3 and session.preprocess is not None else "model tensor",
                  "preprocess_overrides": list(session.preprocess_overrides),
                  "placement": session.placement.to_dict(), "threads": session.threads,
                  "input_shape": list(frame.shape), "cold_start_ms": round(cold_ms, 3),
                  "load_ms": {"first": round(first_load_ms, 3)}, "peak_memory": memory.to_dict(), **timed}
        from edgeserve.runtime.audio.wakeword import stream_figures

        stream = stream_figures(tuple(session.inputs[0].shape), None)
        if stream is not None:
            # Per stride as the detector runs it (StreamStep), not Session.run's general path.
            from edgeserve.runtime.measure.bench import stride_seconds

            stream = stream_figures(tuple(session.inputs[0].shape), stride_seconds(session, frame, frames))
            result["stream"] = {**stream, "timed": f"StreamStep.value, frames copied in, median of {frames} strides"}
        if pipeline:
            from edgeserve.runtime.measure.bench import pipeline_fps

            result["pipeline"] = pipeline_fps(session, frame, frames)
        if operators:
            from edgeserve.runtime.measure.operators import operator_profile

            result["operators"] = operator_profile(session, frame, frames)
        # Energy per inference where the machine has a power sensor (--frames more runs), as `bench
        # OUT` measures each artifact; a profile job's board bench reads it from here.
        from edgeserve.device_profiles import load_profile
        from edgeserve.runtime.measure.loop_energy import LoopEnergy, per_inference

        energy = LoopEnergy.open(load_profile(profile) if profile else None)
        result.update(per_inference(energy, lambda: session.run(frame), frames))
    # Opened again once the first session is closed: the load an application pays on its next start
    # (files in the page cache, libraries loaded), as AI Hub's profile jobs report beside the first.
    t0 = time.perf_counter()
    with open_session(*opened, announce=False):
        result["load_ms"]["warm"] = round((time.perf_counter() - t0) * 1e3, 3)
    if json_out:
        emit_json(result)
    else:
        _print_bench(result)


def _parse_wxh(value: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in value.lower().split("x"))
    except ValueError:
        raise click.BadParameter(f"expected WIDTHxHEIGHT, e.g. 640x480; got {value!r}", param_hint="--synthetic")
    if w < 1 or h < 1:
        raise click.BadParameter(f"width and height must be positive; got {value!r}", param_hint="--synthetic")
    return w, h


def _compare(manifest: Path, frames: int, warmup: int, threads: int | None, profile: str | None,
             public_key: Path | None, json_out: bool, plot: Path | None = None) -> None:
    """Every artifact of a conversion folder on the same input, one table (runtime/measure/compare.py)."""
    from edgeserve.runtime.measure.compare import compare

    if plot is not None:
        from edgeserve.profiling.report import check_available

        check_available()  # before minutes of timing, not after
    rows = compare(manifest, frames=frames, warmup=warmup, threads=threads, profile=profile, public_key=public_key)
    if plot is not None:
        from edgeserve.atomic import write_bytes
        from edgeserve.runtime.measure.compare import render_png

        write_bytes(plot, render_png(rows, f"{manifest.parent.name}: latency against size ({frames} runs each)"))
    if json_out:
        emit_json({"manifest": str(manifest), "frames": frames, "artifacts": rows})
        _none_ran(manifest, rows)
        return
    w = max([12] + [len(r["target"]) for r in rows])
    click.echo(f"{'artifact':{w}} {'backend':22} {'size':>10} {'p50 ms':>9} {'p95 ms':>9} {'x fastest':>9} "
               f"{'load ms':>8} {'peak MiB':>8} {'mJ/inf':>8}  quality")
    for r in rows:
        size = f"{r['bytes'] / 1024:,.1f} KB"
        if "p50_ms" in r:
            mj = f"{r['mj_per_inference']:.3f}" if r.get("mj_per_inference") is not None else "-"
            peak = f"{r['peak_memory_bytes'] / 2**20:.1f}" if r.get("peak_memory_bytes") is not None else "-"
            click.echo(f"{r['target']:{w}} {r['backend']:22} {size:>10} {r['p50_ms']:>9.3f} {r['p95_ms']:>9.3f} "
                       f"{r['ratio']:>9.2f} {r['load_ms']:>8.1f} {peak:>8} {mj:>8}  {r['quality']}")
        else:
            click.echo(f"{r['target']:{w}} {'not run':22} {size:>10} {'':>9} {'':>9} {'':>9} {'':>8} {'':>8} {'':>8}  "
                       f"{r['quality']}")
            click.echo(f"{'':{w}}   {r['skipped']}")
    timed = [r for r in rows if "p50_ms" in r]
    if timed:
        click.echo(f"same input for every artifact: {timed[0]['input']}; {frames} timed runs each after {warmup} "
                   "warm-up runs; load: opening the artifact; peak: the resident memory its open and runs added; "
                   "quality as the manifest recorded it against the float source")
        unmeasured = sorted({r["energy"] for r in timed if r.get("mj_per_inference") is None and r.get("energy")})
        measured = sorted({r["energy"] for r in timed if r.get("mj_per_inference") is not None})
        if measured:
            click.echo(f"energy: {frames} more runs each, the sensor's whole rail or package (idle included): "
                       + "; ".join(measured))
        for reason in unmeasured:
            click.echo(f"energy not measured: {reason}")
    _none_ran(manifest, rows)


def _none_ran(manifest: Path, rows: list[dict[str, Any]]) -> None:
    """A bench that timed nothing has failed, whatever the table shows (it used to exit 0 when
    its only artifact was refused)."""
    if any("p50_ms" in r for r in rows):
        return
    if not rows:
        raise InputError(f"{manifest.parent} has no built artifact to time (its manifest lists none with status ok)")
    raise InputError(f"no artifact of {manifest.parent} ran on this machine ({', '.join(r['target'] for r in rows)}: "
                     "see the table for why); nothing was timed")


def _print_bench(r: dict[str, Any]) -> None:
    lat, st = r["latency_ms"], r["stages_ms"]
    threads = r["threads"] or "engine default"
    click.echo(f"backend        {r['backend']} ({placement(r['placement'])}), threads {threads}")
    click.echo(f"cold start     {r['cold_start_ms']:.1f} ms (open + first inference); load {r['load_ms']['first']:.1f} ms "
               f"first, {r['load_ms']['warm']:.1f} ms warm (opened again)")
    peak = r["peak_memory"]
    click.echo("peak memory    " + (f"{peak['bytes_added'] / 2**20:.1f} MiB added to the process (resident high-water "
                                     "mark over the open and the bench's runs)" if peak["bytes_added"] is not None
                                     else f"not measured: {peak['reason']}"))
    click.echo(f"latency        p50 {lat['p50']:.3f}  p95 {lat['p95']:.3f}  p99 {lat['p99']:.3f} ms  "
               f"({r['frames']} frames, input {'x'.join(map(str, r['input_shape']))})")
    click.echo(f"stages (p50)   preprocess {st['preprocess']:.3f}  invoke {st['invoke']:.3f}  "
               f"postprocess {st['postprocess']:.3f} ms")
    click.echo(f"throughput     {r['throughput_fps']:.1f} frames/s")
    if "pipeline" in r:
        pl = r["pipeline"]
        click.echo(f"pipelined      {pl['fps']:.1f} frames/s vs bare invoke {pl['invoke_fps']:.1f}/s "
                   f"({pl['ratio']:.3f}x), {pl['frames']} frames")
    if "stream" in r:
        st = r["stream"]
        click.echo(f"streaming      {st['ms_per_stride']:.4f} ms per stride of {st['audio_ms_per_stride']:g} ms audio: "
                   f"real-time factor {st['real_time_factor']:.6f} ({1 / st['real_time_factor']:,.0f}x real time)")
    click.echo(f"allocations    {r['alloc_bytes_per_frame']} B/frame kept, {r['transient_peak_bytes']} B transient peak")
    click.echo(f"energy         {r['mj_per_inference']:.4f} mJ per inference ({r['energy']}; the whole rail or package, "
               "idle included)" if r["mj_per_inference"] is not None else f"energy         not measured: {r['energy']}")
    if "operators" in r:
        _print_operators(r["operators"])
    if not quiet():  # -q: the figures only; the skipped backends go to stderr, as run's do
        for a in r["attempts"]:
            if not a["ok"]:
                click.echo(f"  skipped {a['backend']} [{a['stage']}]: {a['reason']}", err=True)


def _print_operators(ops: dict[str, Any]) -> None:
    if "reason" in ops:
        click.echo(f"operators      not profiled: {ops['reason']}")
        return
    click.echo(f"operators      {ops['nodes']} nodes, {ops['us_per_run'] / 1e3:.3f} ms of kernel time per run "
               f"({ops['method']})")
    op_width = max([24, *(len(g["op"]) for g in ops["by_op"])])  # XNNPACK's names run long
    place_width = max([14, *(len(g["placed_on"]) for g in ops["by_op"])])
    for g in ops["by_op"]:
        click.echo(f"  {g['op']:{op_width}} {g['placed_on']:{place_width}} {g['nodes']:>4} node(s) {g['us'] / 1e3:>9.3f} ms "
                   f"{100 * g['share']:>5.1f} %")
