"""The ``--report`` file: power, temperature and latency over time, plus the headline figures.

``.html``: one self-contained file (the PNG embedded as base64). ``.md``: Markdown with
``NAME.png`` written beside it. matplotlib is imported only here, through its object API
(no pyplot, no global backend switch), so it never changes a caller's plotting state.
"""

from __future__ import annotations

import base64
import html
import importlib
import io
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgeserve.atomic import write_bytes, write_text
from edgeserve.errors import InputError, MissingDependencyError

if TYPE_CHECKING:
    from edgeserve.profiling.result import ProfileResult

__all__ = ["check_available", "render_png", "write_report"]

_FORMATS = (".html", ".htm", ".md")


def check_available() -> None:
    """Raise :class:`MissingDependencyError` now if matplotlib cannot be imported."""
    try:
        importlib.import_module("matplotlib")
    except ImportError as exc:
        raise MissingDependencyError("matplotlib", "report", "the --report plots") from exc


def render_png(result: ProfileResult) -> bytes:
    """Three stacked plots sharing the time axis: power, temperature, latency."""
    check_available()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    s = result.summary
    trace = result.trace
    run0 = trace.marks.get("run", 0.0)
    idle0 = trace.marks.get("idle", run0)
    fig = Figure(figsize=(9, 8), dpi=100)
    FigureCanvasAgg(fig)
    ax_p, ax_t, ax_l = fig.subplots(3, 1, sharex=True)

    for ax in (ax_p, ax_t, ax_l):
        if run0 > idle0:
            ax.axvspan(idle0 - run0, 0, color="0.9", label="idle baseline")
        ax.grid(alpha=0.3)

    t_p, w = result.power_w
    if t_p.size:
        label = s.get("power_source") or "power"
        if s.get("estimated"):
            label += " (ESTIMATED)"
        ax_p.plot(t_p - run0, w, lw=1, label=label)
        if s.get("idle_power_w") is not None:
            ax_p.axhline(s["idle_power_w"], color="k", ls=":", lw=1, label="idle")
        ax_p.legend(loc="best", fontsize=8)
    else:
        ax_p.text(0.5, 0.5, f"no power: {s.get('energy_reason') or ''}"[:110], ha="center", va="center",
                  transform=ax_p.transAxes, fontsize=8, wrap=True)
    ax_p.set_ylabel("power (W)")

    good = np.isfinite(trace.temp_c)
    if good.any():
        ax_t.plot(trace.t[good] - run0, trace.temp_c[good], lw=1, label="measured")
        model = result.model
        if model is not None and model.input == "power_w" and t_p.size:
            t_m = trace.t[good]
            x = _interval_means(result, t_m)
            if x is not None:
                ax_t.plot(t_m - run0, model.simulate(t_m, x, float(trace.temp_c[good][0])), lw=1, ls="--",
                          label=f"model (τ={model.tau_s:.0f} s)")
        if s.get("thermal_budget_c") is not None:
            ax_t.axhline(s["thermal_budget_c"], color="r", ls="--", lw=1, label="budget")
        ax_t.legend(loc="best", fontsize=8)
    else:
        ax_t.text(0.5, 0.5, f"no temperature: {s.get('temp_reason') or ''}"[:110], ha="center", va="center",
                  transform=ax_t.transAxes, fontsize=8)
    ax_t.set_ylabel("temperature (°C)")

    lat = result.latencies
    if lat.shape[0]:
        ax_l.plot(lat[:, 0] - run0, lat[:, 1], ".", ms=2, alpha=0.5)
    ax_l.set_ylabel("latency (ms)")
    ax_l.set_xlabel("time since inference started (s)")
    fig.suptitle(f"edgeserve profile: {s.get('artifact') or ''} on {s.get('profile') or '?'}", fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _interval_means(result: ProfileResult, t: np.ndarray) -> np.ndarray | None:
    t_p, w = result.power_w
    if t_p.size < 2:
        return None
    mid = (t[1:] + t[:-1]) / 2
    return np.interp(mid, t_p, w)


def _rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    def fmt(v: Any, unit: str = "") -> str:
        if v is None:
            return "null"
        return f"{v:g}{unit}" if isinstance(v, (int, float)) else str(v)

    e = s.get("energy_mj_per_inference") or {}
    u = e.get("uncertainty") or {}
    temp = s.get("temp_c") or {}
    lat = s.get("latency_ms") or {}
    drift = lat.get("drift") or {}
    rows = [
        ("power source", f"{fmt(s.get('power_source'))}{' (ESTIMATED)' if s.get('estimated') else ''}"),
        ("energy / inference (total)", f"{fmt(e.get('total'))} ± {fmt(u.get('total'))} mJ" if e else "null"),
        ("energy / inference (above idle)", f"{fmt(e.get('above_idle'))} ± {fmt(u.get('above_idle'))} mJ" if e else "null"),
        ("idle / average power", f"{fmt(s.get('idle_power_w'))} W / {fmt(s.get('avg_power_w'))} W"),
        ("inferences per Wh", fmt(s.get("inferences_per_wh"))),
        ("rate", fmt(s.get("rate_hz"), " Hz")),
        ("temperature start / max / end", f"{fmt(temp.get('start'))} / {fmt(temp.get('max'))} / {fmt(temp.get('end'))} °C"),
        ("throttle events", fmt((s.get("throttled") or {}).get("events"))),
        ("sustainable rate", f"{fmt(s.get('sustainable_rate_hz'))} Hz ({(s.get('sustainable_rate') or {}).get('limited_by')})"),
        ("latency p50 / p95", f"{fmt(lat.get('p50'))} / {fmt(lat.get('p95'))} ms"),
        ("latency drift", f"{fmt(drift.get('percent'))} % (first vs last {fmt(drift.get('window_s'))} s)"),
    ]
    for key in ("energy_reason", "temp_reason", "thermal_model_reason"):
        if s.get(key):
            rows.append((key.replace("_", " "), str(s[key])))
    return rows


def write_report(result: ProfileResult, out: str | os.PathLike[str]) -> list[Path]:
    """Write the report; returns the files written.

    Raises:
        InputError: The extension is not .html, .htm or .md.
        MissingDependencyError: matplotlib is not installed.
    """
    out = Path(out)
    if out.suffix.lower() not in _FORMATS:
        raise InputError(f"report must end in {', '.join(_FORMATS)}; got {out.name}")
    png = render_png(result)
    rows = _rows(result.summary)
    data = json.dumps(result.summary, indent=2, default=str)
    if out.suffix.lower() == ".md":
        png_path = out.with_suffix(".png")
        write_bytes(png_path, png)
        table = "\n".join(f"| {k} | {v} |" for k, v in rows)
        text = (f"# edgeserve profile\n\n| figure | value |\n|---|---|\n{table}\n\n![power, temperature, latency]"
                f"({png_path.name})\n\n<details><summary>JSON</summary>\n\n```json\n{data}\n```\n</details>\n")
        write_text(out, text)
        return [out, png_path]
    b64 = base64.b64encode(png).decode("ascii")
    table = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    text = (
        "<!doctype html><html><head><meta charset='utf-8'><title>edgeserve profile</title>"
        "<style>body{font-family:sans-serif;max-width:960px;margin:2em auto}th{text-align:left;padding-right:1em}"
        "pre{background:#f4f4f4;padding:1em;overflow:auto}</style></head><body>"
        f"<h1>edgeserve profile</h1><table>{table}</table>"
        f"<img alt='power, temperature and latency over time' src='data:image/png;base64,{b64}'>"
        f"<details><summary>JSON</summary><pre>{html.escape(data)}</pre></details></body></html>\n"
    )
    write_text(out, text)
    return [out]
