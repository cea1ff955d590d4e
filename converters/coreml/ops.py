"""numpy implementations of the ML program ops that edgeserve's conversions produce.

Each function takes the op's parameters by name (inputs and attributes merged; float16
tensors already widened to float32) and returns its output value, or a tuple for ops with
several outputs. Parameter names and defaults follow coremltools' MIL op definitions
(``coremltools/converters/mil/mil/ops/defs``). The evaluator rounds every output to the
type the program declares, so fp16 programs are emulated as "compute in float32, store in
float16".

An op that is not in :data:`OPS` is not guessed at: the evaluator refuses the program
with :class:`~edgeserve.errors.UnsupportedOpError` before running anything.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from edgeserve.converters.coreml.conv_offsets import conv_by_offsets

Params = dict[str, Any]
OPS: dict[str, Callable[[Params], Any]] = {}


def op(*names: str) -> Callable[[Callable[[Params], Any]], Callable[[Params], Any]]:
    def register(fn: Callable[[Params], Any]) -> Callable[[Params], Any]:
        for name in names:
            OPS[name] = fn
        return fn

    return register


def _ints(value: Any) -> list[int]:
    return [int(v) for v in np.asarray(value).reshape(-1)]


def _bools(value: Any, n: int) -> list[bool]:
    return [False] * n if value is None else [bool(v) for v in np.asarray(value).reshape(-1)]


def _get(p: Params, name: str, default: Any = None) -> Any:
    value = p.get(name)
    return default if value is None else value


# ----- constants and dequantization ------------------------------------------------------------
@op("const")
def _const(p: Params) -> Any:
    return p["val"]


@op("constexpr_affine_dequantize")
def _affine_dequantize(p: Params) -> np.ndarray:
    data = p["quantized_data"].astype(np.float32)
    axis = int(p["axis"]) % data.ndim
    return (data - _along(p["zero_point"], axis, data.ndim)) * _along(p["scale"], axis, data.ndim)


@op("constexpr_blockwise_shift_scale")
def _blockwise_shift_scale(p: Params) -> np.ndarray:
    data = p["data"].astype(np.float32)
    offset = p.get("offset")
    if offset is not None:
        data = data - _blocks(np.asarray(offset, np.float32), data.shape)
    return data * _blocks(np.asarray(p["scale"], np.float32), data.shape)


@op("constexpr_cast")
def _constexpr_cast(p: Params) -> np.ndarray:
    return np.asarray(p["source_val"])  # the evaluator casts to the declared output type


@op("quantize")
def _quantize(p: Params) -> np.ndarray:
    x = np.asarray(p["input"], np.float32)
    axis = p.get("axis")
    scale = np.asarray(p["scale"], np.float32)
    zero = p.get("zero_point")
    if axis is not None and scale.ndim == 1:
        scale = _along(scale, int(axis) % x.ndim, x.ndim)
    q = np.rint(x / scale)  # round half to even, as Core ML's quantize
    if zero is not None:
        zero = np.asarray(zero)
        q = q + (_along(zero, int(axis) % x.ndim, x.ndim) if axis is not None and zero.ndim == 1 else zero)
    dtype = {"int8": np.int8, "uint8": np.uint8}[str(p["output_dtype"])]
    info = np.iinfo(dtype)
    return np.clip(q, info.min, info.max).astype(dtype)


@op("dequantize")
def _dequantize(p: Params) -> np.ndarray:
    q = np.asarray(p["input"]).astype(np.float32)
    axis = p.get("axis")
    scale = np.asarray(p["scale"], np.float32)
    zero = p.get("zero_point")
    if axis is not None and scale.ndim == 1:
        scale = _along(scale, int(axis) % q.ndim, q.ndim)
    if zero is not None:
        zero = np.asarray(zero, np.float32)
        q = q - (_along(zero, int(axis) % q.ndim, q.ndim) if axis is not None and zero.ndim == 1 else zero)
    return q * scale


def _along(values: Any, axis: int, ndim: int) -> np.ndarray:
    """A per-axis vector shaped to broadcast along ``axis`` of an ``ndim`` tensor."""
    values = np.asarray(values, np.float32)
    if values.ndim == 0:
        return values
    shape = [1] * ndim
    shape[axis] = values.size
    return values.reshape(shape)


def _blocks(values: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Repeat block-wise parameters (same rank, each dim dividing the data's) to full shape."""
    if values.ndim == 0:
        return values
    for axis, (n, m) in enumerate(zip(shape, values.shape)):
        if m != n:
            values = np.repeat(values, n // m, axis=axis)
    return values


# ----- convolution and linear layers -------------------------------------------------------------
def _pads(pad_type: str, pad: Any, spatial: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
          dilations: Sequence[int]) -> list[tuple[int, int]]:
    pad_type = str(pad_type)
    if pad_type == "valid":
        return [(0, 0)] * len(spatial)
    if pad_type == "custom":
        values = _ints(pad) if pad is not None else [0] * (2 * len(spatial))
        return [(values[2 * i], values[2 * i + 1]) for i in range(len(spatial))]
    if pad_type in ("same", "same_lower"):
        out = []
        for n, k, s, d in zip(spatial, kernel, strides, dilations):
            total = max((math.ceil(n / s) - 1) * s + (k - 1) * d + 1 - n, 0)
            small, big = total // 2, total - total // 2
            out.append((small, big) if pad_type == "same" else (big, small))
        return out
    raise ValueError(f"unknown pad_type {pad_type!r}")


def _windows(x: np.ndarray, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
             pads: Sequence[tuple[int, int]], ceil_mode: bool = False, fill: float = 0.0) -> np.ndarray:
    """(N, C, *out, *kernel) view of every receptive field of an (N, C, *spatial) tensor."""
    spatial = x.shape[2:]
    pads = list(pads)
    if ceil_mode:
        # Extra end padding so the last partial window is kept (it must start inside the input).
        for i, (n, k, s, d) in enumerate(zip(spatial, kernel, strides, dilations)):
            span = n + pads[i][0] + pads[i][1] - ((k - 1) * d + 1)
            out = math.ceil(span / s) + 1
            if (out - 1) * s >= n + pads[i][0]:
                out -= 1
            extra = max((out - 1) * s + (k - 1) * d + 1 - (n + pads[i][0] + pads[i][1]), 0)
            pads[i] = (pads[i][0], pads[i][1] + extra)
    if any(a or b for a, b in pads):
        x = np.pad(x, [(0, 0), (0, 0), *pads], constant_values=fill)
    extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    axes = tuple(range(2, x.ndim))
    view = np.lib.stride_tricks.sliding_window_view(x, extents, axis=axes)
    index = (slice(None), slice(None), *[slice(None, None, s) for s in strides],
             *[slice(None, None, d) for d in dilations])
    return view[index]


@op("conv")
def _conv(p: Params) -> np.ndarray:
    x, weight = p["x"], p["weight"]
    rank = x.ndim - 2
    strides = _ints(_get(p, "strides", [1] * rank))
    dilations = _ints(_get(p, "dilations", [1] * rank))
    groups = int(_get(p, "groups", 1))
    kernel = weight.shape[2:]
    pads = _pads(_get(p, "pad_type", "valid"), p.get("pad"), x.shape[2:], kernel, strides, dilations)
    if groups > 1 or int(np.prod(kernel)) == 1:
        out = conv_by_offsets(x, weight, strides, dilations, groups, pads)
    else:  # one im2col product: the windows once, one BLAS matrix product
        win = _windows(x, kernel, strides, dilations, pads)  # (N, C, *out, *K)
        n, c = x.shape[:2]
        out_spatial = win.shape[2:2 + rank]
        cout = weight.shape[0]
        win = win.reshape(n, 1, c, int(np.prod(out_spatial)), int(np.prod(kernel)))
        w = weight.reshape(1, cout, c, int(np.prod(kernel)))
        out = np.einsum("ngcpk,gock->ngop", win, w, optimize=True).reshape(n, cout, *out_spatial)
    bias = p.get("bias")
    if bias is not None:
        out = out + _along(bias, 1, out.ndim)
    return out


@op("conv_transpose")
def _conv_transpose(p: Params) -> np.ndarray:
    """x [N, Cin, *D], weight [Cin, Cout/groups, *K]: every input value scatters its kernel
    times itself at stride steps (the full output), then the padding is cut from each side."""
    x, weight = p["x"], p["weight"]
    rank = x.ndim - 2
    strides = _ints(_get(p, "strides", [1] * rank))
    dilations = _ints(_get(p, "dilations", [1] * rank))
    groups = int(_get(p, "groups", 1))
    n, cin = x.shape[:2]
    kernel = weight.shape[2:]
    cout_g = weight.shape[1]
    full = [(d - 1) * s + (k - 1) * dl + 1 for d, s, k, dl in zip(x.shape[2:], strides, kernel, dilations)]
    out = np.zeros((n, groups, cout_g, *full), np.float32)
    xg = x.reshape(n, groups, cin // groups, *x.shape[2:])
    wg = weight.reshape(groups, cin // groups, cout_g, *kernel)
    for offset in np.ndindex(*kernel):
        part = np.einsum("ngc...,gco->ngo...", xg, wg[(slice(None), slice(None), slice(None), *offset)],
                         optimize=True)
        where = tuple(slice(k * dl, k * dl + (d - 1) * s + 1, s)
                      for k, dl, d, s in zip(offset, dilations, x.shape[2:], strides))
        out[(slice(None), slice(None), slice(None), *where)] += part
    out = out.reshape(n, groups * cout_g, *full)
    pad_type = str(_get(p, "pad_type", "valid"))
    if pad_type == "custom":
        pads = _ints(_get(p, "pad", [0] * 2 * rank))
        begins, ends = pads[0::2], pads[1::2]
    elif pad_type == "same":  # the output is the input times the stride, the odd pixel cut at the end
        extra = [f - d * s for f, d, s in zip(full, x.shape[2:], strides)]
        begins, ends = [e // 2 for e in extra], [e - e // 2 for e in extra]
    else:
        begins, ends = [0] * rank, [0] * rank
    shape = p.get("output_shape")
    sizes = _ints(shape)[-rank:] if shape is not None else [f - b - e for b, e, f in zip(begins, ends, full)]
    # output_shape may ask for more than the padding leaves (PyTorch's output_padding): those
    # rows and columns receive no input, so they hold only the bias.
    grown = np.zeros((n, groups * cout_g, *[max(f, b + z) for f, b, z in zip(full, begins, sizes)]), np.float32)
    grown[(slice(None), slice(None), *[slice(0, f) for f in full])] = out
    out = grown[(slice(None), slice(None), *[slice(b, b + z) for b, z in zip(begins, sizes)])]
    bias = p.get("bias")
    return out if bias is None else out + _along(bias, 1, out.ndim)


@op("linear")
def _linear(p: Params) -> np.ndarray:
    out = np.matmul(p["x"], np.swapaxes(p["weight"], -1, -2))
    bias = p.get("bias")
    return out if bias is None else out + bias


@op("matmul")
def _matmul(p: Params) -> np.ndarray:
    x, y = p["x"], p["y"]
    if bool(_get(p, "transpose_x", False)) and x.ndim > 1:
        x = np.swapaxes(x, -1, -2)
    if bool(_get(p, "transpose_y", False)) and y.ndim > 1:
        y = np.swapaxes(y, -1, -2)
    return np.matmul(x, y)


# ----- normalization -----------------------------------------------------------------------------
@op("batch_norm")
def _batch_norm(p: Params) -> np.ndarray:
    x = p["x"]
    eps = float(_get(p, "epsilon", 1e-5))
    out = (x - _along(p["mean"], 1, x.ndim)) / np.sqrt(_along(p["variance"], 1, x.ndim) + eps)
    if p.get("gamma") is not None:
        out = out * _along(p["gamma"], 1, x.ndim)
    if p.get("beta") is not None:
        out = out + _along(p["beta"], 1, x.ndim)
    return out


@op("instance_norm")
def _instance_norm(p: Params) -> np.ndarray:
    x = p["x"]
    axes = tuple(range(2, x.ndim))
    eps = float(_get(p, "epsilon", 1e-5))
    out = (x - x.mean(axis=axes, keepdims=True)) / np.sqrt(x.var(axis=axes, keepdims=True) + eps)
    if p.get("gamma") is not None:
        out = out * _along(p["gamma"], 1, x.ndim)
    if p.get("beta") is not None:
        out = out + _along(p["beta"], 1, x.ndim)
    return out


@op("layer_norm")
def _layer_norm(p: Params) -> np.ndarray:
    x = p["x"]
    axes = tuple(int(a) % x.ndim for a in _ints(p["axes"])) if p.get("axes") is not None else tuple(range(x.ndim))
    eps = float(_get(p, "epsilon", 1e-5))
    out = (x - x.mean(axis=axes, keepdims=True)) / np.sqrt(x.var(axis=axes, keepdims=True) + eps)
    if p.get("gamma") is not None:
        out = out * p["gamma"]
    if p.get("beta") is not None:
        out = out + p["beta"]
    return out


# ----- activations -------------------------------------------------------------------------------
_erf = np.frompyfunc(math.erf, 1, 1)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # no overflow warning for large |x|


OPS["relu"] = lambda p: np.maximum(p["x"], 0)
OPS["relu6"] = lambda p: np.clip(p["x"], 0, 6)
OPS["sigmoid"] = lambda p: _sigmoid(p["x"])
OPS["tanh"] = lambda p: np.tanh(p["x"])
OPS["silu"] = lambda p: p["x"] * _sigmoid(p["x"])
OPS["softplus"] = lambda p: np.logaddexp(0, p["x"])
OPS["softsign"] = lambda p: p["x"] / (1 + np.abs(p["x"]))
OPS["elu"] = lambda p: np.where(p["x"] > 0, p["x"], float(_get(p, "alpha", 1.0)) * np.expm1(np.minimum(p["x"], 0)))
OPS["leaky_relu"] = lambda p: np.where(p["x"] >= 0, p["x"], float(_get(p, "alpha", 0.01)) * p["x"])
OPS["thresholded_relu"] = lambda p: np.where(p["x"] > float(_get(p, "alpha", 1.0)), p["x"], 0)
OPS["clamped_relu"] = lambda p: np.minimum(np.where(p["x"] >= 0, p["x"], float(_get(p, "alpha", 0.0)) * p["x"]),
                                           float(_get(p, "beta", 6.0)))
OPS["clip"] = lambda p: np.clip(p["x"], float(p["alpha"]), float(p["beta"]))
OPS["sigmoid_hard"] = lambda p: np.clip(float(_get(p, "alpha", 0.2)) * p["x"] + float(_get(p, "beta", 0.5)), 0, 1)
OPS["scaled_tanh"] = lambda p: float(_get(p, "alpha", 1.0)) * np.tanh(float(_get(p, "beta", 1.0)) * p["x"])
OPS["linear_activation"] = lambda p: float(_get(p, "alpha", 1.0)) * p["x"] + float(_get(p, "beta", 0.0))


@op("prelu")
def _prelu(p: Params) -> np.ndarray:
    x = p["x"]
    return np.where(x >= 0, x, _along(p["alpha"], 1, x.ndim) * x)


@op("gelu")
def _gelu(p: Params) -> np.ndarray:
    x = p["x"]
    mode = str(_get(p, "mode", "EXACT"))
    if mode == "TANH_APPROXIMATION":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    if mode == "SIGMOID_APPROXIMATION":
        return x * _sigmoid(1.702 * x)
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)).astype(np.float32))


@op("softmax")
def _softmax(p: Params) -> np.ndarray:
    x = p["x"]
    axis = int(_get(p, "axis", -1))
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# ----- elementwise -------------------------------------------------------------------------------
_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "real_div": np.divide,
    "maximum": np.maximum, "minimum": np.minimum, "pow": np.power, "floor_div": np.floor_divide,
    "mod": np.mod, "equal": np.equal, "not_equal": np.not_equal, "less": np.less,
    "less_equal": np.less_equal, "greater": np.greater, "greater_equal": np.greater_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor,
}


