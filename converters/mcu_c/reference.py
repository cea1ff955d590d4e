"""What the generated C must reproduce: TFLM's reference kernels (the tflite-micro Python
interpreter), which is what a user would otherwise flash, and what CMSIS-NN is bit-exact
with by design. LiteRT's reference kernels stand in only where TFLM cannot run the model.

LiteRT's desktop kernels are run beside TFLM for the report: they requantize
FULLY_CONNECTED in double precision, and on some models (hello_world, ad01, one stride of
hey_jarvis) that differs from TFLM's fixed-point multiplier by a step or two.

Called in a child process (:func:`edgeserve.converters.microcontroller.child.call_in_child`): both
interpreters are native code that can abort on a model static checks let through.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

# TFLM needs an arena size; the reference run is on the host, so room is not a concern: 16 MiB,
# doubled while TFLM asks for more (the layout detector's int16 model needs 23 MB).
TFLM_REFERENCE_ARENA = 16 * 1024 * 1024
TFLM_LARGEST_ARENA = 1 << 30


def input_splitter(model_bytes: bytes) -> Callable[[np.ndarray], list[np.ndarray]]:
    """Turns one sample of the generated C's input buffer into the model's inputs: several
    inputs lie back to back in it (generate.py), one is the sample as it is."""
    from edgeserve.tflite.model import TfliteModel

    graph = TfliteModel.from_bytes(model_bytes).subgraphs[0]
    shapes = [tuple(graph.tensors[index].shape) for index in graph.inputs]
    if len(shapes) == 1:
        return lambda row: [row]
    ends = np.cumsum([int(np.prod(shape)) for shape in shapes]).tolist()

    def split(row: np.ndarray) -> list[np.ndarray]:
        flat = np.asarray(row).reshape(-1)
        return [flat[end - int(np.prod(shape)):end].reshape(shape) for shape, end in zip(shapes, ends)]
    return split


def split_inputs(model_bytes: bytes, rows: np.ndarray) -> list[list[np.ndarray]]:
    """Each sample of ``rows`` as the model's inputs (input_splitter)."""
    split = input_splitter(model_bytes)
    return [split(row) for row in rows]


def _tflm_run(model_bytes: bytes, inputs: np.ndarray) -> list[list[np.ndarray]]:
    """TFLM's outputs, the arena doubled each time TFLM says it is too small (no trial
    allocation first: most models fit the first one)."""
    from edgeserve.converters.microcontroller import tflm
    from edgeserve.converters.microcontroller.select_v2 import select_as_v2

    # TFLM has SELECT_V2 only; the -t mcu build makes the same exact rewrite.
    model_bytes, _ = select_as_v2(model_bytes)
    arena = TFLM_REFERENCE_ARENA
    while True:
        try:
            return tflm.run(model_bytes, arena, split_inputs(model_bytes, inputs))
        except tflm.ArenaTooSmallError:
            if arena >= TFLM_LARGEST_ARENA:
                raise
            arena *= 2


def reference_outputs(model_bytes: bytes, inputs: np.ndarray) -> tuple[str, np.ndarray]:
    """(which reference, raw outputs [N, ...]) for int8 ``inputs`` [N, ...] (several inputs: each
    flattened, back to back in the model's order, as are several outputs)."""
    try:
        outputs = _tflm_run(model_bytes, inputs)
        return "tflm-reference", np.stack([_flat(o) for o in outputs])
    except Exception as exc:  # noqa: BLE001 - any refusal means: ask LiteRT instead
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    from edgeserve.console import capture_native_stderr
    from edgeserve.runtime.backends.litert_run import TfliteRunner

    with capture_native_stderr():
        runner = TfliteRunner(model_bytes, reference_kernels=True)
    return (f"litert-reference (TFLM refused the model: {reason[:160]})",
            np.stack([_flat(runner.run_raw(x)) for x in split_inputs(model_bytes, inputs)]))


def _flat(outputs: list[np.ndarray]) -> np.ndarray:
    """One output as it is; several back to back, as the generated C writes them."""
    if len(outputs) == 1:
        return np.asarray(outputs[0])
    return np.concatenate([np.asarray(o).reshape(-1) for o in outputs])


def litert_outputs(model_bytes: bytes, inputs: np.ndarray) -> np.ndarray | None:
    """LiteRT's reference kernels' raw outputs on the same inputs, one stream; None when
    LiteRT refuses the model (it rejects person_detect's quantized_dimension 3)."""
    from edgeserve.console import capture_native_stderr
    from edgeserve.runtime.backends.litert_run import TfliteRunner

    try:
        with capture_native_stderr():
            runner = TfliteRunner(model_bytes, reference_kernels=True)
    except Exception:  # noqa: BLE001 - a refusal is an answer here
        return None
    return np.stack([_flat(runner.run_raw(x)) for x in split_inputs(model_bytes, inputs)])


def reference_tensor(model_bytes: bytes, inputs: np.ndarray, tensor: int) -> np.ndarray:
    """One intermediate tensor's raw values [N, ...] after each input, run as one stream
    (TFLM's reference kernels with every tensor preserved)."""
    from tflite_micro.python.tflite_micro import runtime

    from edgeserve.console import capture_native_stderr

    arena = TFLM_REFERENCE_ARENA
    while True:  # every tensor kept alive needs more than the planned arena: doubled until it fits
        try:
            with capture_native_stderr():
                interpreter = runtime.Interpreter.from_bytes(
                    model_bytes, arena_size=arena, intrepreter_config=runtime.InterpreterConfig.kPreserveAllTensors)
            break
        except RuntimeError:
            if arena >= TFLM_LARGEST_ARENA:
                raise
            arena *= 2
    values = []
    for x in split_inputs(model_bytes, inputs):
        for position, value in enumerate(x):
            interpreter.set_input(np.ascontiguousarray(value), position)
        interpreter.invoke()
        found = interpreter.GetTensor(tensor, 0)  # {"dtype", "shape", "tensor_data"}
        values.append(np.array(found["tensor_data"]).reshape(tuple(int(d) for d in found["shape"])))
    return np.stack(values)
