"""Small Keras models, built and fully quantized in the test, that exercise every mcu-c kernel
the reference models do not: PAD (unfolded, before a max pool), STRIDED_SLICE, CONCATENATION on
two axes, MUL and ADD of two activations and of constants, TRANSPOSE, LOGISTIC, TANH, MEAN."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def build(kind: str):  # -> tf.keras.Model
    import tensorflow as tf

    def conv(filters: int, k: int = 3, act: str | None = "relu"):
        return tf.keras.layers.Conv2D(filters, k, padding="same", activation=act)

    x = inp = tf.keras.Input((16, 16, 3), batch_size=1)
    if kind == "pad":
        a = conv(8)(x)
        b = tf.keras.layers.ZeroPadding2D(((1, 2), (0, 3)))(a)
        b = tf.keras.layers.MaxPool2D(2)(b)
        b = b[:, 1:8, 0:8:2, :]
        c = tf.keras.layers.Concatenate(axis=-1)([b, b * 0.5 + 0.25])
        d = tf.keras.layers.Multiply()([c, conv(16, 1)(c)])
        e = tf.keras.layers.Add()([d, c])
        f = tf.keras.layers.AveragePooling2D(7, padding="same")(e)
        y = tf.keras.layers.Dense(5, activation="softmax")(tf.keras.layers.Flatten()(f))
    elif kind == "act":
        a = conv(8)(x)
        c = tf.keras.layers.Multiply()([a, tf.keras.layers.Activation("sigmoid")(a)])
        e = tf.keras.layers.Add()([c, tf.keras.layers.Activation("tanh")(a)])
        f = tf.keras.layers.GlobalAveragePooling2D()(e)
        y = tf.keras.layers.Dense(5)(f)  # no softmax: raw scores vary more with the input
    elif kind == "move":
        a = conv(4, 1)(x)
        b = tf.keras.layers.Permute((3, 1, 2))(a)
        b = tf.keras.layers.Reshape((4, 256))(b)
        c = tf.keras.layers.Concatenate(axis=1)([b, b])
        y = tf.keras.layers.Dense(6)(tf.keras.layers.Flatten()(c))
    else:
        raise ValueError(kind)
    return tf.keras.Model(inp, y)


def int8_tflite(kind: str, out: Path) -> Path:
    """The model converted by TensorFlow's own converter to full INT8 (int8 in and out)."""
    import tensorflow as tf

    tf.keras.utils.set_random_seed(0)
    converter = tf.lite.TFLiteConverter.from_keras_model(build(kind))
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    rng = np.random.default_rng(0)
    converter.representative_dataset = lambda: ([rng.standard_normal((1, 16, 16, 3)).astype(np.float32)]
                                                for _ in range(20))
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = tf.int8
    converter.inference_output_type = tf.int8
    path = out / f"{kind}.tflite"
    path.write_bytes(converter.convert())
    return path
