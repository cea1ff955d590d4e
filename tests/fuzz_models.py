"""Mutated .tflite models (the shared MLCommons Tiny / TFLM ones) for the CLI fuzz: each
through `inspect`, `convert -t mcu`, `verify` of what was written, and `run`."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
from cli_fuzz import Plan

MODELS = ("tflm/hello_world_int8", "mlperf-tiny/kws_ref_model", "tflm/micro_speech_quantized")


def write_model_mutants(testdata: Path, folder: Path, per_model: int,
                        seed0: int = 0) -> tuple[Plan, collections.Counter[str]]:
    """``per_model`` mutants of each model in MODELS with an input .npy each; the plan and strategy counts."""
    from test_model_validation import _Layout, mutant

    from edgeserve.tflite.model import TfliteModel

    folder.mkdir(parents=True, exist_ok=True)
    plan: Plan = []
    strategies: collections.Counter[str] = collections.Counter()
    for k, name in enumerate(MODELS):
        data = (testdata / f"{name}.tflite").read_bytes()
        model = TfliteModel.from_bytes(data)
        layout = _Layout(data)
        layout.root()
        weights = np.zeros(len(data), bool)
        for buffer in model.buffers:
            weights[buffer.offset : buffer.offset + buffer.size] = True
        tensor = model.subgraphs[0].tensors[model.subgraphs[0].inputs[0]]
        example = np.zeros(tensor.shape, tensor.numpy_dtype)
        for seed in range(seed0 + k * 100_000, seed0 + k * 100_000 + per_model):
            strategy, mutated = mutant(data, layout, weights, seed)
            strategies[strategy] += 1
            stem = folder / f"{k}_{seed:07d}"
            stem.with_suffix(".tflite").write_bytes(mutated)
            np.save(stem.with_suffix(".npy"), example)
            model_path, out = str(stem.with_suffix(".tflite")), str(stem) + ".out"
            plan.append({"file": stem.name + ".tflite", "strategy": strategy, "commands": [
                ["inspect", ["inspect", model_path, "--json"], None],
                ["convert", ["convert", model_path, "-t", "mcu", "--no-fit-check", "-o", out, "-q"], None],
                ["verify", ["verify", out], out],
                ["run", ["run", model_path, "--input", str(stem.with_suffix(".npy")), "-q"], None],
            ]})
    return plan, strategies
