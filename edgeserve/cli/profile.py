"""``edgeserve profile``: energy per inference and thermal behaviour of an artifact.

Only click is imported at module level; the runtime and the profiling package are
imported inside the command. :func:`thermal_budget_options` and :func:`governor_for` are
the pieces ``edgeserve run --thermal-budget`` uses to wrap its session in a
:class:`~edgeserve.profiling.governor.ThermalGovernor`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from edgeserve.errors import EdgeServeError


def _open_session(artifact: Path, profile: Any, threads: int | None) -> Any:
    """The runtime Session for ARTIFACT (tests replace this function with a fake)."""
    try:
        from edgeserve.runtime import Session
    except ImportError as exc:
        raise EdgeServeError(f"the on-device runtime (edgeserve.runtime.Session) is not available: {exc}") from exc
    return Session(artifact, profile=profile, threads=threads)


@click.command()
@click.argument("artifact", type=click.Path(path_type=Path))
@click.option("-p", "--profile", "profile_name", required=True, help="Device profile (see `edgeserve profiles`).")
@click.option("--duration", type=click.FloatRange(min=0, min_open=True), default=60.0, show_default=True,
              help="Seconds of back-to-back inference.")
@click.option("--idle", "idle_s", type=click.FloatRange(min=0), default=10.0, show_default=True,
              help="Seconds of idle baseline measured first (0: no above-idle figures).")
@click.option("--rate", "rate_hz", type=click.FloatRange(min=0, min_open=True), default=10.0, show_default=True,
              help="Sensor sampling rate (Hz).")
@click.option("--power-source", default="auto", show_default=True,
              help="auto, jetson-ina3221, jetson-ina238, vcgencmd-pmic, rapl, hwmon, external or estimate.")
@click.option("--rail", help="Power rail or hwmon channel (DEVICE/LABEL) to read; default from the profile.")
@click.option("--sysfs-root", type=click.Path(file_okay=False, path_type=Path), envvar="EDGESERVE_SYSFS_ROOT",
              help="Read /sys under this directory (a recorded tree). Env: EDGESERVE_SYSFS_ROOT.")
@click.option("--vcgencmd", default="vcgencmd", show_default=True, envvar="EDGESERVE_VCGENCMD",
              help="vcgencmd command (Raspberry Pi PMIC power and throttle flags).")
@click.option("--meter-log", type=click.Path(dir_okay=False, path_type=Path),
              help="External meter CSV (timestamp, watts) for --power-source external.")
@click.option("--meter-offset", type=float, default=0.0, show_default=True,
              help="Seconds added to the meter's timestamps (clock skew).")
@click.option("--thermal-budget", type=float, help="°C for the sustainable rate (default: the profile's throttle_c).")
@click.option("--power-budget", type=click.FloatRange(min=0, min_open=True), help="Watts for the sustainable rate.")
@click.option("--at-rate", type=click.FloatRange(min=0), help="Predict the steady-state temperature at this rate (Hz).")
@click.option("--threads", type=click.IntRange(min=1, max=256), help="Inference threads (default: the profile's).")
@click.option("--report", type=click.Path(dir_okay=False, path_type=Path),
              help="Write plots: OUT.html (self-contained) or OUT.md (+ OUT.png).")
@click.option("--json", "json_out", is_flag=True, help="Print JSON on stdout.")
def profile(artifact: Path, profile_name: str, duration: float, idle_s: float, rate_hz: float, power_source: str,
            rail: str | None, sysfs_root: Path | None, vcgencmd: str, meter_log: Path | None, meter_offset: float,
            thermal_budget: float | None, power_budget: float | None, at_rate: float | None, threads: int | None,
            report: Path | None, json_out: bool) -> None:
    """Measure energy per inference and temperature of ARTIFACT (.tflite, .onnx or manifest.json).

    Idle baseline first, then back-to-back inference for --duration seconds. Energy is
    null (with the reason) when no power source exists; an estimate is marked so.
    """
    from edgeserve.device_profiles import load_profile
    from edgeserve.profiling.power import check_source_name
    from edgeserve.profiling.run import profile_run

    check_source_name(power_source)  # every mistake before the session is opened
    if report is not None:
        from edgeserve.profiling.report import check_available

        if report.suffix.lower() not in (".html", ".htm", ".md"):
            raise click.BadParameter("must end in .html or .md", param_hint="--report")
        check_available()
    prof = load_profile(profile_name)
    session = _open_session(artifact, prof, threads)
    inputs = getattr(session, "inputs", None) or ()
    input_shape = tuple(inputs[0].shape) if inputs else ()
    from edgeserve.runtime.audio.wakeword import stream_figures

    # A streaming model runs per stride as the wake-word detector runs it, not through
    # Session.run's general path (2.5x a wake word's invoke on XNNPACK).
    streaming = stream_figures(input_shape, None) is not None and hasattr(session, "stream_step")
    try:
        if streaming:
            from edgeserve.runtime.measure.bench import StrideRunner

            runner: Any = StrideRunner(session)
        else:
            runner = session
        summary = profile_run(
            runner, prof, report=report, duration_s=duration, idle_s=idle_s, sample_rate_hz=rate_hz,
            power_source=power_source, sysfs_root=sysfs_root, rail=rail, vcgencmd=vcgencmd, meter_log=meter_log,
            meter_offset_s=meter_offset, thermal_budget_c=thermal_budget, power_budget_w=power_budget,
            at_rate_hz=at_rate,
        )
    finally:
        close = getattr(session, "close", None)
        if close is not None:
            close()
    summary = {"artifact": str(artifact), **summary}
    stream = _stream_figures(input_shape, summary)
    if stream is not None:
        summary["stream"] = {**stream, "timed": "StreamStep.value, frames copied in" if streaming else "Session.run"}
    if json_out:
        from edgeserve.cli.options import emit_json

        emit_json(summary)
    else:
        _print_summary(summary)


def _stream_figures(input_shape: tuple[int, ...], summary: dict[str, Any]) -> dict[str, Any] | None:
    """Streaming audio models: time and energy per second of audio, from the run's figures."""
    from edgeserve.runtime.audio.wakeword import stream_figures

    rate = summary.get("rate_hz")
    energy = summary.get("energy_mj_per_inference")
    return stream_figures(input_shape, 1 / rate if rate else None,
                          energy["total"] if isinstance(energy, dict) else None)


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "null"
    return f"{value:g}{unit}" if isinstance(value, (int, float)) else str(value)


