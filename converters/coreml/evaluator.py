"""Run an ML program with numpy: Core ML's numbers on a machine where Core ML does not run.

The evaluator walks the program's ops in order (an ML program is already topologically
sorted), computes each in float32 with :mod:`edgeserve.converters.coreml.ops` and rounds every
result to the type the program declares: an fp16 program is emulated as "float32
arithmetic, float16 storage", which is what Core ML's CPU path does. Constants, including
the constexpr dequantization of INT8 weights, are computed once.

It refuses a program containing any op it has no implementation for, naming the op, so a
package is never reported as verified when part of it was not run.

Example:
    >>> evaluator = MilEvaluator(MilProgram.load(Path("model.mlpackage")))  # doctest: +SKIP
    >>> outputs = evaluator.run({"image": pixels})                        # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from edgeserve.converters.coreml.ops import OPS
from edgeserve.converters.coreml.program import MilProgram, Op, VarType
from edgeserve.errors import InputError, UnsupportedOpError, VerificationError

log = logging.getLogger(__name__)

TARGET = "coreml (edgeserve's numpy verifier)"
# Parameters that take a variable number of arguments (always passed as a list).
_VARIADIC = {"values"}
# Ops whose value does not depend on the inputs: evaluated once, when the evaluator is made.
_CONSTANT_OPS = {"const", "constexpr_affine_dequantize", "constexpr_blockwise_shift_scale", "constexpr_cast"}

Observer = Callable[[str, np.ndarray], None]


def unsupported_ops(program: MilProgram) -> list[str]:
    """Op types in ``program`` that the evaluator cannot run, in program order."""
    return [t for t in program.op_types() if t not in OPS]


def check_supported(program: MilProgram) -> None:
    """Raise :class:`UnsupportedOpError` for the first op type the evaluator cannot run."""
    missing = unsupported_ops(program)
    if missing:
        others = f" (also: {', '.join(missing[1:])})" if len(missing) > 1 else ""
        raise UnsupportedOpError(
            missing[0], TARGET, OPS,
            detail=f"not verified: op {missing[0]}{others}. Core ML may well run it, but edgeserve's numpy "
                   "evaluator has no implementation of it, so the package's numbers cannot be checked here "
                   "(on macOS, Core ML predict checks them instead).",
        )


class MilEvaluator:
    """A program ready to run: constants decoded and dequantized, ops looked up."""

    def __init__(self, program: MilProgram) -> None:
        check_supported(program)
        self.program = program
        self._constants: dict[str, Any] = {}
        self._steps: list[Op] = []
        for op in program.ops:
            if op.type in _CONSTANT_OPS and all(b.name is None or b.name in self._constants
                                                 for args in op.inputs.values() for b in args):
                self._store(op, self._call(op, self._constants, {}), self._constants)
            else:
                self._steps.append(op)
        # The weights of an fp16 program widened to float32 once, not at every op of every sample
        # (the casts were a third of the evaluator's time on PaddleOCR's layout detector).
        self._wide_constants = {name: _widen(value) for name, value in self._constants.items()}

    @property
    def input_names(self) -> list[str]:
        return [name for name, _ in self.program.inputs]

    def run(self, feeds: Mapping[str, np.ndarray], observe: Observer | None = None) -> dict[str, Any]:
        """The program's outputs (by name) for one set of inputs.

        Args:
            feeds: one array per program input, shaped as the program declares.
            observe: called with (name, value) for every input and every floating-point
                value the program computes (activation calibration uses this).

        Raises:
            InputError: an input is missing or has the wrong shape.
            UnsupportedOpError: an op's parameters are outside what the evaluator implements.
            VerificationError: an op failed on the values it was given.
        """
        env: dict[str, Any] = dict(self._constants)
        wide: dict[str, Any] = dict(self._wide_constants)  # each fp16 value widened once, when first read
        for name, vtype in self.program.inputs:
            if name not in feeds:
                raise InputError(f"the program needs input {name!r}; got {sorted(feeds)}")
            value = np.asarray(feeds[name])
            if vtype.shape is not None and (value.ndim != len(vtype.shape) or any(
                    d is not None and d != s for d, s in zip(vtype.shape, value.shape))):
                raise InputError(f"input {name!r} has shape {value.shape}; the program declares {vtype.shape}")
            value = _as_declared(value, vtype)
            env[name] = value
            if observe is not None:
                observe(name, value)
        for op in self._steps:
            self._store(op, self._call(op, env, wide), env, observe)
        return {name: env[name] for name in self.program.outputs}

    # ----- one op -----------------------------------------------------------------------
    def _call(self, op: Op, env: Mapping[str, Any], wide: dict[str, Any]) -> Any:
        params: dict[str, Any] = {k: v for k, v in op.attributes.items() if k != "name"}
        for key, bindings in op.inputs.items():
            values = [_read(b.name, env, wide) if b.name is not None else _widen(b.value) for b in bindings]
            params[key] = values if key in _VARIADIC or len(values) != 1 else values[0]
        try:
            return OPS[op.type](params)
        except NotImplementedError as exc:
            raise UnsupportedOpError(op.type, TARGET, OPS, detail=f"not verified: op {op.type} ({exc})") from exc
        except (ValueError, TypeError, IndexError, KeyError) as exc:
            raise VerificationError(f"op {op.type} {op.name!r} failed in edgeserve's evaluator: {exc}") from exc

    def _store(self, op: Op, result: Any, env: dict[str, Any], observe: Observer | None = None) -> None:
        results = result if len(op.outputs) > 1 else (result,)
        for (name, vtype), value in zip(op.outputs, results):
            value = _as_declared(value, vtype)
            env[name] = value
            if observe is not None and isinstance(value, np.ndarray) and value.dtype.kind == "f":
                observe(name, value)


def _read(name: str, env: Mapping[str, Any], wide: dict[str, Any]) -> Any:
    if name not in wide:
        wide[name] = _widen(env[name])
    return wide[name]


def _widen(value: Any) -> Any:
    """float16 arrays become float32 for arithmetic; everything else is passed as it is."""
    if isinstance(value, np.ndarray) and value.dtype == np.float16:
        return value.astype(np.float32)
    return value


def _as_declared(value: Any, vtype: VarType) -> Any:
    """Round a computed value to its declared tensor type (fp16 storage, int8, ...)."""
    if vtype.kind != "tensor" or vtype.dtype == "string":
        return value
    dtype = vtype.numpy
    if dtype is None:
        raise UnsupportedOpError(f"tensor type {vtype.dtype}", TARGET, OPS,
                                 detail=f"not verified: values of type {vtype.dtype}")
    array = np.asarray(value)
    if array.dtype != dtype:
        if dtype.kind in "iu" and array.dtype.kind == "f":
            array = np.trunc(array)  # Core ML's cast to an integer type truncates
        with np.errstate(over="ignore"):  # beyond fp16's range is inf, as on the device
            array = array.astype(dtype)
    return array