def _binary(fn: Callable[[Any, Any], Any]) -> Callable[[Params], Any]:
    return lambda p: fn(p["x"], p["y"])


def _unary(fn: Callable[[Any], Any]) -> Callable[[Params], Any]:
    return lambda p: fn(p["x"])


for _name, _fn in _BINARY.items():
    OPS[_name] = _binary(_fn)

_UNARY: dict[str, Callable[[Any], Any]] = {
    "abs": np.abs, "sqrt": np.sqrt, "exp": np.exp, "exp2": np.exp2, "square": np.square,
    "floor": np.floor, "ceil": np.ceil, "round": np.round, "sign": np.sign, "sin": np.sin, "cos": np.cos,
    "tan": np.tan, "atan": np.arctan, "logical_not": np.logical_not, "identity": lambda x: x,
}
for _name, _fn in _UNARY.items():
    OPS[_name] = _unary(_fn)

OPS["erf"] = lambda p: _erf(p["x"]).astype(np.float32)
OPS["rsqrt"] = lambda p: 1.0 / np.sqrt(p["x"] + float(_get(p, "epsilon", 1e-12)))
OPS["log"] = lambda p: np.log(p["x"] + float(_get(p, "epsilon", 1e-45)))
OPS["inverse"] = lambda p: 1.0 / (p["x"] + float(_get(p, "epsilon", 1e-4)))
OPS["threshold"] = lambda p: np.maximum(p["x"], float(p["alpha"]))
OPS["select"] = lambda p: np.where(p["cond"], p["a"], p["b"])


