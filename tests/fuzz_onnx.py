"""ONNX files built to be hostile, for the CLI fuzz: each through `inspect`, `run` and
`convert -t onnx`.

The base is a small sound network (Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm).
Each mutant gives it one or two traits a hand-made or hostile file has: huge, zero,
negative or symbolic dimensions; no outputs or no inputs; markup, empty, long or
control-character names; convolution attributes no runtime can build (a kernel that does
not match its weight, groups that do not divide the channels, zero strides or dilations,
negative pads); weights whose size or type lies; unknown operators, domains, opsets and IR
versions; a node that reads its own output or an output nothing produces; external data
that points outside the folder or past a file's end; and flipped or truncated bytes.
"""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
from cli_fuzz import Plan

TRAITS = ("dims", "no-outputs", "no-inputs", "names", "kernel", "weights", "op", "cycle", "external", "bytes")
NAMES = ("[/]x", "[bold red]y[/]", "", "n" * 5000, "a\x00b", "\u202eevil", "../x", "x y", "\x1b[31mred")
DIMS = (0, -1, 1 << 40, 1 << 62, 3, "N", "")


def base_model():
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(np.zeros(4, np.float32), "b"),
             numpy_helper.from_array(rng.normal(0, 0.3, (2, 4)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.zeros(2, np.float32), "b2")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "w2", "b2"], ["y"], name="gemm", transB=1)]
    graph = helper.make_graph(nodes, "hostile", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _pick(rng: np.random.Generator, options: tuple) -> object:
    return options[int(rng.integers(len(options)))]


def _rename(model, old: str, new: str) -> None:
    graph = model.graph
    for value in list(graph.input) + list(graph.output) + list(graph.value_info):
        if value.name == old:
            value.name = new
    for init in graph.initializer:
        if init.name == old:
            init.name = new
    for node in graph.node:
        node.input[:] = [new if n == old else n for n in node.input]
        node.output[:] = [new if n == old else n for n in node.output]


def _apply(model, trait: str, rng: np.random.Generator, folder: Path) -> None:
    from onnx import TensorProto, helper

    graph = model.graph
    conv = graph.node[0]
    if trait == "dims":
        value = _pick(rng, (graph.input[0], graph.output[0]))
        dim = value.type.tensor_type.shape.dim[int(rng.integers(len(value.type.tensor_type.shape.dim)))]
        choice = _pick(rng, DIMS)
        if isinstance(choice, str):
            dim.dim_param = choice
        else:
            dim.dim_value = choice
    elif trait == "no-outputs":
        del graph.output[:]
    elif trait == "no-inputs":
        del graph.input[:]
    elif trait == "names":
        old = _pick(rng, ("x", "y", "c", "w"))
        _rename(model, old, str(_pick(rng, NAMES)))
        graph.node[int(rng.integers(len(graph.node)))].name = str(_pick(rng, NAMES))
    elif trait == "kernel":
        del conv.attribute[:]
        attribute = _pick(rng, ("kernel_shape", "group", "strides", "pads", "dilations", "auto_pad"))
        value = {"kernel_shape": [5, 5], "group": int(_pick(rng, (0, 2, 3, -1))), "strides": [0, 1],
                 "pads": [-2, 1, 1, 1], "dilations": [0, 0], "auto_pad": "SIDEWAYS"}[attribute]
        conv.attribute.append(helper.make_attribute(attribute, value))
        if attribute != "kernel_shape":
            conv.attribute.append(helper.make_attribute("kernel_shape", [3, 3]))
    elif trait == "weights":
        init = graph.initializer[int(rng.integers(len(graph.initializer)))]
        how = int(rng.integers(3))
        if how == 0:
            init.dims[0] = int(_pick(rng, (0, 7, 1 << 40)))
        elif how == 1:
            init.data_type = int(_pick(rng, (TensorProto.INT64, TensorProto.STRING, TensorProto.BOOL, 99)))
        else:
            init.raw_data = init.raw_data[: int(rng.integers(len(init.raw_data)))]
    elif trait == "op":
        how = int(rng.integers(4))
        if how == 0:
            graph.node[int(rng.integers(len(graph.node)))].op_type = str(_pick(rng, ("NoSuchOp", "", "[red]Op")))
        elif how == 1:
            graph.node[1].domain = "com.example.hostile"
        elif how == 2:
            model.opset_import[0].version = int(_pick(rng, (1, 6, 9999)))
        else:
            model.ir_version = int(_pick(rng, (0, 1, 99)))
    elif trait == "cycle":
        how = int(rng.integers(3))
        if how == 0:
            graph.node[1].input[0] = "r"  # Relu reads its own output
        elif how == 1:
            graph.output[0].name = "nothing_makes_this"
        else:
            graph.output.append(graph.output[0])  # the same output twice
    elif trait == "external":
        init = graph.initializer[0]
        init.ClearField("raw_data")
        init.data_location = TensorProto.EXTERNAL
        location = str(_pick(rng, ("../../etc/passwd", "/etc/passwd", "missing.bin", "data.bin", "/dev/zero")))
        (folder / "data.bin").write_bytes(b"\x00" * 64)
        for key, value in (("location", location), ("offset", str(int(_pick(rng, (0, 32, 1 << 40)))))):
            entry = init.external_data.add()
            entry.key, entry.value = key, value


def write_onnx_mutants(folder: Path, count: int, seed0: int = 0) -> tuple[Plan, collections.Counter[str]]:
    """``count`` hostile ONNX files; the plan and the trait counts."""
    folder.mkdir(parents=True, exist_ok=True)
    x = folder / "x.npy"
    np.save(x, np.random.default_rng(1).normal(size=(1, 3, 8, 8)).astype(np.float32))
    plan: Plan = []
    traits: collections.Counter[str] = collections.Counter()
    for seed in range(seed0, seed0 + count):
        rng = np.random.default_rng(seed)
        model = base_model()
        chosen = [str(_pick(rng, TRAITS)) for _ in range(int(rng.integers(1, 3)))]
        for trait in chosen:
            if trait != "bytes":
                try:
                    _apply(model, trait, rng, folder)
                except (IndexError, ValueError):  # a second trait that no longer fits (e.g. no inputs left)
                    pass
            traits[trait] += 1
        data = bytearray(model.SerializeToString())
        if "bytes" in chosen:
            if rng.random() < 0.4:
                data = data[: int(rng.integers(len(data)))]
            for _ in range(int(rng.integers(1, 6))):
                data[int(rng.integers(len(data)))] = int(rng.integers(256))
        path = folder / f"o_{seed:07d}.onnx"
        path.write_bytes(bytes(data))
        out = str(folder / f"o_{seed:07d}.out")
        plan.append({"file": path.name, "strategy": "+".join(chosen), "commands": [
            ["inspect", ["inspect", str(path), "--json"], None],
            ["run", ["run", str(path), "--input", str(x), "-q"], None],
            ["convert", ["convert", str(path), "-t", "onnx", "--calib-random", "-o", out, "-q"], None],
        ]})
    return plan, traits
