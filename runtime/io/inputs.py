"""Where frames come from: arrays, .npy files, images, folders, videos and cameras.

Every source yields ``(name, array)``: a uint8 RGB H x W x C image for pictures, video
and cameras, or an ``.npy``/``.npz`` file's array as it is (the Session treats a
model-shaped array as the model's input tensor, quantizing floats for integer models);
:func:`split_stack` turns an array of N inputs into N; :func:`write_tensor` writes a
model-shaped array into an input buffer, quantizing floats for integer models.

Camera specs: ``camera`` or ``camera:N`` (OpenCV device N), ``/dev/videoN``, and
``picamera2`` (Raspberry Pi camera, when the picamera2 package is installed).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgeserve.atomic import NOT_REGULAR, special_file
from edgeserve.errors import InputError, MissingDependencyError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".pnm")
VIDEO_SUFFIXES = (".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v", ".mpg", ".mpeg")


def is_video_or_camera(spec: str | Path) -> bool:
    """A source of many frames over time: a video file or a camera (pipelined by `run`)."""
    text = str(spec)
    return (text in ("camera", "picamera2") or text.startswith(("camera:", "/dev/video"))
            or Path(text).suffix.lower() in VIDEO_SUFFIXES)


def iter_inputs(specs: Sequence[str | Path], max_frames: int | None = None,
                input_names: Sequence[str] = ()) -> Iterator[tuple[str, Any]]:
    """Frames from each spec in order; a folder gives its images/.npy/videos sorted by name.
    ``input_names``: a model's several inputs, which an .npz may hold one array each of."""
    for spec in specs:
        yield from _one(str(spec), max_frames, tuple(input_names))


def _one(spec: str, max_frames: int | None, input_names: tuple[str, ...] = ()) -> Iterator[tuple[str, Any]]:
    if spec == "picamera2":
        yield from _picamera(max_frames)
        return
    if spec == "camera" or spec.startswith("camera:") or spec.startswith("/dev/video"):
        index: Any = spec if spec.startswith("/dev/") else int(spec.partition(":")[2] or 0)
        yield from _video(index, f"{spec}", max_frames)
        return
    path = Path(spec)
    if path.is_dir():
        files = sorted(p for p in path.iterdir()
                       if p.suffix.lower() in IMAGE_SUFFIXES + VIDEO_SUFFIXES + (".npy", ".npz"))
        if not files:
            raise InputError(f"{path} holds no images, videos or .npy files")
        for f in files:
            yield from _one(str(f), max_frames, input_names)
        return
    if not path.exists():
        raise InputError(f"input not found: {path}")
    suffix = path.suffix.lower()
    if suffix not in VIDEO_SUFFIXES and special_file(path):  # a video may come down a pipe; a frame file may not
        raise InputError(f"{path} {NOT_REGULAR}; expected an image or array file")
    if suffix == ".npy":
        yield str(path), load_npy(path)
    elif suffix == ".npz":
        yield str(path), load_npz(path, input_names)
    elif suffix in IMAGE_SUFFIXES:
        yield str(path), read_image(path)
    elif suffix in VIDEO_SUFFIXES:
        yield from _video(str(path), str(path), max_frames)
    else:
        raise InputError(f"{path}: expected an image ({', '.join(IMAGE_SUFFIXES)}), a video, a .npy/.npz file, "
                         f"a folder or a camera, got '{path.suffix}'")


# The array a .npz of frames is read from: the first of these names it has, else its only array.
NPZ_KEYS = ("frames", "x", "inputs", "images")


