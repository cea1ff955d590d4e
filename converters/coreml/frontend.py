"""Source model → Core ML ML program with coremltools, with the PreprocessSpec built in.

An image model gets an ``ImageType`` input: Core ML takes the camera frame (a pixel
buffer) and applies ``pixel * scale + bias`` per channel in the model's colour order, the
same arithmetic as :meth:`PreprocessSpec.apply`. ``ImageType`` has one scale for all
channels; when the spec's ``std`` differs per channel (ImageNet), the image input takes
raw pixels and the per-channel affine is traced into the graph in front of the model.

Frontends, as coremltools accepts them:

- Keras 3: a concrete ``tf.function`` of the model at batch 1 (coremltools' own Keras
  path calls Keras 2 APIs that Keras 3 removed);
- ``ExportedProgram``: after ``run_decompositions({})`` (coremltools' requirement);
- TorchScript: the loaded module with its input shapes.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from edgeserve._deps import require
from edgeserve.errors import InputError, SourceModelError, UnsupportedOpError, first_line
from edgeserve.preprocess import PreprocessSpec
from edgeserve.sources import SourceModel, TensorInfo

COLOR_LAYOUTS = {"gray": "GRAYSCALE", "rgb": "RGB", "bgr": "BGR"}


@dataclasses.dataclass(frozen=True)
class TensorInput:
    """A plain tensor input (MLMultiArray), fed as the source takes it."""

    name: str
    shape: tuple[int, ...]  # batch 1, the source's layout
    # float32, or int32 for an integer or bool source input (token ids, bytes, a mask): Core ML's
    # multi-arrays hold no int64 or bool, and an id fits int32.
    dtype: str = "float32"

    kind = "tensor"

    def to_package(self, x: np.ndarray) -> np.ndarray:
        """Source-side samples (N first) → what the package takes, still N first."""
        return np.asarray(x, self.dtype)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": "tensor", "shape": list(self.shape), "dtype": self.dtype}


@dataclasses.dataclass(frozen=True)
class ImageInput:
    """An image input: Core ML applies ``pixel * scale + bias[c]``; ``graph_*`` run in the model.

    ``graph_scale``/``graph_bias`` are None unless the spec's per-channel factors differ,
    in which case ``scale`` is 1, ``bias`` 0 and the whole affine is in the graph.
    """

    name: str
    shape: tuple[int, ...]  # batch 1, the source's layout
    layout: str  # "nhwc" or "nchw": the source's
    color: str
    scale: float
    bias: tuple[float, ...]
    graph_scale: tuple[float, ...] | None = None
    graph_bias: tuple[float, ...] | None = None

    kind = "image"

    @classmethod
    def from_spec(cls, spec: PreprocessSpec, info: TensorInfo) -> ImageInput:
        a, b = spec.channel_affine()
        shape = (1, *(int(d) for d in info.shape[1:]))
        if np.allclose(a, a[0], rtol=0, atol=0):
            return cls(info.name, shape, spec.layout, spec.color, float(a[0]), tuple(float(v) + 0.0 for v in b))
        return cls(info.name, shape, spec.layout, spec.color, 1.0, (0.0,) * len(a),
                   tuple(float(v) for v in a), tuple(float(v) + 0.0 for v in b))

    @property
    def color_layout(self) -> str:
        return COLOR_LAYOUTS[self.color]

    @property
    def affine(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-channel (a, b) of the whole preprocessing: model input = pixel * a + b."""
        if self.graph_scale is not None and self.graph_bias is not None:
            return np.asarray(self.graph_scale, np.float32), np.asarray(self.graph_bias, np.float32)
        channels = len(self.bias)
        return np.full(channels, self.scale, np.float32), np.asarray(self.bias, np.float32)

    def to_package(self, x: np.ndarray) -> np.ndarray:
        """Preprocessed samples (the source's float input, N first) → pixel values, N x C x H x W.

        The inverse of the spec's affine, so the package (which applies it itself) sees the
        frames the samples came from. Pixels are not rounded: calibration sets saved as
        floats need not come from whole pixel values.
        """
        a, b = self.affine
        x = np.asarray(x, np.float32)
        if self.layout == "nhwc":
            x = np.transpose(x, (0, 3, 1, 2))
        return ((x - b[None, :, None, None]) / a[None, :, None, None]).astype(np.float32)

    def to_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "kind": "image", "shape": list(self.shape), "color_layout": self.color_layout,
               "scale": self.scale, "bias": list(self.bias)}
        if self.graph_scale is not None:
            out["in_graph"] = {"scale": list(self.graph_scale), "bias": list(self.graph_bias or ())}
        return out


