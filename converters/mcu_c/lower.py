"""A full-INT8 .tflite (int8 activations, or int16 ones with int8 weights: int16.py) as a list
of kernel calls: the generator's view of the model.

Each operator becomes a :class:`Step` naming the C kernel, its parameter struct (values
computed here, once, as TFLite's Prepare would), its constant arrays, and whether its
output may overlap its input (the planner decides whether it will). RESHAPE becomes an
alias: no code, the same bytes under another shape. Anything else is refused before a
file is written. Data movement lives in lower_moves.py, activations in lower_activations.py,
what all share in lower_base.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgeserve.errors import InputError
from edgeserve.tflite.model import Operator, Subgraph, Tensor, TfliteModel
from edgeserve.converters.mcu_c import int16, state
from edgeserve.converters.microcontroller import quant
from edgeserve.converters.mcu_c.lower_activations import Activations
from edgeserve.converters.mcu_c.lower_base import (KERNEL_SOURCES, SUPPORTED, UnsupportedOperatorError,  # noqa: F401
                                                   _merged_axes, _nhwc, _pad4, _q, _refuse, _row_major)
from edgeserve.converters.mcu_c.lower_moves import DataMovement
from edgeserve.converters.mcu_c.steps import ConstArray, InPlace, Ref, Step


class Lowering(DataMovement, Activations):
    def __init__(self, model: TfliteModel) -> None:
        self.model = model
        self.variables = state.read_variables(model)
        self.graph: Subgraph = model.subgraphs[0]
        self.handles: dict[int, state.Variable] = {}  # VAR_HANDLE output -> variable
        # Where TFLM and LiteRT compute an int16 operator differently, the C follows the one that
        # judges the model: LiteRT only when TFLM cannot run it (int16.tflm_runs). Decided once.
        self.litert_judges = not int16.tflm_runs(model)

    def tensor(self, index: int) -> Tensor:
        return self.graph.tensors[index]

    def const(self, index: int, dtype: str) -> np.ndarray:
        tensor = self.tensor(index)
        if not tensor.is_constant:
            raise InputError(f"tensor {tensor.name!r} should be constant weights but is computed at run time")
        data = self.model.tensor_data(0, index)
        if data.dtype != np.dtype(dtype):
            raise InputError(f"tensor {tensor.name!r} is {data.dtype}, the int8 kernels need {dtype}")
        return data

    def steps(self) -> list[Step]:
        unsupported = sorted({op.op_name for op in self.graph.operators if op.op_name not in KERNEL_SOURCES})
        if unsupported:
            first = next(op for op in self.graph.operators if op.op_name == unsupported[0])
            raise _refuse(first, f"(also without kernels here: {', '.join(unsupported[1:])})" if len(unsupported) > 1
                          else f"(kernels exist for {', '.join(SUPPORTED)})")
        for index in (*self.graph.inputs, *self.graph.outputs):
            tensor = self.tensor(index)
            # int16: the int16x8 remedy's models, whose inputs and outputs are int16 too.
            if tensor.dtype_name not in ("int8", "int16") and not (index in self.graph.outputs
                                                                   and tensor.dtype_name == "uint8"):
                raise InputError(
                    f"the mcu-c target needs int8 model inputs and outputs; {tensor.name!r} is "
                    f"{tensor.dtype_name.lower()}. Convert with --io int8")
        steps = []
        self.folded = self._foldable_pads()
        shape_only = self._shape_arithmetic()
        for op in self.graph.operators:
            if op.index in shape_only:
                continue
            kinds = set()
            # RESHAPE's shape input is read for its shape only (and may be an empty tensor nothing writes).
            read = op.inputs[:1] if op.op_name == "RESHAPE" else op.inputs
            for index in (*read, *op.outputs):
                if index < 0 or self.tensor(index).is_constant:
                    continue
                kind = self.tensor(index).dtype_name
                allowed = kind in ("int8", "int16") or (kind == "resource" and op.op_name in state.OPERATORS) or (
                    kind == "uint8" and op.op_name == "QUANTIZE" and index in self.graph.outputs) or (
                    kind == "bool" and _takes_bool(op, index))
                if not allowed:
                    raise _refuse(op, f"on {kind} tensors (int8, and int16 activations with int8 weights)")
                kinds.add(kind)
            if "int16" in kinds and op.op_name not in int16.KERNELS:
                raise _refuse(op, "on int16 tensors (int16 activations have kernels here for "
                              f"{', '.join(sorted(int16.KERNELS))})")
            kinds.discard("bool")  # a condition or a comparison's result: of neither width
            if kinds == {"int8", "int16"} and op.op_name != "QUANTIZE":
                raise _refuse(op, "mixing int8 and int16 tensors")
            if op.op_name in ("PAD", "PADV2") and op.outputs[0] in self.folded:
                continue
            lowered = getattr(self, f"_{op.op_name.lower()}")(op)
            steps.extend(lowered if isinstance(lowered, list) else [lowered] if lowered is not None else [])
        aliases: dict[int, set[int]] = {}
        for s in steps:  # tensors that are the same bytes as a READ_VARIABLE's
            if s.kernel is None and s.inputs:
                for root, members in aliases.items():
                    if s.inputs[0] in members or s.inputs[0] == root:
                        members.add(s.output)
            if s.op == "READ_VARIABLE":
                aliases[s.output] = set()
        state.check_reads_precede_assigns(steps, aliases)
        return steps

    # ----- state ------------------------------------------------------------------------------
    def _call_once(self, op: Operator) -> None:
        return None  # the variables' initial values are copied by NAME_reset()

    def _var_handle(self, op: Operator) -> None:
        name = op.options.get("shared_name", "")
        if name not in self.variables:
            raise state.StateError(f"variable {name!r} (operator {op.index}) is never initialised by CALL_ONCE; "
                                   "-t mcu builds this model for TFLM instead")
        self.handles[op.outputs[0]] = self.variables[name]
        return None

    def _variable(self, op: Operator) -> state.Variable:
        variable = self.handles.get(op.inputs[0])
        if variable is None:
            raise state.StateError(f"{op.op_name} (operator {op.index}) uses a handle no VAR_HANDLE made")
        return variable

    def _read_variable(self, op: Operator) -> Step:
        variable = self._variable(op)
        if self.tensor(op.outputs[0]).nbytes != variable.nbytes:
            raise state.StateError(f"READ_VARIABLE (operator {op.index}) reads {variable.name!r} at another size")
        return Step(op.index, op.op_name, None, None, {"name": variable.name}, [], (), op.outputs[0],
                    state=variable.index)

    def _assign_variable(self, op: Operator) -> Step:
        variable = self._variable(op)
        value = op.inputs[1]
        if self.tensor(value).nbytes != variable.nbytes or self.tensor(value).is_constant:
            raise state.StateError(f"ASSIGN_VARIABLE (operator {op.index}) writes {variable.name!r} at another "
                                   "size or from a constant")
        return Step(op.index, op.op_name, "memcpy", None, {"name": variable.name}, [], (value,), -1,
                    state=variable.index)

    def _shape_arithmetic(self) -> set[int]:
        """Operators that only compute a RESHAPE's new shape (SHAPE -> STRIDED_SLICE -> PACK in a
        squeeze-excite block that keeps a free batch): int32 values every reader of which is such
        an operator or a RESHAPE's shape input. RESHAPE is an alias on its output's static shape,
        so they need no code; TFLM's interpreter, which runs them, checks the same model."""
        ops = self.graph.operators
        readers: dict[int, list[tuple[Operator, int]]] = {}
        for op in ops:
            for position, index in enumerate(op.inputs):
                readers.setdefault(index, []).append((op, position))
        arithmetic = ("SHAPE", "PACK", "STRIDED_SLICE", "SLICE", "CONCATENATION", "GATHER", "CAST")
        found: set[int] = set()
        for op in reversed(ops):  # readers come after their producers: decided before them
            outputs = [i for i in op.outputs if i >= 0]
            if op.op_name not in arithmetic or not outputs or any(
                    self.tensor(i).dtype_name != "int32" or i in self.graph.outputs for i in outputs):
                continue
            if all((reader.op_name == "RESHAPE" and position == 1) or reader.index in found
                   for i in outputs for reader, position in readers.get(i, [])):
                found.add(op.index)
        return found

    def _shape(self, op: Operator) -> None:
        raise _refuse(op, "except as a RESHAPE's new shape (its value is used at run time here)")

    _pack = _shape

    def _foldable_pads(self) -> dict[int, tuple[int, int, int]]:
        """PADs a convolution can do itself: padded tensor -> (unpadded tensor, top, left).

        A spatial PAD with the zero point, read only by a CONV_2D or DEPTHWISE_CONV_2D,
        adds terms filter x (zero point - zero point) = 0: the same as the kernel skipping
        those positions, which it does for its own padding. So the convolution reads the
        unpadded tensor with the PAD's top/left added to its own padding, and the padded
        copy (MobileNetV2 has 18 of them) never exists.
        """
        readers: dict[int, list[Operator]] = {}
        for op in self.graph.operators:
            for t in op.inputs:
                readers.setdefault(t, []).append(op)
        folded = {}
        for op in self.graph.operators:
            if op.op_name not in ("PAD", "PADV2") or len(op.inputs) > 2:
                continue
            x, y = self.tensor(op.inputs[0]), self.tensor(op.outputs[0])
            users = readers.get(op.outputs[0], [])
            if (len(x.shape) != 4 or x.is_constant or op.outputs[0] in self.graph.outputs or len(users) != 1
                    or users[0].op_name not in ("CONV_2D", "DEPTHWISE_CONV_2D") or users[0].inputs[0] != op.outputs[0]
                    or x.quantization is None or y.quantization is None or _q(x) != _q(y)):
                continue
            pads = self.model.tensor_data(0, op.inputs[1]).reshape(-1, 2).tolist()
            if any(pads[0]) or any(pads[3]) or min(min(p) for p in pads) < 0:
                continue
            folded[op.outputs[0]] = (op.inputs[0], int(pads[1][0]), int(pads[2][0]))
        return folded

    # ----- arithmetic (convolutions, fully connected, pools, binaries) ---------------------------
    def _conv_input(self, op: Operator) -> tuple[int, int, int]:
        """The tensor a convolution reads, and extra top/left padding from a folded PAD."""
        return self.folded.get(op.inputs[0], (op.inputs[0], 0, 0))

    def _conv_common(self, op: Operator, depthwise: bool) -> dict[str, Any]:
        source, extra_h, extra_w = self._conv_input(op)
        x, w = self.tensor(op.inputs[0]), self.tensor(op.inputs[1])
        y = self.tensor(op.outputs[0])
        n, in_h, in_w, in_c = _nhwc(x.shape)
        _, out_h, out_w, out_c = _nhwc(y.shape)
        o = op.options
        k_h, k_w = w.shape[1], w.shape[2]
        dil_h, dil_w = o.get("dilation_h_factor", 1), o.get("dilation_w_factor", 1)
        sx, zx = _q(x)
        sy, zy = _q(y)
        if w.quantization is None or any(z != 0 for z in w.quantization.zero_point):
            raise _refuse(op, "with non-zero filter zero points")
        multipliers, shifts = quant.per_channel_multipliers(sx, w.quantization.scale, sy, out_c)
        if y.dtype_name == "int16" and (zx, zy) != (0, 0):
            raise _refuse(op, f"on int16 tensors with zero points {zx} and {zy} (the 16x8 scheme's are 0)")
        act_min, act_max = int16.activation_range(o.get("fused_activation_function", 0), sy, zy, y.dtype_name)
        return {
            "batches": n, "in_h": in_h, "in_w": in_w, "in_c": in_c, "out_h": out_h, "out_w": out_w, "out_c": out_c,
            "k_h": k_h, "k_w": k_w, "k_c": 1 if depthwise else w.shape[3],
            "stride_h": o["stride_h"], "stride_w": o["stride_w"], "dil_h": dil_h, "dil_w": dil_w,
            "pad_h": quant.same_padding(in_h, k_h, o["stride_h"], dil_h, out_h) + extra_h,
            "pad_w": quant.same_padding(in_w, k_w, o["stride_w"], dil_w, out_w) + extra_w,
            "depth_multiplier": o.get("depth_multiplier", 1) if depthwise else 1,
            "in_offset": -zx, "out_offset": zy, "act_min": act_min, "act_max": act_max,
            "_multipliers": multipliers, "_shifts": shifts,
        } | ({"in_h": self.tensor(source).shape[1], "in_w": self.tensor(source).shape[2]} if source != op.inputs[0] else {})

    def _wide(self, op: Operator) -> bool:
        """Whether ``op`` computes on int16 activations (int16.py)."""
        return self.tensor(op.outputs[0]).dtype_name == "int16"

    def _bias(self, op: Operator, position: int, params: dict[str, Any]) -> list[ConstArray]:
        """The bias array, if any: int32 for int8 layers; int64 or int32 for int16 ones, which
        also sets ``acc64`` (TFLM's accumulator width follows the bias type)."""
        present = len(op.inputs) > position and op.inputs[position] >= 0
        if not self._wide(op):
            return [ConstArray(f"b{op.index}", "int32_t", self.const(op.inputs[position], "int32"))] if present else []
        if not present:  # TFLM: the options' quantized_bias_type decides (TensorType INT32 is 2)
            params["acc64"] = int(op.options.get("quantized_bias_type", 0) != 2)
            return []
        values = self.model.tensor_data(0, op.inputs[position])
        if values.dtype not in (np.int32, np.int64):
            raise _refuse(op, f"with a {values.dtype} bias (int32 or int64 for int16 activations)")
        array, params["acc64"] = int16.bias_array(str(op.index), values)
        return [array]

    def _conv_arrays(self, op: Operator, params: dict[str, Any]) -> list[ConstArray]:
        arrays = [ConstArray(f"w{op.index}", "int8_t", self.const(op.inputs[1], "int8"))]
        arrays += self._bias(op, 2, params)
        arrays.append(ConstArray(f"m{op.index}", "int32_t", np.array(params.pop("_multipliers"), np.int32)))
        arrays.append(ConstArray(f"s{op.index}", "int8_t", np.array(params.pop("_shifts"), np.int8)))
        return arrays

    def _conv_2d(self, op: Operator) -> Step:
        params = self._conv_common(op, depthwise=False)
        if params["in_c"] % params["k_c"]:
            raise _refuse(op, f"with {params['in_c']} input channels and {params['k_c']}-channel filters")
        arrays = self._conv_arrays(op, params)
        if self._wide(op):
            return Step(op.index, op.op_name, int16.KERNELS[op.op_name], "es_conv_params", params, arrays,
                        (self._conv_input(op)[0],), op.outputs[0], None, KERNEL_SOURCES[op.op_name])
        pointwise = (params["k_h"], params["k_w"], params["stride_h"], params["stride_w"], params["k_c"]) == \
            (1, 1, 1, 1, params["in_c"]) and params["batches"] == 1 and (params["pad_h"], params["pad_w"]) == (0, 0)
        same_size = (params["stride_h"], params["stride_w"], params["dil_h"], params["dil_w"], params["batches"]) == \
            (1, 1, 1, 1, 1) and (params["in_h"], params["in_w"], params["in_c"]) == \
            (params["out_h"], params["out_w"], params["out_c"]) == (params["in_h"], params["in_w"], params["k_c"])
        if pointwise:
            inplace = InPlace("end", "es_conv2d_1x1_inplace", params["in_c"])
        elif same_size:  # a k x k convolution over rows it has copied out (ring of pad_h + 1 rows)
            inplace = InPlace("start", "es_conv2d_rows_inplace", (params["pad_h"] + 1) * params["in_w"] * params["in_c"])
        else:
            inplace = None
        return Step(op.index, op.op_name, "es_conv2d", "es_conv_params", params, arrays,
                    (self._conv_input(op)[0],), op.outputs[0], inplace, KERNEL_SOURCES[op.op_name])

    def _depthwise_conv_2d(self, op: Operator) -> Step:
        params = self._conv_common(op, depthwise=True)
        if params["out_c"] != params["in_c"] * params["depth_multiplier"]:
            raise _refuse(op, "whose output channels are not input channels x depth multiplier")
        arrays = self._conv_arrays(op, params)
        if self._wide(op):
            if params.get("acc64") == 0:  # measured: TFLM then reads the int32 bias as int64 values
                raise _refuse(op, "on int16 tensors with an int32 bias (TFLM's int16 depthwise kernel takes int64 "
                              "biases only)")
            return Step(op.index, op.op_name, int16.KERNELS[op.op_name], "es_conv_params", params, arrays,
                        (self._conv_input(op)[0],), op.outputs[0], None, KERNEL_SOURCES[op.op_name])
        inplace = (InPlace("either", "es_depthwise_conv2d_inplace", params["in_h"] * params["in_w"])
                   if params["depth_multiplier"] == 1 and params["batches"] == 1
                   and params["out_h"] * params["out_w"] <= params["in_h"] * params["in_w"] else None)
        return Step(op.index, op.op_name, "es_depthwise_conv2d", "es_conv_params", params, arrays,
                    (self._conv_input(op)[0],), op.outputs[0], inplace, KERNEL_SOURCES[op.op_name])

    def _transpose_conv(self, op: Operator) -> Step:
        """Inputs: output shape (constant), filter [out_c, k_h, k_w, in_c], data, bias (optional)."""
        x, w, y = self.tensor(op.inputs[2]), self.tensor(op.inputs[1]), self.tensor(op.outputs[0])
        if x.is_constant or len(x.shape) != 4 or len(w.shape) != 4 or len(y.shape) != 4:
            raise _refuse(op, "on a constant or non-4-D input")
        n, in_h, in_w, in_c = x.shape
        _, out_h, out_w, out_c = y.shape
        o = op.options
        k_h, k_w = w.shape[1], w.shape[2]
        if w.shape[0] != out_c or w.shape[3] != in_c:
            raise _refuse(op, f"with a filter of shape {list(w.shape)} for {in_c} -> {out_c} channels")
        (sx, zx), (sy, zy) = _q(x), _q(y)
        if w.quantization is None or any(z != 0 for z in w.quantization.zero_point):
            raise _refuse(op, "with non-zero filter zero points")
        multipliers, shifts = quant.per_channel_multipliers(sx, w.quantization.scale, sy, out_c)
        act_min, act_max = int16.activation_range(o.get("fused_activation_function", 0), sy, zy, y.dtype_name)
        if self._wide(op) and (zx, zy) != (0, 0):
            raise _refuse(op, f"on int16 tensors with zero points {zx} and {zy} (the 16x8 scheme's are 0)")
        same = o.get("padding", 0) == 0  # TFLite's Padding enum: SAME 0, VALID 1
        params: dict[str, Any] = {
            "batches": n, "in_h": in_h, "in_w": in_w, "in_c": in_c, "out_h": out_h, "out_w": out_w, "out_c": out_c,
            "k_h": k_h, "k_w": k_w, "k_c": in_c, "stride_h": o["stride_h"], "stride_w": o["stride_w"],
            "dil_h": 1, "dil_w": 1,
            "pad_h": quant.transpose_conv_padding(out_h, k_h, o["stride_h"], same),
            "pad_w": quant.transpose_conv_padding(out_w, k_w, o["stride_w"], same),
            "depth_multiplier": 1, "in_offset": -zx, "out_offset": zy, "act_min": act_min, "act_max": act_max}
        arrays = [ConstArray(f"w{op.index}", "int8_t", self.const(op.inputs[1], "int8"))]
        kernel = "es_transpose_conv2d"
        if self._wide(op):  # TFLM: an int64 bias, or an int16 one it widens; an int32 one it would misread
            kernel = str(int16.KERNELS[op.op_name])
            if len(op.inputs) > 3 and op.inputs[3] >= 0:
                bias = self.model.tensor_data(0, op.inputs[3])
                if bias.dtype not in (np.int16, np.int64):
                    raise _refuse(op, f"on int16 tensors with a {bias.dtype} bias (TFLM's takes int16 or int64)")
                arrays.append(ConstArray(f"l{op.index}", "int64_t", bias.astype(np.int64)))
            params["acc64"] = 1
        elif len(op.inputs) > 3 and op.inputs[3] >= 0:
            arrays.append(ConstArray(f"b{op.index}", "int32_t", self.const(op.inputs[3], "int32")))
        arrays.append(ConstArray(f"m{op.index}", "int32_t", np.array(multipliers, np.int32)))
        arrays.append(ConstArray(f"s{op.index}", "int8_t", np.array(shifts, np.int8)))
        return Step(op.index, op.op_name, kernel, "es_conv_params", params, arrays, (op.inputs[2],),
                    op.outputs[0], None, KERNEL_SOURCES[op.op_name])

    def _fully_connected(self, op: Operator) -> Step:
        x, w, y = self.tensor(op.inputs[0]), self.tensor(op.inputs[1]), self.tensor(op.outputs[0])
        if op.options.get("weights_format", 0) != 0:
            raise _refuse(op, "with shuffled weights")
        out_depth, in_depth = w.shape
        count = int(np.prod(x.shape))
        if count % in_depth:
            raise _refuse(op, f"whose input of {count} values is not a multiple of {in_depth}")
        sx, zx = _q(x)
        sy, zy = _q(y)
        q = w.quantization
        if q is None:
            raise _refuse(op, "with unquantized weights")
        per_channel = len(q.scale) > 1
        if per_channel and any(z != 0 for z in q.zero_point):
            raise _refuse(op, "with per-channel weights and non-zero zero points")
        act_min, act_max = int16.activation_range(op.options.get("fused_activation_function", 0), sy, zy,
                                                  y.dtype_name)
        filter_offset = -(q.zero_point[0] if q.zero_point else 0)
        weights = self.const(op.inputs[1], "int8")
        if self._wide(op):
            if (zx, zy) != (0, 0):
                raise _refuse(op, f"on int16 tensors with zero points {zx} and {zy} (the 16x8 scheme's are 0)")
            params = {"batches": count // in_depth, "in_depth": in_depth, "out_depth": out_depth, "in_offset": 0,
                      "filter_offset": filter_offset, "out_offset": 0, "act_min": act_min, "act_max": act_max,
                      "per_channel": int(per_channel)}
            arrays = [ConstArray(f"w{op.index}", "int8_t", weights), *self._bias(op, 2, params)]
            multipliers, shifts = quant.per_channel_multipliers(sx, q.scale, sy, out_depth if per_channel else 1)
            arrays.append(ConstArray(f"m{op.index}", "int32_t", np.array(multipliers, np.int32)))
            arrays.append(ConstArray(f"s{op.index}", "int8_t", np.array(shifts, np.int8)))
            return Step(op.index, op.op_name, int16.KERNELS[op.op_name], "es_fc_params", params, arrays,
                        (op.inputs[0],), op.outputs[0], None, KERNEL_SOURCES[op.op_name])
        bias = self.const(op.inputs[2], "int32") if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
        in_offset = -zx
        if filter_offset == 0 and in_offset != 0:
            # sum((w) * (x + in_offset)) = sum(w * x) + in_offset * sum(w): the second term is
            # a constant per output, folded into the bias here (exact integer arithmetic), so
            # the inner loop is one multiply-accumulate, as CMSIS-NN does with its kernel sums.
            folded = (bias.astype(np.int64) if bias is not None else np.zeros(out_depth, np.int64)) + \
                in_offset * weights.astype(np.int64).sum(axis=1)
            if np.all(np.abs(folded) < 2**31):
                bias, in_offset = folded.astype(np.int32), 0
        params = {"batches": count // in_depth, "in_depth": in_depth, "out_depth": out_depth,
                  "in_offset": in_offset, "filter_offset": filter_offset, "out_offset": zy,
                  "act_min": act_min, "act_max": act_max, "per_channel": int(per_channel)}
        arrays = [ConstArray(f"w{op.index}", "int8_t", weights)]
        if bias is not None:
            arrays.append(ConstArray(f"b{op.index}", "int32_t", bias))
        multipliers, shifts = quant.per_channel_multipliers(sx, q.scale, sy, out_depth if per_channel else 1)
        arrays.append(ConstArray(f"m{op.index}", "int32_t", np.array(multipliers, np.int32)))
        arrays.append(ConstArray(f"s{op.index}", "int8_t", np.array(shifts, np.int8)))
        return Step(op.index, op.op_name, "es_fully_connected", "es_fc_params", params, arrays,
                    (op.inputs[0],), op.outputs[0], None, KERNEL_SOURCES[op.op_name])

    def _pool(self, op: Operator, kernel: str) -> Step:
        x, y = self.tensor(op.inputs[0]), self.tensor(op.outputs[0])
        if _q(x) != _q(y):
            raise _refuse(op, "whose input and output quantization differ")
        n, in_h, in_w, c = _nhwc(x.shape)
        _, out_h, out_w, _ = _nhwc(y.shape)
        o = op.options
        sy, zy = _q(y)
        act_min, act_max = int16.activation_range(o.get("fused_activation_function", 0), sy, zy, y.dtype_name)
        params = {"batches": n, "in_h": in_h, "in_w": in_w, "channels": c, "out_h": out_h, "out_w": out_w,
                  "k_h": o["filter_height"], "k_w": o["filter_width"], "stride_h": o["stride_h"],
                  "stride_w": o["stride_w"],
                  "pad_h": quant.same_padding(in_h, o["filter_height"], o["stride_h"], 1, out_h),
                  "pad_w": quant.same_padding(in_w, o["filter_width"], o["stride_w"], 1, out_w),
                  "act_min": act_min, "act_max": act_max}
        # Global pooling writes channel c after reading all of it, over bytes of channel c only.
        inplace = InPlace("either", kernel) if out_h * out_w == 1 and n == 1 else None
        if self._wide(op):
            kernel, inplace = str(int16.KERNELS[op.op_name]), None
        return Step(op.index, op.op_name, kernel, "es_pool_params", params, [], (op.inputs[0],),
                    op.outputs[0], inplace, KERNEL_SOURCES[op.op_name])

    def _average_pool_2d(self, op: Operator) -> Step:
        return self._pool(op, "es_average_pool")

    def _max_pool_2d(self, op: Operator) -> Step:
        return self._pool(op, "es_max_pool")

    def _binary(self, op: Operator, kernel: str) -> Step:
        a, b, y = (self.tensor(i) for i in (op.inputs[0], op.inputs[1], op.outputs[0]))
        if a.is_constant and b.is_constant:
            raise _refuse(op, "with two constant operands")
        dtype = (b if a.is_constant else a).dtype_name  # int8, or int16 (the _s16 kernels)
        comparison = kernel in COMPARISON_KERNELS
        if comparison and (dtype != "int8" or y.dtype_name != "bool"):
            raise _refuse(op, f"on {dtype} operands (the comparisons here take int8 and give bool)")
        arrays = [ConstArray(f"k{op.index}_{i}", f"{dtype}_t", self.const(t, dtype))
                  for i, t in enumerate(op.inputs[:2]) if self.tensor(t).is_constant]
        call: tuple[int | Ref, ...] = tuple(Ref(f"k{op.index}_{i}") if self.tensor(t).is_constant else t
                                            for i, t in enumerate(op.inputs[:2]))
        activations = tuple(t for t in op.inputs[:2] if not self.tensor(t).is_constant)
        dims = (1,) * (4 - len(y.shape)) + tuple(y.shape)
        if len(dims) > 4:
            raise _refuse(op, "on more than 4 dimensions")

        (sa, za), (sb, zb) = _q(a), _q(b)
        (sy, zy) = (1.0, 0) if comparison else _q(y)  # a bool output has no quantization
        act_min, act_max = int16.activation_range(op.options.get("fused_activation_function", 0), sy, zy, dtype)
        left_shift = int16.ADD_LEFT_SHIFT if dtype == "int16" else 20
        same = tuple(a.shape) == tuple(b.shape) == tuple(y.shape)
        params: dict[str, Any] = {"dims": list(dims), "stride1": _broadcast_strides(a.shape, dims),
                                  "stride2": _broadcast_strides(b.shape, dims),
                                  "same_shape": int(same), "in1_offset": -za, "in2_offset": -zb, "out_offset": zy,
                                  "act_min": act_min, "act_max": act_max}
        unused = {"left_shift": 0, "in1_multiplier": 0, "in1_shift": 0, "in2_multiplier": 0, "in2_shift": 0}
        if comparison:
            # ComparisonsPrepare: each input's own scale as a multiplier smaller than one, after << 8.
            if not (sa < 1.0 and sb < 1.0):
                raise _refuse(op, "with an input scale of 1 or more (the comparison kernels take it as a fraction)")
            (m1, s1), (m2, s2) = quant.quantize_multiplier(sa), quant.quantize_multiplier(sb)
            params.update({"left_shift": 8, "in1_multiplier": m1, "in1_shift": s1, "in2_multiplier": m2,
                           "in2_shift": s2, "out_multiplier": 0, "out_shift": 0})
        elif kernel == "es_div":
            # DivPrepare: the ratio of the scales in float32, then QuantizeMultiplier.
            m, s = quant.quantize_multiplier(float(np.float32(sa) / (np.float32(sb) * np.float32(sy))))
            params.update({"out_multiplier": m, "out_shift": s, **unused})
        elif kernel == "es_add":
            params.update(quant.add_multipliers(sa, sb, sy, left_shift))
        elif kernel == "es_sub" and dtype == "int16":
            # Measured against the tflite-micro interpreter: its int16 SUB takes the ratios in
            # double, as ADD does (1 element in 3,840 was a step off with its int8 float ratios).
            params.update(quant.add_multipliers(sa, sb, sy, left_shift))
        elif kernel == "es_sub":
            params.update(quant.sub_multipliers(sa, sb, sy, left_shift))
        elif kernel == "es_mul" and dtype == "int16" and self.litert_judges:
            # LiteRT, the reference when TFLM cannot run the model, takes this ratio in float32
            # for int16 (measured on MediaPipe's palm detector: 1 element in 295k a step off).
            m, s = quant.quantize_multiplier(float(np.float32(np.float32(sa) * np.float32(sb)) / np.float32(sy)))
            params.update({"out_multiplier": m, "out_shift": s, **unused})
        elif kernel == "es_mul":
            m, s = quant.mul_multiplier(sa, sb, sy)
            params.update({"out_multiplier": m, "out_shift": s, **unused})
        else:  # MAXIMUM/MINIMUM: TFLM compares the stored values, whatever their scales
            params.update({"out_multiplier": 0, "out_shift": 0, **unused})
        if dtype == "int16":
            kernel = str(int16.KERNELS[op.op_name])
        inplace = InPlace("start", kernel) if same else None  # element i read before it is written
        return Step(op.index, op.op_name, kernel, "es_binary_params", params, arrays, activations,
                    op.outputs[0], inplace, KERNEL_SOURCES[op.op_name], call_inputs=call)

    def _add(self, op: Operator) -> Step:
        return self._binary(op, "es_add")

    def _mul(self, op: Operator) -> Step:
        return self._binary(op, "es_mul")

    def _sub(self, op: Operator) -> Step:
        return self._binary(op, "es_sub")

    def _maximum(self, op: Operator) -> Step:
        return self._binary(op, "es_maximum")

    def _minimum(self, op: Operator) -> Step:
        return self._binary(op, "es_minimum")

    def _div(self, op: Operator) -> Step:
        return self._binary(op, "es_div")

    def _greater(self, op: Operator) -> Step:
        return self._binary(op, "es_greater")

    def _greater_equal(self, op: Operator) -> Step:
        return self._binary(op, "es_greater_equal")

    def _less(self, op: Operator) -> Step:
        return self._binary(op, "es_less")

    def _less_equal(self, op: Operator) -> Step:
        return self._binary(op, "es_less_equal")

    def _equal(self, op: Operator) -> Step:
        return self._binary(op, "es_equal")

    def _not_equal(self, op: Operator) -> Step:
        return self._binary(op, "es_not_equal")

    def _select(self, op: Operator) -> Step:
        condition, x, y = (self.tensor(i) for i in op.inputs[:3])
        # SELECT's other form, a vector condition along x's first axis, is not a broadcast.
        if tuple(x.shape) != tuple(y.shape) or tuple(condition.shape) not in ((), tuple(x.shape)):
            raise _refuse(op, f"with condition {list(condition.shape)}, x {list(x.shape)}, y {list(y.shape)} "
                          "(taken: x and y of one shape, the condition a scalar or of that shape)")
        return self._select_v2(op)

    def _select_v2(self, op: Operator) -> Step:
        condition, x, y = (self.tensor(i) for i in op.inputs[:3])
        out = self.tensor(op.outputs[0])
        if condition.is_constant:
            raise _refuse(op, "with a constant condition (fold it into the graph)")
        if not x.dtype_name == y.dtype_name == out.dtype_name == "int8":
            raise _refuse(op, f"on {x.dtype_name}, {y.dtype_name} -> {out.dtype_name} values (int8 throughout)")
        dims = (1,) * (4 - len(out.shape)) + tuple(out.shape)
        if len(dims) > 4:
            raise _refuse(op, "on more than 4 dimensions")
        dtype = out.dtype_name
        arrays = [ConstArray(f"k{op.index}_{i}", f"{dtype}_t", self.const(t, dtype))
                  for i, t in enumerate(op.inputs[1:3], 1) if self.tensor(t).is_constant]
        call = tuple(Ref(f"k{op.index}_{i}") if self.tensor(t).is_constant else t for i, t in enumerate(op.inputs[:3]))
        params = {"dims": list(dims), "stride_c": _broadcast_strides(condition.shape, dims),
                  "stride_x": _broadcast_strides(x.shape, dims), "stride_y": _broadcast_strides(y.shape, dims),
                  "element_bytes": out.element_size}
        activations = tuple(t for t in op.inputs[:3] if not self.tensor(t).is_constant)
        return Step(op.index, op.op_name, "es_select", "es_select_params", params, arrays, activations,
                    op.outputs[0], None, KERNEL_SOURCES[op.op_name], call_inputs=call)


def _broadcast_strides(shape: tuple[int, ...], dims: tuple[int, ...]) -> list[int]:
    """Element strides of a tensor of ``shape`` read over the 4-D ``dims``: 0 along broadcast axes."""
    padded = (1,) * (4 - len(shape)) + tuple(shape)
    out, step = [0] * 4, 1
    for axis in range(3, -1, -1):
        out[axis] = 0 if padded[axis] == 1 and dims[axis] != 1 else step
        step *= padded[axis]
    return out


# The comparisons' kernels: int8 operands rescaled to one fixed point, a bool output.
COMPARISON_KERNELS = ("es_greater", "es_greater_equal", "es_less", "es_less_equal", "es_equal", "es_not_equal")
_COMPARISONS = ("GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL", "EQUAL", "NOT_EQUAL")


def _takes_bool(op: Operator, index: int) -> bool:
    """Whether ``index`` may be a bool tensor of ``op``: a comparison's output, a select's
    condition, or what a RESHAPE-like alias moves."""
    if op.op_name in _COMPARISONS:
        return index in op.outputs
    if op.op_name in ("SELECT", "SELECT_V2"):
        return index == op.inputs[0]
    return op.op_name in ("RESHAPE", "SQUEEZE", "EXPAND_DIMS")
