"""``edgeserve run``: serve an artifact with the on-device runtime on images, video, a camera or audio."""

from __future__ import annotations

import collections
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from edgeserve.cli.options import emit_json
from edgeserve.cli.profile import governor_for, thermal_budget_options
from edgeserve.cli.session import open_session, placement, read_toml, session_options
from edgeserve.errors import InputError
from edgeserve.runtime.decoders import DECODERS


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@click.command()
@click.argument("artifact", type=click.Path(path_type=Path))
@click.argument("more_inputs", nargs=-1, metavar="[PATH]...")
@click.option("-i", "--input", "inputs", multiple=True,
              help="Image, .npy, folder, video, camera[:N], /dev/videoN or picamera2; several may follow "
                   "one --input (--input a.jpg b.jpg), and --input may repeat.")
@click.option("-k", "--top-k", type=click.IntRange(min=1), default=5, show_default=True, help="Classes to report.")
@click.option("--max-frames", type=click.IntRange(min=1), help="Stop a video or camera after this many frames.")
@click.option("--outputs", "show_outputs", is_flag=True, help="Include every dequantized output in the JSON.")
@click.option("--decoder", type=click.Choice(DECODERS),
              help="Decode detector outputs into boxes in frame pixels (a named family also brings its preprocessing).")
@click.option("--decoder-options", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="TOML: score_threshold, iou_threshold, and for ssd-anchors MediaPipe's anchor options.")
@click.option("--save", "save_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the frame (image) or frames (video) with boxes and labels drawn; written atomically.")
@click.option("--cutoff", type=float, help="Wake words: detection threshold on the averaged probability "
                                          "(default: the model's microWakeWord JSON, else 0.9).")
@click.option("--window", type=click.IntRange(min=1), help="Wake words: strides averaged (default: the JSON, else 5).")
@click.option("--duration", type=click.FloatRange(min=0, min_open=True),
              help="Wake words from --input mic or -: stop after this many seconds of audio (default: until the "
                   "source ends or Ctrl-C).")
