"""The joins that make an output hold ranges one int8 scale cannot: found the same way in every IR.

A detector's head joins its parts along the channel axis (boxes in pixels, scores under 1), and
the part of the graph between those joins and the output is kept float by the INT8 targets'
float-tail remedy (tflite-int8, onnx-int8, executorch-int8). Two forms are common:

- YOLOv8: one concatenation along the channels makes the output (behind transposes).
- YOLOv5, YOLOv7, YOLOX: each feature level joins its channels first, the levels are then
  reshaped and joined along the anchors, and the result transposed (ddddocr's YOLOX detector:
  three [1, 6, H, W] channel joins, three reshapes to [1, 6, H*W], one anchor join, a transpose).

Walking back from the output, a concatenation along the mixed channel axis ends a branch; one
along another axis (the anchors) is followed into each of its inputs, since each input holds
every range; transposes and reshapes map the channel axis to the axis holding the same channels
before them. Anything else on the way means the output is not such a join, and the remedy does
not apply. Each IR (TFLite, ONNX, torch.fx) only says what one producer is (:class:`Step`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class Step:
    """What made one value: a concatenation along ``axis`` of ``inputs``, or a layout move of
    ``inputs[0]`` whose channel axis maps back through ``before`` (output axis -> input axis;
    None when it cannot be followed)."""

    name: Hashable  # what the IR calls the operator (a node name; (operator, tensor) in TFLite)
    inputs: tuple[Hashable, ...]
    axis: int | None = None
    before: Callable[[int], int | None] | None = None

    @property
    def is_join(self) -> bool:
        return self.before is None


def join_tail(output: Hashable, axis: int | None,
              describe: Callable[[Hashable], Step | None]) -> list[Hashable] | None:
    """Names of the operators from the channel joins of ``output`` to ``output`` (joins first,
    as met), or None when a branch reaches anything but joins and layout moves. ``axis`` is the
    output's mixed channel axis; None (an axis no longer followed) takes the first join as it is.
    ``describe`` gives the :class:`Step` that makes a value, None for anything else."""
    names: list[Hashable] = []

    def walk(value: Hashable, axis: int | None) -> bool:
        step = describe(value)
        if step is None:
            return False
        if step.name not in names:
            names.append(step.name)
        if step.is_join:
            if axis is None or step.axis == axis:
                return True
            return all(walk(part, axis) for part in step.inputs)  # joined along the anchors
        assert step.before is not None
        return walk(step.inputs[0], step.before(axis) if axis is not None else None)

    return names if walk(output, axis) else None


def transposed_axis(perm: Sequence[int] | None) -> Callable[[int], int | None]:
    """Output axis k of a transpose by ``perm`` is input axis perm[k]; None for a permutation
    known only at run time."""
    return lambda axis: int(perm[axis]) if perm is not None and 0 <= axis < len(perm) else None


def reshaped_axis(before: Sequence[int] | None, after: Sequence[int] | None) -> Callable[[int], int | None]:
    """The input axis holding the same channels as output ``axis`` of a reshape from ``before``
    to ``after`` (row-major): the one of the same size with as many elements before it; None
    when the reshape splits or merges that axis, or a shape is not known."""

    def axis_before(axis: int) -> int | None:
        if before is None or after is None or not 0 <= axis < len(after):
            return None
        lead = int(np.prod(after[:axis], dtype=np.int64))
        for j, size in enumerate(before):
            if size == after[axis] and int(np.prod(before[:j], dtype=np.int64)) == lead:
                return j
        return None

    return axis_before
