"""The ONNX reader's data-movement operators (merged into ``onnx_torch.OPS``): shape, layout,
indexing, padding and constants, as the ONNX operator specification defines them.

A value known before the model runs (a constant, or shape arithmetic as exporters write it:
Shape -> Gather -> Concat -> Reshape) stays a numpy array, so torch.export sees plain
numbers; a run-time value is a torch tensor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch  # imported only on the ONNX routes, which need torch

from edgeserve.sources.onnx.values import Value
from edgeserve.sources.onnx.values import axes as _axes
from edgeserve.sources.onnx.values import ints as _ints
from edgeserve.sources.onnx.values import is_np as _is_np
from edgeserve.sources.onnx.values import tensor as _tensor


def _torch() -> Any:
    return torch


def _split(args: list[Value], attrs: dict[str, Any]) -> Value:
    x = _tensor(args[0])
    axis = int(attrs.get("axis", 0)) % x.dim()
    if "split" in attrs:
        parts = list(attrs["split"])
    elif len(args) > 1 and args[1] is not None:
        parts = _ints(args[1])
    else:
        count = int(attrs.get("num_outputs", 0)) or int(attrs.get("_outputs", 1))
        whole = x.shape[axis]
        step = -(-whole // count)  # ceil: the last part is the smaller one (opset 18)
        parts = [min(step, whole - i * step) for i in range(count)]
    return tuple(x.split(parts, dim=axis))


def _reshape(args: list[Value], attrs: dict[str, Any]) -> Value:
    x, shape = args[0], _ints(args[1])
    dims = list(x.shape)
    if not attrs.get("allowzero", 0):
        shape = [dims[i] if s == 0 else s for i, s in enumerate(shape)]
    return x.reshape(shape)


def _flatten(args: list[Value], attrs: dict[str, Any]) -> Value:
    x = args[0]
    axis = int(attrs.get("axis", 1))
    axis = axis if axis >= 0 else x.ndim + axis
    lead = int(np.prod(x.shape[:axis])) if axis else 1
    return x.reshape(lead, -1)


def _squeeze(args: list[Value], attrs: dict[str, Any]) -> Value:
    x, axes = args[0], _axes(args, attrs)
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    axes = sorted(a % x.ndim for a in axes)
    if isinstance(x, np.ndarray):
        return np.squeeze(x, tuple(axes))
    for a in reversed(axes):
        x = x.squeeze(a)
    return x


def _unsqueeze(args: list[Value], attrs: dict[str, Any]) -> Value:
    x, axes = args[0], _axes(args, attrs)
    rank = x.ndim + len(axes or [])
    for a in sorted(a % rank for a in axes or []):
        x = np.expand_dims(x, a) if isinstance(x, np.ndarray) else x.unsqueeze(a)
    return x


def _concat(args: list[Value], attrs: dict[str, Any]) -> Value:
    axis = int(attrs["axis"])
    if _is_np(*args):
        return np.concatenate(args, axis=axis)
    return _torch().cat([_tensor(a) for a in args], dim=axis)


def _gather(args: list[Value], attrs: dict[str, Any]) -> Value:
    x, idx = args
    axis = int(attrs.get("axis", 0))
    if _is_np(x, idx):
        return np.asarray(np.take(x, idx, axis=axis))  # a 0-d index gives a numpy scalar: keep an array
    if isinstance(idx, np.ndarray) and idx.ndim == 0:
        return _tensor(x).select(axis, int(idx))
    torch = _torch()
    if isinstance(idx, np.ndarray):
        positions = _tensor(np.asarray(idx, np.int64))
    else:
        # Indices computed at run time (a model input of token ids): taken as they are. ONNX also
        # allows negative ones, counted from the end; ids into an embedding table are not, and
        # the source checks calibration ids against the table's rows (sources/onnx/input_ranges.py).
        positions = idx.long()
    return torch.index_select(_tensor(x), axis, positions.reshape(-1)).reshape(
        *x.shape[:axis], *tuple(idx.shape), *x.shape[axis + 1:])


def _slice(args: list[Value], attrs: dict[str, Any]) -> Value:
    x = args[0]
    starts, ends = _ints(args[1]), _ints(args[2])
    axes = _ints(args[3]) if len(args) > 3 and args[3] is not None else list(range(len(starts)))
    steps = _ints(args[4]) if len(args) > 4 and args[4] is not None else [1] * len(starts)
    index = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        index[a % x.ndim] = slice(s, None if e >= 2**62 else e, st)
    if isinstance(x, np.ndarray) or all(part.step is None or part.step > 0 for part in index):
        return x[tuple(index)]
    # torch slices forward only; a backward step (a bidirectional RNN unrolled by its exporter reads
    # its sequence reversed) takes the same positions, which are known here, with index_select.
    # Python's slice arithmetic clamps starts and ends as ONNX does.
    for axis, part in enumerate(index):
        if part.step is not None and part.step < 0:
            positions = np.arange(*part.indices(int(x.shape[axis])), dtype=np.int64)
            x = _torch().index_select(x, axis, _torch().from_numpy(positions))
            index[axis] = slice(None)
    return x[tuple(index)]


def _where(args: list[Value], attrs: dict[str, Any]) -> Value:
    condition, a, b = args
    if _is_np(condition, a, b):
        return np.asarray(np.where(condition, a, b))
    return _torch().where(_tensor(condition).bool(), _tensor(a), _tensor(b))


def _range(args: list[Value], attrs: dict[str, Any]) -> Value:
    """A constant: YOLOv8's anchor grid is a Range over the (fixed) feature map size."""
    if not _is_np(*args):
        raise ValueError("needs its start, limit and delta known before the model runs (constants or static shapes)")
    start, limit, delta = (np.asarray(a).reshape(()) for a in args)
    return np.arange(start, limit, delta).astype(start.dtype)