@session_options
@thermal_budget_options
@click.option("--json", "json_out", is_flag=True, help="Print JSON on stdout.")
@click.pass_context
def run(ctx: click.Context, artifact: Path, more_inputs: Sequence[str], inputs: Sequence[str], top_k: int, max_frames: int | None, show_outputs: bool,
        decoder: str | None, decoder_options: Path | None, save_path: Path | None, cutoff: float | None,
        window: int | None, duration: float | None,
        profile: str | None, backend: str, require: str | None, threads: int | None, target: str | None,
        labels: Path | None, public_key: Path | None, preprocess_file: Path | None, thermal_budget: float | None,
        governor_policy: str,
        sysfs_root: Path | None, json_out: bool, **spec_flags: Any) -> None:
    """Run ARTIFACT (manifest.json, .tflite, .onnx, .mlpackage) on each --input and print the top classes.

    A streaming wake-word model given audio (--input speech.wav; - for raw 16 kHz 16-bit PCM on
    stdin; mic or mic:ALSA_DEVICE for a microphone, through arecord) prints its detections instead,
    as they happen for a live source."""
    from edgeserve.cli.wakeword import is_audio, run_audio
    from edgeserve.runtime.io.inputs import is_video_or_camera, iter_inputs, split_stack
    from edgeserve.runtime.io.outputs import top_k as best

    # Paths after the first --input's value arrive as extra arguments: they are inputs too.
    stray = [v for v in more_inputs if _is_number(v) and not Path(v).exists()]
    if stray:  # `--mean 0.485 0.456 0.406`: click gives --mean the first value and the rest land here
        raise click.UsageError(f"got {', '.join(stray)} where input paths go: --mean and --std take one "
                               "comma-separated value (--mean 0.485,0.456,0.406)")
    inputs = (*inputs, *more_inputs)
    if not inputs:
        raise click.UsageError("give at least one input: --input PATH [PATH]...")
    quiet = bool(ctx.find_root().obj and ctx.find_root().obj.get("quiet"))
    if is_audio(inputs):
        run_audio(artifact, inputs, cutoff, window, backend, threads, json_out, quiet, duration)
        return
    if cutoff is not None or window is not None or duration is not None:
        raise click.UsageError("--cutoff, --window and --duration are for wake-word models given audio "
                               "(--input speech.wav, mic or -)")
    detector = None
    if decoder is not None:
        from edgeserve.runtime.decoders import make_decoder

        detector = make_decoder(decoder, read_toml(decoder_options) if decoder_options else None)
        if detector.preprocess is not None and preprocess_file is None and not any(
                v not in (None, ()) for v in spec_flags.values()):
            # The family's own preprocessing, unless the user said otherwise.
            spec_flags = {**spec_flags, **_spec_flags_of(detector.preprocess)}
    session = open_session(artifact, profile, backend, require, threads, target, labels, preprocess_file, spec_flags,
                           public_key)
    recorded = session.output_spec
    if detector is None and recorded and recorded.get("kind") == "detect":
        from edgeserve.runtime.decoders import make_decoder

        detector = make_decoder(recorded["decoder"], recorded.get("options"))  # as converted: no flag needed
    results = []
    with session:
        governor = governor_for(session, session.profile, thermal_budget, governor_policy, sysfs_root)
        runner = governor or session
        model_shape = tuple(session.inputs[0].shape)
        takes_images = session.preprocess is not None
        saver = None
        if save_path is not None:
            from edgeserve.runtime.io.drawing import Saver

            saver = Saver(save_path)
        # Each frame's shape by name, for mapping boxes back (shapes only: frames are not kept;
        # a live camera's dropped frames are discarded with the next served one).
        frames_seen: collections.OrderedDict[str, tuple[int, ...]] = collections.OrderedDict()

        kept: collections.OrderedDict[str, Any] = collections.OrderedDict()  # --save: frames until drawn

        def remember(name: str, frame: Any) -> tuple[str, Any]:
            frames_seen[name] = getattr(frame, "shape", ())
            if saver is not None:
                kept[name] = frame
            return name, frame

        stream_stats: Any = None  # set when the input is pipelined (video, camera)
        live = False
        items = (remember(n, f) for name, array in iter_inputs(inputs, max_frames, [d.name for d in session.inputs])
                 for n, f in split_stack(name, array, model_shape, takes_images))
        if governor is None and len(inputs) == 1 and is_video_or_camera(inputs[0]):
            # Pipelined: the next frame decodes and preprocesses while this one runs.
            from edgeserve.runtime.streaming.video_pipeline import StreamStats

            live = not Path(inputs[0]).is_file()
            names: dict[int, str] = {}
            stream_stats = StreamStats()

            def frames_of(source: Any) -> Any:
                for i, (n, f) in enumerate(source):
                    names[i] = n
                    yield f

            def streamed() -> Any:
                for index, outputs in session.stream(frames_of(items), live=live, stats=stream_stats):
                    for dropped in [i for i in names if i < index]:  # a live camera's dropped frames
                        del names[dropped]
                    yield names.pop(index), outputs

            pairs: Any = streamed()
        else:
            pairs = ((name, runner.run(frame)) for name, frame in items)
        try:
            for count, (name, outputs) in enumerate(pairs):
                if max_frames is not None and count >= max_frames:
                    break
                if detector is not None:
                    entry: dict[str, Any] = {"input": name, "detections": _detections(detector, session, frames_seen,
                                                                                      name, outputs)}
                elif not session.labels and (session.classifier is False or
                                             (session.classifier is None and not _one_vector(outputs[0]))):
                    # Landmarks or an embedding ranked as class scores read as an answer: say what it is.
                    # A bare model file records nothing: only one vector of scores is ranked.
                    entry = {"input": name, "outputs_summary": [_summary(o) for o in outputs],
                             "not_ranked": NOT_JUDGED if session.classifier is False else NOT_ONE_VECTOR}
                else:
                    entry = {"input": name, "top_k": [p.to_dict() for p in best(outputs[0], top_k, session.labels)]}
                upscale = _upscale_note(session, frames_seen.get(name)) if takes_images else None
                if upscale:  # a thumbnail blown up to the model's size: a confident answer means little
                    entry["note"] = upscale
                    if not json_out and not quiet:
                        click.echo(f"note: {name}: {upscale}", err=True)
                if show_outputs:
                    entry["outputs"] = [o.tolist() for o in outputs]
                results.append(entry)
                if saver is not None:
                    frame = None
                    while kept:  # this frame, and live frames dropped before it (never later ones)
                        seen, held = kept.popitem(last=False)
                        if seen == name:
                            frame = held
                            break
                    if frame is not None and getattr(frame, "ndim", 0) == 3:
                        saver.add(frame, entry)
                if not json_out:
                    _print_result(entry)
        except BaseException:
            if saver is not None:
                saver.abort()  # no half file under the finished name
            raise
        finally:
            close = getattr(pairs, "close", None)
            if close is not None:  # a pipelined video stops its producer and releases the source
                close()
        if saver is not None:
            saver.finish()
            if not json_out and not quiet:
                click.echo(f"saved {saver.frames} frame(s) to {save_path}", err=True)
        summary = {"backend": session.backend, "attempts": [a.to_dict() for a in session.attempts],
                   "placement": session.placement.to_dict(), "results": results}
        if stream_stats is not None:
            summary["stream"] = {"live": live, "frames_in": stream_stats.frames_in,
                                 "frames_out": stream_stats.frames_out, "dropped": stream_stats.dropped}
            if live and not json_out and not quiet:  # the camera outran the model: say by how much
                click.echo(f"camera: {stream_stats.frames_in} frame(s) captured, {stream_stats.frames_out} served, "
                           f"{stream_stats.dropped} dropped (the newest frame wins)", err=True)
        if governor is not None:
            summary["governor"] = {"stats": governor.stats(), "decisions": [_as_dict(d) for d in governor.decisions]}
            governor.close()
    if json_out:
        emit_json(summary)
    elif not quiet:  # -q: the results only, not the backend and skipped-delegate lines
        _print_backend(summary)


