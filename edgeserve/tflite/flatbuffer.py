"""Walk a .tflite flatbuffer by the TFLite schema, verifying every byte before it is used.

The one walk over a model file's bytes: :class:`edgeserve.tflite.model.TfliteModel` is built
from the tables it decodes, and :mod:`edgeserve.tflite.verify` checks their meaning. A
truncated or corrupted file raises :class:`~edgeserve.errors.ModelFileError` naming the
structure (``model.subgraphs[0].tensors[5].quantization``) and the byte at fault.
"""

from __future__ import annotations

import struct
from typing import Any, NoReturn

import numpy as np

from edgeserve.errors import ModelFileError, model_file_guard
from edgeserve.tflite.schema import DEFAULTS, DTYPES, SCHEMA, STRUCTS, UNION_MEMBERS

__all__ = ["verify_flatbuffer"]

_MAX_BUFFER = (1 << 31) - 1  # FLATBUFFERS_MAX_BUFFER_SIZE: 32-bit offsets
_MAX_DEPTH = 64  # flatbuffers::Verifier::Options().max_depth


class _Table:
    """A verified table: its schema type, position, a path for messages and its fields."""

    __slots__ = ("fields", "kind", "path", "pos", "starts")

    def __init__(self, kind: str, pos: int, path: str) -> None:
        self.kind, self.pos, self.path = kind, pos, path
        self.fields: dict[str, Any] = {}
        self.starts: dict[str, int] = {}  # strings and vectors: where their elements begin

    def start(self, name: str) -> int:
        """The byte where a string's or vector's elements begin (0 when absent)."""
        return self.starts.get(name, 0)

    def get(self, name: str) -> Any:
        """A field's value: scalar, bytes (string), ndarray or list (vector), _Table or None."""
        if name in self.fields:
            return self.fields[name]
        return DEFAULTS[self.kind][name]

    def __repr__(self) -> str:
        return f"<{self.kind} {self.path} at byte {self.pos}>"


