"""Load a source model (Keras 3 .keras, Keras 2 .h5, SavedModel, PyTorch) behind one interface.

Converters need three things from a source: its signature (input/output names, shapes,
dtypes), float reference predictions to compare artifacts against, and a batch-1
SavedModel for the TFLite converter. TensorFlow (or torch) is imported only when a source
is loaded. PyTorch sources (an ``ExportedProgram`` saved as ``.pt2``, or TorchScript)
convert to Core ML only; ONNX is not a source (coremltools dropped its ONNX frontend).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import pickle
import re
import warnings
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgeserve._deps import require
from edgeserve.atomic import sha256_file
from edgeserve.errors import SourceModelError

log = logging.getLogger(__name__)

SERVING_KEY = "serving_default"
TORCH_EXPORT_SUFFIXES = (".pt2",)
TORCHSCRIPT_SUFFIXES = (".pt", ".pth", ".torchscript")
ACCEPTED = (
    "a .keras file, a Keras 2 .h5 file, a SavedModel directory, a PyTorch ExportedProgram (.pt2) or "
    "TorchScript (.pt) file (Core ML target only), or a .tflite file (for targets that start from one)"
)
ONNX_IS_NOT_A_SOURCE = (
    "ONNX is not a source edgeserve converts from: coremltools has no ONNX frontend any more (Apple dropped "
    "it; coremltools converts TensorFlow and PyTorch only), and the TFLite targets start from TensorFlow. "
    "Convert the model the ONNX file was exported from instead: the PyTorch module saved with "
    "torch.export.save (.pt2) for -t coreml, or the Keras/SavedModel model for any target"
)


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """One model input or output as the source framework declares it (None = dynamic)."""

    name: str
    shape: tuple[int | None, ...]
    dtype: str

    @property
    def sample_shape(self) -> tuple[int | None, ...]:
        """The shape of one sample, without the batch dimension."""
        return self.shape[1:]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}


@dataclasses.dataclass(frozen=True)
class Signature:
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]


def source_kind(path: Path) -> str:
    """"keras", "keras-h5", "saved_model", "tflite", "torch-export" or "torchscript" for a path,
    or raise naming what is accepted."""
    if path.is_dir():
        if (path / "saved_model.pb").exists():
            return "saved_model"
        raise SourceModelError(f"{path} is a directory without saved_model.pb; expected a SavedModel directory")
    suffix = path.suffix.lower()
    if suffix == ".tflite":
        return "tflite"
    if suffix == ".keras":
        return "keras"
    if suffix in (".h5", ".hdf5"):
        return "keras-h5"
    if suffix in TORCH_EXPORT_SUFFIXES:
        return "torch-export"
    if suffix in TORCHSCRIPT_SUFFIXES:
        return "torchscript"
    if suffix == ".onnx":
        raise SourceModelError(f"{path.name} is an ONNX model. {ONNX_IS_NOT_A_SOURCE}. Accepted: {ACCEPTED}")
    raise SourceModelError(f"cannot tell the model format of {path.name}: expected {ACCEPTED}")


class SourceModel:
    """A loaded float source model. Use :func:`load_source` to make one."""

    def __init__(self, path: Path, kind: str, signature: Signature, framework_version: str) -> None:
        self.path = path
        self.kind = kind
        self.signature = signature
        self.framework = "tensorflow"
        self.framework_version = framework_version
        self._sha256: str | None = None

    @property
    def sha256(self) -> str:
        if self._sha256 is None:
            self._sha256 = sha256_file(self.path)
        return self._sha256

    def describe(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "kind": self.kind,
            "sha256": self.sha256,
            "framework": self.framework,
            "framework_version": self.framework_version,
        }

    def predict(self, inputs: Sequence[np.ndarray], batch_size: int = 64) -> list[np.ndarray]:
        """Float outputs for N samples (one array per input, N first), in output order."""
        n = len(inputs[0])
        chunks: list[list[np.ndarray]] = []
        for start in range(0, n, batch_size):
            chunks.append(self._predict_batch([x[start : start + batch_size] for x in inputs]))
        return [np.concatenate([c[i] for c in chunks]) for i in range(len(self.signature.outputs))]

    def _predict_batch(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        raise NotImplementedError

    def export_batch1_saved_model(self, directory: Path) -> Path:
        """Write a SavedModel whose ``serving_default`` takes batch-1 inputs (for TFLite)."""
        raise NotImplementedError


class KerasSource(SourceModel):
    def __init__(self, path: Path, kind: str, model: Any, framework_version: str) -> None:
        self.model = model
        sig = Signature(
            inputs=tuple(_keras_tensor_info(t, f"input_{i}") for i, t in enumerate(model.inputs)),
            outputs=tuple(_keras_tensor_info(t, f"output_{i}") for i, t in enumerate(model.outputs)),
        )
        super().__init__(path, kind, sig, framework_version)

    def _predict_batch(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        with warnings.catch_warnings():
            # Functional models loaded from Keras 2 files declare their single input as a
            # list and warn when given a bare tensor; the call is still correct.
            warnings.filterwarnings("ignore", message="The structure of `inputs`", category=UserWarning)
            out = self.model(inputs if len(inputs) > 1 else inputs[0], training=False)
        outs = out if isinstance(out, (list, tuple)) else [out]
        return [np.asarray(o) for o in outs]

    def export_batch1_saved_model(self, directory: Path) -> Path:
        tf = require("tensorflow", "TFLite conversion")
        keras = require("keras", "TFLite conversion")
        specs = [_batch1_spec(tf, t) for t in self.signature.inputs]
        model = self.model

        def serve(*xs: Any) -> Any:
            return model(list(xs) if len(xs) > 1 else xs[0], training=False)

        archive = keras.export.ExportArchive()
        archive.track(model)
        archive.add_endpoint(SERVING_KEY, serve, input_signature=specs)
        archive.write_out(str(directory), verbose=False)
        return directory


class SavedModelSource(SourceModel):
    def __init__(self, path: Path, loaded: Any, signature_fn: Any, framework_version: str) -> None:
        self._loaded = loaded  # keeps the variables the signature function reads alive
        self._fn = signature_fn
        _, kwargs = signature_fn.structured_input_signature
        self._input_names = sorted(kwargs)
        self._output_names = sorted(signature_fn.structured_outputs)
        sig = Signature(
            inputs=tuple(
                TensorInfo(n, tuple(kwargs[n].shape.as_list()), kwargs[n].dtype.name) for n in self._input_names
            ),
            outputs=tuple(
                TensorInfo(n, tuple(signature_fn.structured_outputs[n].shape.as_list()),
                           signature_fn.structured_outputs[n].dtype.name)
                for n in self._output_names
            ),
        )
        super().__init__(path, "saved_model", sig, framework_version)

    def _predict_batch(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        tf = require("tensorflow")
        out = self._fn(**{n: tf.constant(x) for n, x in zip(self._input_names, inputs)})
        return [np.asarray(out[n]) for n in self._output_names]

    def export_batch1_saved_model(self, directory: Path) -> Path:
        tf = require("tensorflow", "TFLite conversion")
        specs = [_batch1_spec(tf, t) for t in self.signature.inputs]
        names, fn = self._input_names, self._fn

        module = tf.Module()
        module.source = self._loaded
        module.serve = tf.function(lambda *xs: fn(**dict(zip(names, xs))), input_signature=specs)
        tf.saved_model.save(module, str(directory), signatures={SERVING_KEY: module.serve.get_concrete_function()})
        return directory


class TfliteSource(SourceModel):
    """An already converted .tflite: a starting point for targets that only repackage it (mcu).

    Read with edgeserve's own flatbuffer reader, so neither TensorFlow nor LiteRT is needed
    and a corrupt file is a :class:`ModelFileError`, never a crash.
    """

    def __init__(self, path: Path) -> None:
        from edgeserve.tflite_model import TfliteModel

        self.model = TfliteModel.from_file(path)
        if not self.model.subgraphs:
            raise SourceModelError(f"{path} has no subgraph")
        graph = self.model.subgraphs[0]

        def info(index: int) -> TensorInfo:
            tensor = graph.tensors[index]
            return TensorInfo(tensor.name, tuple(tensor.shape), tensor.dtype_name)

        sig = Signature(inputs=tuple(info(i) for i in graph.inputs), outputs=tuple(info(i) for i in graph.outputs))
        super().__init__(path, "tflite", sig, f"tflite schema {self.model.version}")
        self.framework = "tflite"

    def _predict_batch(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        raise SourceModelError(
            f"{self.path.name} is already a .tflite; this target needs the float source model "
            "(.keras, .h5 or SavedModel) to convert and compare against"
        )

    def export_batch1_saved_model(self, directory: Path) -> Path:
        return self._predict_batch([])  # type: ignore[return-value]


class TorchSource(SourceModel):
    """A PyTorch model: an ``ExportedProgram`` (.pt2) or a TorchScript module (.pt).

    PyTorch sources convert to Core ML only (coremltools takes them directly); the TFLite
    targets need a TensorFlow model. ``program`` is the ExportedProgram (None for
    TorchScript), ``module`` what is called for reference predictions.
    """

    def __init__(self, path: Path, kind: str, module: Any, program: Any, signature: Signature,
                 framework_version: str) -> None:
        self.module = module
        self.program = program
        super().__init__(path, kind, signature, framework_version)
        self.framework = "pytorch"

    def _predict_batch(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        torch = require("torch", "running a PyTorch source")
        # An ExportedProgram (and often a traced module) is specialised to the batch size it
        # was exported with: feed one sample at a time when that batch size is 1.
        fixed_one = all(t.shape and t.shape[0] == 1 for t in self.signature.inputs)
        rows = range(len(inputs[0])) if fixed_one else [slice(None)]
        chunks: list[list[np.ndarray]] = []
        with torch.no_grad():
            for row in rows:
                picked = [x[row : row + 1] if isinstance(row, int) else x for x in inputs]
                out = self.module(*[torch.from_numpy(np.ascontiguousarray(x)) for x in picked])
                outs = out if isinstance(out, (list, tuple)) else [out]
                chunks.append([o.detach().cpu().numpy() for o in outs])
        return [np.concatenate([c[i] for c in chunks]) for i in range(len(chunks[0]))]

    def export_batch1_saved_model(self, directory: Path) -> Path:
        raise SourceModelError(
            f"{self.path.name} is a PyTorch model; it converts to -t coreml only. The TFLite targets "
            "(tflite-int8, mcu) start from a .keras, .h5 or SavedModel model"
        )


def _load_torch(path: Path, kind: str) -> TorchSource:
    torch = require("torch", "loading a PyTorch model")
    version = f"torch {torch.__version__}"
    if kind == "torch-export":
        try:
            with warnings.catch_warnings():
                # torch's own pytree deprecation notices, raised while unpickling the program.
                warnings.simplefilter("ignore", FutureWarning)
                program = torch.export.load(str(path))
        except Exception as exc:  # torch raises many types for a bad archive
            raise SourceModelError(f"cannot load ExportedProgram {path}: {_first_line(exc)}") from exc
        signature = _exported_signature(program)
        return TorchSource(path, kind, program.module(), program, signature, version)
    if not zipfile.is_zipfile(path) or not _is_torchscript(path):
        raise SourceModelError(
            f"{path.name} is not a TorchScript archive (a state dict or a pickled module holds no graph to "
            "convert). Save the model with torch.export.save(torch.export.export(model, example), 'model.pt2') "
            "or torch.jit.trace(model, example).save('model.pt')"
        )
    try:
        module = torch.jit.load(str(path), map_location="cpu").eval()
    except Exception as exc:  # RuntimeError for most problems, others for damaged zips
        raise SourceModelError(f"cannot load TorchScript {path}: {_first_line(exc)}") from exc
    names = [a.name for a in module.forward.schema.arguments[1:]]
    recorded = _traced_input_specs(path)
    if recorded is None or len(recorded) != len(names):
        raise SourceModelError(
            f"{path.name} records no input shapes (it was scripted, or traced with _store_inputs=False), and "
            "Core ML needs fixed ones. Save it with torch.jit.trace(model, example_inputs).save(...) or as an "
            "ExportedProgram (.pt2)"
        )
    inputs = tuple(TensorInfo(_torch_name(n, f"input_{i}"), shape, dtype)
                   for i, (n, (shape, dtype)) in enumerate(zip(names, recorded)))
    with torch.no_grad():
        example = [torch.zeros(t.shape, dtype=getattr(torch, t.dtype)) for t in inputs]
        out = module(*example)
    outs = out if isinstance(out, (list, tuple)) else [out]
    outputs = tuple(TensorInfo(f"output_{i}", tuple(o.shape), str(o.dtype).replace("torch.", ""))
                    for i, o in enumerate(outs))
    return TorchSource(path, kind, module, None, Signature(inputs, outputs), version)


def _exported_signature(program: Any) -> Signature:
    nodes = {n.name: n for n in program.graph.nodes}

    def info(name: str, val: Any, fallback: str) -> TensorInfo:
        shape = tuple(int(d) if isinstance(d, int) else None for d in val.shape)
        return TensorInfo(_torch_name(name, fallback), shape, str(val.dtype).replace("torch.", ""))

    user_inputs = program.graph_signature.user_inputs
    inputs = tuple(info(n, nodes[n].meta["val"], f"input_{i}") for i, n in enumerate(user_inputs))
    output_node = next(n for n in program.graph.nodes if n.op == "output")
    results = output_node.args[0] if isinstance(output_node.args[0], (list, tuple)) else [output_node.args[0]]
    user_outputs = set(program.graph_signature.user_outputs)
    outputs = tuple(info(r.name, r.meta["val"], f"output_{i}")
                    for i, r in enumerate(x for x in results if getattr(x, "name", None) in user_outputs))
    return Signature(inputs, outputs)


def _is_torchscript(path: Path) -> bool:
    with zipfile.ZipFile(path) as archive:
        return any(n.endswith("/constants.pkl") or "/code/" in n for n in archive.namelist())


_STORAGE_DTYPES = {"FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16",
                   "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16",
                   "CharStorage": "int8", "ByteStorage": "uint8", "BoolStorage": "bool"}


class _TracedShapes(pickle.Unpickler):
    """Reads ``traced_inputs.pkl`` for the example inputs' shapes only: no tensor data, no code."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return lambda storage, offset, size, *rest: (tuple(int(d) for d in size), storage)
        if (module, name) == ("torch.jit._pickle", "restore_type_tag"):
            return lambda value, tag: value
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if module == "torch" and name in _STORAGE_DTYPES:
            return _STORAGE_DTYPES[name]
        raise pickle.UnpicklingError(f"unexpected {module}.{name} in traced_inputs.pkl")

    def persistent_load(self, pid: Any) -> Any:
        return pid[1]  # ("storage", dtype marker, key, location, numel)


