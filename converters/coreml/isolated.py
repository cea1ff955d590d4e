"""coremltools in child processes (edgeserve.isolation): conversion, then quantization and save.

ct.convert drives TensorFlow's graph tooling (for Keras) or torch's, and coremltools' own
passes, over a graph it has never seen; a native crash there used to end the user's whole
run. Here it costs a child and becomes one error line naming coremltools, and the other
targets go on. The source crosses as a file (its torch program as .pt2, a TorchScript
module as TorchScript; a Keras model is loaded again from its own file) and the child
prepares what coremltools reads from it exactly as the in-process path did.

The second step (int8 activations from the parent's ranges, int8 weights, metadata, save)
runs coremltools' graph passes and its native weight-blob writer on the converted package:
a child too, so that no coremltools code runs in the user's process. Packages cross on disk.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from edgeserve._deps import TORCH_TRACING, require
from edgeserve.isolation import run_isolated
from edgeserve.sources import SourceModel


def convert_in_child(source: SourceModel, plans: Sequence[Any], *, target_name: str,
                     labels: Sequence[str] | None, workdir: Path) -> tuple[Path, list[str]]:
    """The fp16 ML program of ``source`` as a package in ``workdir`` and what coremltools said
    while converting it."""
    from edgeserve.converters.coreml.frontend import prepared

    folder = workdir / "coreml"
    folder.mkdir(parents=True, exist_ok=True)
    package = folder / "converted.mlpackage"
    if source.framework == "tensorflow":
        carrier = ("keras", str(source.path))
    elif source.framework in ("pytorch", "onnx"):
        torch = require("torch", "Core ML conversion of a PyTorch model")
        with TORCH_TRACING:
            program = getattr(source, "program", None)
            if program is not None:  # the source's own program: the child prepares it as in-process
                carrier = ("pt2", str(folder / "for_coremltools.pt2"))
                torch.export.save(program, carrier[1])
            else:
                carrier = ("torchscript", str(folder / "for_coremltools.pt"))
                torch.jit.save(source.module, carrier[1])
    else:
        prepared(source, plans)  # raises: no frontend for this framework
    messages = run_isolated(f"{__name__}:convert_step", carrier, list(plans), target_name,
                            list(labels) if labels else None, source.path.name, str(package),
                            tool="coremltools", what=f"converting {source.path.name} to an ML program")
    return package, messages


def finish_in_child(converted: Path, package: Path, *, precision: str, stats: Any,
                    metadata: Mapping[str, str], name: str) -> list[str]:
    """``converted`` quantized as ``precision`` asks (``stats``: activation ranges, for w8a8),
    stamped with ``metadata`` and saved as ``package``; what coremltools said."""
    return run_isolated(f"{__name__}:finish_step", str(converted), str(package), precision, stats, dict(metadata),
                        tool="coremltools", what=f"quantizing and saving the ML program of {name} ({precision})")


def convert_step(carrier: tuple[str, str], plans: list[Any], target_name: str, labels: list[str] | None,
                 name: str, package: str) -> list[str]:
    """The child's side: build what coremltools reads, convert, save the package."""
    from edgeserve.converters.coreml import toolchain
    from edgeserve.converters.coreml.frontend import convert_prepared, deployment_target, prepared

    kind, path = carrier
    saturated = 0
    if kind == "keras":
        from edgeserve.sources import load_source

        # TensorFlow first: coremltools' TensorFlow frontend is there only when TensorFlow was
        # imported before coremltools (toolchain.coremltools hides what is not yet imported).
        source: Any = load_source(path)
    else:
        torch = require("torch", "Core ML conversion of a PyTorch model")
        from edgeserve.converters.coreml.fp16_range import FP16_MAX, saturate_constants

        program = torch.export.load(path) if kind == "pt2" else None
        module = program.module() if program is not None else torch.jit.load(path).eval()
        saturated = saturate_constants(program if program is not None else module)
        if program is not None and saturated:
            module = program.module()
        source = SimpleNamespace(framework="pytorch", program=program, module=module, path=Path(name), kind=kind)
    ct = toolchain.coremltools()
    model, frontend = prepared(source, plans)
    notes = [f"edgeserve: {saturated} constant tensor(s) holding stand-ins for infinity (|x| >= 1e30) saturated to "
             f"±{FP16_MAX:g}, fp16's largest (fp16_range.py)"] if saturated else []
    with toolchain.captured() as said:
        mlmodel = convert_prepared(ct, model, frontend, plans, target=deployment_target(ct, target_name),
                                   labels=labels, name=name)
        mlmodel.save(package)
    return notes + said.messages


def finish_step(converted: str, package: str, precision: str, stats: Any, metadata: dict[str, str]) -> list[str]:
    """The child's side of :func:`finish_in_child`."""
    from edgeserve.converters.coreml import quantize, toolchain

    ct = toolchain.coremltools()
    messages: list[str] = []
    mlmodel = ct.models.MLModel(converted, skip_model_load=True)
    if precision == "w8a8":
        with toolchain.captured() as said:
            mlmodel = quantize.quantize_activations(mlmodel, stats)
        messages += said.messages
    if precision in ("int8-weights", "w8a8"):
        with toolchain.captured() as said:
            mlmodel = quantize.quantize_weights(mlmodel)
        messages += said.messages
    for key in ("author", "license", "version", "short_description"):
        setattr(mlmodel, key, metadata.pop(key))
    for key, value in metadata.items():
        mlmodel.user_defined_metadata[key] = value
    with toolchain.captured() as said:
        mlmodel.save(package)
    return messages + said.messages
