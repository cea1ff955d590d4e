"""The TensorFlow route: a batch-1 SavedModel of a Keras/TensorFlow source, TFLiteConverter.

The per-layer table comes from TensorFlow's QuantizationDebugger, and the "worst layers in
float" remedy from its selective quantization (``layer_errors``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from edgeserve._deps import require
from edgeserve.console import capture_native_stderr
from edgeserve.converters.tflite_int8.layer_errors import LayerError, float_layers_model, layer_errors

NAME = "tensorflow-converter"


class TensorFlowRoute:
    name = NAME
    io_types = ("int8", "uint8", "float")

    def __init__(self, saved_model: Path, calibration: Any, io: str, progress: Any, debug_samples: int) -> None:
        self.saved_model = saved_model
        self.calibration = calibration
        self.io = io
        self.progress = progress
        self.debug_samples = debug_samples

    def tools(self) -> dict[str, str | None]:
        tf = require("tensorflow", "TFLite conversion")
        return {"tensorflow": tf.__version__}

    def make_converter(self, scheme: str = "int8") -> Any:
        tf = require("tensorflow", "TFLite conversion")
        calibration, progress = self.calibration, self.progress

        def representative() -> Iterator[list[np.ndarray]]:
            yield from progress.track(calibration.batch1(), len(calibration), "calibrating")

        converter = tf.lite.TFLiteConverter.from_saved_model(str(self.saved_model))
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = representative
        if scheme == "int16x8":
            ops = tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8
            converter.target_spec.supported_ops = [ops]
            io = None if self.io == "float" else tf.int16  # 16x8 models take int16 or float
        else:
            converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
            io = {"int8": tf.int8, "uint8": tf.uint8, "float": None}[self.io]
        if io is not None:
            converter.inference_input_type = io
            converter.inference_output_type = io
        return converter

    def layer_errors(self, debug: Any) -> list[LayerError]:
        def debug_dataset() -> Iterator[list[np.ndarray]]:
            yield from debug.batch1()

        with capture_native_stderr():
            return layer_errors(self.make_converter, debug_dataset)

    def emit(self, remedy: Any) -> bytes:
        if remedy.name == "float-layers":
            debug = self.calibration.head(self.debug_samples)
            return float_layers_model(self.make_converter, lambda: debug.batch1(),
                                      [l.tensor for l in remedy.float_layers], integer_io=self.io != "float")
        return bytes(self.make_converter(remedy.name).convert())