def _expand(args: list[Value], attrs: dict[str, Any]) -> Value:
    x, shape = args[0], _ints(args[1])
    full = tuple(np.broadcast_shapes(tuple(x.shape), tuple(shape)))  # ONNX Expand broadcasts both ways
    if _is_np(x):
        return np.broadcast_to(x, full).copy()
    return _tensor(x).expand(full)


def _pad(args: list[Value], attrs: dict[str, Any]) -> Value:
    x = _tensor(args[0])
    pads = list(attrs["pads"]) if "pads" in attrs else _ints(args[1])
    value = float(np.asarray(args[2]).reshape(-1)[0]) if len(args) > 2 and args[2] is not None else 0.0
    mode = attrs.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    rank = x.dim()
    flat: list[int] = []
    for i in reversed(range(rank)):
        flat += [pads[i], pads[i + rank]]
    while len(flat) > 2 and flat[-2:] == [0, 0]:
        flat = flat[:-2]
    if mode == "constant":
        return _torch().nn.functional.pad(x, flat, value=value)
    if mode in ("reflect", "edge"):
        return _gather_pad(x, pads, mode)
    raise NotImplementedError(f"pad mode {mode} is not supported")


def _gather_pad(x: Any, pads: list[int], mode: str) -> Any:
    """A reflect or edge pad as one index_select per padded axis, its indices computed here.

    torch's reflection pad exports as index arithmetic on int32 (ABS, SUB, LESS, SELECT,
    GATHER_ND over an arange) that litert-torch does not fold, and TFLM has no int32 ABS
    (silero-vad's STFT pads its 576 samples so); the shapes are static, so the indices are
    constants here and each axis is one GATHER.
    """
    torch = _torch()
    rank = x.dim()
    for axis in range(rank):
        before, after = pads[axis], pads[axis + rank]
        if before == 0 and after == 0:
            continue
        size = int(x.shape[axis])
        index = np.arange(-before, size + after)
        if mode == "reflect":  # mirror without repeating the edge: -1 -> 1, size -> size - 2
            if max(before, after) >= size:  # ONNX Runtime refuses it too
                raise ValueError(f"a reflect pad of {max(before, after)} on an axis of {size} (at most {size - 1})")
            index = np.abs(index)
            index = np.where(index >= size, 2 * (size - 1) - index, index)
        else:
            index = np.clip(index, 0, size - 1)
        x = torch.index_select(x, axis, torch.as_tensor(index, dtype=torch.int64))
    return x


def _cast(args: list[Value], attrs: dict[str, Any]) -> Value:
    from onnx import helper

    dtype = helper.tensor_dtype_to_np_dtype(int(attrs["to"]))
    x = args[0]
    if isinstance(x, np.ndarray):
        return x.astype(dtype)
    if dtype.kind == "b":  # a condition (a data-dependent If's, loop.py)
        return x != 0
    if dtype.kind != "f":
        raise NotImplementedError(f"casting a run-time tensor to {dtype} is not supported")
    return x.float()