InputPlan = TensorInput | ImageInput


def package_name(name: str) -> str:
    """The name coremltools gives a feature (its NameSanitizer's rule): every character other
    than [A-Za-z0-9_] becomes '_', and a name not starting with a letter or '_' gets a '_'
    in front. tf2onnx's 'serving_default_image:0' and torch's 'onnx::Flatten_0' change so;
    planning with the package's own names keeps every feed of the package by name right.
    Words MIL reserves (its type names, and "state", silero-vad's input) get "_workaround"."""
    name = re.sub("[^a-zA-Z0-9_]", "_", name)
    name = name if re.match("[a-zA-Z_]", name) else "_" + name
    return name + "_workaround" if name in _MIL_RESERVED else name


# Names coremltools 9's NameSanitizer renames (coremltools/converters/mil/mil/passes/defs/preprocess.py).
_MIL_RESERVED = frozenset(("any", "bool", "program", "func", "tensor", "list", "dict", "tuple", "true", "false",
                           "string", "bf16", "fp16", "fp32", "fp64", "int8", "int16", "int32", "int64", "uint8",
                           "uint16", "uint32", "uint64", "state"))


def plan_inputs(source: SourceModel, spec: PreprocessSpec | None, sample_shapes: Sequence[tuple[int, ...]]
                ) -> list[InputPlan]:
    """One plan per source input: an image when the pipeline bound a PreprocessSpec to it."""
    plans: list[InputPlan] = []
    for info, sample in zip(source.signature.inputs, sample_shapes):
        name = package_name(info.name)
        if not info.is_float:
            plans.append(TensorInput(name, (1, *(int(d) for d in sample)), "int32"))
        elif spec is not None and len(source.signature.inputs) == 1:
            plans.append(ImageInput.from_spec(spec, TensorInfo(name, (1, *sample), info.dtype)))
        else:
            plans.append(TensorInput(name, (1, *(int(d) for d in sample))))
    return plans


def deployment_target(ct: Any, name: str) -> Any:
    """``ct.target.iOS17`` for "iOS17" (any case), or an InputError listing the choices."""
    from edgeserve.errors import did_you_mean

    members = dict(ct.target.__members__)  # aliases too: macOS13 is iOS16's spec version
    known = {n.lower(): t for n, t in members.items()}
    if name.lower() not in known:
        names = list(members)
        raise InputError(f"unknown --deployment-target {name!r}.{did_you_mean(name, names)} Known: {', '.join(names)}")
    return known[name.lower()]


def prepared(source: SourceModel, plans: Sequence[InputPlan]) -> tuple[Any, str]:
    """What coremltools is given for ``source`` and its frontend's name: a Keras model's
    concrete function (in a list), or a torch program or traced module."""
    if source.framework == "tensorflow":
        return [_keras_function(source, plans)], "tensorflow"
    if source.framework in ("pytorch", "onnx"):  # an ONNX source is traced into a torch program
        return _torch_model(source, plans), "pytorch"
    raise SourceModelError(f"{source.path.name} ({source.kind}) cannot be converted to Core ML")