@op("cast")
def _cast(p: Params) -> np.ndarray:
    return np.asarray(p["x"])  # the evaluator casts to the declared output type


# ----- pooling ------------------------------------------------------------------------------------
def _pool(p: Params, reduce: str) -> np.ndarray:
    x = p["x"]
    kernel = _ints(p["kernel_sizes"])
    rank = len(kernel)
    strides = _ints(_get(p, "strides", [1] * rank))
    pads = _pads(_get(p, "pad_type", "valid"), p.get("pad"), x.shape[2:], kernel, strides, [1] * rank)
    ceil_mode = bool(_get(p, "ceil_mode", False))
    axes = tuple(range(-rank, 0))
    if reduce == "max":
        return _windows(x, kernel, strides, [1] * rank, pads, ceil_mode, fill=-np.inf).max(axis=axes)
    if reduce == "l2":
        return np.sqrt(np.square(_windows(x, kernel, strides, [1] * rank, pads, ceil_mode)).sum(axis=axes))
    total = _windows(x, kernel, strides, [1] * rank, pads, ceil_mode).sum(axis=axes)
    if bool(_get(p, "exclude_padding_from_average", False)):
        ones = np.ones((1, 1, *x.shape[2:]), np.float32)
        count = _windows(ones, kernel, strides, [1] * rank, pads, ceil_mode).sum(axis=axes)
    else:
        count = float(np.prod(kernel))
    return total / count


