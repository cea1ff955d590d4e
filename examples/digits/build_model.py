"""Train the bundled example: a small Keras CNN on scikit-learn's 8x8 digits (seconds, seeded).

Writes to OUT (default build/example):
  digits_cnn.keras   the float source model
  calib.npz          x: 300 preprocessed training images (calibration set)
  eval.npz           x, y: the 360 held-out images and their labels
  frames.npz         frames: the held-out images as raw uint8 8x8 "camera frames", y: labels

The images are stored as uint8 pixels (0..255, from the data set's 0..16) and the model
is trained on exactly what edgeserve's default PreprocessSpec (gray, scale 1/255) makes of
them, so the runtime can feed raw frames and get the training-time preprocessing.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def digits_as_frames() -> tuple[np.ndarray, np.ndarray]:
    """All 1,797 digits as uint8 8x8x1 frames (0..255) and their labels."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    frames = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)[..., None]
    return frames, digits.target.astype(np.int64)


def split(frames: np.ndarray, labels: np.ndarray, seed: int = 0) -> tuple[np.ndarray, ...]:
    order = np.random.default_rng(seed).permutation(len(frames))
    test, train = order[:360], order[360:]
    return frames[train], labels[train], frames[test], labels[test]


def build(out: Path, epochs: int = 30, seed: int = 0) -> dict[str, float]:
    from edgeserve.console import capture_native_stderr

    # TensorFlow's C++ start-up notices (oneDNN, absl) go to descriptor 2 whatever
    # TF_CPP_MIN_LOG_LEVEL says; they are not this script's output.
    with capture_native_stderr():
        import keras

    keras.utils.set_random_seed(seed)
    frames, labels = digits_as_frames()
    f_train, y_train, f_test, y_test = split(frames, labels, seed)
    x_train = f_train.astype(np.float32) / 255.0  # = PreprocessSpec(color="gray").apply(frame)
    x_test = f_test.astype(np.float32) / 255.0

    model = keras.Sequential(
        [
            keras.Input((8, 8, 1), name="image"),
            keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
            keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling2D(2),
            keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(10, activation="softmax"),
        ],
        name="digits_cnn",
    )
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x_train, y_train, epochs=epochs, batch_size=64, verbose=0, shuffle=True)
    _, accuracy = model.evaluate(x_test, y_test, verbose=0)

    out.mkdir(parents=True, exist_ok=True)
    model.save(out / "digits_cnn.keras")
    np.savez(out / "calib.npz", x=x_train[:300])
    np.savez(out / "eval.npz", x=x_test, y=y_test)
    np.savez(out / "frames.npz", frames=f_test, y=y_test)
    return {"float_accuracy": float(accuracy)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("build/example"))
    parser.add_argument("--epochs", type=int, default=30)
    args = parser.parse_args()
    result = build(args.out, args.epochs)
    print(f"trained digits_cnn: float top-1 {result['float_accuracy']:.4f} on 360 held-out digits -> {args.out}")


if __name__ == "__main__":
    main()
