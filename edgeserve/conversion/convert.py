"""``edgeserve convert``: load the source and data once, run each target, write the manifest."""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import logging
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from edgeserve._deps import remember_installed
from edgeserve.atomic import read_settings
from edgeserve.console import Progress, capture_native_stderr
from edgeserve.datasets import NO_CALIBRATION_HELP, check_data_paths, check_shape_early, load_calibration, load_eval
from edgeserve.isolation import budget
from edgeserve.conversion.schedule import default_jobs, in_dependency_order
from edgeserve.conversion.source_outputs import label_outputs
from edgeserve.manifest.staging import check_output_path, staged_output
from edgeserve.errors import (
    AccuracyError,
    CalibrationDataError,
    EdgeServeError,
    InputError,
    PreprocessSpecError,
    first_line,
)
from edgeserve.manifest.record import MANIFEST_NAME, merge_into_existing, new_manifest, upsert_artifact, write_manifest
from edgeserve.preprocess import PreprocessSpec
from edgeserve.sources import SourceModel, TensorInfo, load_source

log = logging.getLogger(__name__)

# Seconds one target's isolated steps may take together (--target-budget): the slowest target
# of the corpus took about 400 s in CI at the lowest priority.
DEFAULT_TARGET_BUDGET_S = 1800.0


@dataclasses.dataclass(frozen=True)
class ConvertResult:
    manifest_path: Path
    manifest: dict[str, Any]

    @property
    def ok(self) -> bool:
        return all(a.get("status") == "ok" for a in self.manifest["artifacts"])


def convert(
    source: str | Path | Any,
    targets: Sequence[str],
    out_dir: str | Path,
    *,
    calib: str | Path | None = None,
    eval_data: str | Path | None = None,
    calib_random: bool = False,
    preprocess: PreprocessSpec | None = None,
    profile: str | None = None,
    options: Mapping[str, Any] | None = None,
    max_calib_samples: int | None = 1000,
    progress: Progress | None = None,
    sign_key: str | Path | None = None,
    example_inputs: Any = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    input_values: Mapping[str, str] | None = None,
    batch_axes: Mapping[str, int] | None = None,
    reuse: bool = True,
    cache: bool = True,
    jobs: int | None = None,
) -> ConvertResult:
    """Convert one source model to each target and verify every artifact.

    Everything is written into a staging folder beside ``out_dir`` that replaces it only
    when the run ends (see :mod:`edgeserve.manifest.staging`): an error, Ctrl-C or a kill leaves
    ``out_dir`` as it was. A run that completes with a target under its accuracy bound is
    published, so the report of every attempt is there to read.

    ``source`` is a model file or directory, or a ``torch.nn.Module`` with
    ``example_inputs`` (batch-1 tensors): it is exported with ``torch.export`` first.
    ``input_shapes`` fixes an ONNX input's dynamic dimensions by name; ``input_values`` fixes
    an ONNX input to a value (a sample rate), so it is a constant in every artifact;
    ``batch_axes`` moves an ONNX input's or output's batch axis first (a recurrent state).
    ``reuse`` keeps a target that the previous run into ``out_dir`` built from exactly the same
    inputs, options and tools (:mod:`edgeserve.conversion.reuse`); False builds every target again.
    ``cache`` takes such a target from the cache shared between output folders, and keeps every
    target that passes there (:mod:`edgeserve.conversion.cache`); False neither reads nor writes it.
    ``jobs`` targets are built side by side (default: the cores this process may use; 1 builds
    them one after another in this thread); each one's isolated steps stay isolated.

    Raises:
        EdgeServeError subclasses for bad input; AccuracyError (after the manifest is
        written, with the failing artifact marked) when a target misses its accuracy bound.
    """
    from edgeserve.converters import get_converter
    from edgeserve.device_profiles import load_profile

    for target in targets:
        get_converter(target)  # unknown names fail before any work
    if not targets:
        raise InputError("no target given; use -t tflite-int8 (see edgeserve convert --help)")
    prof = load_profile(profile) if profile else None
    for target in targets:
        get_converter(target).check_request(options or {}, prof)
    out = Path(out_dir)
    check_output_path(out)  # before the model is loaded: a bad -o costs nothing
    _check_data_early(source, calib, eval_data, calib_random, fixed_shapes=bool(input_shapes))
    progress = progress or Progress(enabled=False)

    with contextlib.ExitStack() as stack:
        if isinstance(source, (str, Path)):
            with progress.step(f"load {Path(source).name}"), capture_native_stderr():
                model = load_source(source, {k: tuple(v) for k, v in input_shapes.items()} if input_shapes else None,
                                    {k: str(v) for k, v in input_values.items()} if input_values else None,
                                    {k: int(v) for k, v in batch_axes.items()} if batch_axes else None)
        else:  # an nn.Module: its ExportedProgram lives in a folder kept for the whole conversion
            from edgeserve.sources.pytorch import from_module

            exported = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="edgeserve-module-")))
            with progress.step(f"torch.export {type(source).__name__}"):
                model = from_module(source, example_inputs, exported)
        loading = {"input_shapes": input_shapes, "input_values": input_values, "batch_axes": batch_axes}
        return _convert_loaded(model, targets, out, calib, eval_data, calib_random, preprocess, prof, profile,
                               options, max_calib_samples, progress, sign_key, loading if reuse else None,
                               cache, jobs)


