"""The data movement operators as mcu-c steps: TRANSPOSE, slices, PAD, CONCATENATION, SPLIT,
DEPTH_TO_SPACE/SPACE_TO_DEPTH, both resizes, and the aliases (RESHAPE, SQUEEZE, EXPAND_DIMS).

No arithmetic: each becomes strided copies over at most 4 axes (es_copy.c) or a resize's row
and column tables (es_resize.c). An int16 tensor moves as bytes (int16.copy_in_bytes). Mixed
into :class:`edgeserve.converters.mcu_c.lower.Lowering`, whose helpers it uses.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgeserve.converters.mcu_c import int16
from edgeserve.converters.microcontroller import quant
from edgeserve.converters.mcu_c.lower_base import KERNEL_SOURCES, _merged_axes, _pad4, _q, _refuse, _row_major
from edgeserve.converters.mcu_c.steps import ConstArray, Ref, Step, StructArray
from edgeserve.tflite.model import Operator, Tensor


class DataMovement:
    """Lowering's methods for operators that move values without computing new ones."""

    def _split_v(self, op: Operator) -> list[Step]:
        """One strided copy per output (SPLIT_V: sizes given; SPLIT: equal parts)."""
        data = op.inputs[0] if op.op_name == "SPLIT_V" else op.inputs[1]
        axis_tensor = op.inputs[2] if op.op_name == "SPLIT_V" else op.inputs[0]
        x = self.tensor(data)
        if x.is_constant or len(x.shape) > 4:
            raise _refuse(op, "on a constant or more than 4-D input")
        k = 4 - len(x.shape)
        axis = int(self.model.tensor_data(0, axis_tensor).reshape(-1)[0]) % len(x.shape) + k
        dims = _pad4(x.shape)
        strides = _row_major(dims)
        steps, offset = [], 0
        for out in op.outputs:
            y = self.tensor(out)
            if _q(y) != _q(x):
                raise _refuse(op, "whose outputs are quantized differently from its input")
            part = _pad4(y.shape)
            params = {"dims": part, "in_offset": offset * strides[axis], "in_strides": strides,
                      "out_offset": 0, "out_strides": _row_major(part)}
            if y.dtype_name == "int16":
                params = self._in_bytes(op, params, 2)
            steps.append(Step(op.index, op.op_name, "es_copy4d", "es_copy_params", params, [], (data,), out,
                              None, KERNEL_SOURCES[op.op_name]))
            offset += part[axis]
        return steps

    def _split(self, op: Operator) -> list[Step]:
        return self._split_v(op)

    def _data_input(self, op: Operator, position: int = 0) -> Tensor:
        tensor = self.tensor(op.inputs[position])
        if tensor.is_constant:
            raise _refuse(op, "with a constant data input")
        return tensor

    def _same_quantization(self, op: Operator, tensors: list[Tensor], y: Tensor) -> None:
        for t in tensors:
            if _q(t) != _q(y):
                raise _refuse(op, "whose inputs and output are quantized differently")

    def _copy_step(self, op: Operator, kernel: str, params_type: str, params: dict[str, Any],
                   inputs: tuple[int, ...], **extra: Any) -> Step:
        itemsize = self.tensor(op.outputs[0]).nbytes // max(1, int(np.prod(self.tensor(op.outputs[0]).shape)))
        if itemsize > 1:  # int16: the same moves over bytes (int16.copy_in_bytes)
            if params_type == "es_copy_params":
                params = self._in_bytes(op, params, itemsize)
            elif params_type == "es_pad_params":
                if params["value"] != 0:
                    raise _refuse(op, f"padding int16 with {params['value']} (the 16x8 scheme's zero point is 0)")
                params = {**params, "interior": self._in_bytes(op, params["interior"], itemsize)}
            for array in extra.get("struct_arrays", []):
                array.items[:] = [self._in_bytes(op, item, itemsize) for item in array.items]
        return Step(op.index, op.op_name, kernel, params_type, params, [], inputs, op.outputs[0],
                    None, KERNEL_SOURCES[op.op_name], **extra)

    def _in_bytes(self, op: Operator, params: dict[str, Any], itemsize: int) -> dict[str, Any]:
        moved = int16.copy_in_bytes(params, itemsize)
        if moved is None:
            raise _refuse(op, "on int16 tensors with a first axis longer than 1 (a batch)")
        return moved

    def _gather_nd(self, op: Operator) -> Step:
        """GATHER_ND with constant indices: each output row is the input row its index names
        (rows of the input's trailing axes the indices do not address)."""
        x, y = self._data_input(op), self.tensor(op.outputs[0])
        self._same_quantization(op, [x], y)
        if not self.tensor(op.inputs[1]).is_constant:
            raise _refuse(op, "with indices computed at run time")
        indices = self.model.tensor_data(0, op.inputs[1]).astype(np.int64)
        depth = int(indices.shape[-1]) if indices.ndim else 0
        addressed = [int(d) for d in x.shape[:depth]]
        if not 1 <= depth <= len(x.shape):
            raise _refuse(op, f"with index depth {depth} on a {len(x.shape)}-D input")
        rows = indices.reshape(-1, depth)
        if np.any(rows < 0) or np.any(rows >= np.array(addressed)):
            raise _refuse(op, "with an index outside its input")
        # Row-major strides of the addressed axes, in rows of the trailing axes.
        strides = np.array(_row_major(addressed), np.int64)
        flat = (rows * strides).sum(axis=1).astype(np.int32)
        itemsize = y.nbytes // max(1, int(np.prod(y.shape)))
        params = {"rows": int(len(flat)), "row_bytes": int(np.prod(x.shape[depth:], dtype=np.int64)) * itemsize,
                  "index": Ref(f"g{op.index}")}
        if params["rows"] * params["row_bytes"] != y.nbytes:
            raise _refuse(op, f"whose rows do not give its output shape {list(y.shape)}")
        return Step(op.index, op.op_name, "es_gather", "es_gather_params", params,
                    [ConstArray(f"g{op.index}", "int32_t", flat)], (op.inputs[0],), op.outputs[0], None,
                    KERNEL_SOURCES[op.op_name])

    def _transpose(self, op: Operator) -> Step:
        x, y = self._data_input(op), self.tensor(op.outputs[0])
        self._same_quantization(op, [x], y)
        perm = [int(v) for v in self.model.tensor_data(0, op.inputs[1]).reshape(-1)]
        # Axes of size 1, and axes that stay side by side, do not change the copy: a 5-D
        # TRANSPOSE at batch 1 (DEPTH_TO_SPACE as the int16 remedy writes it) is a 4-D one.
        shape, perm = _merged_axes(tuple(int(d) for d in x.shape), perm)
        if len(shape) > 4:
            raise _refuse(op, "on more than 4 dimensions")
        k = 4 - len(shape)
        dims4 = _pad4(shape)
        perm4 = list(range(k)) + [p + k for p in perm]
        strides = _row_major(dims4)
        out_dims = [dims4[a] for a in perm4]
        params = {"dims": out_dims, "in_offset": 0, "in_strides": [strides[a] for a in perm4],
                  "out_offset": 0, "out_strides": _row_major(out_dims)}
        return self._copy_step(op, "es_copy4d", "es_copy_params", params, (op.inputs[0],))

    def _strided_slice(self, op: Operator) -> Step:
        x, y = self._data_input(op), self.tensor(op.outputs[0])
        self._same_quantization(op, [x], y)
        o = op.options
        if o.get("ellipsis_mask", 0) or o.get("new_axis_mask", 0) or o.get("offset", False):
            raise _refuse(op, "with an ellipsis, new axes or offset=True")
        begin, end, step = (self.model.tensor_data(0, i).reshape(-1).tolist() for i in op.inputs[1:4])
        starts, counts, steps = [], [], []
        for axis, size in enumerate(x.shape):
            b = None if o.get("begin_mask", 0) >> axis & 1 else begin[axis]
            e = None if o.get("end_mask", 0) >> axis & 1 else end[axis]
            s = step[axis]
            if o.get("shrink_axis_mask", 0) >> axis & 1:
                b = begin[axis] + size if begin[axis] < 0 else begin[axis]
                e, s = b + 1, 1
            start, stop, stride = slice(b, e, s).indices(size)
            starts.append(start)
            counts.append(len(range(start, stop, stride)))
            steps.append(stride)
        if int(np.prod(counts)) != int(np.prod(y.shape)) or len(x.shape) > 4:
            raise _refuse(op, f"whose slice ({counts}) does not give its output shape {list(y.shape)}")
        k = 4 - len(x.shape)
        in_strides = _row_major(_pad4(x.shape))
        counts4 = [1] * k + counts
        params = {"dims": counts4, "in_offset": sum(st * in_strides[k + a] for a, st in enumerate(starts)),
                  "in_strides": [in_strides[a] * ([1] * k + steps)[a] for a in range(4)],
                  "out_offset": 0, "out_strides": _row_major(counts4)}
        return self._copy_step(op, "es_copy4d", "es_copy_params", params, (op.inputs[0],))

    def _slice(self, op: Operator) -> Step:
        x, y = self._data_input(op), self.tensor(op.outputs[0])
        self._same_quantization(op, [x], y)
        begin, size = (self.model.tensor_data(0, i).reshape(-1).tolist() for i in op.inputs[1:3])
        counts = [dim - b if s == -1 else s for dim, b, s in zip(x.shape, begin, size)]  # -1: to the end
        if len(x.shape) > 4 or counts != list(y.shape):
            raise _refuse(op, f"whose slice ({counts}) does not give its output shape {list(y.shape)}")
        k = 4 - len(x.shape)
        in_strides = _row_major(_pad4(x.shape))
        counts4 = [1] * k + counts
        params = {"dims": counts4, "in_offset": sum(b * in_strides[k + a] for a, b in enumerate(begin)),
                  "in_strides": in_strides, "out_offset": 0, "out_strides": _row_major(counts4)}
        return self._copy_step(op, "es_copy4d", "es_copy_params", params, (op.inputs[0],))

    def _pad(self, op: Operator) -> Step:
        x, y = self._data_input(op), self.tensor(op.outputs[0])
        self._same_quantization(op, [x], y)
        if len(x.shape) > 4:
            raise _refuse(op, "on more than 4 dimensions")
        paddings = self.model.tensor_data(0, op.inputs[1]).reshape(-1, 2).tolist()
        value = _q(y)[1]
        if op.op_name == "PADV2" and len(op.inputs) > 2 and op.inputs[2] >= 0:
            value = int(self.const(op.inputs[2], y.dtype_name).reshape(-1)[0])
        k = 4 - len(x.shape)
        out_dims = _pad4(y.shape)
        out_strides = _row_major(out_dims)
        before = [0] * k + [int(p[0]) for p in paddings]
        interior = {"dims": _pad4(x.shape), "in_offset": 0, "in_strides": _row_major(_pad4(x.shape)),
                    "out_offset": sum(b * st for b, st in zip(before, out_strides)), "out_strides": out_strides}
        return self._copy_step(op, "es_pad", "es_pad_params",
                               {"out_bytes": y.nbytes, "value": value, "interior": interior}, (op.inputs[0],))

    def _padv2(self, op: Operator) -> Step:
        return self._pad(op)

    def _concatenation(self, op: Operator) -> Step:
        inputs = [self._data_input(op, i) for i in range(len(op.inputs))]
        y = self.tensor(op.outputs[0])
        self._same_quantization(op, inputs, y)
        if op.options.get("fused_activation_function", 0) != 0:
            raise _refuse(op, "with a fused activation")
        if len(y.shape) > 4:
            raise _refuse(op, "on more than 4 dimensions")
        k = 4 - len(y.shape)
        axis = op.options.get("axis", 0) % len(y.shape) + k
        out_dims = _pad4(y.shape)
        out_strides = _row_major(out_dims)
        parts, offset = [], 0
        for t in inputs:
            dims = _pad4(t.shape)
            parts.append({"dims": dims, "in_offset": 0, "in_strides": _row_major(dims),
                          "out_offset": offset * out_strides[axis], "out_strides": out_strides})
            offset += dims[axis]
        array = StructArray(f"c{op.index}", "es_copy_params", parts)
        return self._copy_step(op, "es_concatenation", "es_concat_params",
                               {"count": len(parts), "parts": Ref(array.name)}, tuple(op.inputs),
                               struct_arrays=[array], pack_inputs=True)

    def _depth_to_space(self, op: Operator) -> Step:
        """out[h*b + i, w*b + j, c] = in[h, w, (i*b + j)*C + c] (TFLite's order, NHWC): one 4-D
        copy per block row i, all of them reading the one input (es_concatenation's parts)."""
        return self._block_moves(op, to_space=True)

    def _space_to_depth(self, op: Operator) -> Step:
        """The inverse: out[h, w, (i*b + j)*C + c] = in[h*b + i, w*b + j, c]."""
        return self._block_moves(op, to_space=False)

    def _block_moves(self, op: Operator, to_space: bool) -> Step:
        x, y = self._data_input(op), self.tensor(op.outputs[0])
        self._same_quantization(op, [x], y)  # TFLM's kernels require it too
        b = int(op.options.get("block_size", 0))
        if len(x.shape) != 4 or x.shape[0] != 1 or b < 1:
            raise _refuse(op, "other than batch 1 NHWC with a block size")
        deep, wide = (x, y) if to_space else (y, x)  # the [H, W, b*b*C] side and the [H*b, W*b, C] side
        _, h, w, depth = deep.shape
        c = depth // (b * b)
        deep_strides, deep_offset = [w * depth, depth, c, 1], lambda i: i * b * c
        wide_strides, wide_offset = [b * w * b * c, b * c, c, 1], lambda i: i * w * b * c
        parts = []
        for i in range(b):
            src, dst = ((deep_strides, deep_offset(i)), (wide_strides, wide_offset(i))) if to_space else \
                ((wide_strides, wide_offset(i)), (deep_strides, deep_offset(i)))
            parts.append({"dims": [h, w, b, c], "in_offset": src[1], "in_strides": src[0],
                          "out_offset": dst[1], "out_strides": dst[0]})
        array = StructArray(f"c{op.index}", "es_copy_params", parts)
        return self._copy_step(op, "es_concatenation", "es_concat_params",
                               {"count": b, "parts": Ref(array.name)}, (op.inputs[0],) * b,
                               struct_arrays=[array], pack_inputs=True)

    def _resize(self, op: Operator, bilinear: bool) -> Step:
        x, y = self._data_input(op), self.tensor(op.outputs[0])
        if len(x.shape) != 4 or len(y.shape) != 4:
            raise _refuse(op, f"on a rank-{len(x.shape)} tensor (NHWC images only)")
        align, half = bool(op.options.get("align_corners", False)), bool(op.options.get("half_pixel_centers", False))
        if align and half:
            raise _refuse(op, "with both align_corners and half_pixel_centers (TFLite refuses that too)")
        (n, in_h, in_w, depth), (_, out_h, out_w, _) = x.shape, y.shape
        params: dict[str, Any] = {"batches": n, "in_h": in_h, "in_w": in_w, "depth": depth, "out_h": out_h,
                                  "out_w": out_w}
        tables: dict[str, list[int]] = {}
        if bilinear:
            tables["y0"], tables["y1"], tables["wy"] = quant.resize_bilinear_axis(in_h, out_h, align, half)
            tables["x0"], tables["x1"], tables["wx"] = quant.resize_bilinear_axis(in_w, out_w, align, half)
        else:
            tables["y0"] = quant.resize_nearest_axis(in_h, out_h, align, half)
            tables["x0"] = quant.resize_nearest_axis(in_w, out_w, align, half)
        arrays = []
        for field in ("y0", "y1", "wy", "x0", "x1", "wx"):
            if field not in tables:
                params[field] = 0  # NULL: nearest reads only y0 and x0
                continue
            arrays.append(ConstArray(f"t{op.index}_{field}", "int32_t", np.array(tables[field], np.int32)))
            params[field] = Ref(f"t{op.index}_{field}")
        kernel = "es_resize_bilinear" if bilinear else "es_resize_nearest"
        if y.dtype_name == "int16":  # nearest moves bytes: two per value
            kernel = "es_resize_bilinear_s16" if bilinear else kernel
            params["depth"] = depth if bilinear else 2 * depth
        return Step(op.index, op.op_name, kernel, "es_resize_params", params, arrays, (op.inputs[0],),
                    op.outputs[0], None, KERNEL_SOURCES[op.op_name])

    def _resize_bilinear(self, op: Operator) -> Step:
        return self._resize(op, bilinear=True)

    def _resize_nearest_neighbor(self, op: Operator) -> Step:
        return self._resize(op, bilinear=False)

    def _squeeze(self, op: Operator) -> Step:
        return self._reshape(op)

    def _expand_dims(self, op: Operator) -> Step:
        return self._reshape(op)

    def _reshape(self, op: Operator) -> Step:
        x, y = self.tensor(op.inputs[0]), self.tensor(op.outputs[0])
        if x.nbytes != y.nbytes or (x.quantization and y.quantization and _q(x) != _q(y)):
            raise _refuse(op, "that changes the size or quantization of its tensor")
        if x.is_constant:  # an alias lives in the arena; a constant's bytes are in flash (the planner met a KeyError)
            raise _refuse(op, "of a constant tensor (nothing to compute at run time: fold it into the constant)")
        return Step(op.index, op.op_name, None, None, {}, [], (op.inputs[0],), op.outputs[0])
