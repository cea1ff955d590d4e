"""Before an int16x8 quantization: operators with no int16 path, written in float as ones with one.

The int16-activation remedy is what rescues models whose activations span a wide range
(MediaPipe's pose detector: 78 % of its detections kept with int8 activations, 89 % with
int16, measured on the corpus photos). But ai-edge-quantizer 0.10's int16x8 recipe has no
rule for PRELU, LEAKY_RELU, HARD_SWISH, DEPTH_TO_SPACE or SPACE_TO_DEPTH, and LiteRT has no
int16 kernel for PRELU (activations.cc: float, uint8, int8) or DEPTH_TO_SPACE / SPACE_TO_DEPTH
(float, uint8, int8, int32, int64), so a model with any of them had no int16x8 model at all.
Each is rewritten into operators that the recipe and both runtimes take in int16:

    PRELU(x, alpha)      = RELU(x) + alpha * (x - RELU(x))
    LEAKY_RELU(x, a)     = MAXIMUM(x, a * x)                      (0 <= a <= 1)
    HARD_SWISH(x)        = x * (6 - RELU(6 - RELU(x + 3))) / 6    (RELU6 and MINIMUM lack a rule)
    DEPTH_TO_SPACE(x, b) = RESHAPE [n, h, w, b, b, c] -> TRANSPOSE (0, 1, 3, 2, 4, 5)
                           -> RESHAPE [n, h*b, w*b, c]
    SPACE_TO_DEPTH(x, b) = RESHAPE [n, h/b, b, w/b, b, c] -> TRANSPOSE (0, 1, 3, 2, 4, 5)
                           -> RESHAPE [n, h/b, w/b, b*b*c]

(TensorFlow's DCR order, which TFLite's kernels use; with n = 1 the batch axis is left out of
the split, so the TRANSPOSE is 5-D.) The float model is rewritten, then
calibrated and quantized as any other: each new tensor gets its own calibrated range. The
rewrite only runs for the int16x8 remedy; the int8 model keeps the original operators (their
int8 kernels exist, ``integer_activations``). tests/test_int16_rewrites.py checks each rewrite
against the original operator in LiteRT, in float: to the last bit, HARD_SWISH to float rounding
(its arithmetic is reordered).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgeserve.tflite.metadata import pack_model, schema_module, unpack_model

# BuiltinOperator values of the TFLite schema.
_ADD, _DEPTH_TO_SPACE, _MUL, _RELU, _RESHAPE, _SPACE_TO_DEPTH = 0, 5, 18, 19, 22, 26
_TRANSPOSE, _SUB, _PRELU, _MAXIMUM, _LEAKY_RELU, _HARD_SWISH = 39, 41, 54, 55, 98, 117
_FLOAT32, _INT32 = 0, 2
REWRITTEN = {_PRELU: "PRELU", _LEAKY_RELU: "LEAKY_RELU", _DEPTH_TO_SPACE: "DEPTH_TO_SPACE",
             _SPACE_TO_DEPTH: "SPACE_TO_DEPTH", _HARD_SWISH: "HARD_SWISH"}


def rewrite_for_int16(model_bytes: bytes) -> tuple[bytes, dict[str, int]]:
    """The float model with the operators above rewritten, and how many of each were; the
    bytes come back unchanged when there were none."""
    if not _has_any(model_bytes):
        return model_bytes, {}
    model = unpack_model(model_bytes)
    done: dict[str, int] = {}
    for graph in model.subgraphs or []:
        rewritten = []
        for op in graph.operators or []:
            code = _code(model, op)
            replacement = _rewrite(model, graph, op, code) if code in REWRITTEN else None
            if replacement is None:
                rewritten.append(op)
                continue
            rewritten += replacement
            done[REWRITTEN[code]] = done.get(REWRITTEN[code], 0) + 1
        graph.operators = rewritten
    if not done:
        return model_bytes, {}
    return pack_model(model, len(model_bytes) * 2), done


def _has_any(model_bytes: bytes) -> bool:
    from edgeserve.tflite.model import TfliteModel

    return any(name in TfliteModel.from_bytes(model_bytes).op_counts_all() for name in REWRITTEN.values())


def _code(model: Any, op: Any) -> int:
    code = model.operatorCodes[op.opcodeIndex]
    return 0 if code.customCode else max(code.builtinCode or 0, code.deprecatedBuiltinCode or 0)


def _rewrite(model: Any, graph: Any, op: Any, code: int) -> list[Any] | None:
    """The operators that replace ``op``, or None to keep it (a form this rewrite does not cover)."""
    if len(op.outputs) != 1 or graph.tensors[op.outputs[0]].type != _FLOAT32:
        return None
    new = _Builder(model, graph, op)
    x, y = int(op.inputs[0]), int(op.outputs[0])
    if code == _PRELU:
        positive, negative, scaled = new.like(y, "relu"), new.like(y, "negative"), new.like(y, "scaled")
        return [new.op(_RELU, [x], [positive]),
                new.op(_SUB, [x, positive], [negative], "SubOptions"),
                new.op(_MUL, [negative, int(op.inputs[1])], [scaled], "MulOptions"),
                new.op(_ADD, [positive, scaled], [y], "AddOptions")]
    if code == _HARD_SWISH:
        # x * min(max(x + 3, 0), 6) / 6, with min(r, 6) as 6 - RELU(6 - r): the int16 recipe
        # has RELU, ADD, SUB and MUL, but neither RELU6 nor MINIMUM.
        shifted, low, headroom, clipped = (new.like(y, name) for name in ("plus3", "relu", "headroom", "relu6"))
        product = new.like(y, "product")
        three, six = new.constant("three", np.float32(3.0), _FLOAT32), new.constant("six", np.float32(6.0), _FLOAT32)
        cut = new.like(y, "cut")
        return [new.op(_ADD, [x, three], [shifted], "AddOptions"),
                new.op(_RELU, [shifted], [low]),
                new.op(_SUB, [six, low], [headroom], "SubOptions"),
                new.op(_RELU, [headroom], [cut]),
                new.op(_SUB, [six, cut], [clipped], "SubOptions"),
                new.op(_MUL, [x, clipped], [product], "MulOptions"),
                new.op(_MUL, [product, new.constant("sixth", np.float32(1 / 6), _FLOAT32)], [y], "MulOptions")]
    if code == _LEAKY_RELU:
        alpha = float(op.builtinOptions.alpha) if op.builtinOptions is not None else 0.0  # the schema default
        if not 0.0 <= alpha <= 1.0:  # then it is a MINIMUM, which the int16 recipe lacks
            return None
        scaled = new.like(y, "scaled")
        return [new.op(_MUL, [x, new.constant("alpha", np.float32(alpha), _FLOAT32)], [scaled], "MulOptions"),
                new.op(_MAXIMUM, [x, scaled], [y])]
    block = int(op.builtinOptions.blockSize)
    shape = [int(d) for d in graph.tensors[x].shape]
    if len(shape) != 4 or block < 1:
        return None
    n, h, w, c = shape
    if code == _DEPTH_TO_SPACE:
        if c % (block * block):
            return None
        split = [n, h, w, block, block, c // (block * block)]
        final = [n, h * block, w * block, c // (block * block)]
    else:
        if h % block or w % block:
            return None
        split = [n, h // block, block, w // block, block, c]
        final = [n, h // block, w // block, block * block * c]
    # Both swap the two middle axes of the split. A batch of 1 is left out of it, so the
    # TRANSPOSE is 5-D: TFLM's stops at 5 dimensions (transpose_common.cc), LiteRT's at 6.
    if n == 1:
        split = split[1:]
    perm = [0, 2, 1, 3, 4] if n == 1 else [0, 1, 3, 2, 4, 5]
    moved = [split[p] for p in perm]
    parts, turned = new.tensor("split", split), new.tensor("moved", moved)
    return [new.reshape(x, parts, split),
            new.op(_TRANSPOSE, [parts, new.constant("perm", np.array(perm, np.int32), _INT32)],
                   [turned], "TransposeOptions"),
            new.reshape(turned, y, final)]


class _Builder:
    """New tensors and operators in one graph, named after the operator they replace."""
    def __init__(self, model: Any, graph: Any, op: Any) -> None:
        self.model, self.graph = model, graph
        name = graph.tensors[op.outputs[0]].name
        self.prefix = name.decode() if isinstance(name, bytes) else (name or "rewritten")
        self.schema = schema_module()

    def _add(self, suffix: str, shape: list[int], dtype: int, data: np.ndarray | None) -> int:
        tensor = self.schema.TensorT()
        tensor.shape, tensor.type, tensor.name = list(shape), dtype, f"{self.prefix}/int16_{suffix}".encode()
        buffer = self.schema.BufferT()
        if data is not None:
            buffer.data = np.frombuffer(np.ascontiguousarray(data).astype(data.dtype.newbyteorder("<")).tobytes(),
                                        np.uint8)
        self.model.buffers.append(buffer)
        tensor.buffer = len(self.model.buffers) - 1
        self.graph.tensors.append(tensor)
        return len(self.graph.tensors) - 1

    def tensor(self, suffix: str, shape: list[int]) -> int:
        return self._add(suffix, shape, _FLOAT32, None)

    def like(self, index: int, suffix: str) -> int:
        return self.tensor(suffix, [int(d) for d in self.graph.tensors[index].shape])

    def constant(self, suffix: str, values: np.ndarray, dtype: int) -> int:
        values = np.asarray(values)
        return self._add(suffix, list(values.shape), dtype, values.reshape(-1) if values.ndim else values.reshape(1))

    def op(self, builtin: int, inputs: list[int], outputs: list[int], options: str | None = None) -> Any:
        from edgeserve.tflite.edit import builtin_code

        op = self.schema.OperatorT()
        op.opcodeIndex = builtin_code(self.model, builtin, version=1)
        op.inputs, op.outputs = list(inputs), list(outputs)
        if options is not None:
            op.builtinOptionsType = getattr(self.schema.BuiltinOptions, options)
            op.builtinOptions = getattr(self.schema, f"{options}T")()
        return op

    def reshape(self, source: int, target: int, shape: list[int]) -> Any:
        op = self.op(_RESHAPE, [source, self.constant(f"shape{len(shape)}_{target}", np.array(shape, np.int32), _INT32)],
                     [target], "ReshapeOptions")
        op.builtinOptions.newShape = list(shape)
        return op