def _check_data_early(source: Any, calib: Any, eval_data: Any, calib_random: bool, *, fixed_shapes: bool) -> None:
    """The data mistakes that need no framework, said before the model is loaded (loading a
    Keras model imports TensorFlow, ~10 s): a --calib or --eval path that is not there, no
    calibration for a source that needs it (every source but a .tflite, which may be INT8),
    and for a one-input Keras model, samples whose shape its saved config rules out. The
    source's kind is told from its suffix or layout, which opens no framework."""
    from edgeserve.sources import source_kind

    kind = None
    if isinstance(source, (str, Path)):
        if not Path(source).exists():
            return  # the loader's error names the missing model first
        kind = source_kind(Path(source))  # by suffix or layout: an unknown format is said first
    check_data_paths(calib if isinstance(calib, (str, Path)) else None,
                     eval_data if isinstance(eval_data, (str, Path)) else None)
    if calib is None and not calib_random and kind != "tflite":
        raise CalibrationDataError(NO_CALIBRATION_HELP)
    if kind in ("keras", "keras-h5") and not fixed_shapes:
        from edgeserve.sources.keras_peek import keras_input_shapes

        inputs = keras_input_shapes(Path(source))
        if inputs is not None and len(inputs) == 1:
            for data in (calib, eval_data):
                if isinstance(data, (str, Path)):
                    check_shape_early(data, *inputs[0])


def _warm_isolated_imports(converters: Sequence[Any], kind: str) -> None:
    """The frameworks the targets' isolated steps import start importing in the fork server now,
    beside the shared steps, instead of in the first step that needs each. Not before the model
    and the data have loaded: a run that ends on bad input costs no import it never needed."""
    from edgeserve.isolation import warm as warm_children

    warm_children.warm(list(dict.fromkeys(m for c in converters for m in c.isolated_imports(kind))))


def _convert_loaded(model: SourceModel, targets: Sequence[str], out: Path, calib: Any, eval_data: Any,
                    calib_random: bool, preprocess: PreprocessSpec | None, prof: Any, profile: str | None,
                    options: Mapping[str, Any] | None, max_calib_samples: int | None, progress: Progress,
                    sign_key: Any, loading: Mapping[str, Any] | None, use_cache: bool = True,
                    jobs: int | None = None) -> ConvertResult:
    from edgeserve.converters import get_converter

    source = model.path
    _refuse_output_inside_source(model, out)
    converters = [get_converter(t) for t in plan_targets(targets, model.kind)]
    spec = bind_preprocess(preprocess, model.signature.inputs, explicit=preprocess is not None)
    if model.kind == "tflite":
        # Already quantized: there is nothing to calibrate, and no float model to score against.
        if calib or eval_data or calib_random:
            raise InputError(
                f"{Path(source).name} is already a .tflite, so --calib, --calib-random and --eval "
                "do not apply; pass the float source model to convert and calibrate it"
            )
        calibration = evaluation = judged = None
    else:
        calibration = load_calibration(
            calib, model.signature.inputs, spec, random_ok=calib_random, max_samples=max_calib_samples,
            quantizes=any(c.uses_calibration(options or {}) for c in converters),
        )
        if preprocess is None and spec is not None and calibration is not None and calibration.origin == "npz":
            spec = _default_spec_the_data_allows(spec, calibration, str(calib))
        if eval_data:
            evaluation, judged = load_eval(eval_data, model.signature.inputs), {"judged_on": "--eval"}
        elif calibration is not None:
            from edgeserve.datasets import hold_out

            calibration, evaluation, judged = hold_out(calibration)
        else:
            evaluation, judged = None, None
        if evaluation is not None and evaluation.labels is not None and model.signature.outputs:
            from edgeserve.quality.metrics import check_labels

            check_labels(evaluation.labels, tuple(model.signature.outputs[0].shape), str(eval_data or calib))

    if (options or {}).get("labels") and not read_labels(options["labels"]):  # checked before any work
        raise InputError(f"labels file {options['labels']} holds no labels; expected one class name per line")
    if sign_key is not None:  # a bad key is an error before the conversion, not after it
        from edgeserve.manifest.signing import _load_key

        _load_key(sign_key, private=True)
    _warm_isolated_imports(converters, model.kind)
    with staged_output(out) as staging:
        manifest, failures = _convert_into(staging, model, converters, calibration, evaluation, spec, prof,
                                           profile, options, progress, loading, judged, use_cache, jobs)
        from edgeserve.manifest.signing import sign_manifest, signature_path

        if sign_key is not None:
            sign_manifest(staging / MANIFEST_NAME, sign_key)
        else:  # a signature of the manifest this run replaced would not match: never leave one
            signature_path(staging / MANIFEST_NAME).unlink(missing_ok=True)
    result = ConvertResult(out / MANIFEST_NAME, manifest)
    if failures:
        raise AccuracyError(_failure_message(failures), result)
    return result


