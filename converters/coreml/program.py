"""An ML program read back from a written ``.mlpackage``: its ops, constants and interface.

This is what the numpy evaluator runs, so it is read from the package on disk (the
``model.mlmodel`` protobuf and the weight file), never from coremltools' in-memory
objects: the check is of the artifact the user ships. coremltools is used only for its
protobuf classes.

Example:
    >>> program = MilProgram.load(Path("build/model.mlpackage"))   # doctest: +SKIP
    >>> program.op_counts()                                         # doctest: +SKIP
    {'conv': 3, 'relu': 3, 'max_pool': 1, ...}
"""

from __future__ import annotations

import collections
import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from edgeserve.converters.coreml.blob import BlobFile
from edgeserve.errors import ModelFileError

WEIGHTS_PREFIX = "@model_path/"

# MIL DataType names (MIL.proto) -> the short names ops use (cast's dtype, etc.) and numpy.
DTYPES: dict[str, tuple[str, np.dtype | None]] = {
    "BOOL": ("bool", np.dtype(bool)),
    "STRING": ("string", None),
    "FLOAT16": ("fp16", np.dtype(np.float16)),
    "FLOAT32": ("fp32", np.dtype(np.float32)),
    "FLOAT64": ("fp64", np.dtype(np.float64)),
    "INT8": ("int8", np.dtype(np.int8)),
    "INT16": ("int16", np.dtype(np.int16)),
    "INT32": ("int32", np.dtype(np.int32)),
    "INT64": ("int64", np.dtype(np.int64)),
    "UINT8": ("uint8", np.dtype(np.uint8)),
    "UINT16": ("uint16", np.dtype(np.uint16)),
    "UINT32": ("uint32", np.dtype(np.uint32)),
    "UINT64": ("uint64", np.dtype(np.uint64)),
}
NUMPY_OF = {short: dt for short, dt in DTYPES.values() if dt is not None}


@dataclasses.dataclass(frozen=True)
class VarType:
    """A value's declared type: ``kind`` "tensor", "list", "dict" or "tuple"."""

    kind: str
    dtype: str | None = None  # short name ("fp16"), tensors only
    shape: tuple[int | None, ...] | None = None  # None: rank unknown

    @property
    def numpy(self) -> np.dtype | None:
        return NUMPY_OF.get(self.dtype or "")


@dataclasses.dataclass(frozen=True)
class Binding:
    """One argument of an op input: a variable by name, or an inline constant."""

    name: str | None
    value: Any = None


@dataclasses.dataclass(frozen=True)
class Op:
    type: str
    name: str
    inputs: dict[str, tuple[Binding, ...]]
    attributes: dict[str, Any]  # decoded; constexpr ops keep their parameters here
    outputs: tuple[tuple[str, VarType], ...]


@dataclasses.dataclass(frozen=True)
class Feature:
    """One model input or output as the model description declares it."""

    name: str
    kind: str  # "image", "multiArray", "string", "dictionary", ...
    detail: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, **self.detail}