def _print_summary(s: dict[str, Any]) -> None:
    source = s["power_source"] or "none"
    if s["estimated"]:
        source += " (ESTIMATED from the profile, not measured)"
    click.echo(f"{s['artifact']} on {s['profile']} ({s['backend']}): {s['inferences']} inferences "
               f"in {s['duration_s']['run']} s ({_fmt(s['rate_hz'], ' Hz')})")
    click.echo(f"power source     {source}")
    host = s.get("host") or {}
    if host.get("note"):
        click.echo(f"note             {host['note']}")
    e = s["energy_mj_per_inference"]
    if e is None:
        click.echo(f"energy           null: {s['energy_reason']}")
    else:
        u = e["uncertainty"]

        def pm(key: str) -> str:
            return f"{_fmt(e[key])} ± {_fmt(u[key])} mJ" if u[key] is not None else f"{_fmt(e[key])} mJ (model)"

        click.echo(f"energy/inference {pm('total')} total, {pm('above_idle')} above idle")
        click.echo(f"power            idle {_fmt(s['idle_power_w'], ' W')}, average {_fmt(s['avg_power_w'], ' W')}; "
                   f"{_fmt(s['inferences_per_wh'])} inferences per Wh")
    if "stream" in s:
        st = s["stream"]
        energy = st.get("energy_mj_per_audio_second")
        click.echo(f"streaming        real-time factor {_fmt(st.get('real_time_factor'))}; "
                   + (f"{_fmt(energy)} mJ per second of audio" if energy is not None else "energy per second of audio: null"))
    t = s["temp_c"]
    if t is None:
        click.echo(f"temperature      null: {s['temp_reason']}")
    else:
        click.echo(f"temperature      start {_fmt(t['start'])} °C, max {_fmt(t['max'])} °C, end {_fmt(t['end'])} °C; "
                   f"throttle events {_fmt((s['throttled'] or {}).get('events'))}")
    m = s["thermal_model"]
    if m is not None:
        click.echo(f"thermal model    T_amb {m['t_amb_c']} °C, τ {m['tau_s']} s"
                   + (f", steady state {s['steady_state_c']['temp_c']} °C at {s['steady_state_c']['rate_hz']} Hz"
                      if s["steady_state_c"] else ""))
    sus = s["sustainable_rate"]
    click.echo(f"sustainable rate {_fmt(s['sustainable_rate_hz'], ' Hz')}"
               + (f" (limited by {sus['limited_by']})" if sus.get("limited_by") else f": {sus.get('reason')}"))
    lat = s["latency_ms"]
    if lat:
        click.echo(f"latency          p50 {_fmt(lat['p50'])} ms, p95 {_fmt(lat['p95'])} ms; drift "
                   f"{_fmt(lat['drift']['percent'], ' %')} (first vs last {lat['drift']['window_s']} s)")
    o = s["sampler"]
    click.echo(f"sampler          {o['samples']} samples at {_fmt(o['achieved_rate_hz'], ' Hz')}, "
               f"{_fmt(o['mean_read_ms'], ' ms')} per read, {_fmt(o['cpu_fraction'])} of a core")
    for path in s.get("report", []):
        click.echo(f"report           {path}")


# ----------------------------------------------------------------------------- for `run`
def thermal_budget_options(f: Any) -> Any:
    """``--thermal-budget``, ``--governor`` and ``--sysfs-root`` for a serving command."""
    opts = [
        click.option("--thermal-budget", type=float, help="Keep the device at or below this °C (ThermalGovernor)."),
        click.option("--governor", "governor_policy", type=click.Choice(["pace", "switch", "threads"]),
                     default="pace", show_default=True, help="How to stay under --thermal-budget."),
        click.option("--sysfs-root", type=click.Path(file_okay=False, path_type=Path),
                     envvar="EDGESERVE_SYSFS_ROOT", help="Read /sys under this directory."),
    ]
    for option in reversed(opts):
        f = option(f)
    return f


def governor_for(session: Any, profile: Any, thermal_budget: float | None, governor_policy: str = "pace",
                 sysfs_root: Path | None = None) -> Any:
    """A started ThermalGovernor around ``session``, or None without a budget.

    Raises:
        SensorError: A budget was asked for but no thermal zone can be read.
    """
    if thermal_budget is None:
        return None
    from edgeserve.profiling.governor import ThermalGovernor

    return ThermalGovernor.for_device(session, thermal_budget, governor_policy, profile=profile,
                                      sysfs_root=sysfs_root)
