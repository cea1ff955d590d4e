"""tflite-int8 target: full-integer post-training quantization with a per-layer error report.

converter     the target itself (prepare → calibrate → emit → verify), registered as "tflite-int8"
layer_errors  per-layer quantization error from TensorFlow's QuantizationDebugger
"""

from edgeserve.converters.tflite_int8.converter import TfliteInt8Converter  # registers "tflite-int8"

__all__ = ["TfliteInt8Converter"]