@dataclasses.dataclass(frozen=True)
class MilProgram:
    """The ``main`` function of a package's ML program, with every constant decoded."""

    path: Path
    opset: str
    specification_version: int
    inputs: tuple[tuple[str, VarType], ...]
    ops: tuple[Op, ...]
    outputs: tuple[str, ...]
    input_features: tuple[Feature, ...]
    output_features: tuple[Feature, ...]
    metadata: dict[str, Any]
    classifier: dict[str, str] | None  # predicted feature / probabilities names

    # ----- loading ----------------------------------------------------------------------
    @classmethod
    def load(cls, package: Path) -> MilProgram:
        """Read ``package`` (a ``.mlpackage`` directory).

        Raises:
            ModelFileError: the package, its protobuf or its weights are missing or damaged.
        """
        from edgeserve.converters.coreml.toolchain import coremltools

        coremltools()  # quietly, before the protobuf modules import the package
        from coremltools.proto import Model_pb2

        package = Path(package)
        spec_path, weights_dir = _package_paths(package)
        model = Model_pb2.Model()
        try:
            model.ParseFromString(spec_path.read_bytes())
        except OSError as exc:
            raise ModelFileError(f"cannot read {spec_path}: {exc}") from exc
        except Exception as exc:  # protobuf's DecodeError and friends
            raise ModelFileError(f"{spec_path} is not a Core ML model: {exc}") from exc
        if model.WhichOneof("Type") != "mlProgram":
            raise ModelFileError(f"{package} holds a {model.WhichOneof('Type')} model, not an ML program")
        functions = model.mlProgram.functions
        if "main" not in functions:
            raise ModelFileError(f"{package}: the ML program has no 'main' function")
        function = functions["main"]
        block = function.block_specializations[function.opset]
        decoder = _Decoder(weights_dir)
        ops = tuple(_op(op, decoder) for op in block.operations)
        description = model.description
        classifier = None
        if description.predictedFeatureName:
            classifier = {"label": description.predictedFeatureName,
                          "probabilities": description.predictedProbabilitiesName}
        meta = description.metadata
        metadata = {
            "author": meta.author, "license": meta.license, "version": meta.versionString,
            "short_description": meta.shortDescription, "user_defined": dict(meta.userDefined),
        }
        return cls(
            path=package, opset=function.opset, specification_version=model.specificationVersion,
            inputs=tuple((i.name, _var_type(i.type)) for i in function.inputs),
            ops=ops, outputs=tuple(block.outputs),
            input_features=tuple(_feature(f) for f in description.input),
            output_features=tuple(_feature(f) for f in description.output),
            metadata=metadata, classifier=classifier,
        )

    # ----- facts ------------------------------------------------------------------------
    def op_counts(self) -> dict[str, int]:
        """Op types and how often each occurs, constants left out."""
        counts = collections.Counter(op.type for op in self.ops if op.type != "const")
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def op_types(self) -> list[str]:
        """Every op type in program order, once each (constants included)."""
        return list(dict.fromkeys(op.type for op in self.ops))

    def producer(self, var: str) -> Op | None:
        for op in self.ops:
            if any(name == var for name, _ in op.outputs):
                return op
        return None

    def constant(self, binding: Binding) -> Any:
        """The value of an op argument when it is a constant (inline or a ``const`` op), else None."""
        if binding.name is None:
            return binding.value
        op = self.producer(binding.name)
        return op.attributes.get("val") if op is not None and op.type == "const" else None

    def classes(self) -> list[str] | None:
        """The class labels of a classifier, in the order of its probabilities."""
        op = next((o for o in self.ops if o.type == "classify"), None)
        if op is None:
            return None
        values = self.constant(op.inputs["classes"][0])
        return [str(v.item() if isinstance(v, np.ndarray) else v) for v in values] if values is not None else None


def _package_paths(package: Path) -> tuple[Path, Path]:
    """The root model's ``model.mlmodel`` and its ``weights`` directory, via Manifest.json."""
    manifest = package / "Manifest.json"
    try:
        info = json.loads(manifest.read_text(encoding="utf-8"))
        root = info["itemInfoEntries"][info["rootModelIdentifier"]]
        spec_path = package / "Data" / root["path"]
    except FileNotFoundError as exc:
        raise ModelFileError(f"{package} is not an .mlpackage: {manifest.name} is missing") from exc
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelFileError(f"{manifest} is damaged: {exc}") from exc
    return spec_path, spec_path.parent


class _Decoder:
    """Decodes MIL ``Value`` messages; blob values are read from the package's weight files."""

    def __init__(self, model_dir: Path) -> None:
        self.model_dir = model_dir
        self._files: dict[str, BlobFile] = {}

    def value(self, value: Any) -> Any:
        vtype = _var_type(value.type)
        which = value.WhichOneof("value")
        if which == "blobFileValue":
            return self._blob(value.blobFileValue, vtype)
        if which != "immediateValue":
            raise ModelFileError(f"a constant has no value ({which})")
        immediate = value.immediateValue
        kind = immediate.WhichOneof("value")
        if kind == "tensor":
            return _tensor(immediate.tensor, vtype)
        if kind == "list":
            return [self.value(v) for v in immediate.list.values]
        if kind == "tuple":
            return tuple(self.value(v) for v in immediate.tuple.values)
        if kind == "dictionary":
            return {self.value(kv.key): self.value(kv.value) for kv in immediate.dictionary.values}
        raise ModelFileError(f"unknown immediate value kind {kind}")

    def _blob(self, blob: Any, vtype: VarType) -> np.ndarray:
        name = blob.fileName
        if not name.startswith(WEIGHTS_PREFIX):
            raise ModelFileError(f"weight file {name!r} is outside the package")
        if vtype.numpy is None or vtype.shape is None or any(d is None for d in vtype.shape):
            raise ModelFileError(f"blob constant in {name} has no fixed numeric type ({vtype})")
        if name not in self._files:
            # "@model_path/weights/weight.bin" is relative to the model's own directory.
            self._files[name] = BlobFile(self.model_dir / name[len(WEIGHTS_PREFIX):])
        return self._files[name].read(int(blob.offset), vtype.numpy, tuple(int(d) for d in vtype.shape))


