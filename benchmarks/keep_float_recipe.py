"""What keeping N operators in float costs ai-edge-quantizer's recipe lookup: one regex per kept
tensor (edgeserve before 0.2.1) against one regex for all of them, side by side in one process.

    python benchmarks/keep_float_recipe.py [--kept 100 600 2000]

The quantizer asks its recipe for every operator (by its output tensors' names) and searches
each name with every recipe regex; Python's re keeps 512 compiled patterns, so past that each
search compiles its pattern again. The operator names here are those of an unrolled LSTM
(one name per gate tensor and time step); half of them are kept in float, as the
float-layers remedy does. Prints seconds per lookup pass for both forms and their ratio.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def lookup_seconds(kept: list[str], op_names: list[str], combined: bool) -> float:
    from ai_edge_quantizer import algorithm_manager, qtyping, recipe, recipe_manager

    from edgeserve.converters.tflite_int8.quantizer_route import keep_float_pattern

    manager = recipe_manager.RecipeManager()
    manager.load_quantization_recipe(recipe.static_wi8_ai8())
    patterns = [keep_float_pattern(kept)] if combined else [f"(^|;){re.escape(t)};" for t in kept]
    for pattern in patterns:
        manager.add_quantization_config(pattern, qtyping.TFLOperationName.ALL_SUPPORTED,
                                        algorithm_key=algorithm_manager.AlgorithmName.NO_QUANTIZE)
    re.purge()
    start = time.perf_counter()
    for name in op_names:
        manager.get_quantization_configs(qtyping.TFLOperationName.FULLY_CONNECTED, name)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kept", type=int, nargs="+", default=[100, 600, 2000])
    args = parser.parse_args()
    print(f"{'kept':>6} {'operators':>9} {'one regex each (s)':>19} {'one regex (s)':>14} {'ratio':>7}")
    for n in args.kept:
        steps = -(-2 * n // 12)  # 3 layers x 4 gates a time step
        names = [f"model/lstm_{layer}/while/step_{t}/gate_{g};" for t in range(steps) for layer in range(3)
                 for g in range(4)][: 2 * n]
        kept = [name.rstrip(";") for name in names[::2]]
        each = lookup_seconds(kept, names, combined=False)
        one = lookup_seconds(kept, names, combined=True)
        print(f"{n:>6} {len(names):>9} {each:>19.2f} {one:>14.3f} {each / one:>7.0f}")


if __name__ == "__main__":
    main()
