"""Load a source model (Keras 3 .keras, Keras 2 .h5, TensorFlow SavedModel) behind one interface.

Converters need three things from a source: its signature (input/output names, shapes,
dtypes), float reference predictions to compare artifacts against, and a batch-1
SavedModel for the TFLite converter. TensorFlow is imported only when a source is loaded.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgeserve._deps import require
from edgeserve.atomic import sha256_file
from edgeserve.errors import SourceModelError

log = logging.getLogger(__name__)

SERVING_KEY = "serving_default"


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
    """"keras", "keras-h5" or "saved_model" for a path, or raise naming what is accepted."""
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
    raise SourceModelError(
        f"cannot tell the model format of {path.name}: expected a .keras file, a Keras 2 "
        ".h5 file, a SavedModel directory or (for targets that start from one) a .tflite file"
    )


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


def load_source(path: str | Path) -> SourceModel:
    """Load a .keras, Keras 2 .h5, SavedModel or .tflite source, or raise :class:`SourceModelError`."""
    path = Path(path)
    if not path.exists():
        raise SourceModelError(f"source model not found: {path}")
    kind = source_kind(path)
    if kind == "tflite":
        return TfliteSource(path)
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