def _constant(args: list[Value], attrs: dict[str, Any]) -> Value:
    from onnx import numpy_helper

    if "value" in attrs:
        array = numpy_helper.to_array(attrs["value"])
    elif "value_float" in attrs:
        array = np.asarray(attrs["value_float"], np.float32)
    elif "value_int" in attrs:
        array = np.asarray(attrs["value_int"], np.int64)
    elif "value_ints" in attrs:
        array = np.asarray(attrs["value_ints"], np.int64)
    else:
        raise NotImplementedError(f"Constant with {sorted(attrs)} is not supported")
    return array


def _constant_of_shape(args: list[Value], attrs: dict[str, Any]) -> Value:
    from onnx import numpy_helper

    value = numpy_helper.to_array(attrs["value"]) if "value" in attrs else np.zeros(1, np.float32)
    return np.full(_ints(args[0]), value.reshape(-1)[0], dtype=value.dtype)


def _shape(args: list[Value], attrs: dict[str, Any]) -> Value:
    dims = np.asarray([int(d) for d in args[0].shape], np.int64)
    return dims[attrs.get("start", 0): attrs.get("end", len(dims))]


def _transpose(args: list[Value], attrs: dict[str, Any]) -> Value:
    x = args[0]
    perm = list(attrs.get("perm", reversed(range(x.ndim))))
    return np.transpose(x, perm) if isinstance(x, np.ndarray) else x.permute(perm)


def _depth_to_space(args: list[Value], attrs: dict[str, Any]) -> Value:
    """DepthToSpace: DCR (the default; what tf2onnx writes for TFLite's DEPTH_TO_SPACE) moves
    depth in (block row, block column, channel) order; CRD in (channel, row, column), which
    is torch's pixel_shuffle."""
    x, b = _tensor(args[0]), int(attrs["blocksize"])
    n, c, h, w = x.shape
    if attrs.get("mode", b"DCR") in (b"CRD", "CRD"):
        return _torch().nn.functional.pixel_shuffle(x, b)
    y = x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    return y.reshape(n, c // (b * b), h * b, w * b)


def _space_to_depth(args: list[Value], attrs: dict[str, Any]) -> Value:
    """SpaceToDepth, the inverse of DepthToSpace in DCR order (the only order ONNX defines)."""
    x, b = _tensor(args[0]), int(attrs["blocksize"])
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b, b, w // b, b).permute(0, 3, 5, 1, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


def _reverse_sequence(args: list[Value], attrs: dict[str, Any]) -> Value:
    """ReverseSequence: along ``time_axis``, each batch entry's first ``sequence_lens[b]`` steps
    in reverse order and the rest as they are (tf2onnx writes TensorFlow's ReverseV2 this way:
    BirdNET's spectrogram flips its frequency axis, every length the whole axis)."""
    x, lengths = args
    if not isinstance(lengths, np.ndarray):
        raise ValueError("needs its sequence_lens known before the model runs (a constant)")
    time_axis, batch_axis = int(attrs.get("time_axis", 0)), int(attrs.get("batch_axis", 1))
    steps = int(x.shape[time_axis])
    # One gather index per (time, batch) position: reversed below the entry's length, as is after it.
    index = np.empty((steps, len(lengths)), np.int64)
    for b, length in enumerate(np.asarray(lengths, np.int64).reshape(-1)):
        length = min(max(int(length), 0), steps)
        index[:, b] = np.concatenate([np.arange(length)[::-1], np.arange(length, steps)])
    shape = [1] * x.ndim
    shape[time_axis], shape[batch_axis] = steps, len(lengths)
    index = index.reshape(shape) if time_axis < batch_axis else index.T.reshape(shape)
    index = np.broadcast_to(index, tuple(x.shape))
    if isinstance(x, np.ndarray):
        return np.take_along_axis(x, index, axis=time_axis)
    return _torch().gather(x, time_axis, _torch().from_numpy(np.ascontiguousarray(index)))


OPS: dict[str, Callable[[list[Value], dict[str, Any]], Value]] = {
    "Split": _split,
    "Reshape": _reshape,
    "Flatten": _flatten,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Concat": _concat,
    "Gather": _gather,
    "Slice": _slice,
    "Where": _where,
    "Range": _range,
    "Expand": _expand,
    "Pad": _pad,
    "Cast": _cast,
    "Constant": _constant,
    "ConstantOfShape": _constant_of_shape,
    "Shape": _shape,
    "Transpose": _transpose,
    "DepthToSpace": _depth_to_space,
    "SpaceToDepth": _space_to_depth,
    "ReverseSequence": _reverse_sequence,
}