def _traced_input_specs(path: Path) -> list[tuple[tuple[int, ...], str]] | None:
    """The (shape, dtype) of each example input ``torch.jit.trace`` stored, or None."""
    with zipfile.ZipFile(path) as archive:
        entry = next((n for n in archive.namelist() if n.endswith("/traced_inputs.pkl")), None)
        if entry is None:
            return None
        try:
            recorded = _TracedShapes(archive.open(entry)).load()
        except (pickle.UnpicklingError, EOFError, TypeError, ValueError, IndexError) as exc:
            log.debug("cannot read %s in %s: %s", entry, path, exc)
            return None
    inputs = recorded.get("forward") if isinstance(recorded, dict) else None
    if not inputs or not all(isinstance(t, tuple) and len(t) == 2 for t in inputs):
        return None
    return [(shape, dtype) for shape, dtype in inputs]


def _torch_name(name: str, fallback: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name) or fallback


def load_source(path: str | Path) -> SourceModel:
    """Load a .keras, Keras 2 .h5, SavedModel, PyTorch or .tflite source, or raise :class:`SourceModelError`."""
    path = Path(path)
    if not path.exists():
        raise SourceModelError(f"source model not found: {path}")
    kind = source_kind(path)
    if kind == "tflite":
        return TfliteSource(path)
    if kind in ("torch-export", "torchscript"):
        return _load_torch(path, kind)
    tf = require("tensorflow", "loading a TensorFlow/Keras model")
    if kind == "saved_model":
        try:
            loaded = tf.saved_model.load(str(path))
        except Exception as exc:  # TF raises many unrelated types for a bad directory
            raise SourceModelError(f"cannot load SavedModel {path}: {_first_line(exc)}") from exc
        signatures = dict(loaded.signatures)
        if not signatures:
            raise SourceModelError(f"SavedModel {path} has no signatures; export it with a serving signature")
        key = SERVING_KEY if SERVING_KEY in signatures else sorted(signatures)[0]
        return SavedModelSource(path, loaded, signatures[key], tf.__version__)

    keras = require("keras", "loading a Keras model")
    custom: dict[str, Any] = {}
    if kind == "keras-h5":
        from edgeserve.legacy_keras import legacy_custom_objects

        custom = legacy_custom_objects(keras)
    try:
        model = keras.models.load_model(str(path), compile=False, custom_objects=custom)
    except SourceModelError:
        raise
    except Exception as exc:  # Keras raises ValueError/TypeError/OSError/... for bad files
        raise SourceModelError(f"cannot load Keras model {path}: {_first_line(exc)}") from exc
    return KerasSource(path, kind, model, f"tensorflow {tf.__version__}, keras {keras.__version__}")


def _keras_tensor_info(tensor: Any, fallback: str) -> TensorInfo:
    name = getattr(tensor, "name", None) or fallback
    name = re.sub(r"[^A-Za-z0-9_]", "_", name.split(":")[0]) or fallback
    dtype = getattr(tensor, "dtype", "float32")
    return TensorInfo(name, tuple(tensor.shape), getattr(dtype, "name", str(dtype)))


def _batch1_spec(tf: Any, info: TensorInfo) -> Any:
    dims = info.shape[1:]
    if any(d is None for d in dims):
        raise SourceModelError(
            f"input {info.name} has dynamic dimensions {info.shape}; edge targets need a fixed "
            "shape. Re-export the model with a fixed input size"
        )
    return tf.TensorSpec([1, *dims], tf.as_dtype(info.dtype), name=info.name)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
