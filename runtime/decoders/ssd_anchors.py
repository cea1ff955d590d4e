"""SSD anchors the way MediaPipe's SsdAnchorsCalculator lays them out, for its detectors.

Layers that share a stride share a feature map; at each of its cells every such layer
adds one anchor per aspect ratio, plus one more when ``interpolated_scale_aspect_ratio``
is set, all centred on the cell ((x + offset) / width, (y + offset) / height). With
``fixed_anchor_size`` (MediaPipe's face detectors) every anchor is 1 x 1, so only centres
matter. Facts from mediapipe/calculators/tflite/ssd_anchors_calculator.cc and the face
detection graphs' options; this code is edgeserve's own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class AnchorOptions:
    input_size: tuple[int, int]  # (height, width)
    strides: tuple[int, ...]
    aspect_ratios: tuple[float, ...] = (1.0,)
    interpolated_scale_aspect_ratio: float = 1.0
    anchor_offset: tuple[float, float] = (0.5, 0.5)  # (x, y)
    fixed_anchor_size: bool = True

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> "AnchorOptions":
        """From a TOML table (``--decoder ssd-anchors`` with a file), MediaPipe's option names."""
        known = {"input_size_height", "input_size_width", "strides", "aspect_ratios",
                 "interpolated_scale_aspect_ratio", "anchor_offset_x", "anchor_offset_y", "fixed_anchor_size"}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown SSD anchor option(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}")
        if not data.get("fixed_anchor_size", True):
            raise ValueError("only fixed_anchor_size = true anchors are decoded (MediaPipe's face and palm models)")
        return cls((int(data["input_size_height"]), int(data["input_size_width"])),
                   tuple(int(s) for s in data["strides"]), tuple(float(a) for a in data.get("aspect_ratios", [1.0])),
                   float(data.get("interpolated_scale_aspect_ratio", 1.0)),
                   (float(data.get("anchor_offset_x", 0.5)), float(data.get("anchor_offset_y", 0.5))))


def generate_anchors(options: AnchorOptions) -> np.ndarray:
    """[N, 2] anchor centres (x, y), normalised to the input, in the model's output order."""
    centres: list[tuple[float, float]] = []
    strides: Sequence[int] = options.strides
    layer = 0
    while layer < len(strides):
        per_cell, last = 0, layer
        while last < len(strides) and strides[last] == strides[layer]:
            per_cell += len(options.aspect_ratios) + (1 if options.interpolated_scale_aspect_ratio > 0 else 0)
            last += 1
        height = int(np.ceil(options.input_size[0] / strides[layer]))
        width = int(np.ceil(options.input_size[1] / strides[layer]))
        for y in range(height):
            cy = (y + options.anchor_offset[1]) / height
            for x in range(width):
                centres.extend([((x + options.anchor_offset[0]) / width, cy)] * per_cell)
        layer = last
    return np.asarray(centres, np.float32)


# MediaPipe's face detectors (modules/face_detection/face_detection_short_range_common.pbtxt,
# face_detection_full_range_common.pbtxt): 896 and 2304 anchors.
FACE_SHORT = AnchorOptions((128, 128), (8, 16, 16, 16))
FACE_FULL = AnchorOptions((192, 192), (4,), interpolated_scale_aspect_ratio=0.0)