class _Verifier:
    """flatbuffers::Verifier for the TFLite schema, decoding as it goes.

    Rules from flatbuffers/verifier.h, each checked before the bytes are used: every
    offset is non-zero, below 2**31 and lands inside the buffer; tables, vtables, offsets and
    scalars are aligned to their size; a vtable's size is even and lies in the buffer;
    vectors fit and strings end in NUL; nesting depth <= 64; the number of tables visited is
    bounded (shared sub-tables cannot make verification quadratic). Stricter than the
    reference in two places, like the reader it replaced: each field must lie inside
    its table's declared inline size, and vector elements that are offsets must be non-zero.
    """

    def __init__(self, data: bytes) -> None:
        self.data = data
        # LiteRT verifies at most 2 GB; data past it is only reached through buffer offsets.
        self.end = min(len(data), _MAX_BUFFER - 1)
        # Without sharing every table holds at least its own 4-byte vtable offset.
        self.tables_left = min(1_000_000, self.end // 4 + 64)
        self.depth = 0

    def fail(self, path: str, pos: int, problem: str) -> NoReturn:
        raise ModelFileError(f"{path or 'model'} at byte {pos}: {problem} "
                             f"(file is {len(self.data)} bytes)")

    def check(self, pos: int, size: int, align: int, path: str, what: str) -> None:
        if pos < 0 or pos + size > self.end:
            self.fail(path, pos, f"{what} ({size} bytes) lies outside the file")
        if pos % align:
            self.fail(path, pos, f"{what} is not {align}-byte aligned")

    def scalar(self, fmt: str, pos: int, path: str, what: str) -> Any:
        s = STRUCTS[fmt]
        self.check(pos, s.size, s.size, path, what)
        return s.unpack_from(self.data, pos)[0]

    def offset(self, pos: int, path: str) -> int:
        """VerifyOffset: follow the uoffset at ``pos``; return the absolute target."""
        rel = self.scalar("I", pos, path, "offset")
        if rel == 0 or rel >= 1 << 31:
            self.fail(path, pos, f"invalid offset {rel}")
        target = pos + rel
        if target >= self.end:
            self.fail(path, pos, f"offset points to byte {target}, past the end")
        return target

    def root(self) -> _Table:
        if len(self.data) < 8:
            self.fail("file header", 0, "too short to be a TFLite model (needs at least 8 bytes)")
        if self.data[4:8] != b"TFL3":
            self.fail("file identifier", 4, f"found {self.data[4:8]!r}, expected b'TFL3': "
                      "not a TFLite model")
        return self.table(self.offset(0, "root offset"), "Model", "model")

    def table(self, pos: int, kind: str, path: str) -> _Table:
        self.depth += 1
        self.tables_left -= 1
        if self.depth > _MAX_DEPTH:
            self.fail(path, pos, f"tables nest deeper than {_MAX_DEPTH} levels")
        if self.tables_left < 0:
            self.fail(path, pos, "too many tables for the file size (shared sub-tables?)")
        vt = pos - self.scalar("i", pos, path, "vtable offset")
        if vt < 0 or vt + 4 > self.end or vt % 2:
            self.fail(path, pos, f"its vtable offset points to byte {vt}, outside the file "
                      "or misaligned")
        vt_size = self.scalar("H", vt, path, "vtable")
        size = self.scalar("H", vt + 2, path, "vtable")
        if vt_size < 4 or vt_size % 2 or vt + vt_size > self.end:
            self.fail(f"{path} vtable", vt, f"invalid vtable size {vt_size}")
        if size < 4 or pos + size > self.end:
            self.fail(path, pos, f"invalid table size {size}")
        table = _Table(kind, pos, path)
        n_slots = (vt_size - 4) // 2
        for fid, f in enumerate(SCHEMA[kind][:n_slots]):
            off = struct.unpack_from("<H", self.data, vt + 4 + 2 * fid)[0]
            if off == 0 or f.deprecated:
                continue
            fsize = STRUCTS[f.arg].size if f.kind == "scalar" else (
                1 if f.kind == "union_type" else 4)
            fpath = f"{path}.{f.name}"
            if off < 4 or off + fsize > size:
                self.fail(fpath, pos, f"field offset {off} lies outside the table's {size} bytes")
            at = pos + off
            if f.kind == "scalar":
                table.fields[f.name] = self.scalar(f.arg, at, fpath, "field")
            elif f.kind == "union_type":
                table.fields[f.name] = self.data[at]
            elif f.kind == "union":
                target = self.offset(at, fpath)
                code = table.fields.get(f"{f.name}_type", 0)
                members = UNION_MEMBERS[f.arg]
                if 1 <= code <= len(members):  # NONE and unknown types are ignored, as in C++
                    table.fields[f.name] = self.table(target, members[code - 1],
                                                      f"{fpath}<{members[code - 1]}>")
            elif f.kind == "table":
                table.fields[f.name] = self.table(self.offset(at, fpath), f.arg, fpath)
            elif f.kind == "string":
                target = self.offset(at, fpath)
                table.fields[f.name] = self.string(target, fpath)
                table.starts[f.name] = target + 4
            else:
                target = self.offset(at, fpath)
                table.fields[f.name] = self.vector(target, f.arg, fpath)
                table.starts[f.name] = target + 4
        self.depth -= 1
        return table

    def _vector_start(self, pos: int, elem_size: int, path: str) -> int:
        count: int = self.scalar("I", pos, path, "vector length")
        if count >= _MAX_BUFFER // elem_size or pos + 4 + count * elem_size > self.end:
            self.fail(path, pos, f"{count} elements of {elem_size} bytes run past the end of "
                      "the file")
        return count

    def string(self, pos: int, path: str) -> bytes:
        count = self._vector_start(pos, 1, path)
        end = pos + 4 + count
        if end >= self.end or self.data[end] != 0:
            self.fail(path, pos, "string is not NUL-terminated")
        return self.data[pos + 4 : end]

    def vector(self, pos: int, elem: str, path: str) -> Any:
        if elem in DTYPES:
            dtype = DTYPES[elem]
            count = self._vector_start(pos, dtype.itemsize, path)
            array = np.frombuffer(self.data, dtype, count, pos + 4)
            return array
        count = self._vector_start(pos, 4, path)
        items = []
        for i in range(count):
            at = pos + 4 + 4 * i
            target = self.offset(at, f"{path}[{i}]")
            items.append(self.string(target, f"{path}[{i}]") if elem == "s"
                         else self.table(target, elem, f"{path}[{i}]"))
        return items


def verify_flatbuffer(data: bytes) -> _Table:
    """Verify the whole flatbuffer against the TFLite schema; return the decoded root table.

    Raises:
        ModelFileError: naming the structure (a path such as
            ``model.subgraphs[0].tensors[5].quantization``) and the byte at fault.
    """
    with model_file_guard("verifying the flatbuffer"):
        return _Verifier(data).root()
