"""mcu-c: a full-INT8 model as plain C99 with no interpreter, checked before it is flashed.

prepare   the full-INT8 .tflite: tflite-int8's artifact from this run, or the .tflite source
lower     every operator to a portable kernel call (UnsupportedOperatorError, nothing written)
plan      tensors into one static arena: in-place kernels, then offsets over lifetimes
fit       flash (weights + code) and RAM (arena + stack) against the profile
emit      OUT/mcu-c/: NAME.h, NAME.c, kernels/ (only those the model uses), the model
verify    gcc builds it with -Wall -Wextra -Werror; its outputs equal TFLM's reference kernels'
          bit for bit on random inputs; a sanitizer build proves every kernel stays inside
          its own tensors; on an emulated Cortex-M4 (when arm-none-eabi-gcc and
          qemu-system-arm are installed) the firmware prints the host's outputs, and its
          instruction count and code size are recorded
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from edgeserve._deps import installed
from edgeserve.atomic import write_bytes, write_json, write_text
from edgeserve.converters import register
from edgeserve.converters._base import Check, ConversionContext, Converter, VerifyResult
from edgeserve.errors import DoesNotFitError, InputError, VerificationError
from edgeserve.manifest.record import check_file, edgeserve_version, file_record
from edgeserve.tflite.model import TfliteModel

OUT_DIR = "mcu-c"
HOST_SAMPLES = 50
SANITIZER_SAMPLES = 3
TARGET_SAMPLES = 2
# LiteRT's reference kernels take about a second per 100 M multiply-accumulates; big models
# are compared on fewer random inputs so a conversion stays within a minute or two.
CHECK_MAC_BUDGET = 2_000_000_000
# The sanitizer step (-O1, every access checked) took 95 s, build included, for three inputs of
# a layout detector's 3.3 G int16 multiply-accumulates (2026-11-28). Which bytes a kernel
# touches follows from the static plan, not from the input's values (a lookup table's index is
# bounded by its type), so it gets as many inputs as fit this budget, and at least one.
SANITIZER_MAC_BUDGET = 1_000_000_000


def check_samples(macs: int) -> tuple[int, int, int]:
    """(host, sanitizer, Cortex-M4) sample counts for a model of ``macs`` per inference."""
    host = max(3, min(HOST_SAMPLES, CHECK_MAC_BUDGET // max(macs, 1)))
    sanitizer = max(1, min(SANITIZER_SAMPLES, host, SANITIZER_MAC_BUDGET // max(macs, 1)))
    return host, sanitizer, TARGET_SAMPLES if macs < 50_000_000 else 1
# The kernels do not recurse and keep a few dozen bytes of locals; a generous allowance.
STACK_ESTIMATE_BYTES = 1024


# Code flash is estimated before anything is built (the fit check runs before files are
# written): measured on Cortex-M4 at -O2, the kernels take 0.3-1.5 KB each and the
# generated parameter structs about 100 bytes per step; this rounds both up.
CODE_BASE_BYTES = 2048
CODE_PER_KERNEL_FILE = 2048
CODE_PER_STEP = 128
# CMSIS-NN's files are smaller (one function each); measured 0.6-0.8 KB each on the MLPerf
# Tiny models at -O2.
CODE_PER_LIBRARY_SOURCE = 1024


def fit(generated: Any, profile: Any) -> dict[str, Any]:
    """Flash (weights + code estimate) and RAM (arena + stack), and where each goes.

    The arena goes to the fastest RAM region of the profile that holds it (regions are
    listed fastest first, e.g. DTCM, then SRAM, then external PSRAM); weights stay in flash.
    """
    code = CODE_BASE_BYTES + CODE_PER_KERNEL_FILE * len(generated.kernel_files) + CODE_PER_STEP * len(generated.steps) + \
        CODE_PER_LIBRARY_SOURCE * len(generated.library_sources)
    ram_needed = generated.plan.arena_bytes + generated.state_bytes + STACK_ESTIMATE_BYTES
    flash_needed = generated.weight_bytes + code
    report: dict[str, Any] = {
        "flash": {"needed": flash_needed, "weights": generated.weight_bytes, "code_estimate": code},
        "ram": {"needed": ram_needed, "arena": generated.plan.arena_bytes, "state": generated.state_bytes,
                "stack_estimate": STACK_ESTIMATE_BYTES},
        "profile": None, "fits": None, "arena_region": None,
    }
    if profile is None:
        return report
    regions = profile.memory.regions()
    region = next((r for r in regions if r.bytes >= ram_needed), None)
    report["profile"] = profile.name
    report["regions"] = [{"name": r.name, "bytes": r.bytes, "note": r.note} for r in regions]
    flash = profile.memory.flash_bytes
    problems = []
    if flash is not None and flash_needed > flash:
        problems.append(f"flash needs {flash_needed:,} bytes (weights {generated.weight_bytes:,} + code about "
                        f"{code:,}) but {profile.name} has {flash:,}")
    if region is None:
        largest = max(regions, key=lambda r: r.bytes)
        problems.append(f"RAM needs {ram_needed:,} bytes (arena {generated.plan.arena_bytes:,} + state "
                        f"{generated.state_bytes:,} + stack {STACK_ESTIMATE_BYTES:,}) but the largest RAM of "
                        f"{profile.name} ({largest.name}) has {largest.bytes:,}")
    else:
        report["arena_region"] = region.name
        report["arena_region_note"] = region.note
        report["arena_in_fastest_region"] = region is regions[0]
    report["fits"] = not problems
    if problems:
        report["problem"] = "mcu-c does not fit " + profile.name + ": " + "; ".join(problems) + \
            ". Use a smaller model or input, or pass --no-fit-check"
    return report


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


C_GENERATOR = "edgeserve C generator"  # its route's tool: pure Python; gcc and qemu only check what it writes


@register
class McuCConverter(Converter):
    name = "mcu-c"
    route_order = 2
    served_by_runtime = False

    def route_from(self, kind: str, control_flow: bool = False) -> Any:
        """edgeserve's C generator after tflite-int8's route (a full-integer .tflite: edgeserve's C generator alone)."""
        from edgeserve.converters import get_converter
        from edgeserve.routes import MCU_CONTROL_FLOW, Route

        if control_flow:
            return Route(self.name, (), MCU_CONTROL_FLOW)
        if kind == "tflite":
            return Route(self.name, (C_GENERATOR,))
        int8 = get_converter("tflite-int8").route_from(kind)
        return Route(self.name, (*int8.steps, C_GENERATOR)) if int8.exists else Route(self.name, (), int8.reason)
    report_lines = "edgeserve.converters.mcu_c.report"
    summary = "plain C99, no interpreter: static arena below TFLM's, bit-exact, run on an emulated Cortex-M4"

    def requires(self, source_kind: str) -> tuple[str, ...]:
        return () if source_kind == "tflite" else ("tflite-int8",)

    def check_operators(self, model: Any) -> None:
        """The C generator's lowering of ``model``: it refuses an operator it has no kernel for."""
        from edgeserve.converters.mcu_c.lower import Lowering

        Lowering(model).steps()

    def check_request(self, options: Mapping[str, Any], profile: Any) -> None:
        from edgeserve.converters.mcu_c.options import Options

        from edgeserve.converters.mcu_c.generate import KERNELS

        opts = Options.from_mapping(options)
        if opts.kernels not in KERNELS:
            raise InputError(f"--kernels takes {' or '.join(KERNELS)}; given {opts.kernels!r}")
        _cmsis_nn_for(opts.cmsis_nn, profile)

    def prepare(self, ctx: ConversionContext) -> tuple[bytes, str]:
        from edgeserve.converters.microcontroller.int8_source import full_int8_model

        return full_int8_model(ctx, self.name)

    def convert(self, ctx: ConversionContext) -> dict[str, Any]:
        from edgeserve.converters.microcontroller.arena import plan_head
        from edgeserve.converters.mcu_c.options import Options
        from edgeserve.converters.microcontroller.int8_source import default_name
        from edgeserve.converters.microcontroller.memory import mcu_profile_limits
        from edgeserve.converters.microcontroller.split_tail import split_float_tail
        from edgeserve.converters.mcu_c.generate import generate
        from edgeserve.tflite.verify import validate_tflite

        opts = Options.from_mapping(ctx.options)
        cmsis_nn = _cmsis_nn_for(opts.cmsis_nn, ctx.profile)
        model_bytes, origin = self.prepare(ctx)
        built_from = _sha256(model_bytes)
        model_bytes, split = split_float_tail(model_bytes)  # tflite-int8's float tail, as integer outputs
        name = opts.name or default_name(ctx.source.path.stem if ctx.source.kind != "tflite" else Path(origin).stem)
        model = validate_tflite(model_bytes, runtime="tflm")
        with ctx.progress.step("mcu-c: lower operators and plan the arena"):
            generated = generate(model, name, Path(origin).name, cmsis_nn=cmsis_nn, kernels=opts.kernels)
        tflm_head = plan_head(model, pointer_bytes=4).head_bytes if len(model.subgraphs) == 1 else None
        mcu_profile_limits(ctx.profile)  # refuses a profile that is not a microcontroller
        memory = fit(generated, ctx.profile)
        flash = ctx.profile.memory.flash_bytes if ctx.profile is not None else None
        if opts.kernels == "generated" and flash is not None and memory["flash"]["needed"] > flash:
            # The generated layers' int16 weights do not fit the profile's flash: the layers
            # with the fewest multiply-accumulates per weight keep int8 weights until they do.
            from edgeserve.converters.mcu_c.specialise import narrowing

            narrow = narrowing(generated.steps, memory["flash"]["needed"] - flash)
            with ctx.progress.step(f"mcu-c: int8 weights for {len(narrow)} generated layers, to fit "
                                   f"{ctx.profile.name}'s flash"):
                generated = generate(model, name, Path(origin).name, cmsis_nn=cmsis_nn, kernels=opts.kernels,
                                     int8_weights=narrow)
            memory = fit(generated, ctx.profile)
        if opts.fit_check and memory["fits"] is False:
            raise DoesNotFitError(memory["problem"], memory)
        ram_needed = memory["ram"]["needed"]
        profile_name = ctx.profile.name if ctx.profile is not None else None

        directory = ctx.out_dir / OUT_DIR
        written = [write_text(directory / rel, text) for rel, text in generated.files.items()]
        written.append(write_bytes(directory / f"{name}_model.tflite", model_bytes))
        library_root = cmsis_nn.root if cmsis_nn is not None and generated.library_sources else None
        verification = self.verify(ctx, model_bytes, model, generated, directory, library_root)
        if "cortex_m4" in verification and "code_bytes" in verification["cortex_m4"]:
            memory["flash"]["code_measured_with_newlib"] = verification["cortex_m4"]["code_bytes"]
        ratio = round(generated.plan.arena_bytes / tflm_head, 4) if tflm_head else None
        report = {"target": self.name, "name": name, "model_from": origin,
                  **({"outputs_split": split} if split else {}), **generated.summary(),
                  "tflm_arena_head_bytes": tflm_head, "arena_vs_tflm_head": ratio,
                  "input_in_arena": False, "memory": memory, "verification": verification,
                  "steps": _step_records(generated)}
        report_path = write_json(ctx.out_dir / "reports" / "mcu-c.json", report)
        return {
            "target": self.name, "status": "ok", "path": OUT_DIR, "name": name,
            "files": [file_record(ctx.out_dir, p) for p in written],
            "model_bytes": len(model_bytes), "model_sha256": _sha256(model_bytes), "model_from": origin,
            **({"from_sha256": built_from, "outputs_split": split} if split else {}),
            **generated.summary(),
            "tflm_arena_head_bytes": tflm_head, "arena_vs_tflm_head": ratio,
            "ram_bytes": ram_needed, "profile": profile_name, "fits": memory["fits"],
            "arena_region": memory["arena_region"],
            "verification": verification,
            "audio": _audio(model, ctx),
            "report": file_record(ctx.out_dir, report_path),
            "provenance": {"edgeserve_version": edgeserve_version(), "model_from": origin,
                           **({"cmsis_nn_dir": str(cmsis_nn.root)} if library_root else {})},
        }

    def verify(self, ctx: ConversionContext, model_bytes: bytes, model: TfliteModel, generated: Any,
               directory: Path, library_root: Path | None = None) -> dict[str, Any]:
        from edgeserve.converters.microcontroller.samples import sample_inputs
        from edgeserve.converters.microcontroller.child import call_in_child
        from edgeserve.converters.microcontroller.toolchain import CompileError, MissingToolError
        from edgeserve.converters.mcu_c import check

        graph = model.subgraphs[0]
        # Several outputs arrive back to back in one buffer (see generate.py), so they are
        # compared as one flat row per input; one output keeps its shape.
        out_dtype = graph.tensors[graph.outputs[0]].dtype_name
        out_shape = (tuple(graph.tensors[graph.outputs[0]].shape) if len(graph.outputs) == 1
                     else (generated.output_bytes // np.dtype(out_dtype).itemsize,))
        host_samples, sanitizer_samples, target_samples = check_samples(generated.macs)
        inputs = np.stack([_one_buffer(s) for s in sample_inputs(model, host_samples)])
        try:
            with ctx.progress.step("mcu-c: gcc -std=c99 -Wall -Wextra -Werror, run on the host"):
                host = check.build_host(directory, generated.name, ctx.workdir / "mcu_c_host", cmsis_nn=library_root)
                ours = check.run_host(host, inputs, out_shape, out_dtype)
        except MissingToolError as exc:
            return {"method": "none", "note": str(exc)}
        except (CompileError, RuntimeError, subprocess.TimeoutExpired) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise VerificationError(f"the generated C did not build or run on the host: {first[:400]}; "
                                    "please report this model") from exc
        if not installed("ai_edge_litert") and not installed("tflite_micro"):
            return {"method": "compiled-only", "note": "neither LiteRT nor tflite-micro is installed to compare with"}
        with ctx.progress.step("mcu-c: the reference kernels on the same inputs"):
            reference_name, reference = call_in_child("edgeserve.converters.mcu_c.reference:reference_outputs",
                                                      model_bytes, inputs, what="running the reference kernels")
        diff = int(np.max(np.abs(ours.astype(np.int32) - reference.reshape(ours.shape).astype(np.int32))))
        if diff:
            why = "please report this model"
            if reference_name.startswith("litert") and "FULLY_CONNECTED" in model.op_counts():
                # LiteRT requantizes FULLY_CONNECTED in double (reference.py); TFLM, which the
                # C follows, refused the model, so nothing here is bit-exact with the C.
                why = ("LiteRT's FULLY_CONNECTED requantizes in double where TFLM's (which the C follows) does not, "
                       "and TFLM could not run this model to compare with")
            raise VerificationError(
                f"the generated C differs from {reference_name} by up to {diff} quantization steps on "
                f"{host_samples} random inputs; {why}")
        result: dict[str, Any] = {"method": "host-vs-reference", "reference": reference_name.split(" ")[0],
                                  "reference_note": reference_name, "samples": host_samples, "bit_exact": True,
                                  "distinct_reference_outputs": int(len(np.unique(reference)))}
        if reference_name.startswith("tflm"):
            # LiteRT's desktop kernels beside it, for the report only (see reference.py).
            litert = call_in_child("edgeserve.converters.mcu_c.reference:litert_outputs", model_bytes, inputs,
                                   what="running LiteRT's reference kernels")
            result["litert_reference_max_steps"] = None if litert is None else int(np.max(np.abs(
                ours.astype(np.int32) - litert.reshape(ours.shape).astype(np.int32))))
        if len(np.unique(reference.reshape(len(inputs), -1), axis=0)) == 1:
            result.update(self._compare_before_the_head(ctx, model_bytes, model, generated, inputs, reference_name,
                                                        library_root))
        try:
            with ctx.progress.step("mcu-c: AddressSanitizer + UBSan + region check"):
                sanitized = check.build_host(directory, generated.name, ctx.workdir / "mcu_c_asan", sanitize=True,
                                             cmsis_nn=library_root)
                check.run_host(sanitized, inputs[:sanitizer_samples], out_shape, out_dtype)
            result["sanitizers"] = {"ok": True, "samples": sanitizer_samples}
        except Exception as exc:  # noqa: BLE001 - a sanitizer report is a failed build
            unable = check.sanitizer_could_not_run(str(exc))
            if unable is None and ("sanitize" in str(exc) or "AddressSanitizer" in str(exc) or "runtime error" in str(exc)):
                raise VerificationError(f"a kernel read or wrote outside its tensors: {str(exc)[:1500]}") from exc
            result["sanitizers"] = {"ok": None, "note": unable or str(exc).splitlines()[0][:300]}
        missing = check.qemu_available() or check.board_room(
            generated.plan.arena_bytes + generated.state_bytes, generated.weight_bytes,
            generated.input_bytes * target_samples)
        if missing:
            result["cortex_m4"] = {"skipped": missing}
            return result
        try:
            with ctx.progress.step("mcu-c: Cortex-M4 firmware under qemu-system-arm -M mps2-an386"):
                image = check.build_cortex_m4(directory, generated.name, inputs[:target_samples],
                                              ctx.workdir / "mcu_c_m4", cmsis_nn=library_root)
                run = check.run_cortex_m4(image, generated.name, int(np.prod(out_shape)))
        except (CompileError, RuntimeError, subprocess.TimeoutExpired) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise VerificationError(f"the Cortex-M4 build of the generated C did not run under qemu-system-arm: "
                                    f"{first[:400]}") from exc
        same = bool(np.array_equal(run.outputs, ours[:target_samples].reshape(target_samples, -1)))
        if not same:
            raise VerificationError("the Cortex-M4 build's outputs differ from the host build's")
        result["cortex_m4"] = {"board": "qemu mps2-an386", "matches_host": True, "samples": target_samples,
                               "instructions": run.instructions[-1], "code_bytes": run.code_bytes,
                               "weight_bytes": run.weight_bytes, "text_bytes": run.text_bytes,
                               "bss_bytes": run.bss_bytes, "data_bytes": run.data_bytes,
                               # The whole firmware's deepest stack (the harness and newlib's
                               # printf included), beside the fit check's estimate.
                               "stack_bytes": run.stack_bytes, "stack_estimate_bytes": STACK_ESTIMATE_BYTES,
                               "flags": " ".join(check.CORTEX_M4_C_FLAGS)}
        profile = ctx.profile
        if profile is not None and getattr(profile.cpu, "freq_mhz", 0):
            # QEMU counts instructions, not cycles: at one instruction per cycle (no flash wait
            # states, no stalls) this is the least time the profile's core can take.
            mhz = profile.cpu.freq_mhz
            result["cortex_m4"]["at_profile_clock"] = {
                "profile": profile.name, "freq_mhz": mhz,
                "min_ms": round(run.instructions[-1] / (mhz * 1e3), 3)}
        return result

    def _compare_before_the_head(self, ctx: ConversionContext, model_bytes: bytes, model: TfliteModel,
                                 generated: Any, inputs: np.ndarray, reference_name: str,
                                 library_root: Path | None = None) -> dict[str, Any]:
        """When every random input gives the same output (a wake-word detector saying "no"
        to noise), the comparison could not fail; compare the tensor before the model's
        squashing head (LOGISTIC/SOFTMAX/QUANTIZE/RESHAPE) instead, which varies."""
        from edgeserve.converters.microcontroller.child import call_in_child
        from edgeserve.converters.mcu_c import check
        from edgeserve.converters.mcu_c.generate import generate

        graph = model.subgraphs[0]
        producers = {t: op for op in graph.operators for t in op.outputs}
        tensor = graph.outputs[0]
        while tensor in producers and producers[tensor].op_name in ("LOGISTIC", "SOFTMAX", "QUANTIZE", "RESHAPE",
                                                                      "TANH"):
            tensor = producers[tensor].inputs[0]
        degenerate = {"degenerate": "every random input gave the same output: the comparison could not fail"}
        if tensor == graph.outputs[0] or not reference_name.startswith("tflm") or \
                graph.tensors[tensor].dtype_name != "int8":
            return degenerate
        from edgeserve.converters.mcu_c.cmsis_nn_tree import locate

        tree = locate(library_root) if library_root is not None else None
        probe = generate(model, generated.name, "probe", output_tensor=tensor, cmsis_nn=tree, kernels=generated.kernels,
                         int8_weights=generated.int8_weights)
        directory = ctx.workdir / "mcu_c_probe"
        for rel, text in probe.files.items():
            (directory / rel).parent.mkdir(parents=True, exist_ok=True)
            (directory / rel).write_text(text)
        shape = tuple(graph.tensors[tensor].shape)
        ours = check.run_host(check.build_host(directory, generated.name, ctx.workdir / "mcu_c_probe_host",
                                               cmsis_nn=library_root), inputs, shape)
        reference = call_in_child("edgeserve.converters.mcu_c.reference:reference_tensor", model_bytes, inputs,
                                  tensor, what="reading the reference kernels' intermediate tensor")
        if len(np.unique(reference.reshape(len(inputs), -1), axis=0)) == 1:
            return degenerate
        diff = int(np.max(np.abs(ours.astype(np.int32) - reference.reshape(ours.shape).astype(np.int32))))
        if diff:
            raise VerificationError(f"the generated C's {graph.tensors[tensor].name!r} differs from the reference "
                                    f"kernels by up to {diff} steps; please report this model")
        return {"also_compared": {"tensor": graph.tensors[tensor].name, "bit_exact": True,
                                  "distinct_values": int(len(np.unique(reference))),
                                  "why": "the model's output was the same for every random input"}}

    def reverify(self, entry: Mapping[str, Any], root: Path) -> VerifyResult:
        """Hashes, then the generator run again on the stored model must give the same files."""
        from edgeserve.converters.mcu_c.generate import generate

        checks: list[Check] = []
        for record in [*entry["files"], entry["report"]]:
            problem = check_file(root, record)
            checks.append(Check(f"{record['path']} sha256", problem is None, problem or record["sha256"][:16]))
        model_path = root / OUT_DIR / f"{entry['name']}_model.tflite"
        if not model_path.is_file():
            checks.append(Check("model file", False, f"{model_path.name} is missing"))
            return VerifyResult(self.name, entry["path"], tuple(checks))
        model_bytes = model_path.read_bytes()
        checks.append(Check("model is the one built", _sha256(model_bytes) == entry.get("model_sha256"),
                            _sha256(model_bytes)[:16]))
        try:
            tree = None
            if "cmsis_nn" in entry:
                from edgeserve.converters.mcu_c.cmsis_nn_tree import ENV, locate

                recorded = str(entry.get("provenance", {}).get("cmsis_nn_dir", ""))
                tree = locate(None) or locate(recorded)
                if tree is None:
                    raise InputError(f"the C calls CMSIS-NN; set {ENV} to the folder it was generated against")
            again = generate(TfliteModel.from_bytes(model_bytes), entry["name"], Path(entry["model_from"]).name,
                             cmsis_nn=tree, kernels="generated" if "generated_kernels" in entry else "portable",
                             int8_weights=(entry.get("generated_kernels") or {}).get("int8_weights", ()))
        except InputError as exc:
            checks.append(Check("regenerates", False, str(exc)))
            return VerifyResult(self.name, entry["path"], tuple(checks))
        differ = [rel for rel, text in again.files.items()
                  if not (root / OUT_DIR / rel).is_file() or (root / OUT_DIR / rel).read_text() != text]
        checks.append(Check("regenerated files are byte-identical", not differ,
                            "yes" if not differ else f"differ: {', '.join(differ[:4])}"))
        checks.append(Check("arena re-planned", again.plan.arena_bytes == entry["arena_bytes"],
                            f"{again.plan.arena_bytes} bytes (manifest: {entry['arena_bytes']})"))
        return VerifyResult(self.name, entry["path"], tuple(checks))


# Architectures whose cores have the DSP extension CMSIS-NN's fast paths are written for,
# and whose scratch sizes the generated code reserves (cmsis_nn.py).
CMSIS_NN_ARCHITECTURES = ("armv7e-m", "armv8-m.main")


def _cmsis_nn_for(given: Any, profile: Any) -> Any:
    """The CMSIS-NN tree to call (--cmsis-nn, or CMSIS_NN_DIR), refused with one clear line
    when it is not one, or when the profile's core is not one it is sized for."""
    from edgeserve.converters.mcu_c.cmsis_nn_tree import locate

    tree = locate(given)
    if tree is None or profile is None:
        return tree
    arch = getattr(profile.cpu, "arch", None)
    if arch not in CMSIS_NN_ARCHITECTURES:
        why = ("its Helium (MVE) kernels ask for other scratch sizes than the DSP ones reserved here"
               if arch == "armv8.1-m.main" else "it has no Cortex-M DSP extension for CMSIS-NN's kernels")
        raise InputError(f"--cmsis-nn needs a Cortex-M core with DSP extensions ({', '.join(CMSIS_NN_ARCHITECTURES)}); "
                         f"profile {profile.name} is {arch}: {why}. Leave out --cmsis-nn (the portable C runs on it)")
    return tree


def _step_records(generated: Any) -> list[dict[str, Any]]:
    """Every step of the report: operator, kernel, in place or not, and with --cmsis-nn the
    library that runs it and why a layer CMSIS-NN covers stayed portable."""
    choices = {c.position: c for c in generated.choices}
    records = []
    for i, s in enumerate(generated.steps):
        record: dict[str, Any] = {"op": s.op, "index": s.index, "kernel": s.kernel,
                                  "in_place": i in generated.plan.inplace_sources}
        if i in choices:
            record.update({k: v for k, v in choices[i].record().items() if k not in ("op", "index")})
            if s.scratch_bytes:
                record["scratch_bytes"] = s.scratch_bytes
        records.append(record)
    return records


def _audio(model: TfliteModel, ctx: ConversionContext) -> dict[str, Any] | None:
    """A streaming audio model's frontend settings and detector (runtime/audio/wakeword.py)."""
    from edgeserve.runtime.audio.wakeword import audio_manifest

    graph = model.subgraphs[0]
    return audio_manifest(tuple(graph.tensors[graph.inputs[0]].shape), ctx.source.path)


def _one_buffer(sample: list[np.ndarray]) -> np.ndarray:
    """One sample as the generated C reads it: one input as it is, several back to back
    (generate.py; reference.py splits them again for the interpreters)."""
    if len(sample) == 1:
        return sample[0]
    return np.concatenate([np.asarray(x).reshape(-1) for x in sample])
