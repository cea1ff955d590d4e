"""executorch and executorch-int8 targets: a .pte for ExecuTorch, PyTorch's own on-device runtime.

converter  the two targets: float (XNNPACK fp32) and INT8 (PT2E with XNNPACKQuantizer, per-channel
           weights, calibrated on the run's --calib data), both lowered to the XNNPACK delegate
lower      what runs in a child process: quantize, lower, write the .pte, run it with
           executorch.runtime on the check inputs (ExecuTorch's runtime is native code)
"""

from edgeserve.converters.executorch.converter import ExecutorchConverter, ExecutorchInt8Converter

__all__ = ["ExecutorchConverter", "ExecutorchInt8Converter"]
