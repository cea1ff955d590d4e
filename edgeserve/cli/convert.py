"""``edgeserve convert``: one source to verified artifacts for each target asked for."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from edgeserve.cli.options import emit_json, preprocess_options, progress_for, spec_from_flags
from edgeserve.errors import AccuracyError
from edgeserve.quality.detections import DEFAULT_MAX_SCORE_ERROR, DEFAULT_MIN_DETECTION_MATCH
from edgeserve.quality.options import DEFAULT_MIN_AGREEMENT, DEFAULT_MIN_SQNR_DB
from edgeserve.runtime.decoders import DECODERS


@click.command()
@click.argument("source", type=click.Path(path_type=Path))
@click.option("-t", "--target", "targets", multiple=True, required=True,
              help="Target to build (repeatable). See `edgeserve targets`.")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Output directory; manifest.json is written there.")
@click.option("--calib", type=click.Path(path_type=Path), help="Calibration data: .npz (x, or one array per input) or an image folder.")
@click.option("--calib-random", is_flag=True, help="Calibrate on random data. Smoke tests only: the manifest says so.")
@click.option("--calib-samples", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Use at most this many calibration samples.")
@click.option("--eval", "eval_data", type=click.Path(path_type=Path), help="Evaluation .npz with x and y (labels).")
@click.option("--max-drop", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="Largest accepted drop of the task metric against --eval labels: accuracy points (top1), or "
                   "percent more error (mae/mse, or with --metric). Judges output 0.")
@click.option("--min-agreement", type=click.FloatRange(min=0, max=100), default=DEFAULT_MIN_AGREEMENT,
              show_default=True, metavar="PCT",
              help="Without labels, a classifier's output 0: smallest accepted share of samples (percent) whose "
                   "top-1 equals the float source's.")
@click.option("--min-detection-match", type=click.FloatRange(min=0, max=100), default=DEFAULT_MIN_DETECTION_MATCH,
              show_default=True, metavar="PCT",
              help="With --decoder: smallest accepted share (percent) of detections that match the float source's "
                   "(same class, IoU >= 0.5), judged on the outputs the decoder reads.")
@click.option("--max-score-error", type=click.FloatRange(min=0, max=1), default=DEFAULT_MAX_SCORE_ERROR,
              show_default=True, help="With --decoder: largest accepted mean score difference of the matched "
                                      "detections.")
@click.option("--min-sqnr", "min_sqnr_db", type=float, default=DEFAULT_MIN_SQNR_DB, show_default=True, metavar="DB",
              help="Smallest accepted SQNR in dB against the float source, for every output the task metric "
                   "does not judge (regression, landmarks, embeddings, detector heads, extra outputs).")
@click.option("--metric", type=click.Choice(["top1", "mae", "mse"]), help="Task metric (default: from the labels and outputs).")
@click.option("--io", type=click.Choice(["int8", "uint8", "float"]), default="int8", show_default=True,
              help="Type of the model's input and output tensors.")
@click.option("--debug-samples", type=click.IntRange(min=1), default=32, show_default=True,
              help="Samples the per-layer quantization debugger runs.")
@click.option("--no-reuse", is_flag=True,
              help="Build every target again, even one the previous run into OUT built from the same source, "
                   "data, options and tools (kept by default, marked `reused` in the manifest).")
@click.option("--no-cache", is_flag=True,
              help="Neither take targets from the cache shared between output folders (~/.cache/edgeserve/targets, "
                   "`edgeserve cache`) nor keep them there.")
@click.option("-j", "--jobs", type=click.IntRange(min=1, max=256), default=None, metavar="N",
              help="Targets built side by side once the shared steps are done (default: the cores this process "
                   "may use); each target's risky steps stay isolated. 1: one after another.")
@click.option("--per-layer", is_flag=True,
              help="tflite-int8: measure the per-layer error table on every run (by default only when the "
                   "int8 model misses its gate and a remedy needs it).")
@click.option("--remedy-budget", type=click.FloatRange(min=1, max=10**6), default=900, show_default=True,
              metavar="SECONDS",
              help="tflite-int8: the longest the quantization attempts may take together (int8, then each remedy "
                   "with the per-layer table); past it the search stops and keeps the best attempt so far.")
@click.option("--target-budget", type=click.FloatRange(min=1, max=10**7), default=1800, show_default=True,
              metavar="SECONDS",
              help="The longest one target's tool steps may take together; a target past it is refused (its "
                   "step killed) and the other targets go on.")
@click.option("--max-float-macs", type=click.FloatRange(0, 100), default=50.0, show_default=True, metavar="PCT",
              help="tflite-int8: the largest share of multiply-accumulates a model may compute in float and still "
                   "pass as INT8 (100 accepts a mostly float model).")
@click.option("-p", "--profile", help="Device profile (see `edgeserve profiles`); mcu checks the build fits it.")
@click.option("--name", help="mcu: C name of the model (g_NAME_model_data, NAME_model::...). Default: from the file name.")
@click.option("--no-fit-check", is_flag=True, help="mcu: write the build even if it does not fit the profile.")
@click.option("--cmsis-nn", "cmsis_nn", metavar="DIR",
              help="mcu-c: call the CMSIS-NN in DIR (yours: STM32Cube, Zephyr, ESP-IDF and TFLM ship one) where a "
                   "layer fits it; default: $CMSIS_NN_DIR, else portable C only.")
@click.option("--kernels", type=click.Choice(["portable", "generated"]), default=None,
              help="mcu-c: 'generated' writes 1x1 and 3x3 depthwise int8 convolutions as code of their own, "
                   "specialised to each layer's shapes with the Cortex-M DSP instructions (checked bit-exact like "
                   "the rest); default: edgeserve's portable kernels.")
@click.option("--coreml-precision", type=click.Choice(["fp16", "int8-weights", "w8a8"]), default="fp16",
              show_default=True, help="coreml: FP16 weights and activations, INT8 weights, or INT8 weights and activations.")
@click.option("--deployment-target", default="iOS17", show_default=True,
              help="coreml: minimum OS the package runs on (iOS16, iOS17, iOS18, macOS13, ...).")
@click.option("--labels", "labels_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Class labels, one per line: stored in the manifest (the runtime's classify uses them); "
                   "coreml: makes the package a classifier.")
@click.option("--author", help="coreml: author in the package metadata.")
@click.option("--license", "license_", help="coreml: licence in the package metadata.")
@click.option("--model-version", help="coreml: version in the package metadata (default: source sha256[:12]).")
@click.option("--sign-key", type=click.Path(dir_okay=False, path_type=Path),
              help="Sign the manifest with this Ed25519 private key (PEM): writes manifest.json.sig.")
@click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME=1x3x224x224",
              help="ONNX and .pt2 sources: fix an input's dynamic dimensions (repeatable).")
@click.option("--input-value", "input_values", multiple=True, metavar="NAME=VALUE",
              help="ONNX sources: fix an input to a value (a sample rate: sr=16000); it becomes a constant of "
                   "every artifact (repeatable).")
@click.option("--batch-axis", "batch_axes", multiple=True, metavar="NAME=AXIS",
              help="ONNX sources: the input or output NAME carries the batch at AXIS (a recurrent state laid out "
                   "[layers, batch, units]: state=1); every artifact takes and gives it batch-first (repeatable).")
@click.option("--dynamic-batch", is_flag=True, help="onnx, onnx-int8: leave the batch dimension free (default: 1).")
@click.option("--decoder", type=click.Choice(DECODERS),
              help="Record the detector's decoder in the manifest (`run` then gives boxes with no flag); a named "
                   "family also records its preprocessing unless given.")
@click.option("--decoder-options", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="TOML: score_threshold, iou_threshold, and for ssd-anchors MediaPipe's anchor options.")
@preprocess_options
@click.option("--json", "json_out", is_flag=True, help="Print the manifest as JSON on stdout.")
@click.pass_context
def convert(ctx: click.Context, source: Path, targets: Sequence[str], out_dir: Path, calib: Path | None,
            calib_random: bool, calib_samples: int, eval_data: Path | None, max_drop: float, min_agreement: float,
            min_detection_match: float, max_score_error: float, min_sqnr_db: float,
            metric: str | None, io: str, debug_samples: int, no_reuse: bool, no_cache: bool, jobs: int | None, per_layer: bool, remedy_budget: float, target_budget: float, max_float_macs: float, profile: str | None, name: str | None, no_fit_check: bool,
            cmsis_nn: str | None, kernels: str | None, coreml_precision: str, deployment_target: str, labels_file: Path | None, author: str | None,
            license_: str | None, model_version: str | None, sign_key: Path | None,
            input_shapes: Sequence[str], input_values: Sequence[str], batch_axes: Sequence[str], dynamic_batch: bool, decoder: str | None, decoder_options: Path | None,
            preprocess_file: Path | None, json_out: bool, **spec_flags: Any) -> None:
    """Convert SOURCE (.keras, Keras 2 .h5, SavedModel dir, PyTorch .pt2 or traced .pt, .onnx, or a
    float or full-INT8 .tflite) to verified edge artifacts. `edgeserve inspect SOURCE` shows the routes."""
    from edgeserve.conversion.convert import convert as run_convert

    if calib is not None and calib_random:
        raise click.UsageError("give either --calib or --calib-random, not both")
    spec = spec_from_flags(preprocess_file, spec_flags)
    output = None
    if decoder is not None:
        from edgeserve.cli.session import read_toml
        from edgeserve.runtime.decoders import make_decoder

        decoder_settings = read_toml(decoder_options) if decoder_options else {}
        family = make_decoder(decoder, decoder_settings)  # refuses bad options before converting
        output = {"kind": "detect", "decoder": decoder, "options": decoder_settings}
        if spec is None and family.preprocess is not None:
            spec = family.preprocess
    options = {"output": output, "io": io, "max_drop": max_drop, "min_agreement": min_agreement, "min_sqnr_db": min_sqnr_db, "metric": metric,
               "min_detection_match": min_detection_match, "max_score_error": max_score_error,
               "debug_samples": debug_samples, "per_layer": per_layer, "remedy_budget_s": remedy_budget,
               "max_float_macs": max_float_macs, "target_budget_s": target_budget,
               "name": name, "fit_check": not no_fit_check, "cmsis_nn": cmsis_nn,
               "kernels": kernels,
               "coreml_precision": coreml_precision, "deployment_target": deployment_target,
               "labels": str(labels_file) if labels_file else None, "author": author, "license": license_,
               "model_version": model_version, "dynamic_batch": dynamic_batch}
    try:
        with progress_for(ctx) as progress:
            result = run_convert(
                source, targets, out_dir, calib=calib, eval_data=eval_data, calib_random=calib_random,
                preprocess=spec, profile=profile, options=options, max_calib_samples=calib_samples,
                progress=progress, sign_key=sign_key, input_shapes=parse_input_shapes(input_shapes),
                input_values=parse_input_values(input_values), batch_axes=parse_batch_axes(batch_axes),
                reuse=not no_reuse, cache=not no_cache, jobs=jobs,
            )
    except AccuracyError as exc:
        if exc.result is not None and not json_out:  # with --json, the error object carries the manifest
            _show_manifest(exc.result.manifest, json_out)  # type: ignore[attr-defined]
        raise
    _show_manifest(result.manifest, json_out)


def parse_input_values(values: Sequence[str]) -> dict[str, str] | None:
    """``NAME=VALUE`` options as {name: value text} (the source parses it as the input's type)."""
    fixed: dict[str, str] = {}
    for value in values:
        name, sep, text = value.partition("=")
        if not sep or not name or not text:
            raise click.BadParameter(f"expected NAME=VALUE (sr=16000); got {value!r}", param_hint="--input-value")
        fixed[name] = text
    return fixed or None


def parse_batch_axes(values: Sequence[str]) -> dict[str, int] | None:
    """``NAME=AXIS`` options as {name: axis}."""
    axes: dict[str, int] = {}
    for value in values:
        name, sep, text = value.partition("=")
        if not sep or not name or not text.isdigit():
            raise click.BadParameter(f"expected NAME=AXIS (state=1); got {value!r}", param_hint="--batch-axis")
        axes[name] = int(text)
    return axes or None


def parse_input_shapes(values: Sequence[str]) -> dict[str, tuple[int, ...]] | None:
    """``NAME=1x3x224x224`` options as {name: shape}."""
    shapes: dict[str, tuple[int, ...]] = {}
    for value in values:
        name, sep, dims = value.rpartition("=")
        try:
            shape = tuple(int(d) for d in dims.lower().split("x"))
        except ValueError:
            shape = ()
        if not sep or not name or not shape or any(d < 1 for d in shape):
            raise click.BadParameter(f"expected NAME=1x3x224x224 (positive sizes); got {value!r}",
                                     param_hint="--input-shape")
        shapes[name] = shape
    return shapes or None


def _show_manifest(manifest: dict[str, Any], json_out: bool) -> None:
    if json_out:
        emit_json(manifest)
        return
    from edgeserve.cli.report import print_conversion

    print_conversion(manifest)
