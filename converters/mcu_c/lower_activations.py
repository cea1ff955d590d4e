"""Elementwise activations, QUANTIZE, SOFTMAX, PRELU and MEAN as mcu-c steps.

int8 activations are 256-entry tables of the reference kernel's own arithmetic (es_lut.c);
int16 ones are computed (int16.py). Mixed into :class:`edgeserve.converters.mcu_c.lower.Lowering`,
whose helpers it uses.
"""

from __future__ import annotations

import numpy as np

from edgeserve.converters.mcu_c import int16
from edgeserve.converters.microcontroller import quant
from edgeserve.converters.mcu_c.lower_base import KERNEL_SOURCES, _pad4, _q, _refuse, _row_major
from edgeserve.converters.mcu_c.steps import ConstArray, InPlace, Ref, Step
from edgeserve.tflite.model import Operator


class Activations:
    """Lowering's methods for activations and the other one-input elementwise operators."""

    def _softmax(self, op: Operator) -> Step:
        x, y = self.tensor(op.inputs[0]), self.tensor(op.outputs[0])
        sy, zy = _q(y)
        if zy != -128 or abs(sy - 1 / 256) > 1e-9:
            raise _refuse(op, f"with output scale {sy:g} and zero point {zy} (int8 softmax outputs 1/256, -128)")
        depth = x.shape[-1]
        params = {"rows": int(np.prod(x.shape)) // depth, "depth": depth,
                  **quant.softmax_parameters(op.options.get("beta", 1.0), _q(x)[0])}
        return Step(op.index, op.op_name, "es_softmax", "es_softmax_params", params, [], (op.inputs[0],),
                    op.outputs[0], InPlace("start", "es_softmax"), KERNEL_SOURCES[op.op_name])

    def _quantize(self, op: Operator) -> Step:
        x, y = self._data_input(op), self.tensor(op.outputs[0])
        (sx, zx), (sy, zy) = _q(x), _q(y)
        multiplier, shift = quant.quantize_multiplier(float(np.float32(sx)) / float(np.float32(sy)))
        if "int16" in (x.dtype_name, y.dtype_name):
            bits = {"int8": 8, "int16": 16}
            lo, hi = int16.limits(y.dtype_name)
            params = {"count": int(np.prod(x.shape)), "in_zero_point": zx, "out_zero_point": zy,
                      "multiplier": multiplier, "shift": shift, "in_bits": bits[x.dtype_name],
                      "out_bits": bits[y.dtype_name], "act_min": lo, "act_max": hi}
            # Not in place: an int16 output would overwrite int8 inputs not yet read.
            return Step(op.index, op.op_name, "es_requantize16", "es_requantize16_params", params, [],
                        (op.inputs[0],), op.outputs[0], None, KERNEL_SOURCES[op.op_name])
        unsigned = y.dtype_name == "uint8"  # a model output only (checked in steps())
        params = {"count": int(np.prod(x.shape)), "in_zero_point": zx, "out_zero_point": zy,
                  "multiplier": multiplier, "shift": shift, "out_unsigned": int(unsigned)}
        return Step(op.index, op.op_name, "es_requantize", "es_requantize_params", params, [], (op.inputs[0],),
                    op.outputs[0], InPlace("start", "es_requantize"), KERNEL_SOURCES[op.op_name])

    def _lookup(self, op: Operator) -> Step:
        x, y = self._data_input(op), self.tensor(op.outputs[0])
        (sx, zx), (sy, zy) = _q(x), _q(y)
        table = quant.lookup_table(op.op_name, sx, zx, sy, zy)
        params = {"count": int(np.prod(x.shape)), "table": Ref(f"t{op.index}")}
        return Step(op.index, op.op_name, "es_lookup", "es_lookup_params", params,
                    [ConstArray(f"t{op.index}", "int8_t", table)], (op.inputs[0],), op.outputs[0],
                    InPlace("start", "es_lookup"), KERNEL_SOURCES[op.op_name])

    def _logistic(self, op: Operator) -> Step:
        if not self._wide(op):
            return self._lookup(op)
        x, y = self._data_input(op), self.tensor(op.outputs[0])
        if (_q(x)[1], _q(y)[1]) != (0, 0):
            raise _refuse(op, "on int16 tensors with non-zero zero points (TFLM requires 0)")
        try:
            multiplier, left_shift = int16.logistic_parameters(_q(x)[0], _q(y)[0])
        except ValueError as exc:
            raise _refuse(op, f"({exc})") from exc
        params = {"count": int(np.prod(x.shape)), "multiplier": multiplier, "left_shift": left_shift,
                  "table": Ref(f"t{op.index}")}
        return Step(op.index, op.op_name, "es_logistic_s16", "es_logistic16_params", params,
                    [ConstArray(f"t{op.index}", "uint16_t", int16.sigmoid_table())], (op.inputs[0],), op.outputs[0],
                    InPlace("start", "es_logistic_s16"), KERNEL_SOURCES[op.op_name])

    def _tanh(self, op: Operator) -> Step:
        return self._lookup(op)

    def _table_step(self, op: Operator, table: np.ndarray) -> Step:
        x = self._data_input(op)
        params = {"count": int(np.prod(x.shape)), "table": Ref(f"t{op.index}")}
        return Step(op.index, op.op_name, "es_lookup", "es_lookup_params", params,
                    [ConstArray(f"t{op.index}", "int8_t", table)], (op.inputs[0],), op.outputs[0],
                    InPlace("start", "es_lookup"), KERNEL_SOURCES[op.op_name])

    def _sqrt(self, op: Operator) -> Step:
        """int8 SQRT as LiteRT computes it, truncating (quant.lookup_table): TFLM has no int8
        SQRT, so LiteRT's reference kernels judge the C."""
        x, y = self._data_input(op), self.tensor(op.outputs[0])
        if (x.dtype_name, y.dtype_name) != ("int8", "int8"):
            raise _refuse(op, f"on {x.dtype_name} (int8 only)")
        return self._lookup(op)

    def _relu(self, op: Operator) -> Step:
        (sx, zx), (sy, zy) = _q(self._data_input(op)), _q(self.tensor(op.outputs[0]))
        if self._wide(op):  # a requantization clamped at zero (CalculateReluOpData, ReluQuantized)
            # Measured: the tflite-micro interpreter takes this scale ratio in double (PP-PicoDet's
            # int16 model: in float32, 1 value in 10^6 was a step off), LiteRT in float32
            # (MediaPipe's palm detector, which only LiteRT runs).
            ratio = (float(np.float32(np.float32(sx) / np.float32(sy))) if self.litert_judges
                     else float(np.float32(sx)) / float(np.float32(sy)))
            multiplier, shift = quant.quantize_multiplier(ratio)
            return self._clamp_step(op, multiplier, shift, max(int16.INT16_MIN, zy), int16.INT16_MAX)
        return self._table_step(op, quant.relu_table(sx, zx, sy, zy))

    def _relu6(self, op: Operator) -> Step:
        sx, zx = _q(self._data_input(op))
        if self._wide(op):
            sy, zy = _q(self.tensor(op.outputs[0]))
            if (sx, zx) != (sy, zy) and self.litert_judges:
                # LiteRT, the reference when TFLM cannot run the model, requantizes int16 RELU6 to
                # the output's scale (as RELU) and clamps at round(6 / output scale).
                multiplier, shift = quant.quantize_multiplier(float(np.float32(np.float32(sx) / np.float32(sy))))
                six = zy + quant.round_half_away(float(np.float32(6.0) / np.float32(sy)))
                return self._clamp_step(op, multiplier, shift, max(int16.INT16_MIN, zy), min(int16.INT16_MAX, six))
            # TFLM: the input clamped to [zero point, six] in its own quantization (output's unread).
            six = quant.round_half_away(float(np.float32(6.0) / np.float32(sx))) + zx
            return self._clamp_step(op, 1 << 30, 1, zx, min(int16.INT16_MAX, six))  # 2^30 x 2^1 / 2^31: x
        return self._table_step(op, quant.relu6_table(sx, zx))

    def _clamp_step(self, op: Operator, multiplier: int, shift: int, lo: int, hi: int) -> Step:
        """An int16 activation as es_requantize16: a requantization clamped to [lo, hi]."""
        x, y = self._data_input(op), self.tensor(op.outputs[0])
        params = {"count": int(np.prod(x.shape)), "in_zero_point": _q(x)[1], "out_zero_point": _q(y)[1],
                  "multiplier": multiplier, "shift": shift, "in_bits": 16, "out_bits": 16, "act_min": lo,
                  "act_max": hi}
        return Step(op.index, op.op_name, "es_requantize16", "es_requantize16_params", params, [], (op.inputs[0],),
                    op.outputs[0], InPlace("start", "es_requantize16"), "es_quantize.c")

    def _hard_swish(self, op: Operator) -> Step:
        """A table of TFLM's 16-bit fixed-point arithmetic for each of the 256 inputs."""
        (sx, zx), (sy, zy) = _q(self._data_input(op)), _q(self.tensor(op.outputs[0]))
        try:
            table = quant.hard_swish_table(sx, zx, sy, zy)
        except ValueError as exc:
            raise _refuse(op, f"({exc})") from exc
        return self._table_step(op, table)

    def _leaky_relu(self, op: Operator) -> Step:
        """A table of TFLM's own arithmetic for each of the 256 inputs (quant.leaky_relu_table)."""
        (sx, zx), (sy, zy) = _q(self._data_input(op)), _q(self.tensor(op.outputs[0]))
        return self._table_step(op, quant.leaky_relu_table(float(op.options.get("alpha", 0.0)), sx, zx, sy, zy))

    def _prelu(self, op: Operator) -> Step:
        x, y = self._data_input(op), self.tensor(op.outputs[0])
        alpha_tensor = self.tensor(op.inputs[1])
        alpha = self.const(op.inputs[1], "int8")
        q = alpha_tensor.quantization
        if q is None or len(q.scale) != 1:
            raise _refuse(op, "with a per-channel quantized alpha (one scale is what TFLM's int8 kernel takes)")
        # alpha repeats along the input: its shape, without leading ones, must be the input's
        # trailing dimensions (one value per channel, or per pixel and channel).
        trailing = list(alpha.shape)
        while trailing and trailing[0] == 1:
            trailing.pop(0)
        if trailing and list(x.shape[len(x.shape) - len(trailing):]) != trailing:
            raise _refuse(op, f"with alpha of shape {list(alpha.shape)} broadcast over {list(x.shape)} "
                          "in another way than along the trailing dimensions")
        (sx, zx), (sa, za), (sy, zy) = _q(x), _q(alpha_tensor), _q(y)
        params = {"count": int(np.prod(x.shape)), "alpha_count": int(alpha.size), "in_offset": -zx,
                  "alpha_offset": -za, "out_offset": zy, **quant.prelu_multipliers(sx, sa, sy),
                  "alpha": Ref(f"t{op.index}")}
        return Step(op.index, op.op_name, "es_prelu", "es_prelu_params", params,
                    [ConstArray(f"t{op.index}", "int8_t", alpha.reshape(-1))], (op.inputs[0],), op.outputs[0],
                    InPlace("start", "es_prelu"), KERNEL_SOURCES[op.op_name])

    def _l2_normalization(self, op: Operator) -> Step:
        """Along the last axis; TFLite's int8 kernels write the output on 1/128, zero point 0
        (LiteRT refuses another), so the C assumes that scale and this checks it."""
        x, y = self._data_input(op), self.tensor(op.outputs[0])
        if self._wide(op) or x.dtype_name != "int8":
            raise _refuse(op, "on int16 tensors (its kernel here is int8)")
        (_, zx), (sy, zy) = _q(x), _q(y)
        if abs(sy - 1.0 / 128.0) > 1e-9 or zy != 0:
            raise _refuse(op, f"with output scale {sy:g} and zero point {zy} (its int8 kernels write 1/128 and 0)")
        depth = int(x.shape[-1]) if x.shape else 1
        params = {"rows": int(np.prod(x.shape)) // max(depth, 1), "depth": depth, "in_offset": -zx}
        return Step(op.index, op.op_name, "es_l2_normalization", "es_l2_normalization_params", params, [],
                    (op.inputs[0],), op.outputs[0], InPlace("start", "es_l2_normalization"),
                    KERNEL_SOURCES[op.op_name])

    def _mean(self, op: Operator) -> Step:
        x, y = self._data_input(op), self.tensor(op.outputs[0])
        if len(x.shape) > 4:
            raise _refuse(op, "on more than 4 dimensions")
        axes = {int(a) % len(x.shape) for a in self.model.tensor_data(0, op.inputs[1]).reshape(-1)}
        k = 4 - len(x.shape)
        dims = _pad4(x.shape)
        reduce = [int(a - k in axes) for a in range(4)]
        count = int(np.prod([d for d, r in zip(dims, reduce) if r]))
        (sx, zx), (sy, zy) = _q(x), _q(y)
        multiplier, shift = quant.mean_multiplier(sx, sy, count)
        params = {"dims": dims, "strides": _row_major(dims), "reduce": reduce, "count": count,
                  "in_zero_point": zx, "out_zero_point": zy, "multiplier": multiplier, "shift": shift}
        kernel = "es_mean_s16" if self._wide(op) else "es_mean"
        return Step(op.index, op.op_name, kernel, "es_mean_params", params, [], (op.inputs[0],),
                    op.outputs[0], None, KERNEL_SOURCES[op.op_name])
