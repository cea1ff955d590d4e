"""Models whose graph ends in TFLite_Detection_PostProcess (SSD MobileNet and the like):
the op already decoded the anchors and ran NMS, so what is left is reading its four
outputs (boxes as normalised ymin, xmin, ymax, xmax; class ids without the background;
scores; the count), keeping scores above the threshold, and mapping boxes to the frame."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edgeserve.errors import InputError
from edgeserve.runtime.decoders.boxes import Detection, label_of
from edgeserve.runtime.decoders.geometry import FrameGeometry


def decode_postprocess(outputs: Sequence[np.ndarray], input_size: tuple[int, int], geometry: FrameGeometry, *,
                       score_threshold: float = 0.5, labels: Sequence[str] | None = None) -> list[Detection]:
    boxes = next((o for o in outputs if o.ndim == 3 and o.shape[-1] == 4), None)
    pairs = [o for o in outputs if o.ndim == 2 and boxes is not None and o.shape[1] == boxes.shape[1]]
    count = next((o for o in outputs if o.size == 1), None)
    if boxes is None or len(pairs) != 2 or count is None:
        raise InputError("decoder ssd-postprocess reads TFLite_Detection_PostProcess's four outputs (boxes "
                         f"[1, N, 4], classes and scores [1, N], count [1]); this model gives "
                         f"{[list(o.shape) for o in outputs]}")
    classes, scores = pairs  # the op's output order: boxes, classes, scores, count
    h, w = input_size
    n = int(np.asarray(count).reshape(-1)[0])
    keep = [i for i in range(min(n, boxes.shape[1])) if float(scores[0, i]) >= score_threshold]
    if not keep:
        return []
    ymin, xmin, ymax, xmax = (boxes[0, keep, j].astype(np.float64) for j in range(4))
    pixels = geometry.to_frame(np.stack([xmin * w, ymin * h, xmax * w, ymax * h], axis=1))
    return [Detection(tuple(float(v) for v in box), float(scores[0, i]), int(round(float(classes[0, i]))),
                      label_of(int(round(float(classes[0, i]))), labels)) for box, i in zip(pixels, keep)]