def _convert_into(out: Path, model: SourceModel, converters: list[Any], calibration: Any, evaluation: Any,
                  spec: PreprocessSpec | None, prof: Any, profile: str | None, options: Mapping[str, Any] | None,
                  progress: Progress, loading: Mapping[str, Any] | None,
                  judged: Mapping[str, Any] | None = None, use_cache: bool = True,
                  jobs: int | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``loading`` None: every target is built again (--no-reuse); else the source's loading
    options, part of each target's reuse key."""
    from edgeserve.conversion import cache, reuse
    from edgeserve.converters._base import ConversionContext

    use_cache = use_cache and cache.enabled()

    manifest_path = out / MANIFEST_NAME
    previous = reuse.previous_entries(manifest_path, model.sha256) if loading is not None else {}
    run = reuse.run_key(model.describe(), model.signature, calibration, evaluation, spec, prof, options or {},
                        loading or {})
    calibration_record = None
    if calibration is not None:
        calibration_record = calibration.describe() | {"random": calibration.origin == "random"}
        if judged:  # what every target was judged on: --eval, held-out samples, or (too few) these
            calibration_record["evaluation"] = dict(judged)
    from edgeserve.converters import get_converter, target_names

    def built_from(target: str) -> tuple[str, ...]:
        return get_converter(target).requires(model.kind) if target in target_names() else ()

    manifest, stale = merge_into_existing(
        manifest_path,
        new_manifest(model.describe(), spec.to_dict() if spec else None, prof.name if prof else None,
                     calibration_record),
        {c.name for c in converters}, built_from,
    )
    for entry in stale:  # a build of the old model goes with its entry (this is the staging copy)
        _remove_files_of(out, entry)
    # The source's output names, in its order: each artifact's outputs say which of them they are.
    source_outputs = [t.name for t in model.signature.outputs]
    manifest["source"]["outputs"] = source_outputs
    labels = (options or {}).get("labels")
    if labels:
        manifest["labels"] = read_labels(labels)
    output = (options or {}).get("output")
    if output:  # the OutputSpec: how the runtime reads the outputs (a detector's decoder)
        manifest["output"] = output
    failures = []
    shared_steps = len(progress.timings)  # load, data, float outputs: what every target starts from
    timing: dict[str, Any] = {"shared_steps": _steps(progress.timings[:shared_steps]), "targets": {}}
    # Inside the staging folder (and gone before it is published), so a killed run's scratch
    # files go with it at the next run (staging.clean_leftovers) instead of piling up in /tmp.
    with tempfile.TemporaryDirectory(prefix=".work-", dir=out) as work:
        ctx = ConversionContext(
            source=model, out_dir=out, calibration=calibration, evaluation=evaluation,
            preprocess=spec, profile=prof, options=dict(options or {}), progress=progress,
            workdir=Path(work),
        )
        not_built: list[dict[str, str]] = []
        refused: list[tuple[str, EdgeServeError]] = []
        keys: dict[str, str] = {}

        def wanted(converter: Any) -> bool:
            needed = converter.requires(model.kind)
            failed = [name for name in needed if ctx.artifacts.get(name, {}).get("status") == "failed"]
            missing = [name for name in needed if name not in ctx.artifacts]
            if failed or missing:  # nothing sound to build on: said, never silently dropped
                why = (f"{failed[0]}'s artifact, which failed its quality gate" if failed
                       else f"{missing[0]}'s artifact, which was refused")
                not_built.append({"target": converter.name, "reason": f"not built: it is built from {why}"})
                manifest["not_built"] = not_built
                write_manifest(manifest_path, manifest)
                failures.append({"target": converter.name, "not_built": not_built[-1]["reason"]})
                return False
            keys[converter.name] = reuse.target_key(run, converter.name,
                                                    {n: ctx.artifacts[n].get("sha256") for n in needed})
            return True

        def build(converter: Any) -> tuple[dict[str, Any] | EdgeServeError, float, list[tuple[str, float]]]:
            """In a thread of its own with --jobs: the entry, or the target's refusal, with its
            seconds and steps either way (anything else raised is a bug, and ends the run)."""
            key, began = keys[converter.name], time.monotonic()
            why_not = reuse.reusable(previous.get(converter.name), key, out) if loading is not None else "--no-reuse"
            cached = None
            if why_not is not None and loading is not None and use_cache:
                cached = cache.lookup(key, out)
            with progress.collecting(converter.name) as steps:
                try:
                    if why_not is None:
                        with progress.step(f"{converter.name}: kept from the previous run into this folder (same "
                                           "source, data, options and tools; --no-reuse builds it again)"):
                            entry = dict(previous[converter.name]) | {"reused": True}
                    elif cached is not None:
                        with progress.step(f"{converter.name}: from the cache ({cache.root()}), built and checked "
                                           "before from the same source, data, options and tools; --no-cache "
                                           "builds it again"):
                            entry = cached
                    else:
                        log.debug("%s: built again: %s", converter.name, why_not)
                        # Every isolated step of the target ends by its budget: a target lost to a
                        # step that never ends is refused, and the other targets go on.
                        with budget((options or {}).get("target_budget_s", DEFAULT_TARGET_BUDGET_S)):
                            entry = _with_judge(converter.convert(ctx.for_target(converter.name))) | {"reuse_key": key}
                except EdgeServeError as exc:
                    return exc, time.monotonic() - began, list(steps)
            return entry, time.monotonic() - began, list(steps)

        def settle(converter: Any, built: "concurrent.futures.Future[Any]") -> None:
            entry, seconds, steps = built.result()
            if isinstance(entry, EdgeServeError):
                # One target's refusal (its tool missing, TFLM refusing the model, an operator it
                # lacks) does not throw away the others' work: it is recorded and the run goes on
                # (and ends with exit 1). Errors about the run itself were raised before this loop.
                exc = entry
                refused.append((converter.name, exc))
                timing["targets"][converter.name] = {"seconds": round(seconds, 2), "steps": _steps(steps),
                                                     "refused": True}
                manifest["timing"] = timing
                manifest["refused"] = [{"target": name, "reason": first_line(e)} for name, e in refused]
                write_manifest(manifest_path, manifest)
                failures.append({"target": converter.name, "refused": first_line(exc)})
                return
            label_outputs(entry, source_outputs, {n: ctx.artifacts[n] for n in converter.requires(model.kind)
                                                  if n in ctx.artifacts})
            ctx.artifacts[converter.name] = entry
            timing["targets"][converter.name] = {"seconds": round(seconds, 2), "steps": _steps(steps)}
            timing["wall_seconds"] = round(time.monotonic() - progress.started, 2)
            manifest["timing"] = timing
            if use_cache and loading is not None and entry.get("status") == "ok" and not entry.get("cached"):
                cache.store(keys[converter.name], out, entry)
            upsert_artifact(manifest, entry)
            write_manifest(manifest_path, manifest)
            if entry["status"] != "ok":
                failures.append(entry)

        remember_installed()  # before any target thread: see _deps.installed
        in_dependency_order(converters, lambda c: c.name, lambda c: c.requires(model.kind), build, settle,
                            jobs=jobs or default_jobs(), wanted=wanted)
        # Targets side by side end in any order: the manifest lists them in the order asked for.
        _in_target_order(manifest, timing, [c.name for c in converters])
        write_manifest(manifest_path, manifest)
        if refused and not ctx.artifacts:
            refused.sort(key=lambda item: [c.name for c in converters].index(item[0]))
            raise refused[0][1]  # nothing was built: the refusal itself is the answer, nothing written
    return manifest, failures


def read_labels(labels: str | Path | Sequence[str]) -> list[str]:
    """Class labels from a list or a text file (one per line, blank lines ignored)."""
    if isinstance(labels, (str, Path)):
        try:
            text = read_settings(labels).decode("utf-8", "replace")
        except OSError as exc:
            raise InputError(f"cannot read labels file {labels}: {exc}") from exc
        return [line.strip() for line in text.splitlines() if line.strip()]
    return [str(label) for label in labels]


def plan_targets(targets: Sequence[str], source_kind: str) -> list[str]:
    """The targets in run order, each preceded by the targets it builds on (once each).

    ``-t mcu`` from a Keras model first needs the INT8 .tflite, so it runs tflite-int8
    first, with the same calibration, and both land in the manifest.
    """
    from edgeserve.converters import get_converter

    ordered: list[str] = []

    def add(name: str) -> None:
        for needed in get_converter(name).requires(source_kind):
            add(needed)
        if name not in ordered:
            ordered.append(name)

    for target in targets:
        add(target)
    return ordered


def bind_preprocess(
    spec: PreprocessSpec | None, inputs: Sequence[TensorInfo], *, explicit: bool
) -> PreprocessSpec | None:
    """The spec bound to the model's image input, or None for a model that takes no image.

    An explicit spec must fit the model. Without one, a 4-D input with 1 or 3 channels last
    (NHWC) or, failing that, first (NCHW, PyTorch) gets the default spec (gray for one
    channel) so the runtime can feed frames.
    """
    if explicit:
        assert spec is not None
        if len(inputs) != 1:
            raise PreprocessSpecError(f"image preprocessing needs a single-input model; this one has {len(inputs)}")
        if inputs[0].takes_integers:
            raise PreprocessSpecError(f"image preprocessing makes pixels, and input '{inputs[0].name}' takes "
                                      f"{inputs[0].dtype} values (ids, bytes); give its values with --calib DATA.npz")
        return spec.bind_to_input(inputs[0].shape)
    if len(inputs) != 1 or len(inputs[0].shape) != 4 or inputs[0].takes_integers:
        return None
    shape = inputs[0].shape
    if shape[-1] in (1, 3):
        default = PreprocessSpec(color="gray" if shape[-1] == 1 else "rgb")
    elif shape[1] in (1, 3):  # NCHW, as PyTorch image models take it
        default = PreprocessSpec(color="gray" if shape[1] == 1 else "rgb", layout="nchw")
    else:
        return None
    try:
        return default.bind_to_input(inputs[0].shape)
    except PreprocessSpecError:
        return None


def _steps(timings: Sequence[tuple[str, float]]) -> list[dict[str, Any]]:
    return [{"step": description, "seconds": round(seconds, 3)} for description, seconds in timings]


def _with_judge(entry: dict[str, Any]) -> dict[str, Any]:
    """The entry with ``metrics.judged_by``: what the gate judged output 0 by. A top-1 "drop" of
    50 points above max_drop 1.0 read as a failure in a passing entry whose output was judged by
    SQNR; the report shows the drop and its bound only where they were the judge."""
    metrics, quality = entry.get("metrics"), entry.get("quality")
    if isinstance(metrics, dict) and isinstance(quality, dict) and quality.get("outputs"):
        entry["metrics"] = metrics | {"judged_by": quality["outputs"][0].get("judged_by")}
    return entry


def _default_spec_the_data_allows(spec: PreprocessSpec, calibration: Any, where: str) -> PreprocessSpec | None:
    """The default image preprocessing (pixels / 255), kept only when the .npz's values are ones it
    can produce. A face model calibrated on values in -0.996..0.996 got "scale 1/255, mean 0"
    recorded, and `run --input face.png` then fed it 0..1 without a word: for such data nothing
    is recorded, and run asks for the preprocessing instead of assuming one."""
    low, high = spec.value_range
    held = calibration.value_ranges()[0]
    if held is None:
        return spec
    slack = 1e-3 * (high - low)
    if low - slack <= held[0] and held[1] <= high + slack:
        return spec
    log.warning("%s holds values %.4g..%.4g, which the default image preprocessing (pixels x %.4g, range %g..%g) "
                "cannot give: no preprocessing is recorded; give --scale/--mean/--std (or --preprocess) to record "
                "the one the model was trained with", where, held[0], held[1], spec.scale, low, high)
    return None


def _in_target_order(manifest: dict[str, Any], timing: dict[str, Any], order: list[str]) -> None:
    def place(name: str) -> int:
        return order.index(name) if name in order else -1  # kept entries of earlier runs first

    manifest["artifacts"] = sorted(manifest["artifacts"], key=lambda a: place(a.get("target", "")))
    timing["targets"] = dict(sorted(timing["targets"].items(), key=lambda item: place(item[0])))
    for listed in ("refused", "not_built"):
        if listed in manifest:
            manifest[listed] = sorted(manifest[listed], key=lambda r: place(r["target"]))


def _remove_files_of(out: Path, entry: dict[str, Any]) -> None:
    from edgeserve.manifest.record import inside

    records = [entry, *(entry.get("files") or []), *([entry["report"]] if isinstance(entry.get("report"), dict) else [])]
    for record in records:
        path = inside(out, record.get("path"), f"{entry.get('target')} entry")
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def _refuse_output_inside_source(model: SourceModel, out: Path) -> None:
    # Never write into a SavedModel directory: the source must stay untouched.
    src = model.path.resolve()
    if src.is_dir() and (out.resolve() == src or src in out.resolve().parents):
        raise InputError(f"output directory {out} is inside the source model {src}; choose another -o")


def _failure_message(failures: list[dict[str, Any]]) -> str:
    lines = []
    for entry in failures:
        if "not_built" in entry:
            lines.append(f"{entry['target']}: {entry['not_built']}")
            continue
        if "refused" in entry:
            lines.append(f"{entry['target']}: refused: {entry['refused']}")
            continue
        m = entry["metrics"]
        unit = "points" if m["metric"] == "top1" else "% more error"
        attempts = f"after {len(entry['attempts'])} attempt(s); the artifact is marked failed in the manifest"
        if (entry.get("route") or {}).get("stopped"):  # not every remedy was tried
            attempts = (f"after {len(entry['attempts'])} attempt(s), when the remedy budget ran out (--remedy-budget "
                        "gives it more); the artifact is marked failed in the manifest")
        quality = entry.get("quality")
        failed = [o for o in (quality or {}).get("outputs", []) if not o["ok"]]
        if not failed and (entry.get("macs") or {}).get("float_percent") is not None:  # accurate, but float
            lines.append(f"{entry['target']}: best attempt computes {entry['macs']['float_percent']:g} % of its "
                         f"multiply-accumulates in float, above --max-float-macs {entry['macs']['max_float_percent']:g} % "
                         f"(--max-float-macs 100 accepts it) {attempts}")
            continue
        if any(o["judged_by"] == "detections" for o in failed):
            found = quality["detections"]
            if found["match_percent"] < found["min_match"]:
                lines.append(f"{entry['target']}: best attempt matches {found['match_percent']:g} % of the float "
                             f"source's detections ({found['decoder']}, IoU >= {found['iou']:g}), below "
                             f"--min-detection-match {found['min_match']:g} % {attempts}")
            else:
                lines.append(f"{entry['target']}: best attempt's detections differ from the float source's by a mean "
                             f"score of {found['mean_score_error']:g}, above --max-score-error "
                             f"{found['max_score_error']:g} {attempts}")
            failed = [o for o in failed if o["judged_by"] != "detections"]
            if not failed:
                continue
        if failed and not (len(failed) == 1 and failed[0]["judged_by"] in ("metric", "agreement")):
            # Outputs judged by SQNR: name each, and the flag that sets the bound.
            below = ", ".join(f"{o['name']} {o['sqnr_db'] if o['sqnr_db'] is not None else '-'} dB" for o in failed)
            lines.append(f"{entry['target']}: best attempt has output(s) below --min-sqnr {quality['min_sqnr_db']:g} "
                         f"dB against the float source ({below}) {attempts}")
            continue
        if failed and failed[0]["judged_by"] == "agreement":
            lines.append(f"{entry['target']}: best top-1 agreement with the float source {100 - m['drop_points']:.1f} % "
                         f"is below --min-agreement {quality['min_agreement']:g} % {attempts}")
            continue
        lines.append(f"{entry['target']}: best {m['metric']} drop {m['drop_points']:.2f} {unit} exceeds --max-drop "
                     f"{m['max_drop']} {attempts}")
    return "; ".join(lines)
