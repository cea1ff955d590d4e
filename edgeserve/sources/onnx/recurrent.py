"""ONNX's recurrent operators (LSTM, GRU) for edgeserve's ONNX reader, unrolled over time.

The sequence length of a batch-1 conversion is fixed, so each time step becomes the plain
matrix products, sigmoids and tanhs of the ONNX operator specification, which torch.export
traces and litert-torch lowers to FULLY_CONNECTED, LOGISTIC, TANH, MUL and ADD: operators
every INT8 quantizer and the microcontroller kernels take, where a fused sequence operator is
often left in float. Supported: forward, reverse and bidirectional, both layouts, initial
states, LSTM peepholes, GRU's ``linear_before_reset``; not: other activations, ``clip``,
``input_forget``, and ``sequence_lens`` shorter than the sequence.

Gate order (ONNX): LSTM's W, R and B stack input, output, forget and cell gates; GRU's stack
update, reset and hidden gates.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

Value = Any


def _tensor(v: Value) -> Any:
    return torch.from_numpy(np.ascontiguousarray(v, np.float32)) if isinstance(v, np.ndarray) else v


def _arg(args: list[Value], index: int) -> Value:
    return args[index] if len(args) > index and args[index] is not None else None


def _check(attrs: dict[str, Any], op: str, defaults: tuple[str, ...], sequence: int, lens: Value) -> None:
    names = [a.decode() if isinstance(a, bytes) else a for a in attrs.get("activations", [])]
    if names and [n.lower() for n in names] != [d.lower() for d in defaults] * (len(names) // len(defaults)):
        raise NotImplementedError(f"{op} activations {names} are not supported (only the default {list(defaults)})")
    if "clip" in attrs:
        raise NotImplementedError(f"{op} with clip is not supported")
    if attrs.get("input_forget", 0):
        raise NotImplementedError("LSTM with input_forget is not supported")
    if lens is not None and (not isinstance(lens, np.ndarray) or np.any(np.asarray(lens) != sequence)):
        raise NotImplementedError(f"{op} sequence_lens other than the whole sequence ({sequence}) are not supported")


def _directions(attrs: dict[str, Any]) -> list[bool]:
    """Per direction: whether it runs backwards in time."""
    direction = attrs.get("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    return {"forward": [False], "reverse": [True], "bidirectional": [False, True]}[direction]


def _sequence_first(x: Any, layout: int) -> Any:
    return x.transpose(0, 1) if layout else x  # layout 1: [batch, seq, input]


def _recurrent(args: list[Value], attrs: dict[str, Any], op: str) -> tuple[Any, ...]:
    layout = int(attrs.get("layout", 0))
    x = _sequence_first(_tensor(args[0]), layout)  # [seq, batch, input]
    w, r, b = _tensor(args[1]), _tensor(args[2]), _tensor(_arg(args, 3))
    sequence, batch = int(x.shape[0]), int(x.shape[1])
    hidden = int(attrs.get("hidden_size", r.shape[-1]))
    _check(attrs, op, ("Sigmoid", "Tanh", "Tanh") if op == "LSTM" else ("Sigmoid", "Tanh"), sequence, _arg(args, 4))
    directions = _directions(attrs)
    states = []
    for slot in (5, 6):  # initial_h, initial_c ([dirs, batch, hidden]; layout 1: [batch, dirs, hidden])
        state = _tensor(_arg(args, slot))
        states.append(None if state is None else (state.transpose(0, 1) if layout else state))
    peepholes = _tensor(_arg(args, 7)) if op == "LSTM" else None
    ys, hs, cs = [], [], []
    for d, backwards in enumerate(directions):
        h = states[0][d] if states[0] is not None else torch.zeros(batch, hidden)
        c = states[1][d] if op == "LSTM" and states[1] is not None else torch.zeros(batch, hidden)
        wb = b[d, : b.shape[1] // 2] if b is not None else None
        rb = b[d, b.shape[1] // 2:] if b is not None else None
        steps = range(sequence - 1, -1, -1) if backwards else range(sequence)
        out: list[Any] = [None] * sequence
        for t in steps:
            xw = x[t] @ w[d].T + (wb if wb is not None else 0)
            if op == "LSTM":
                h, c = _lstm_step(xw, h, c, r[d], rb, None if peepholes is None else peepholes[d], hidden)
            else:
                h = _gru_step(xw, h, r[d], rb, hidden, bool(attrs.get("linear_before_reset", 0)))
            out[t] = h
        ys.append(stack_steps(out))  # [seq, batch, hidden]
        hs.append(h)
        cs.append(c)
    y = torch.stack(ys, dim=1)  # [seq, dirs, batch, hidden]
    y_h, y_c = torch.stack(hs), torch.stack(cs)  # [dirs, batch, hidden]
    if layout:
        y, y_h, y_c = y.permute(2, 0, 1, 3), y_h.transpose(0, 1), y_c.transpose(0, 1)
    return (y, y_h, y_c) if op == "LSTM" else (y, y_h)


def stack_steps(steps: list[Any]) -> Any:
    """``torch.stack(steps)`` as a tree of stacks and concatenations of at most 8 inputs each:
    TFLM's CONCATENATION takes at most 10 (kMaxInputNum), and a 20-step sequence is one op."""
    if len(steps) <= 8:
        return torch.stack(steps)
    return _concat_chunks([torch.stack(steps[i: i + 8]) for i in range(0, len(steps), 8)])


def _concat_chunks(chunks: list[Any]) -> Any:
    if len(chunks) <= 8:
        return torch.cat(chunks)
    return _concat_chunks([torch.cat(chunks[i: i + 8]) for i in range(0, len(chunks), 8)])


def _lstm_step(xw: Any, h: Any, c: Any, r: Any, rb: Any, p: Any, hidden: int) -> tuple[Any, Any]:
    gates = xw + h @ r.T + (rb if rb is not None else 0)
    i, o, f, g = gates.split(hidden, dim=-1)
    if p is not None:  # peepholes: input and forget gates see the old cell, output gate the new one
        i = i + p[:hidden] * c
        f = f + p[2 * hidden:] * c
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    if p is not None:
        o = o + p[hidden: 2 * hidden] * c
    return torch.sigmoid(o) * torch.tanh(c), c


def _gru_step(xw: Any, h: Any, r: Any, rb: Any, hidden: int, linear_before_reset: bool) -> Any:
    xz, xr, xh = xw.split(hidden, dim=-1)
    rz, rr, rh = r.split(hidden, dim=0)
    bz, br, bh = rb.split(hidden) if rb is not None else (0, 0, 0)
    z = torch.sigmoid(xz + h @ rz.T + bz)
    reset = torch.sigmoid(xr + h @ rr.T + br)
    if linear_before_reset:
        candidate = torch.tanh(xh + reset * (h @ rh.T + bh))
    else:
        candidate = torch.tanh(xh + (reset * h) @ rh.T + bh)
    return (1 - z) * candidate + z * h


def lstm(args: list[Value], attrs: dict[str, Any]) -> tuple[Any, ...]:
    return _recurrent(args, attrs, "LSTM")


def gru(args: list[Value], attrs: dict[str, Any]) -> tuple[Any, ...]:
    return _recurrent(args, attrs, "GRU")
