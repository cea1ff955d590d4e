"""What the generated C must reproduce: LiteRT's reference kernels, or TFLM where LiteRT
refuses the model (it rejects person_detect's quantized_dimension 3, which TFLM runs).

Called in a child process (:func:`edgeserve.converters.mcu.child.call_in_child`): both
interpreters are native code that can abort on a model static checks let through.
"""

from __future__ import annotations

import numpy as np

# TFLM needs an arena size; the reference run is on the host, so room is not a concern.
TFLM_REFERENCE_ARENA = 16 * 1024 * 1024


def reference_outputs(model_bytes: bytes, inputs: np.ndarray) -> tuple[str, np.ndarray]:
    """(which reference, raw outputs [N, ...]) for int8 ``inputs`` [N, ...] of a one-input model."""
    try:
        from edgeserve.console import capture_native_stderr
        from edgeserve.runtime.litert import TfliteRunner

        with capture_native_stderr():
            runner = TfliteRunner(model_bytes, reference_kernels=True)
    except Exception as exc:  # noqa: BLE001 - any refusal means: ask TFLM instead
        from edgeserve.converters.mcu import tflm

        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        outputs = tflm.run(model_bytes, TFLM_REFERENCE_ARENA, [[x] for x in inputs])
        return (f"tflm-reference (LiteRT refused the model: {reason[:160]})",
                np.stack([np.asarray(o[0]) for o in outputs]))
    return "litert-reference", np.stack([runner.run_raw([x])[0] for x in inputs])


def reference_tensor(model_bytes: bytes, inputs: np.ndarray, tensor: int) -> np.ndarray:
    """One intermediate tensor's raw values [N, ...] after each input, run as one stream
    (LiteRT's reference kernels, every tensor preserved)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from edgeserve.console import capture_native_stderr

    with capture_native_stderr():
        interpreter = Interpreter(model_content=model_bytes, experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
                                  experimental_preserve_all_tensors=True)
        interpreter.allocate_tensors()
    index = interpreter.get_input_details()[0]["index"]
    values = []
    for x in inputs:
        interpreter.set_tensor(index, x)
        interpreter.invoke()
        values.append(interpreter.get_tensor(tensor).copy())
    return np.stack(values)
