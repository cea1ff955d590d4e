"""ExecuTorch backend: a .pte (made by -t executorch / executorch-int8) in executorch.runtime.

The XNNPACK delegate is chosen when the .pte is made (the manifest's ``delegation`` says how
much of the graph it took), so there is one backend here, on the CPU. Inputs are torch
tensors that share memory with numpy buffers the Session writes frames into, so a frame is
not copied on its way in; the outputs ExecuTorch returns are read in place.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgeserve.runtime.backends.base import Backend, BackendOptions, BackendUnavailable, Placement
from edgeserve.runtime.backends.litert_run import TensorDetail

ENGINE = "executorch"

# c10::ScalarType codes MethodMeta reports.
_DTYPES = {0: np.uint8, 1: np.int8, 3: np.int32, 4: np.int64, 5: np.float16, 6: np.float32}


class ExecutorchBackend(Backend):
    def __init__(self, name: str, path: str) -> None:
        import logging

        # torchao, which ExecuTorch imports, logs at import time that its CUDA kernels do not
        # load (a CPU build) and a deprecation of torch's own: neither concerns a .pte on the CPU.
        for logger in ("torchao", "torch.utils._pytree"):
            logging.getLogger(logger).setLevel(logging.ERROR)
        try:
            import torch
            from executorch.runtime import Runtime
        except ImportError as exc:
            raise BackendUnavailable("executorch is not installed (pip install 'edgeserve[executorch]')") from exc
        self.name, self.kind = name, "cpu"
        from edgeserve.console import capture_native_stderr

        try:
            import executorch.kernels.quantized  # noqa: F401  (q/dq kernels an INT8 .pte may use)

            # ExecuTorch's cpuinfo prints what it could not read of the CPU (an x86 host has no
            # Arm MIDR file) on the process's stderr: kept out of the user's terminal.
            with capture_native_stderr():
                self._method = Runtime.get().load_program(path).load_method("forward")
        except Exception as exc:  # the pybindings raise RuntimeError/ValueError on a bad program
            raise BackendUnavailable(f"ExecuTorch could not load {path}: {str(exc).splitlines()[0][:300]}") from exc
        self._path = path
        meta = self._method.metadata
        self.inputs = tuple(_detail(f"input_{i}", meta.input_tensor_meta(i)) for i in range(meta.num_inputs()))
        self.outputs = tuple(_detail(f"output_{i}", meta.output_tensor_meta(i)) for i in range(meta.num_outputs()))
        self._in = [np.zeros(d.shape, d.dtype) for d in self.inputs]
        self._in_tensors = [torch.from_numpy(a) for a in self._in]  # the same memory
        self._out: list[np.ndarray] = [np.zeros(d.shape, d.dtype) for d in self.outputs]
        self.placement = Placement(None, None, note="XNNPACK delegation fixed in the .pte at conversion "
                                                    "(the manifest's delegation records it)", taken_by="XNNPACK")

    def input_buffer(self, i: int) -> np.ndarray:
        return self._in[i]

    def invoke(self) -> None:
        results = self._method.execute(self._in_tensors)
        self._out = [r.detach().numpy() for r in results]

    def output_buffer(self, i: int) -> np.ndarray:
        return self._out[i]

    def operator_times(self, runs: int) -> list[dict[str, Any]]:
        """ExecuTorch's own event tracer (ETDump), in a second program of the same .pte loaded with
        tracing on (tracing adds to each operator's time, so the timed method stays as it is):
        each operator XNNPACK runs and each kernel call outside the delegate, averaged over ``runs``."""
        import tempfile
        from pathlib import Path

        from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc
        from executorch.runtime import Runtime

        from edgeserve.console import capture_native_stderr
        from edgeserve.runtime.backends.executorch_profile import operator_times

        with capture_native_stderr():
            program = Runtime.get().load_program(self._path, enable_etdump=True)
            method = program.load_method("forward")
            for _ in range(runs):
                method.execute(self._in_tensors)
        with tempfile.TemporaryDirectory(prefix="edgeserve-etdump-") as folder:
            dump = Path(folder) / "run.etdp"
            program.write_etdump_result_to_file(str(dump), str(Path(folder) / "debug.bin"))
            return operator_times(deserialize_from_etdump_flatcc(dump.read_bytes()))


def _detail(name: str, meta: Any) -> TensorDetail:
    code = int(meta.dtype())
    if code not in _DTYPES:
        raise BackendUnavailable(f"{name} has ExecuTorch scalar type {code}; the runtime feeds numeric tensors only")
    return TensorDetail(name=name, index=-1, shape=tuple(int(s) for s in meta.sizes()), dtype=np.dtype(_DTYPES[code]),
                        scale=0.0, zero_point=0)


def _open(path: str, data: bytes, options: BackendOptions) -> Backend:
    return ExecutorchBackend("executorch:xnnpack", path)


BACKENDS = (("executorch:xnnpack", "cpu", _open),)