def _as_dict(decision: Any) -> Any:
    to_dict = getattr(decision, "to_dict", None)
    return to_dict() if to_dict else decision


def _spec_flags_of(spec: Any) -> dict[str, Any]:
    """A decoder family's PreprocessSpec as the run command's spec flags (what --size etc. set)."""
    return {"size": tuple(spec.size), "color": spec.color, "resize_mode": spec.resize_mode, "scale": spec.scale,
            "mean": tuple(spec.mean), "std": tuple(spec.std)}


def _detections(detector: Any, session: Any, frames_seen: Any, name: str,
                outputs: list[Any]) -> list[dict[str, Any]]:
    from edgeserve.runtime.decoders.geometry import FrameGeometry

    shape: tuple[int, ...] = ()
    while frames_seen:  # this frame, and any dropped before it
        seen, shape = frames_seen.popitem(last=False)
        if seen == name:
            break
    spec = session.preprocess
    if spec is None or len(shape) != 3:
        raise InputError("--decoder maps boxes back to the frame: it needs image inputs and a PreprocessSpec")
    geometry = FrameGeometry.of(spec, shape[0], shape[1])
    return [d.to_dict() for d in detector.detect(outputs, spec.size, geometry, session.labels)]


# An image this many times smaller than the model's input on a side is mostly interpolation.
UPSCALE_WARNING = 4


def _upscale_note(session: Any, shape: Any) -> str | None:
    """Why an image far smaller than the model's input gives an answer that means little."""
    size = getattr(session.preprocess, "size", None)  # (height, width) of the model input
    if not size or not shape or len(shape) < 2:
        return None
    height, width = int(shape[0]), int(shape[1])
    factor = max(size[0] / max(height, 1), size[1] / max(width, 1))
    if factor < UPSCALE_WARNING:
        return None
    return (f"a {width}x{height} image was enlarged {factor:.0f}x to the model's {size[1]}x{size[0]} input; "
            "the result says little about it")


def _summary(output: Any) -> dict[str, Any]:
    """An output that is not class scores, in numbers: its shape and range."""
    return {"shape": list(output.shape), "min": float(output.min()) if output.size else None,
            "max": float(output.max()) if output.size else None,
            "mean": float(output.mean()) if output.size else None}


NOT_JUDGED = "the conversion did not judge output 0 as class scores"


NOT_ONE_VECTOR = ("a bare model file does not say what its outputs are, and output 0 is not one vector of "
                  "scores; convert it with edgeserve to record it")


def _one_vector(output: Any) -> bool:
    """Output 0 of one input is one vector of two or more scores ([1, N] or [N]): what a classifier
    gives, logits or probabilities; landmarks [1, 468, 3] or a map [1, H, W, C] are not ranked.
    (An embedding [1, 128] is one vector too: a bare file cannot tell it from scores.)"""
    shape = tuple(getattr(output, "shape", ()))
    return (len(shape) == 1 and shape[0] >= 2) or (len(shape) == 2 and shape[0] == 1 and shape[1] >= 2)


def _print_result(entry: dict[str, Any]) -> None:
    if "outputs_summary" in entry:
        said = "; ".join(f"output {i} {o['shape']} {o['min']:.4g}..{o['max']:.4g} (mean {o['mean']:.4g})"
                         if o["min"] is not None else f"output {i} {o['shape']} empty"
                         for i, o in enumerate(entry["outputs_summary"]))
        click.echo(f"{entry['input']}: {said} (not ranked as classes: {entry.get('not_ranked', NOT_JUDGED)}; "
                   "--outputs prints the values with --json, --labels names classes)")
        return
    if "detections" in entry:
        found = "; ".join(f"{d['label'] or d['class']} {d['score']:.2f} at [{', '.join(f'{v:.0f}' for v in d['box'])}]"
                          for d in entry["detections"])
        click.echo(f"{entry['input']}: {len(entry['detections'])} detection(s)" + (f": {found}" if found else ""))
        return
    best = ", ".join(
        f"{p.get('label', p['index'])}={p['score']:.3f}" for p in entry["top_k"]
    )
    click.echo(f"{entry['input']}: {best}")


def _print_backend(summary: dict[str, Any]) -> None:
    click.echo(f"backend: {summary['backend']} ({placement(summary['placement'])})", err=True)
    for a in summary["attempts"]:
        if not a["ok"]:
            click.echo(f"  skipped {a['backend']} [{a['stage']}]: {a['reason']}", err=True)
