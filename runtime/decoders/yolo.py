"""YOLO-style detection heads, decoded into boxes in frame pixels.

Two layouts are common in exported models: ``[1, 4 + C, N]`` (YOLOv8 and later: centre x,
centre y, width, height, then C class scores, no objectness) and ``[1, N, 5 + C]`` (YOLOv5:
the four box values, an objectness score, then C class scores whose product with the
objectness is the score). The head is told apart by which axis is the small one. Box values
are in model-input pixels; a head that gives them normalised to [0, 1] (every coordinate at
most 1.5) is scaled by the input size first.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edgeserve.runtime.decoders.boxes import Detection, label_of, nms
from edgeserve.runtime.decoders.geometry import FrameGeometry

NORMALISED_LIMIT = 1.5


def decode_yolo(output: np.ndarray, input_size: tuple[int, int], geometry: FrameGeometry, *,
                score_threshold: float = 0.25, iou_threshold: float = 0.45, max_detections: int = 100,
                labels: Sequence[str] | None = None) -> list[Detection]:
    raw = np.asarray(output, np.float32)
    if raw.ndim != 3 or raw.shape[0] != 1:
        raise ValueError(f"a YOLO head is [1, 4+C, N] or [1, N, 5+C]; got {list(raw.shape)}")
    rows = raw[0].T if raw.shape[1] < raw.shape[2] else raw[0]  # [N, values]
    v8 = raw.shape[1] < raw.shape[2]
    boxes_cxcywh = rows[:, :4]
    if v8:
        class_scores = rows[:, 4:]
    else:
        class_scores = rows[:, 5:] * rows[:, 4:5]
    if class_scores.shape[1] == 0:
        raise ValueError("the head has no class scores")
    classes = class_scores.argmax(axis=1)
    scores = class_scores[np.arange(len(rows)), classes]
    keep = scores >= score_threshold
    boxes_cxcywh, scores, classes = boxes_cxcywh[keep], scores[keep], classes[keep]
    if boxes_cxcywh.size and float(np.abs(boxes_cxcywh).max()) <= NORMALISED_LIMIT:
        h, w = input_size
        boxes_cxcywh = boxes_cxcywh * np.array([w, h, w, h], np.float32)
    xyxy = np.concatenate([boxes_cxcywh[:, :2] - boxes_cxcywh[:, 2:] / 2,
                           boxes_cxcywh[:, :2] + boxes_cxcywh[:, 2:] / 2], axis=1)
    kept = nms(xyxy, scores, iou_threshold, max_detections, classes)
    frame_boxes = geometry.to_frame(xyxy[kept]) if kept else np.zeros((0, 4))
    return [Detection(tuple(float(v) for v in box), float(scores[i]), int(classes[i]),
                      label_of(int(classes[i]), labels)) for box, i in zip(frame_boxes, kept)]
