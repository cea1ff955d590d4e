"""onnx and onnx-int8 targets: ONNX Runtime models from any source, checked in ONNX Runtime.

export     the float ONNX by the source's route (tf2onnx, torch.onnx.export, the ONNX file)
converter  the onnx target (float), registered as "onnx"
int8       the onnx-int8 target (static QDQ with the run's calibration), registered as "onnx-int8"
check      running and scoring an ONNX artifact in ONNX Runtime
"""

from edgeserve.converters.onnx.converter import OnnxConverter  # registers "onnx"
from edgeserve.converters.onnx.int8 import OnnxInt8Converter  # registers "onnx-int8"

__all__ = ["OnnxConverter", "OnnxInt8Converter"]
