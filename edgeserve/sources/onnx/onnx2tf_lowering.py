"""onnx2tf's lowering of an ONNX graph to a float .tflite, in a child process.

onnx2tf (a maintained ONNX -> LiteRT converter; Ultralytics exports its TFLite models through
it) writes the .tflite directly from the ONNX graph (its ``flatbuffer_direct`` backend, no
TensorFlow graph in between) and moves the layout to NHWC inside. edgeserve keeps the source's
layout at the model's edges, so calibration data, the quality gate, the runtime's
preprocessing and the detector decoders see the tensors the ONNX model has:

* inputs: onnx2tf is asked to keep each input as the source lays it out (NCHW, NCW);
* outputs: onnx2tf may hand an output back transposed (a detector's [1, 7600, 10] head as
  [1, 10, 7600], measured with onnx2tf 2.6.9). Which output is which, and its axis order, is
  found by running both models on the same input (:func:`match_outputs`), and a TRANSPOSE is
  appended where the order differs (:func:`restore_outputs`).

Like litert-torch's lowering, it runs where a crash costs a child process (edgeserve.isolation).
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgeserve import _deps
from edgeserve._deps import package_version, require
from edgeserve.console import quiet_libraries
from edgeserve.errors import EdgeServeError, SourceModelError, first_line

TOOL = "onnx2tf"
# The float .tflite must equal ONNX Runtime to float rounding; anything less is a translation
# that changed the numbers, and the reader route is tried instead.
MIN_FLOAT_SQNR_DB = 60.0


def installed() -> bool:
    return _deps.installed("onnx2tf")


def version() -> str | None:
    return package_version("onnx2tf")


def lower_to_tflite(data: bytes, shapes: dict[str, tuple[int, ...]], workdir: Path) -> bytes:
    """The float .tflite onnx2tf makes of the ONNX model ``data`` with inputs of ``shapes``
    (source layout), as onnx2tf writes it; an EdgeServeError (a crash included) carries its line."""
    from edgeserve.isolation import run_isolated

    workdir.mkdir(parents=True, exist_ok=True)
    source = workdir / "for_onnx2tf.onnx"
    source.write_bytes(data)
    return run_isolated(f"{__name__}:lower_step", str(source), shapes, str(workdir / "onnx2tf"), tool=TOOL,
                        what="lowering the ONNX graph to a float .tflite")


def _static(onnx: Any, path: str, shapes: dict[str, tuple[int, ...]]) -> Any:
    """The model with every input's dimensions fixed and shapes inferred through the graph:
    onnx2tf's own shape override leaves named dynamic dimensions (``p2o.DynamicDimension.0``)
    at 1."""
    model = onnx.load(path)
    for value in model.graph.input:
        if value.name in shapes:
            dims = value.type.tensor_type.shape.dim
            for dim, size in zip(dims, shapes[value.name]):
                dim.Clear()
                dim.dim_value = int(size)
    del model.graph.value_info[:]  # the old shapes were inferred from the dynamic dimensions
    return onnx.shape_inference.infer_shapes(model)


def lower_step(path: str, shapes: dict[str, tuple[int, ...]], out: str) -> bytes:
    onnx = require("onnx", "lowering an ONNX model with onnx2tf")
    onnx2tf = require("onnx2tf", "lowering an ONNX model with onnx2tf")
    model = _static(onnx, path, shapes)
    folder = Path(out)
    try:
        with quiet_libraries(), tempfile.TemporaryDirectory() as scratch:
            onnx2tf.convert(onnx_graph=model, output_folder_path=str(folder), non_verbose=True,
                            verbosity="error", keep_ncw_or_nchw_or_ncdhw_input_names=list(shapes),
                            onnxruntime_output_memmap_dir=scratch)
    except EdgeServeError:
        raise
    except BaseException as exc:  # onnx2tf raises many types and calls sys.exit on some failures
        raise SourceModelError(first_line(exc) or type(exc).__name__) from exc
    made = sorted(folder.glob("*_float32.tflite"))
    if not made:
        raise SourceModelError(f"onnx2tf wrote no float32 .tflite (wrote: {', '.join(p.name for p in folder.iterdir())})")
    return made[0].read_bytes()


def match_outputs(reference: Sequence[np.ndarray], got: Sequence[np.ndarray]) -> list[tuple[int, tuple[int, ...]]]:
    """For each reference output, the index of the converted output and the axis order that
    gives it back (``got[i].transpose(perm)``), by the closest values among outputs whose
    shape can be permuted into the reference's; raises when an output has no counterpart."""
    found: list[tuple[int, tuple[int, ...]]] = []
    taken: set[int] = set()
    for k, ref in enumerate(reference):
        best: tuple[float, int, tuple[int, ...]] | None = None
        for i, out in enumerate(got):
            if i in taken or out.ndim != ref.ndim or sorted(out.shape) != sorted(ref.shape):
                continue
            for perm in itertools.permutations(range(out.ndim)):
                moved = out.transpose(perm)
                if moved.shape != ref.shape:
                    continue
                score = -float(np.mean(np.square(ref.astype(np.float64) - moved)))
                if best is None or score > best[0] or (score == best[0] and perm == tuple(range(out.ndim))):
                    best = (score, i, perm)
        if best is None:
            raise SourceModelError(f"onnx2tf's model has no output shaped like ONNX output {k} {list(ref.shape)}")
        taken.add(best[1])
        found.append((best[1], best[2]))
    return found


def restore_outputs(model_bytes: bytes, matches: Sequence[tuple[int, tuple[int, ...]]],
                    names: Sequence[str]) -> bytes:
    """The model with the ONNX model's outputs: in its order, each in its axis order (a
    TRANSPOSE appended where onnx2tf moved the axes) and named as ONNX names it."""
    from edgeserve.tflite.edit import add_tensor, new_operator
    from edgeserve.tflite.metadata import pack_model, schema_module, unpack_model

    schema = schema_module()
    model = unpack_model(model_bytes)
    graph = model.subgraphs[0]
    old = list(graph.outputs)
    new: list[int] = []
    for (index, perm), name in zip(matches, names):
        tensor = old[index]
        if perm == tuple(range(len(perm))):
            graph.tensors[tensor].name = name.encode()
            new.append(tensor)
            continue
        source = graph.tensors[tensor]
        source.name = f"{name}/onnx2tf_layout".encode()
        order = add_tensor(model, graph, f"{name}/perm", [len(perm)], schema.TensorType.INT32,
                           np.array(perm, np.int32))
        shape = [int(source.shape[p]) for p in perm]
        moved = add_tensor(model, graph, name, shape, source.type)
        graph.operators.append(new_operator(model, schema.BuiltinOperator.TRANSPOSE, 1, [tensor, order], [moved],
                                            "TransposeOptions"))
        new.append(moved)
    graph.outputs = new
    for signature in model.signatureDefs or []:  # keyed by the ONNX names, in the ONNX order
        if signature.subgraphIndex == 0:
            entries = []
            for name, tensor in zip(names, new):
                entry = schema.TensorMapT()
                entry.name, entry.tensorIndex = name.encode(), tensor
                entries.append(entry)
            signature.outputs = entries
    return pack_model(model, len(model_bytes))
