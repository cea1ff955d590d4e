"""Keras sources: a Keras 3 ``.keras`` file, a Keras 2 ``.h5`` file, or a SavedModel directory.

TensorFlow and Keras are imported when a model is loaded. Every TFLite route starts from
the batch-1 SavedModel these sources export.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from edgeserve._deps import require
from edgeserve.console import quiet_warnings
from edgeserve.errors import SourceModelError, first_line
from edgeserve.sources.base import SERVING_KEY, Signature, SourceKind, SourceModel, TensorInfo, with_input_shapes


class KerasSource(SourceModel):
    def __init__(self, path: Path, kind: str, model: Any, framework_version: str,
                 input_shapes: dict[str, tuple[int, ...]] | None = None) -> None:
        self.model = model
        inputs = tuple(_keras_tensor_info(t, f"input_{i}") for i, t in enumerate(model.inputs))
        # A free dimension (a sequence length the model takes any of) is fixed by --input-shape:
        # the batch-1 SavedModel every target starts from is exported at that shape.
        sig = Signature(
            inputs=with_input_shapes(inputs, input_shapes, path.name) if input_shapes else inputs,
            outputs=tuple(_keras_tensor_info(t, f"output_{i}") for i, t in enumerate(model.outputs)),
        )
        super().__init__(path, kind, sig, framework_version)

    def _predict_batch(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        with quiet_warnings() as caught:
            out = self.model(inputs if len(inputs) > 1 else inputs[0], training=False)
        for w in caught:
            # Functional models loaded from Keras 2 files declare their single input as a list
            # and warn when given a bare tensor; the call is still correct. Others are shown.
            if not (issubclass(w.category, UserWarning) and "The structure of `inputs`" in str(w.message)):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        outs = out if isinstance(out, (list, tuple)) else [out]
        return [np.asarray(o) for o in outs]

    def operator_counts(self) -> dict[str, int]:
        import collections

        return dict(collections.Counter(type(layer).__name__ for layer in self.model.layers))

    def export_batch1_saved_model(self, directory: Path, batch: int | None = 1) -> Path:
        tf = require("tensorflow", "TFLite conversion")
        keras = require("keras", "TFLite conversion")
        specs = [_batch1_spec(tf, t, batch) for t in self.signature.inputs]
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

    def operator_counts(self) -> dict[str, int]:
        import collections

        return dict(collections.Counter(op.type for op in self._fn.graph.get_operations()
                                        if op.type not in ("Placeholder", "Const", "Identity", "NoOp")))

    def _predict_batch(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        tf = require("tensorflow")
        out = self._fn(**{n: tf.constant(x) for n, x in zip(self._input_names, inputs)})
        return [np.asarray(out[n]) for n in self._output_names]

    def export_batch1_saved_model(self, directory: Path, batch: int | None = 1) -> Path:
        tf = require("tensorflow", "TFLite conversion")
        specs = [_batch1_spec(tf, t, batch) for t in self.signature.inputs]
        names, fn = self._input_names, self._fn

        module = tf.Module()
        module.source = self._loaded
        module.serve = tf.function(lambda *xs: fn(**dict(zip(names, xs))), input_signature=specs)
        tf.saved_model.save(module, str(directory), signatures={SERVING_KEY: module.serve.get_concrete_function()})
        return directory


def _check_container(path: Path) -> None:
    """A .keras file is a ZIP archive and an .h5 file HDF5: a truncated or mistaken file is
    said to be one before TensorFlow loads (Keras reports a damaged .keras as "File not
    found"), and in a fraction of a second."""
    import zipfile

    from edgeserve.file_kinds import describe

    with open(path, "rb") as handle:
        head = handle.read(16)
    if path.suffix.lower() == ".keras":
        if not zipfile.is_zipfile(path):
            kind = describe(head)
            raise SourceModelError(f"{path} is not a .keras model: " + (
                f"the file is {kind}" if kind and "ZIP" not in kind else
                "a .keras file is a ZIP archive and this one cannot be read as one (truncated or damaged?)"))
        try:
            with zipfile.ZipFile(path) as archive:
                damaged = archive.testzip()
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise SourceModelError(f"{path} is a damaged .keras archive: {exc}") from exc
        if damaged is not None:
            raise SourceModelError(f"{path} is a damaged .keras archive: {damaged} fails its CRC check")
    elif head[:8] != b"\x89HDF\r\n\x1a\n":
        kind = describe(head)
        raise SourceModelError(f"{path} is not a Keras .h5 model: " + (
            f"the file is {kind}" if kind else "it does not start with the HDF5 signature"))


def load_keras(path: Path, input_shapes: dict[str, tuple[int, ...]] | None = None) -> KerasSource:
    """A ``.keras`` or Keras 2 ``.h5`` file; ``input_shapes`` fixes free input dimensions by name."""
    _check_container(path)
    tf = require("tensorflow", "loading a TensorFlow/Keras model")
    keras = require("keras", "loading a Keras model")
    kind = "keras" if path.suffix.lower() == ".keras" else "keras-h5"
    custom: dict[str, Any] = {}
    if kind == "keras-h5":
        from edgeserve.sources.keras_legacy import legacy_custom_objects

        custom = legacy_custom_objects(keras)
    try:
        model = keras.models.load_model(str(path), compile=False, custom_objects=custom)
    except SourceModelError:
        raise
    except Exception as exc:  # Keras raises ValueError/TypeError/OSError/... for bad files
        raise SourceModelError(f"cannot load Keras model {path}: {first_line(exc)}") from exc
    return KerasSource(path, kind, model, f"tensorflow {tf.__version__}, keras {keras.__version__}", input_shapes)


def load_saved_model(path: Path) -> SavedModelSource:
    tf = require("tensorflow", "loading a TensorFlow/Keras model")
    try:
        loaded = tf.saved_model.load(str(path))
    except Exception as exc:  # TF raises many unrelated types for a bad directory
        raise SourceModelError(f"cannot load SavedModel {path}: {first_line(exc)}") from exc
    signatures = dict(loaded.signatures)
    if not signatures:
        raise SourceModelError(f"SavedModel {path} has no signatures; export it with a serving signature")
    key = SERVING_KEY if SERVING_KEY in signatures else sorted(signatures)[0]
    return SavedModelSource(path, loaded, signatures[key], tf.__version__)


def _keras_tensor_info(tensor: Any, fallback: str) -> TensorInfo:
    name = getattr(tensor, "name", None) or fallback
    name = re.sub(r"[^A-Za-z0-9_]", "_", name.split(":")[0]) or fallback
    dtype = getattr(tensor, "dtype", "float32")
    return TensorInfo(name, tuple(tensor.shape), getattr(dtype, "name", str(dtype)))


def _batch1_spec(tf: Any, info: TensorInfo, batch: int | None = 1) -> Any:
    dims = info.shape[1:]
    if any(d is None for d in dims):
        raise SourceModelError(
            f"input {info.name} has dynamic dimensions {info.shape}; edge targets need a fixed "
            "shape. Re-export the model with a fixed input size"
        )
    return tf.TensorSpec([batch, *dims], tf.as_dtype(info.dtype), name=info.name)


KINDS = (
    SourceKind("keras", "a .keras file", lambda p: not p.is_dir() and p.suffix.lower() == ".keras", load_keras),
    SourceKind("keras-h5", "a Keras 2 .h5 file",
               lambda p: not p.is_dir() and p.suffix.lower() in (".h5", ".hdf5"), load_keras),
    SourceKind("saved_model", "a SavedModel directory",
               lambda p: p.is_dir() and (p / "saved_model.pb").exists(), load_saved_model),
)