def convert_prepared(ct: Any, model: Any, frontend: str, plans: Sequence[InputPlan], *, target: Any,
                     labels: Sequence[str] | None, name: str) -> Any:
    """coremltools' conversion of what :func:`prepared` gave; its refusals as edgeserve errors."""
    ct_inputs = [_ct_input(ct, plan) for plan in plans]
    options: dict[str, Any] = {
        "convert_to": "mlprogram",
        "minimum_deployment_target": target,
        "compute_precision": ct.precision.FLOAT16,
        "inputs": ct_inputs,
        "skip_model_load": True,  # Core ML itself only exists on macOS; verification loads it there
    }
    if labels:
        options["classifier_config"] = ct.ClassifierConfig(list(labels))
    try:
        return ct.convert(model, source=frontend, **options)
    except NotImplementedError as exc:
        missing = _MISSING_OP.search(str(exc))
        if missing is None:
            raise SourceModelError(f"coremltools {ct.__version__} cannot convert {name}: "
                                   f"{first_line(exc)}") from exc
        raise UnsupportedOpError(
            missing.group(1), f"coreml (coremltools {ct.__version__} {frontend} frontend)", _frontend_ops(frontend),
            detail=f"coremltools has no conversion for this {frontend} op, so no package was made.",
        ) from exc
    except (ValueError, TypeError, RuntimeError, KeyError, AssertionError) as exc:
        # coremltools reports unconvertible graphs with these; the reason goes to the user.
        raise SourceModelError(f"coremltools {ct.__version__} cannot convert {name}: "
                               f"{first_line(exc)}") from exc


_MISSING_OP = re.compile(r"op '([^']+)' not implemented")


def _frontend_ops(frontend: str) -> list[str]:
    """The source ops coremltools can convert (for the error's "Supported ops" list)."""
    if frontend == "tensorflow":
        from coremltools.converters.mil.frontend.tensorflow.tf_op_registry import (
            _TF_OPS_REGISTRY,
        )

        return sorted(_TF_OPS_REGISTRY)
    from coremltools.converters.mil.frontend.torch.torch_op_registry import (
        _TORCH_OPS_REGISTRY,
    )

    return sorted(_TORCH_OPS_REGISTRY.name_to_func_mapping)



def _ct_input(ct: Any, plan: InputPlan) -> Any:
    if isinstance(plan, ImageInput):
        bias = list(plan.bias) if plan.color != "gray" else plan.bias[0]
        return ct.ImageType(name=plan.name, shape=plan.shape, scale=plan.scale, bias=bias,
                            color_layout=getattr(ct.colorlayout, plan.color_layout),
                            channel_first=plan.layout == "nchw")
    return ct.TensorType(name=plan.name, shape=plan.shape, dtype=np.dtype(plan.dtype).type)


def _keras_function(source: SourceModel, plans: Sequence[InputPlan]) -> Any:
    tf = require("tensorflow", "Core ML conversion of a Keras model")
    model = getattr(source, "model", None)
    if model is None:
        raise SourceModelError(
            f"{source.path.name} is a SavedModel directory; coremltools converts a Keras model object. "
            "Convert the .keras (or .h5) file the SavedModel was exported from"
        )
    specs = [tf.TensorSpec(plan.shape, tf.int32 if getattr(plan, "dtype", "float32") == "int32" else tf.float32,
                           name=plan.name) for plan in plans]
    affines = [_graph_affine(plan, channels_last=True) for plan in plans]

    def serve(*xs: Any) -> Any:
        xs = tuple(x if aff is None else x * aff[0] + aff[1] for x, aff in zip(xs, affines))
        return model(list(xs) if len(xs) > 1 else xs[0], training=False)

    return tf.function(serve, input_signature=specs).get_concrete_function()


