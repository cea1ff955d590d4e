"""Stand-ins for infinity saturated to ±65504 before Core ML converts a torch program.

Every Core ML precision edgeserve writes computes activations in fp16 (int8-weights and w8a8
too), and coremltools casts each constant to fp16 by rounding: a finite float32 beyond ±65504
becomes ±inf. Transformers exported to ONNX build their attention bias as (1 - mask) * -3.4e38
(float32's lowest, MiniLM in issue 48's trial); in fp16 that is 0 * -inf = NaN for every token
the mask keeps, and every output of the package was NaN. Saturated, the bias is 0 where the
mask keeps a token and -65504 where it does not, which the softmax after it turns into the same
zero weight as -3.4e38 did.

Only values of at least SENTINEL in magnitude are taken: numbers that large stand for infinity
(float32's lowest and highest, -1e30). A large value that is data stays as it is: PaddleOCR's
DBNet keeps batch-norm variances up to 1e8 as constants, which coremltools folds into the
convolutions in float32, and saturating them to 65504 made its Core ML package's output noise
(-0.5 dB, the corpus). Infinities and NaNs stay too; the package is judged against the source
like any other, so a constant whose size mattered shows up there.
"""

from __future__ import annotations

from typing import Any

FP16_MAX = 65504.0
SENTINEL = 1e30


def saturate_constants(program: Any) -> int:
    """Set, in place, the finite values of at least SENTINEL in magnitude in the floating-point
    constants, parameters and buffers of an ExportedProgram or nn.Module to ±FP16_MAX; how many
    tensors changed."""
    import torch

    tensors: list[Any] = []
    if hasattr(program, "constants"):  # torch.export.ExportedProgram: lifted constants, then its state
        tensors += [t for t in program.constants.values() if isinstance(t, torch.Tensor)]
        tensors += list(program.state_dict.values())
    else:
        tensors += list(program.state_dict(keep_vars=True).values())
    changed = 0
    with torch.no_grad():
        for tensor in tensors:
            if not tensor.is_floating_point():
                continue
            beyond = torch.isfinite(tensor) & (tensor.abs() >= SENTINEL)
            if bool(beyond.any()):
                tensor.data.copy_(torch.where(beyond, tensor.sign() * FP16_MAX, tensor))
                changed += 1
    return changed