def load_npz(path: Path, input_names: Sequence[str] = ()) -> np.ndarray | dict[str, np.ndarray]:
    """The input array of an .npz file; for a model of several ``input_names`` (token ids and a
    mask), an array of each by name, which the Session matches to the model's inputs."""
    try:
        with np.load(path, allow_pickle=False) as data:
            names = list(data.keys())
            if len(input_names) > 1:
                missing = [n for n in input_names if n not in names]
                if missing:
                    raise InputError(f"{path} holds {', '.join(names) or 'no arrays'}; the model's inputs are "
                                     f"{', '.join(input_names)}: give one array named after each")
                return {name: data[name] for name in input_names}
            key = next((k for k in NPZ_KEYS if k in names), names[0] if len(names) == 1 else None)
            if key is None:
                raise InputError(f"{path} holds {', '.join(names) or 'no arrays'}; expected an array named "
                                 f"{' or '.join(NPZ_KEYS)}, or a single array")
            return data[key]
    except (OSError, ValueError) as exc:
        raise InputError(f"{path} is not a readable .npz file: {exc}") from exc


def split_stack(name: str, array: np.ndarray, model_shape: tuple[int, ...],
                takes_images: bool) -> list[tuple[str, np.ndarray]]:
    """An array holding N inputs, split into them; anything else comes back whole.

    N inputs are: N model-shaped tensors ([N, *shape] with the batch dimension dropped or
    kept, N > 1), or, for a Session that preprocesses images, N uint8 H x W x C frames
    ([N, H, W, C], C of 1, 3 or 4), like the bundled example's frames.npz.
    """
    if isinstance(array, dict):  # one sample of each input, by name
        return [(name, array)]
    per_item = None
    if array.ndim == len(model_shape) + 1 and tuple(array.shape[1:]) == tuple(model_shape):
        per_item = array  # [N, 1, ...]
    elif (len(model_shape) > 1 and model_shape[0] == 1 and array.ndim == len(model_shape)
          and tuple(array.shape[1:]) == tuple(model_shape[1:]) and array.shape[0] > 1):
        per_item = array  # [N, ...] without the batch dimension
    elif takes_images and array.ndim == 4 and array.dtype == np.uint8 and array.shape[3] in (1, 3, 4):
        per_item = array
    if per_item is None:
        return [(name, array)]
    return [(f"{name}#{i}", per_item[i]) for i in range(len(per_item))]


def load_npy(path: Path) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path} is not a readable .npy array: {exc}") from exc


def read_image(path: Path) -> np.ndarray:
    """An image file as uint8 RGB (or H x W x 1 gray), decoded by OpenCV, else Pillow."""
    try:
        import cv2
    except ImportError:
        cv2 = None
    if cv2 is not None:
        data = np.fromfile(path, np.uint8)  # imdecode: no locale/unicode path issues
        try:
            img = cv2.imdecode(data, cv2.IMREAD_UNCHANGED) if data.size else None
        except cv2.error as exc:  # its size check: a header claiming 10^10 pixels
            said = " ".join(str(exc).split())
            raise InputError(f"{path} is not an image OpenCV decodes: {said[said.rfind('error:'):][:200]}") from exc
        if img is None:
            raise InputError(f"{path} is not an image OpenCV can decode")
        if img.dtype != np.uint8:  # 16-bit PNG/TIFF: keep the high byte
            img = (img >> 8).astype(np.uint8) if img.dtype == np.uint16 else img.astype(np.uint8)
        if img.ndim == 2:
            return img[:, :, None]
        code = cv2.COLOR_BGRA2RGBA if img.shape[2] == 4 else cv2.COLOR_BGR2RGB
        return cv2.cvtColor(img, code)
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            im = im.convert("RGB") if im.mode not in ("RGB", "L") else im
            arr = np.asarray(im)
    except Image.DecompressionBombError as exc:  # a header claiming 10^10 pixels
        raise InputError(f"{path} says it has more pixels than Pillow decodes ({exc})") from exc
    except (OSError, UnidentifiedImageError) as exc:
        raise InputError(f"{path} is not an image Pillow can decode: {exc}") from exc
    return arr[:, :, None] if arr.ndim == 2 else arr


