"""Streaming wake-word models: time per stride, real-time factor, per-stride overhead, for the README.

    python benchmarks/streaming.py [--json] [--blocks 400]

Models: the four microWakeWord detectors in the pymicro-wakeword wheel (fetched into the
registry cache by tests/registry_models.py). Each invoke consumes ``stride`` feature frames
(the input's second dimension) of ``feature_step_size`` ms each (from the model's JSON), so
one invoke covers stride x step ms of audio; the real-time factor is the time per stride
over that span (lower is faster; 0.01 = 100x faster than real time).

Measured on both LiteRT CPU backends (XNNPACK, and the builtin kernels ``run --input
speech.wav`` uses), one thread, round-robin in one process, on feature frames of speech
(one stride from the middle of espeak-ng's speech, through the TFLM audio frontend) or,
without espeak-ng, quiet frames:

* ``StreamStep.value(frames)``: frames copied in, the probability out, state carried;
* ``StreamStep.value()``: the frames already written into ``step.input``, the engine's own
  input memory (what WakeWordStream does: it quantizes the features straight into it);
* ``Session.run``: the same through the general path (arrays out);
* the plain loop: LiteRT's own ``set_tensor`` / ``invoke()`` / ``get_tensor``;
* ``invoke()``: LiteRT's ``Interpreter.invoke()`` alone, the goal's baseline (at most 1.2x);
* the engine's ``Invoke``: the C++ call under it, without the Python guard ``invoke()`` adds.

The whole detector (``run --input speech.wav``: PCM through the TFLM frontend, quantized
into the input, the model, the sliding window) is timed per stride over the speech too.

Calls are timed in blocks of 100 (one clock read per block, so the clock's own ~70 ns is
not added to microsecond calls); each figure is the median over blocks.
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

MODELS = ("alexa", "hey_jarvis", "hey_mycroft", "okay_nabu")
BACKENDS = ("litert:xnnpack", "litert:cpu")
BLOCK = 100


def measure_blocks(steps: dict[str, Callable[[], Any]], blocks: int) -> dict[str, float]:
    """Median seconds per call of each step, timed in blocks of BLOCK calls, round-robin."""
    for step in steps.values():
        for _ in range(BLOCK):
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(blocks):
        for name, step in steps.items():
            t0 = time.perf_counter()
            for _ in range(BLOCK):
                step()
            times[name].append((time.perf_counter() - t0) / BLOCK)
    return {name: float(np.median(t)) for name, t in times.items()}


def spoken(tmp: Path) -> Any:
    """espeak-ng saying the four wake words as 16 kHz Audio; None without espeak-ng."""
    if shutil.which("espeak-ng") is None:
        return None
    from speech import speak

    from edgeserve.runtime.audio.pcm import read_wav

    return read_wav(speak("Alexa. Hey Jarvis. Okay Nabu. Hey Mycroft.", tmp / "speech.wav"))


def pipeline_per_stride(model: Path, backend: str, audio: Any, repeats: int = 5) -> float:
    """Seconds per stride of the whole detector (PCM -> TFLM frontend -> quantize -> model ->
    sliding window), WakeWordStream over the speech: the median of ``repeats`` passes."""
    from edgeserve.runtime import Session
    from edgeserve.runtime.audio.wakeword import WakeWordStream

    times = []
    with Session(model, backend=backend, threads=1) as session:
        for _ in range(repeats):
            session.reset()
            t0 = time.perf_counter()
            stream = WakeWordStream(session, 0.9, 5).run(audio)
            times.append((time.perf_counter() - t0) / len(stream.probabilities))
    return float(np.median(times))


def run(blocks: int) -> dict[str, Any]:
    import registry_models
    import speech
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from edgeserve.runtime import Session
    from edgeserve.tflite.model import TfliteModel

    wheel = registry_models.fetch_wheel(registry_models.MICROWAKEWORD)
    if wheel is None:
        sys.exit(f"error: pip could not download {registry_models.MICROWAKEWORD}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as archive:
        audio = spoken(Path(tmp))
        frames_of_speech = None if audio is None else speech.features(audio.samples.tobytes())
        for backend in BACKENDS:
            steps: dict[str, Callable[[], Any]] = {}
            keep: list[Any] = []
            info: dict[str, dict[str, Any]] = {}
            for name in MODELS:
                model = Path(tmp) / f"{name}.tflite"
                model.write_bytes(archive.read(f"pymicro_wakeword/models/{name}.tflite"))
                config = json.loads(archive.read(f"pymicro_wakeword/models/{name}.json"))
                session = Session(model, backend=backend, threads=1)
                detail = session.inputs[0]
                stride = detail.shape[1]
                if frames_of_speech is not None:  # speech: a realistic stride, not silence
                    frames = speech.quantized_strides(frames_of_speech, detail.scale, detail.zero_point, stride)
                else:
                    frames = np.random.default_rng(0).integers(-128, -60, (16, *detail.shape)).astype(np.int8)
                step = session.stream_step()
                frame = frames[len(frames) // 2]
                step.value(frame)  # the first call runs Session.run's checks; then the step holds views
                assert step.fast, f"{name} on {backend}: no fast path"
                raw_invoke = session._active._raw_invoke  # LiteRT's C++ Invoke, as the step calls it
                kwargs = ({"experimental_op_resolver_type": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES}
                          if backend == "litert:cpu" else {})
                plain = Interpreter(model_path=str(model), num_threads=1, **kwargs)
                plain.allocate_tensors()
                i, o = plain.get_input_details()[0]["index"], plain.get_output_details()[0]["index"]

                def loop(p=plain, i=i, o=o, f=frame) -> Any:
                    p.set_tensor(i, f)
                    p.invoke()
                    return p.get_tensor(o)

                loop()
                step.input[...] = frame
                # functools.partial, not lambdas: a C-level call adds nothing of its own to the figures.
                steps[f"{name} step"] = functools.partial(step.value, frame)
                steps[f"{name} inplace"] = step.value  # the frames already in step.input (WakeWordStream's way)
                steps[f"{name} run"] = functools.partial(session.run, frame)
                steps[f"{name} plain"] = loop
                steps[f"{name} invoke"] = plain.invoke
                steps[f"{name} Invoke"] = raw_invoke
                keep += [session, step, plain]
                model_info = TfliteModel.from_bytes(model.read_bytes())
                info[name] = {"stride_ms": stride * config["micro"]["feature_step_size"],
                              "state_bytes": sum(v["bytes"] for v in model_info.resource_variables())}
            times = measure_blocks(steps, blocks)
            for name in MODELS:
                t = {k: times[f"{name} {k}"] * 1e6 for k in ("step", "inplace", "run", "plain", "invoke", "Invoke")}
                rows.append({"model": name, "backend": backend, **info[name],
                             "frames": "speech" if frames_of_speech is not None else "quiet",
                             **{f"{k.lower() if k != 'Invoke' else 'engine_invoke'}_us": round(v, 2)
                                for k, v in t.items()},
                             "step_overhead": round(t["step"] / t["invoke"], 3),
                             "inplace_overhead": round(t["inplace"] / t["invoke"], 3),
                             "run_overhead": round(t["run"] / t["invoke"], 3),
                             "plain_loop_overhead": round(t["plain"] / t["invoke"], 3),
                             "step_over_engine_invoke": round(t["step"] / t["Invoke"], 3),
                             "real_time_factor": round(t["step"] / 1e3 / info[name]["stride_ms"], 6)})
                if audio is not None:
                    whole = pipeline_per_stride(Path(tmp) / f"{name}.tflite", backend, audio) * 1e6
                    rows[-1]["detector_us_per_stride"] = round(whole, 1)
                    rows[-1]["detector_real_time_factor"] = round(whole / 1e3 / info[name]["stride_ms"], 5)
            for obj in keep:
                if hasattr(obj, "close"):
                    obj.close()
    return {"blocks": blocks, "block": BLOCK, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=400, help="blocks of 100 calls per measurement")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.blocks)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print("| model | backend | audio per stride | state | StreamStep µs (frames in place) | StreamStep µs (frames copied in) "
          "| Session.run µs | plain loop µs | invoke() µs | engine Invoke µs | StreamStep in place / invoke() "
          "| StreamStep copy / invoke() | Session.run / invoke() | plain loop / invoke() | real-time factor "
          "| whole detector µs per stride | whole detector real-time factor |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in result["rows"]:
        print(f"| {r['model']} | {r['backend']} | {r['stride_ms']} ms | {r['state_bytes']:,} B | {r['inplace_us']} | "
              f"{r['step_us']} | {r['run_us']} | {r['plain_us']} | {r['invoke_us']} | {r['engine_invoke_us']} | "
              f"**{r['inplace_overhead']}x** | **{r['step_overhead']}x** | {r['run_overhead']}x | "
              f"{r['plain_loop_overhead']}x | {r['real_time_factor']} | {r.get('detector_us_per_stride', '-')} | "
              f"{r.get('detector_real_time_factor', '-')} |")

if __name__ == "__main__":
    main()