OPS["max_pool"] = lambda p: _pool(p, "max")
OPS["avg_pool"] = lambda p: _pool(p, "avg")
OPS["l2_pool"] = lambda p: _pool(p, "l2")


# ----- reductions ---------------------------------------------------------------------------------
def _reduction(fn: Callable[..., np.ndarray]) -> Callable[[Params], np.ndarray]:
    def run(p: Params) -> np.ndarray:
        x = p["x"]
        axes = p.get("axes")
        axes = None if axes is None else tuple(int(a) % x.ndim for a in _ints(axes))
        return fn(x, axis=axes, keepdims=bool(_get(p, "keep_dims", False)))

    return run


OPS["reduce_mean"] = _reduction(np.mean)
OPS["reduce_sum"] = _reduction(np.sum)
OPS["reduce_max"] = _reduction(np.max)
OPS["reduce_min"] = _reduction(np.min)
OPS["reduce_prod"] = _reduction(np.prod)
OPS["reduce_l1_norm"] = _reduction(lambda x, **k: np.sum(np.abs(x), **k))
OPS["reduce_l2_norm"] = _reduction(lambda x, **k: np.sqrt(np.sum(np.square(x), **k)))
OPS["reduce_sum_square"] = _reduction(lambda x, **k: np.sum(np.square(x), **k))
OPS["reduce_log_sum"] = _reduction(lambda x, **k: np.log(np.sum(x, **k)))
OPS["reduce_log_sum_exp"] = _reduction(
    lambda x, axis, keepdims: np.log(np.sum(np.exp(x - x.max(axis=axis, keepdims=True)), axis=axis,
                                            keepdims=keepdims)) + x.max(axis=axis, keepdims=keepdims))


