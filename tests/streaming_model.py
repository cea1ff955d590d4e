"""A small streaming model built in the test: a ring buffer of the last 4 frames kept in a
tf.Variable, converted by TensorFlow with resource variables enabled and int8 variables,
full INT8 in and out (CALL_ONCE, VAR_HANDLE, READ_VARIABLE, ASSIGN_VARIABLE in the file)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def build(out: Path) -> Path:
    import tensorflow as tf

    class Stream(tf.Module):
        def __init__(self) -> None:
            self.state = tf.Variable(tf.zeros((1, 4, 8)), trainable=False)
            self.w = tf.constant(np.random.default_rng(0).standard_normal((32, 3)).astype(np.float32))

        @tf.function(input_signature=[tf.TensorSpec((1, 1, 8), tf.float32)])
        def __call__(self, x):  # noqa: ANN001 - a traced TensorFlow function
            window = tf.concat([self.state[:, 1:, :], x], axis=1)
            self.state.assign(window)
            return tf.nn.softmax(tf.matmul(tf.reshape(window, (1, 32)), self.w))

    module = Stream()
    converter = tf.lite.TFLiteConverter.from_concrete_functions([module.__call__.get_concrete_function()], module)
    converter.experimental_enable_resource_variables = True
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    rng = np.random.default_rng(1)
    converter.representative_dataset = lambda: ([rng.standard_normal((1, 1, 8)).astype(np.float32)]
                                                for _ in range(50))
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = tf.int8
    converter.inference_output_type = tf.int8
    converter._experimental_variable_quantization = True  # int8 state, as microWakeWord's
    path = out / "stream.tflite"
    path.write_bytes(converter.convert())
    return path
