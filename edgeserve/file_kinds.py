"""What a file is, from its first bytes: for error messages that say "this is a JPEG" instead
of a decoder's complaint about byte 52 (a renamed or mistaken file is the common case)."""

from __future__ import annotations

# (offset, magic, what it is); the first match wins.
_SIGNATURES = (
    (4, b"TFL3", "a TFLite model (.tflite)"),
    (0, b"\x89HDF\r\n\x1a\n", "an HDF5 file (a Keras .h5 model)"),
    (0, b"PK\x03\x04", "a ZIP archive (a .keras model, a .pt2 or TorchScript file, a wheel)"),
    (0, b"\xff\xd8\xff", "a JPEG image"),
    (0, b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (0, b"GIF8", "a GIF image"),
    (0, b"%PDF", "a PDF document"),
    (0, b"RIFF", "a RIFF file (a WAV recording or an AVI video)"),
    (0, b"\x1aE\xdf\xa3", "a Matroska/WebM video"),
    (0, b"\x93NUMPY", "a NumPy .npy array"),
    (0, b"\x80\x02", "a Python pickle"),
)


def describe(head: bytes) -> str | None:
    """What the bytes ``head`` (a file's first 16 or more) start like, or None when unknown."""
    for offset, magic, kind in _SIGNATURES:
        if head[offset:offset + len(magic)] == magic:
            return kind
    if head[4:8] == b"ftyp":
        return "an MP4/MOV video or HEIC image"
    return None