def _torch_model(source: SourceModel, plans: Sequence[InputPlan]) -> Any:
    torch = require("torch", "Core ML conversion of a PyTorch model")
    # A torch program from a float .tflite (through ONNX) keeps the .tflite's NHWC inputs.
    affines = [_graph_affine(plan, channels_last=getattr(plan, "layout", "nchw") == "nhwc") for plan in plans]
    program = getattr(source, "program", None)
    table = _ops_coremltools_lacks(torch)
    if program is not None and _prelu_off_rank_4(program):
        table |= _prelu_as_where(torch)
    if all(a is None for a in affines):
        return _without_aliases(program.run_decompositions(table)) if program is not None else \
            source.module  # type: ignore[attr-defined]

    class Preprocessed(torch.nn.Module):
        """The source with the per-channel affine ImageType cannot express in front of it."""

        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner
            for i, aff in enumerate(affines):
                if aff is not None:
                    self.register_buffer(f"scale_{i}", torch.from_numpy(aff[0]))
                    self.register_buffer(f"bias_{i}", torch.from_numpy(aff[1]))

        def forward(self, *xs: Any) -> Any:
            xs = tuple(x if affines[i] is None else x * getattr(self, f"scale_{i}") + getattr(self, f"bias_{i}")
                       for i, x in enumerate(xs))
            return self.inner(*xs)

    # Not .eval(): an ExportedProgram's module refuses train(); the source is in eval mode already.
    wrapped = Preprocessed(source.module)  # type: ignore[attr-defined]
    example = tuple(torch.zeros(plan.shape) for plan in plans)
    if program is not None:
        return _without_aliases(torch.export.export(wrapped, example).run_decompositions(table))
    return torch.jit.trace(wrapped, example)


def _without_aliases(program: Any) -> Any:
    """``program`` with its ``aten.alias`` nodes bypassed: torch.export writes one where a view
    changes nothing (a cast to the dtype a tensor has, a slice of all of it; silero-vad's ONNX
    graph has three), and coremltools 9 has no conversion for it ("Unsupported fx node alias").
    An alias that is itself a program output stays (its name is in the signature)."""
    import torch

    graph = program.graph_module.graph
    changed = False
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target == torch.ops.aten.alias.default and \
                not any(user.op == "output" for user in node.users):
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)
            changed = True
    if changed:
        program.graph_module.recompile()
    return program


def _ops_coremltools_lacks(torch: Any) -> dict[Any, Any]:
    """Decompositions for ATen ops that ``run_decompositions({})`` keeps and coremltools 9 has no
    conversion for: ``new_ones`` (a Hugging Face BERT's attention mask, "Unsupported fx node
    new_ones"; Ultralytics met it too, ultralytics/ultralytics#25616), written as ``full`` of ones,
    which it converts."""
    def new_ones(x: Any, size: Any, *, dtype: Any = None, layout: Any = None, device: Any = None,
                 pin_memory: Any = None) -> Any:
        return torch.full(size, 1, dtype=x.dtype if dtype is None else dtype)

    return {torch.ops.aten.new_ones.default: new_ones}


def _prelu_off_rank_4(program: Any) -> bool:
    """True when a PReLU with one alpha per channel reads other than a rank-4 tensor (MTCNN's
    dense layers): coremltools' prelu takes a per-channel alpha on rank 4 only, and refuses
    ("rank 3 or rank 5 input is only supported when all the values of alpha are same")."""
    for node in program.graph.nodes:
        if node.op != "call_function" or "prelu" not in str(node.target) or len(node.args) < 2:
            continue
        x, alpha = (getattr(a, "meta", {}).get("val") for a in node.args[:2])
        if x is not None and alpha is not None and x.dim() != 4 and alpha.numel() > 1:
            return True
    return False


def _prelu_as_where(torch: Any) -> dict[Any, Any]:
    """A decomposition table writing PReLU as where(x >= 0, x, alpha * x), alpha on dim 1."""
    def prelu(x: Any, weight: Any) -> Any:
        shape = [1] * x.dim()
        if weight.numel() > 1:
            shape[1] = weight.numel()
        return torch.where(x >= 0, x, x * weight.reshape(shape))

    return {torch.ops.aten.prelu.default: prelu, torch.ops.aten._prelu_kernel.default: prelu}


def _graph_affine(plan: InputPlan, channels_last: bool) -> tuple[np.ndarray, np.ndarray] | None:
    if not isinstance(plan, ImageInput) or plan.graph_scale is None:
        return None
    a, b = plan.affine
    shape = (1, 1, 1, -1) if channels_last else (1, -1, 1, 1)
    return a.reshape(shape), b.reshape(shape)