def _var_type(value_type: Any) -> VarType:
    which = value_type.WhichOneof("type")
    if which == "tensorType":
        t = value_type.tensorType
        from coremltools.proto import MIL_pb2

        raw = MIL_pb2.DataType.Name(t.dataType)
        short = DTYPES.get(raw, (raw.lower(), None))[0]
        if t.rank < 0:
            return VarType("tensor", short, None)
        dims = tuple(int(d.constant.size) if d.WhichOneof("dimension") == "constant" else None
                     for d in t.dimensions)
        return VarType("tensor", short, dims)
    return VarType({"listType": "list", "dictionaryType": "dict", "tupleType": "tuple",
                    "stateType": "state"}.get(which or "", str(which)))


def _tensor(tensor: Any, vtype: VarType) -> Any:
    kind = tensor.WhichOneof("value")
    if vtype.dtype == "string":
        values = list(tensor.strings.values)
        return values[0] if vtype.shape == () else values
    if kind == "bytes":
        if vtype.numpy is None:
            raise ModelFileError(f"raw bytes for a {vtype.dtype} tensor")
        array = np.frombuffer(tensor.bytes.values, dtype=vtype.numpy.newbyteorder("<"))
    elif kind is None:
        array = np.zeros(0, dtype=vtype.numpy or np.float32)
    else:
        array = np.asarray(list(getattr(tensor, kind).values))
        if vtype.numpy is not None:
            array = array.astype(vtype.numpy)
    shape = vtype.shape if vtype.shape is not None and all(d is not None for d in vtype.shape) else None
    if shape is not None:
        if int(np.prod(shape, dtype=np.int64)) != array.size:
            raise ModelFileError(f"constant has {array.size} values for declared shape {shape}")
        array = array.reshape(shape)
    return array


def _op(op: Any, decoder: _Decoder) -> Op:
    inputs = {
        key: tuple(Binding(a.name) if a.WhichOneof("binding") == "name" else Binding(None, decoder.value(a.value))
                   for a in arg.arguments)
        for key, arg in op.inputs.items()
    }
    attributes = {key: decoder.value(value) for key, value in op.attributes.items()}
    outputs = tuple((o.name, _var_type(o.type)) for o in op.outputs)
    name = attributes.get("name")
    return Op(op.type, str(name) if name is not None else (outputs[0][0] if outputs else op.type),
              inputs, attributes, outputs)


def _feature(feature: Any) -> Feature:
    ftype = feature.type
    which = ftype.WhichOneof("Type")
    if which == "imageType":
        from coremltools.proto import FeatureTypes_pb2

        image = ftype.imageType
        color = FeatureTypes_pb2.ImageFeatureType.ColorSpace.Name(image.colorSpace)
        return Feature(feature.name, "image", {"width": int(image.width), "height": int(image.height),
                                               "color_layout": color})
    if which == "multiArrayType":
        from coremltools.proto import FeatureTypes_pb2

        array = ftype.multiArrayType
        dtype = FeatureTypes_pb2.ArrayFeatureType.ArrayDataType.Name(array.dataType).lower()
        return Feature(feature.name, "multiArray", {"shape": [int(s) for s in array.shape], "dtype": dtype})
    kind = (which or "unknown").replace("Type", "")
    return Feature(feature.name, kind, {})