def _arg_reduction(fn: Callable[..., np.ndarray]) -> Callable[[Params], np.ndarray]:
    def run(p: Params) -> np.ndarray:
        axis = int(_get(p, "axis", -1))
        out = fn(p["x"], axis=axis)
        return np.expand_dims(out, axis) if bool(_get(p, "keep_dims", False)) else out

    return run


OPS["reduce_argmax"] = _arg_reduction(np.argmax)
OPS["reduce_argmin"] = _arg_reduction(np.argmin)


# ----- shapes -------------------------------------------------------------------------------------
@op("reshape")
def _reshape(p: Params) -> np.ndarray:
    x = p["x"]
    shape = [x.shape[i] if d == 0 and i < x.ndim else d for i, d in enumerate(_ints(p["shape"]))]
    return x.reshape(shape)


OPS["transpose"] = lambda p: np.transpose(p["x"], _ints(p["perm"]))
OPS["squeeze"] = lambda p: np.squeeze(p["x"], axis=None if p.get("axes") is None else tuple(_ints(p["axes"])))
OPS["expand_dims"] = lambda p: np.expand_dims(p["x"], tuple(_ints(p["axes"])))
OPS["shape"] = lambda p: np.asarray(np.shape(p["x"]), np.int32)
OPS["tile"] = lambda p: np.tile(p["x"], _ints(p["reps"]))
OPS["reverse"] = lambda p: np.flip(p["x"], axis=None if p.get("axes") is None else tuple(_ints(p["axes"])))


