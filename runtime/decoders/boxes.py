"""Detections and greedy non-maximum suppression."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class Detection:
    box: tuple[float, float, float, float]  # x1, y1, x2, y2 in the original frame's pixels
    score: float
    class_id: int
    label: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {"box": [round(v, 2) for v in self.box], "score": round(self.score, 4), "class": self.class_id,
                "label": self.label}


def iou(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    """Intersection over union of one [4] box with [N, 4] boxes (x1, y1, x2, y2)."""
    x1 = np.maximum(box[0], others[:, 0])
    y1 = np.maximum(box[1], others[:, 1])
    x2 = np.minimum(box[2], others[:, 2])
    y2 = np.minimum(box[3], others[:, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    union = area + areas - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float, max_detections: int = 100,
        classes: np.ndarray | None = None) -> list[int]:
    """Indices kept by greedy NMS, best score first (ties: lower index); per class when
    ``classes`` is given (boxes of different classes never suppress each other)."""
    order = sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))
    kept: list[int] = []
    suppressed = np.zeros(len(scores), bool)
    boxes = np.asarray(boxes, np.float64)
    for i in order:
        if suppressed[i]:
            continue
        kept.append(i)
        if len(kept) == max_detections:
            break
        overlap = iou(boxes[i], boxes) > iou_threshold
        if classes is not None:
            overlap &= classes == classes[i]
        suppressed |= overlap
    return kept


def label_of(class_id: int, labels: Sequence[str] | None) -> str | None:
    return labels[class_id] if labels is not None and 0 <= class_id < len(labels) else None
