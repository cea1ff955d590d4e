"""The TensorFlow route: a batch-1 SavedModel of a Keras/TensorFlow source, TFLiteConverter.

The per-layer table comes from TensorFlow's QuantizationDebugger, and the "worst layers in
float" remedy from its selective quantization (``layer_errors``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from edgeserve._deps import require
from edgeserve.console import capture_native_stderr
from edgeserve.converters.tflite_int8.layer_errors import LayerError, float_layers_model, layer_errors
from edgeserve.isolation import run_isolated

NAME = "tensorflow-converter"


class TensorFlowRoute:
    name = NAME
    io_types = ("int8", "uint8", "float")

    def __init__(self, saved_model: Path, calibration: Any, io: str, debug_samples: int) -> None:
        self.saved_model = saved_model
        self.calibration = calibration
        self.io = io
        self.debug_samples = debug_samples

    def tools(self) -> dict[str, str | None]:
        tf = require("tensorflow", "TFLite conversion")
        return {"tensorflow": tf.__version__}

    # TensorFlow's converter and its calibrator can crash on a model they accept (a Keras
    # LSTM: SIGSEGV in the calibrator's _feed_tensors), so every step below runs in a child
    # process (edgeserve.isolation): the arguments are plain arrays and a path.
    def layer_errors(self, debug: Any, keep_float: list[str] | None = None) -> list[LayerError]:
        # keep_float: tflite-int8 asks it only of the quantizer route (float-refused is skipped here)
        return run_isolated(f"{__name__}:layer_errors_step", str(self.saved_model), self.calibration.inputs, self.io,
                            debug.inputs, tool="TensorFlow's quantization debugger",
                            what="measuring the per-layer int8 error")

    def emit(self, remedy: Any) -> bytes:
        if remedy.name == "float-layers":
            debug = self.calibration.head(self.debug_samples)
            return run_isolated(f"{__name__}:float_layers_step", str(self.saved_model), self.calibration.inputs,
                                self.io, debug.inputs, [l.tensor for l in remedy.float_layers],
                                tool="TensorFlow's quantization debugger", what="keeping the worst layers in float")
        return run_isolated(f"{__name__}:quantize_step", str(self.saved_model), self.calibration.inputs, self.io,
                            remedy.name, tool="TensorFlow's converter", what=f"quantizing ({remedy.name})")


def _batch1(inputs: tuple[np.ndarray, ...]) -> Iterator[list[np.ndarray]]:
    """Each sample as a list of batch-1 arrays (the representative dataset's form)."""
    for i in range(len(inputs[0]) if inputs else 0):
        yield [x[i: i + 1] for x in inputs]


def _converter_factory(saved_model: str, calibration: tuple[np.ndarray, ...], io: str) -> Callable[..., Any]:
    def make_converter(scheme: str = "int8") -> Any:
        tf = require("tensorflow", "TFLite conversion")
        converter = tf.lite.TFLiteConverter.from_saved_model(saved_model)
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = lambda: _batch1(calibration)
        if scheme == "int16x8":
            ops = tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8
            converter.target_spec.supported_ops = [ops]
            types = None if io == "float" else tf.int16  # 16x8 models take int16 or float
        else:
            converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
            types = {"int8": tf.int8, "uint8": tf.uint8, "float": None}[io]
        if types is not None:
            converter.inference_input_type = types
            converter.inference_output_type = types
        return converter

    return make_converter


# The isolated steps (run in the child; module-level so the child finds them by name).
def quantize_step(saved_model: str, calibration: tuple[np.ndarray, ...], io: str, scheme: str) -> bytes:
    with capture_native_stderr():
        return bytes(_converter_factory(saved_model, calibration, io)(scheme).convert())


def layer_errors_step(saved_model: str, calibration: tuple[np.ndarray, ...], io: str,
                      debug: tuple[np.ndarray, ...]) -> list[LayerError]:
    with capture_native_stderr():
        return layer_errors(_converter_factory(saved_model, calibration, io), lambda: _batch1(debug))


def float_layers_step(saved_model: str, calibration: tuple[np.ndarray, ...], io: str, debug: tuple[np.ndarray, ...],
                      denylisted: list[str]) -> bytes:
    with capture_native_stderr():
        return float_layers_model(_converter_factory(saved_model, calibration, io), lambda: _batch1(debug),
                                  denylisted, integer_io=io != "float")
