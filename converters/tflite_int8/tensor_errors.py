"""Per-layer quantization error without TensorFlow: the float and the INT8 .tflite side by side.

For a model quantized outside TensorFlow's converter (the float-.tflite route) there is no
QuantizationDebugger. Both models run in LiteRT with every intermediate tensor kept; each
quantized activation is compared with the float tensor of the same name (the quantizer
keeps names), sample by sample. The figures are those of ``layer_errors``: RMS error in
quantization steps (1/sqrt(12) ≈ 0.29 is pure rounding) and SQNR in dB.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from edgeserve.converters.tflite_int8.layer_errors import LayerError
from edgeserve.tflite.model import TfliteModel


def _interpreter(model: bytes):  # noqa: ANN202 - LiteRT's Interpreter
    from edgeserve.console import capture_native_stderr, quiet_warnings
    from edgeserve.runtime.backends.litert_run import interpreter_module

    # LiteRT warns that keeping every tensor is for debugging: here it is exactly that.
    with capture_native_stderr(), quiet_warnings():
        interpreter = interpreter_module().Interpreter(model_content=model, experimental_preserve_all_tensors=True)
        interpreter.allocate_tensors()
    return interpreter


def tensor_errors(float_model: bytes, quant_model: bytes, samples: Iterable[Sequence[np.ndarray]]) -> list[LayerError]:
    """Layers sorted worst first (by RMSE per quantization step).

    ``samples`` yields batch-1 float inputs in the models' input order; the quantized
    model's integer inputs are quantized here as the runtime does.
    """
    parsed = TfliteModel.from_bytes(quant_model)
    graph = parsed.subgraphs[0]
    produced = {out: op.op_name for op in graph.operators for out in op.outputs}
    f_run, q_run = _interpreter(float_model), _interpreter(quant_model)
    float_by_name = {d["name"]: d for d in f_run.get_tensor_details()}
    pairs = []
    for detail in q_run.get_tensor_details():
        scale, zero = detail["quantization"]
        twin = float_by_name.get(detail["name"])
        if (detail["index"] in produced and scale > 0 and twin is not None and twin["dtype"] == np.float32
                and tuple(twin["shape"]) == tuple(detail["shape"])):
            pairs.append((detail, twin, float(scale), int(zero)))
    if not pairs:
        return []
    stats = {d["index"]: {"sq_err": [], "sqnr": [], "max": 0.0} for d, *_ in pairs}
    from edgeserve.runtime.backends.litert_run import _detail

    # The quantized model's inputs are quantized as the runtime does it (round half away from zero).
    q_inputs = [_detail(d) for d in q_run.get_input_details()]
    f_inputs = f_run.get_input_details()
    for sample in samples:
        for detail, x in zip(f_inputs, sample):  # an integer input (token ids) is fed in its own type
            f_run.set_tensor(detail["index"], np.asarray(x, detail["dtype"]))
        for detail, x in zip(q_inputs, sample):
            typed = np.asarray(x, np.float32 if detail.quantized else detail.dtype)
            q_run.set_tensor(detail.index, detail.quantize(typed))
        f_run.invoke()
        q_run.invoke()
        for detail, twin, scale, zero in pairs:
            ref = f_run.get_tensor(twin["index"]).astype(np.float64).ravel()
            err = ref - (q_run.get_tensor(detail["index"]).astype(np.float64).ravel() - zero) * scale
            if not err.size:
                continue
            # Each sum once, as dot products (what sqnr_db computes, at a fifth of the time: the
            # per-layer table of a 320x320 detector spent 9 of its 11 s here, not in LiteRT).
            noise, signal = float(err @ err), float(ref @ ref)
            s = stats[detail["index"]]
            s["sq_err"].append(noise / err.size)
            s["max"] = max(s["max"], float(np.max(np.abs(err))))
            if noise > 0.0 and signal > 0.0:
                s["sqnr"].append(round(10.0 * math.log10(signal / noise), 2))
    layers = []
    for detail, _, scale, _ in pairs:
        s = stats[detail["index"]]
        if not s["sq_err"]:
            continue
        rmse = math.sqrt(float(np.mean(s["sq_err"])))
        layers.append(LayerError(
            tensor=detail["name"], op=produced[detail["index"]], elements=int(np.prod(detail["shape"])),
            rmse_per_scale=round(rmse / scale, 4), sqnr_db=round(float(np.mean(s["sqnr"])), 2) if s["sqnr"] else None,
            max_abs_error=s["max"], scale=scale,
        ))
    return sorted(layers, key=lambda l: l.rmse_per_scale, reverse=True)