@op("concat")
def _concat(p: Params) -> np.ndarray:
    values = [np.asarray(v) for v in p["values"]]
    axis = int(p["axis"])
    if bool(_get(p, "interleave", False)):
        stacked = np.stack(values, axis=axis % values[0].ndim + 1)
        shape = list(values[0].shape)
        shape[axis] = sum(v.shape[axis] for v in values)
        return stacked.reshape(shape)
    return np.concatenate(values, axis=axis)


@op("stack")
def _stack(p: Params) -> np.ndarray:
    return np.stack([np.asarray(v) for v in p["values"]], axis=int(p["axis"]))


@op("split")
def _split(p: Params) -> tuple[np.ndarray, ...]:
    x = p["x"]
    axis = int(p["axis"])
    if p.get("split_sizes") is not None:
        points = np.cumsum(_ints(p["split_sizes"]))[:-1]
        return tuple(np.split(x, points, axis=axis))
    return tuple(np.split(x, int(p["num_splits"]), axis=axis))


@op("pad")
def _pad(p: Params) -> np.ndarray:
    x = p["x"]
    values = _ints(p["pad"])
    k = len(values) // 2
    widths = [(0, 0)] * (x.ndim - k) + [(values[2 * i], values[2 * i + 1]) for i in range(k)]
    mode = str(_get(p, "mode", "constant"))
    if mode == "constant":
        return np.pad(x, widths, constant_values=float(_get(p, "constant_val", 0.0)))
    return np.pad(x, widths, mode={"reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode])


@op("crop")
def _crop(p: Params) -> np.ndarray:
    """[top, bottom] rows and [left, right] columns off the last two axes (Keras's Cropping1D, as
    coremltools writes it on the rank-4 form of a Conv1D's activations: SpliceAI, found by the trial)."""
    x, (top, bottom), (left, right) = p["x"], _ints(p["crop_height"]), _ints(p["crop_width"])
    return x[..., top:x.shape[-2] - bottom, left:x.shape[-1] - right]


@op("slice_by_index")
def _slice_by_index(p: Params) -> np.ndarray:
    x = p["x"]
    n = x.ndim
    begin, end = _ints(p["begin"]), _ints(p["end"])
    stride = _ints(p["stride"]) if p.get("stride") is not None else [1] * n
    begin_mask, end_mask = _bools(p.get("begin_mask"), n), _bools(p.get("end_mask"), n)
    squeeze = _bools(p.get("squeeze_mask"), n)
    index: list[Any] = []
    for i in range(n):
        if squeeze[i]:
            index.append(begin[i])
            continue
        b = None if begin_mask[i] else begin[i]
        e = None if end_mask[i] else end[i]
        index.append(slice(b, e, stride[i]))
    return x[tuple(index)]


@op("slice_by_size")
def _slice_by_size(p: Params) -> np.ndarray:
    x = p["x"]
    begin, size = _ints(p["begin"]), _ints(p["size"])
    index = tuple(slice(b % x.shape[i] if b < 0 else b, None if s == -1 else (b % x.shape[i] if b < 0 else b) + s)
                  for i, (b, s) in enumerate(zip(begin, size)))
    return x[index]


@op("gather")
def _gather(p: Params) -> np.ndarray:
    x, indices = p["x"], np.asarray(p["indices"]).astype(np.int64)
    axis = int(_get(p, "axis", 0))
    if int(_get(p, "batch_dims", 0)) != 0:
        raise NotImplementedError("gather with batch_dims")
    return np.take(x, indices, axis=axis)


@op("gather_along_axis")
def _gather_along_axis(p: Params) -> np.ndarray:
    return np.take_along_axis(p["x"], np.asarray(p["indices"]).astype(np.int64), axis=int(_get(p, "axis", 0)))


@op("upsample_nearest_neighbor")
def _upsample_nearest(p: Params) -> np.ndarray:
    x = p["x"]
    sh, sw = float(_get(p, "scale_factor_height", 1)), float(_get(p, "scale_factor_width", 1))
    h, w = x.shape[-2:]
    rows = np.minimum(np.floor(np.arange(math.floor(h * sh)) / sh).astype(int), h - 1)
    cols = np.minimum(np.floor(np.arange(math.floor(w * sw)) / sw).astype(int), w - 1)
    return x[..., rows, :][..., cols]


@op("upsample_bilinear")
def _upsample_bilinear(p: Params) -> np.ndarray:
    """The grid of MIL's upsample_bilinear documentation: spacing (in-1)/(out-1) from 0 with
    align_corners, else in/out with half-pixel centres; each point clamped to [0, in-1]
    and read by linear interpolation between its two neighbours, along H then W."""
    x = np.asarray(p["x"], np.float32)
    sh, sw = float(_get(p, "scale_factor_height", 1)), float(_get(p, "scale_factor_width", 1))
    corners = bool(_get(p, "align_corners", True))
    h, w = x.shape[-2:]
    for axis, size, factor in ((-2, h, sh), (-1, w, sw)):
        out = math.floor(size * factor)
        i = np.arange(out, dtype=np.float64)
        if corners:
            grid = i * ((size - 1) / (out - 1) if out > 1 else 0.0)
        else:
            spacing = size / out
            grid = i * spacing + 0.5 * spacing - 0.5
        grid = np.clip(grid, 0, size - 1)
        lo = np.floor(grid).astype(int)
        hi = np.minimum(lo + 1, size - 1)
        frac = (grid - lo).astype(np.float32)
        shape = [1] * x.ndim
        shape[axis] = out
        frac = frac.reshape(shape)
        x = np.take(x, lo, axis=axis) * (1 - frac) + np.take(x, hi, axis=axis) * frac
    return x


# ----- classifier ---------------------------------------------------------------------------------
@op("classify")
def _classify(p: Params) -> tuple[str, dict[str, float]]:
    probabilities = np.asarray(p["probabilities"], np.float64).reshape(-1)
    classes = [str(c if not isinstance(c, np.ndarray) else c.item()) for c in p["classes"]]
    if len(classes) != probabilities.size:
        raise ValueError(f"classify has {len(classes)} classes for {probabilities.size} probabilities")
    return classes[int(np.argmax(probabilities))], dict(zip(classes, probabilities.tolist()))
