"""Where a model-input pixel came from in the original frame: the inverse of the
PreprocessSpec's geometry (centre crop, then stretch or letterbox to the input size),
computed with the same rounding as edgeserve.preprocess, so a box maps back exactly."""

from __future__ import annotations

import dataclasses

import numpy as np

from edgeserve.preprocess import PreprocessSpec


@dataclasses.dataclass(frozen=True)
class FrameGeometry:
    frame_size: tuple[int, int]  # (height, width) of the original frame
    crop: tuple[int, int, int, int]  # top, left, height, width of the region that was resized
    scale: tuple[float, float]  # input pixels per frame pixel, (y, x)
    offset: tuple[int, int]  # letterbox padding (top, left) in input pixels

    @classmethod
    def of(cls, spec: PreprocessSpec, frame_height: int, frame_width: int) -> "FrameGeometry":
        if spec.size is None:
            raise ValueError("the PreprocessSpec has no size: bind it to the model input first")
        th, tw = spec.size
        top, left, h, w = 0, 0, frame_height, frame_width
        if spec.crop == "center":  # the arithmetic of edgeserve.preprocess.center_crop
            aspect = th / tw
            ch, cw = (w * aspect, float(w)) if h / w > aspect else (float(h), h / aspect)
            ch, cw = max(1, round(ch * spec.crop_fraction)), max(1, round(cw * spec.crop_fraction))
            top, left, h, w = (h - ch) // 2, (w - cw) // 2, ch, cw
        if spec.resize_mode == "letterbox" and (h, w) != (th, tw):
            ratio = min(th / h, tw / w)
            nh, nw = max(1, round(h * ratio)), max(1, round(w * ratio))
            return cls((frame_height, frame_width), (top, left, h, w), (nh / h, nw / w),
                       ((th - nh) // 2, (tw - nw) // 2))
        return cls((frame_height, frame_width), (top, left, h, w), (th / h, tw / w), (0, 0))

    def to_frame(self, boxes: np.ndarray) -> np.ndarray:
        """[N, 4] boxes (x1, y1, x2, y2) in model-input pixels -> frame pixels, clipped to it."""
        boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
        sy, sx = self.scale
        oy, ox = self.offset
        top, left = self.crop[0], self.crop[1]
        out = np.empty_like(boxes)
        out[:, [0, 2]] = (boxes[:, [0, 2]] - ox) / sx + left
        out[:, [1, 3]] = (boxes[:, [1, 3]] - oy) / sy + top
        out[:, [0, 2]] = out[:, [0, 2]].clip(0, self.frame_size[1])
        out[:, [1, 3]] = out[:, [1, 3]].clip(0, self.frame_size[0])
        return out
