"""``edgeserve bench OUT``: every artifact of a conversion folder, side by side, in one run.

"Which format should I ship on this board?" is answered by running each artifact this
machine can run on the same input, with the same Session path an application uses (frame in,
dequantized outputs out), and putting latency beside size on disk and the quality the
manifest recorded against the float source, and energy per inference where the machine has a
power sensor (``loop_energy``). Artifacts that cannot run here (microcontroller
builds, a Core ML package off Apple hardware, a backend that refuses) get a row with the
reason instead of vanishing.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from edgeserve.errors import EdgeServeError
from edgeserve.manifest.record import load_manifest
from edgeserve.manifest.entry import ArtifactEntry
from edgeserve.device_profiles import load_profile
from edgeserve.runtime.artifacts import served
from edgeserve.runtime.measure.loop_energy import LoopEnergy, per_inference
from edgeserve.runtime.measure.memory import PeakMemory

def disk_bytes(path: Path) -> int:
    """A file's size, or every file's under a folder (an .mlpackage, OUT/mcu-c/)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def quality(entry: ArtifactEntry) -> str:
    """What the manifest says the artifact keeps of the source, in a few words."""
    metrics = entry.metrics or {}
    if metrics.get("metric") == "top1" and metrics.get("quantized") is not None:
        if not metrics.get("labelled", True):  # against the float model's own top-1
            return f"top-1 agreement {100 * metrics['quantized']:.1f} %"
        return f"top1 {metrics['quantized']:.3f} (drop {metrics.get('drop_points', 0.0):.2f} pts)"
    sqnr = entry.output_sqnr_db()
    if sqnr:
        return f"SQNR {min(sqnr):.1f} dB" + (" (worst output)" if len(sqnr) > 1 else "")
    check = entry.verification
    if check.get("bit_exact"):
        return f"bit-exact with {check.get('reference') or 'TFLM'}"
    if check.get("max_abs_diff") is not None:
        return f"max |diff| {check['max_abs_diff']:.3g}"
    return "-"


def compare(manifest_path: Path, *, frames: int, warmup: int, threads: int | None = None,
            profile: str | None = None, public_key: Path | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """One row per artifact with status ok, in the manifest's order; ``ratio`` is p50 over the
    fastest artifact's p50 (1.0 for the fastest)."""
    from edgeserve.runtime.measure.bench import benchmark, synthetic_frame
    from edgeserve.runtime.session import Session

    manifest = load_manifest(manifest_path)
    root = manifest_path.parent
    rows: list[dict[str, Any]] = []
    energy = LoopEnergy.open(load_profile(profile) if profile else None)
    shared_frame: np.ndarray | None = None
    for written in manifest["artifacts"]:
        entry = ArtifactEntry.read(written, f"{manifest_path} artifact {written.get('target')!r}")
        if not entry.ok:
            continue
        target = entry.target
        row: dict[str, Any] = {"target": target, "path": entry.path, "bytes": disk_bytes(root / entry.path),
                               "quality": quality(entry)}
        rows.append(row)
        if not served(target):  # a microcontroller build: its figures come from the emulated board
            m4 = entry.verification.get("cortex_m4") or {}
            row["skipped"] = "a microcontroller build: it runs on the board" + (
                f" (emulated Cortex-M4: {m4['instructions']:,} instructions per inference)" if "instructions" in m4 else "")
            continue
        memory = PeakMemory().start()  # each artifact's own peak: the mark is reset for each
        try:
            started = time.perf_counter()
            with Session(manifest_path, profile, target=target, threads=threads, public_key=public_key) as session:
                row["load_ms"] = round((time.perf_counter() - started) * 1e3, 3)
                if session.preprocess is not None:
                    # One camera frame for every artifact, through each one's recorded preprocessing.
                    if shared_frame is None:
                        shared_frame = synthetic_frame(640, 480, seed=seed)
                    frame, row["input"] = shared_frame, "640x480 frame"
                else:
                    frame, row["input"] = session.example_input(), "model tensor"
                result = benchmark(session, frame, frames=frames, warmup=warmup)
                memory.stop()
                row.update(backend=session.backend, p50_ms=result["latency_ms"]["p50"],
                           p95_ms=result["latency_ms"]["p95"], peak_memory_bytes=memory.bytes_added)
                row.update(per_inference(energy, lambda: session.run(frame), frames))
        except EdgeServeError as exc:
            # Each backend's own reason (BackendError lists them), not just "none worked".
            failed = [f"{a.backend}: {a.reason}" for a in getattr(exc, "attempts", ()) if not a.ok]
            row["skipped"] = "; ".join(failed)[:400] if failed else \
                (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    timed = [r["p50_ms"] for r in rows if "p50_ms" in r]
    for r in rows:
        if "p50_ms" in r and timed:
            r["ratio"] = round(r["p50_ms"] / min(timed), 2)
    return rows


def render_png(rows: list[dict[str, Any]], title: str) -> bytes:
    """Latency (p50, with p95 as the bar's top) against size on disk, one point per artifact
    that ran; matplotlib's object API, no global state (edgeserve[report])."""
    import io

    from edgeserve.profiling.report import check_available

    check_available()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    timed = [r for r in rows if "p50_ms" in r]
    fig = Figure(figsize=(7, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for r in timed:
        kb = r["bytes"] / 1024
        ax.errorbar([kb], [r["p50_ms"]], yerr=[[0.0], [r["p95_ms"] - r["p50_ms"]]], fmt="o", capsize=4)
        ax.annotate(f"{r['target']} ({r['backend']})", (kb, r["p50_ms"]), textcoords="offset points", xytext=(6, 4),
                    fontsize=8)
    ax.set_xlabel("size on disk (KB)")
    ax.set_ylabel("latency per frame, p50 to p95 (ms)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    skipped = [r["target"] for r in rows if "p50_ms" not in r]
    if skipped:
        fig.text(0.01, 0.01, f"not run here: {', '.join(skipped)}", fontsize=7)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()
