"""A tiny sine regressor (the TFLM hello_world task), trained in-process with fixed seeds.

Its int8 version loses measurable accuracy (a 1-D input and output quantized to 256
levels), which makes it the fixture for accuracy-aware tuning.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def build_sine(out: Path, seed: int = 0) -> Path:
    import keras

    keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 2 * np.pi, (1200, 1)).astype(np.float32)
    y = np.sin(x).astype(np.float32)
    model = keras.Sequential([
        keras.Input((1,), name="x"),
        keras.layers.Dense(16, activation="relu"),
        keras.layers.Dense(16, activation="relu"),
        keras.layers.Dense(1),
    ])
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    model.fit(x[:1000], y[:1000], epochs=60, batch_size=32, verbose=0)
    out.mkdir(parents=True, exist_ok=True)
    model.save(out / "sine.keras")
    np.savez(out / "calib.npz", x=x[:300])
    np.savez(out / "eval.npz", x=x[1000:], y=y[1000:])
    return out
