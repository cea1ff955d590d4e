"""`edgeserve run --save OUT`: the frames with boxes and labels drawn (OpenCV), written
atomically: into a hidden partial file beside OUT, renamed to OUT only when complete, so a
crash or Ctrl-C never leaves a half file under the finished name."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from edgeserve.errors import InputError

VIDEO_SUFFIXES = (".mp4", ".avi", ".mkv", ".mov")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp")
_FOURCC = {".mp4": "mp4v", ".avi": "MJPG", ".mkv": "MJPG", ".mov": "mp4v"}


def draw(frame: np.ndarray, entry: dict[str, Any]) -> np.ndarray:
    """A BGR copy of an RGB frame with the entry's detections (or its best class) drawn."""
    import cv2

    image = cv2.cvtColor(frame, cv2.COLOR_RGB2BGR) if frame.shape[2] == 3 else cv2.cvtColor(frame, cv2.COLOR_GRAY2BGR)
    for det in entry.get("detections") or []:
        x1, y1, x2, y2 = (int(round(v)) for v in det["box"])
        cv2.rectangle(image, (x1, y1), (x2, y2), (0, 255, 0), 2)
        text = f"{det.get('label') or det['class']} {det['score']:.2f}"
        cv2.putText(image, text, (x1, max(12, y1 - 4)), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 255, 0), 1, cv2.LINE_AA)
    top = (entry.get("top_k") or [None])[0]
    if top is not None:
        cv2.putText(image, f"{top.get('label', top['index'])} {top['score']:.2f}", (8, 20),
                    cv2.FONT_HERSHEY_SIMPLEX, 0.6, (0, 255, 0), 1, cv2.LINE_AA)
    return image


class Saver:
    """Collects drawn frames into OUT (an image for one frame, a video for many)."""

    def __init__(self, out: Path, fps: float = 10.0) -> None:
        suffix = out.suffix.lower()
        if suffix not in VIDEO_SUFFIXES + IMAGE_SUFFIXES:
            raise InputError(f"--save {out}: expected an image ({', '.join(IMAGE_SUFFIXES)}) or a video "
                             f"({', '.join(VIDEO_SUFFIXES)}) name")
        self.out, self.fps, self.video = out, fps, suffix in VIDEO_SUFFIXES
        self.partial = out.with_name(f".{out.stem}.partial{out.suffix}")
        self._writer: Any = None
        self.frames = 0

    def add(self, frame: np.ndarray, entry: dict[str, Any]) -> None:
        import cv2

        image = draw(frame, entry)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        if not self.video:
            if self.frames:
                raise InputError(f"--save {self.out} is an image but the input has several frames; save to a video")
            if not cv2.imwrite(str(self.partial), image):
                raise InputError(f"could not write {self.out}")
        else:
            if self._writer is None:
                h, w = image.shape[:2]
                self._writer = cv2.VideoWriter(str(self.partial), cv2.VideoWriter_fourcc(*_FOURCC[self.out.suffix.lower()]),
                                               self.fps, (w, h))
            self._writer.write(image)
        self.frames += 1

    def finish(self) -> None:
        if self._writer is not None:
            self._writer.release()
        if self.frames:
            os.replace(self.partial, self.out)

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.release()
        self.partial.unlink(missing_ok=True)