def _video(source: Any, name: str, max_frames: int | None) -> Iterator[tuple[str, np.ndarray]]:
    try:
        import cv2
    except ImportError as exc:
        raise MissingDependencyError("opencv-python-headless", "images", "reading video and cameras") from exc
    cap = cv2.VideoCapture(source)
    if not cap.isOpened():
        raise InputError(f"cannot open video source {name}")
    try:
        n = 0
        while max_frames is None or n < max_frames:
            ok, bgr = cap.read()
            if not ok:
                break
            # Converted in place: the decoder hands out a new array per frame anyway, and
            # a caller may keep frames (list(iter_inputs(...))), so none is reused.
            yield f"{name}#{n}", cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB, dst=bgr)
            n += 1
        if n == 0:
            raise InputError(f"{name} gave no frames")
    finally:
        cap.release()


def _picamera(max_frames: int | None) -> Iterator[tuple[str, np.ndarray]]:
    try:
        from picamera2 import Picamera2
    except ImportError as exc:
        raise InputError("picamera2 is not installed (Raspberry Pi OS: sudo apt install python3-picamera2)") from exc
    cam = Picamera2()
    cam.configure(cam.create_video_configuration(main={"format": "RGB888", "size": (640, 480)}))
    cam.start()
    try:
        n = 0
        while max_frames is None or n < max_frames:
            # picamera2's "RGB888" is B, G, R in memory; reverse to RGB as a view.
            yield f"picamera2#{n}", np.ascontiguousarray(cam.capture_array()[:, :, ::-1])
            n += 1
    finally:
        cam.stop()


def refuse_non_finite(name: str, x: np.ndarray) -> None:
    """Raise InputError if a float array holds NaN or an infinity. The reductions propagate NaN
    and keep infinities, so two passes over the array with nothing allocated are exact."""
    if x.size and not (np.isfinite(x.min()) and np.isfinite(x.max())):
        raise InputError(f"input '{name}' contains NaN or infinity")


def write_tensor(d: Any, x: Any, out: np.ndarray, *, has_spec: bool) -> None:
    """Write one model-shaped array into an input buffer, quantizing floats for integer models."""
    x = np.asarray(x)
    shape = tuple(d.shape)
    if x.shape == shape[1:] and len(shape) > 1:
        x = x[None]
    if x.shape != shape:
        problem = f"input '{d.name}' expects shape {shape} {d.dtype.name}, got {x.shape} {x.dtype.name}"
        if has_spec:
            raise InputError(problem)
        raise InputError(f"{problem} (images need a PreprocessSpec: pass preprocess=PreprocessSpec(...))",
                         cli=f"{problem} (images need preprocessing: record it at conversion with --size/--mean/--std, "
                             "or give those flags or --preprocess spec.toml to this command)")
    if x.dtype.kind == "f":
        refuse_non_finite(d.name, x)
        if d.quantized:
            np.copyto(out, d.quantize(x))
        elif d.dtype.kind == "f":
            np.copyto(out, x, casting="same_kind")
        else:
            raise InputError(f"input '{d.name}' expects {d.dtype.name}, got {x.dtype.name}")
    elif x.dtype == d.dtype:
        np.copyto(out, x)
    elif x.dtype.kind in "iub" and d.dtype.kind in "iub" and not d.quantized:
        # Token ids or a mask in another integer width: the source's int64 ids are int32 in a
        # LiteRT or Core ML artifact (litert-torch lowers without 64-bit integers).
        if x.size and d.dtype.kind != "b":
            bounds = np.iinfo(d.dtype)
            if x.min() < bounds.min or x.max() > bounds.max:
                raise InputError(f"input '{d.name}' takes {d.dtype.name}; got values {x.min()}..{x.max()}, "
                                 "which do not fit")
        np.copyto(out, x, casting="unsafe")
    elif x.dtype.kind in "iub" and d.dtype.kind == "f":
        np.copyto(out, x, casting="unsafe")
    else:
        raise InputError(f"input '{d.name}' expects {d.dtype.name} (or float to quantize), got {x.dtype.name}")


def is_image(frame: Any) -> bool:
    """A camera frame (uint8 H x W, or H x W x C) rather than a model-shaped tensor."""
    return isinstance(frame, np.ndarray) and frame.dtype == np.uint8 and frame.ndim in (2, 3)
