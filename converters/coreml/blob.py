"""Read Core ML's weight file (``weights/weight.bin``, MIL blob storage version 2) with numpy.

The layout, as Apple's MILBlob ``StorageFormat.hpp`` defines it (all little-endian, every
entry 64-byte aligned)::

    storage_header  uint32 count, uint32 version (= 2), 7 x uint64 reserved        64 bytes
    blob_metadata   uint32 sentinel 0xDEADBEEF, uint32 dtype, uint64 size_in_bytes,
                    uint64 data_offset, 5 x uint64 reserved                        64 bytes
    data            size_in_bytes bytes at data_offset

A ``const`` in the ML program points at a ``blob_metadata`` by its file offset. Reading it
here, rather than through coremltools' C++ extension, means a damaged file is reported as
what it is (:class:`ModelFileError`), and the verifier reads exactly the bytes Core ML will.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

import numpy as np

from edgeserve.errors import ModelFileError

SENTINEL = 0xDEADBEEF
HEADER = struct.Struct("<II")
METADATA = struct.Struct("<IIQQ")
ALIGNMENT = 64

# BlobDataType (MILBlob/Blob/BlobDataType.hpp). 8-13 are the sub-byte types (int4, uint1-6),
# which edgeserve's conversions never write; they are refused with their name.
BLOB_DTYPES: dict[int, np.dtype] = {
    1: np.dtype("<f2"), 2: np.dtype("<f4"), 3: np.dtype("u1"), 4: np.dtype("i1"),
    6: np.dtype("<i2"), 7: np.dtype("<u2"), 14: np.dtype("<i4"), 15: np.dtype("<u4"),
}
_UNSUPPORTED = {5: "bfloat16", 8: "int4", 9: "uint1", 10: "uint2", 11: "uint3", 12: "uint4", 13: "uint6"}


class BlobFile:
    """One weight file, memory-mapped read-only; arrays returned by :meth:`read` are views.

    The views keep the map alive (numpy holds a reference to the buffer), so a
    ``BlobFile`` may be dropped while its arrays are still in use.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            with open(self.path, "rb") as fh:
                size = self.path.stat().st_size
                self._data: bytes | mmap.mmap = (
                    mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
                )
        except OSError as exc:
            raise ModelFileError(f"cannot read Core ML weights {self.path}: {exc}") from exc
        if len(self._data) < ALIGNMENT:
            raise ModelFileError(f"{self.path} is {len(self._data)} bytes; a weight file starts with a 64-byte header")
        self.count, self.version = HEADER.unpack_from(self._data, 0)
        if self.version != 2:
            raise ModelFileError(f"{self.path}: blob storage version {self.version}; only version 2 is known")

    def read(self, offset: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """The array of ``dtype`` and ``shape`` whose metadata sits at ``offset``.

        Raises:
            ModelFileError: the offset, sentinel, type or size does not match what the
                program declares (a truncated, swapped or edited file).
        """
        where = f"{self.path.name} at offset {offset}"
        if offset % ALIGNMENT or offset + METADATA.size > len(self._data):
            raise ModelFileError(f"{where}: no blob metadata there (file is {len(self._data)} bytes)")
        sentinel, code, nbytes, data_offset = METADATA.unpack_from(self._data, offset)
        if sentinel != SENTINEL:
            raise ModelFileError(f"{where}: bad sentinel {sentinel:#x} (expected {SENTINEL:#x}); the file is damaged")
        if code in _UNSUPPORTED:
            raise ModelFileError(f"{where}: {_UNSUPPORTED[code]} weights are not supported by edgeserve's evaluator")
        stored = BLOB_DTYPES.get(code)
        if stored is None:
            raise ModelFileError(f"{where}: unknown blob data type {code}")
        if stored.kind != np.dtype(dtype).kind or stored.itemsize != np.dtype(dtype).itemsize:
            raise ModelFileError(f"{where}: stored as {stored}, but the program declares {np.dtype(dtype)}")
        count = int(np.prod(shape, dtype=np.int64))
        if nbytes != count * stored.itemsize or data_offset + nbytes > len(self._data):
            raise ModelFileError(
                f"{where}: {nbytes} bytes at {data_offset}, but the program declares {count} x {stored} "
                f"(file is {len(self._data)} bytes)"
            )
        return np.frombuffer(self._data, dtype=stored, count=count, offset=data_offset).reshape(shape)
