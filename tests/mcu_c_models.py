"""Small Keras models, built and fully quantized in the test, that exercise every mcu-c kernel
the reference models do not: PAD (unfolded, before a max pool), STRIDED_SLICE, CONCATENATION on
two axes, MUL and ADD of two activations and of constants, TRANSPOSE, LOGISTIC, TANH, MEAN,
PRELU, LEAKY_RELU, SUB, MAXIMUM, MINIMUM, RELU, RELU6, RESIZE_BILINEAR/NEAREST_NEIGHBOR, HARD_SWISH,
TRANSPOSE_CONV, DEPTH_TO_SPACE and SPACE_TO_DEPTH, and a model with two outputs; and the same
kind of models with int16 activations and int8 weights (the 16x8 scheme the INT8 retry can
choose), converted by TensorFlow's own 16x8 converter."""

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
    elif kind == "prelu":  # per-channel PRELU (as MediaPipe's detectors have) and LEAKY_RELU
        init = tf.keras.initializers.RandomUniform(0.05, 0.6, seed=0)
        a = tf.keras.layers.PReLU(alpha_initializer=init, shared_axes=[1, 2])(conv(8, act=None)(x))
        b = tf.keras.layers.LeakyReLU(0.2)(conv(8, act=None)(a))
        y = tf.keras.layers.Dense(5)(tf.keras.layers.GlobalAveragePooling2D()(b))
    elif kind == "misc":  # SUB, MAXIMUM, MINIMUM of activations; RELU and RELU6 not fused into anything
        a, b = conv(8, act=None)(x), conv(8, act=None)(x)
        d = tf.keras.layers.Subtract()([a, b])
        f = tf.keras.layers.Minimum()([tf.keras.layers.Maximum()([d, a]), b])
        r = tf.keras.layers.ReLU()(tf.keras.layers.Reshape((2048,))(f))
        r6 = tf.keras.layers.ReLU(6.0)(tf.keras.layers.Reshape((2048,))(d))
        y = tf.keras.layers.Dense(5)(tf.keras.layers.Concatenate()([r, r6]))
    elif kind == "resize":  # RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR, up by 2 and to odd sizes
        a = conv(8)(x)
        up = tf.keras.layers.Add()([tf.keras.layers.Resizing(32, 32, interpolation="bilinear")(a),
                                    tf.keras.layers.Resizing(32, 32, interpolation="nearest")(a)])
        down = tf.keras.layers.Resizing(11, 13, interpolation="bilinear")(up)
        odd = tf.keras.layers.Resizing(23, 9, interpolation="nearest")(down)
        y = tf.keras.layers.Dense(5)(tf.keras.layers.Flatten()(odd))
    elif kind == "hswish":  # HARD_SWISH (MobileNetV3's activation), on inputs of two scales
        a = tf.keras.layers.Activation("hard_swish")(conv(8, act=None)(x))
        b = tf.keras.layers.Activation("hard_swish")(conv(8, act=None)(a) * 4.0)
        y = tf.keras.layers.Dense(5)(tf.keras.layers.GlobalAveragePooling2D()(b))
    elif kind == "tconv":  # TRANSPOSE_CONV: SAME and VALID, strides 2, kernels 3 and 4, a fused RELU
        a = tf.keras.layers.Conv2DTranspose(6, 3, strides=2, padding="same", activation="relu")(conv(8)(x))
        b = tf.keras.layers.Conv2DTranspose(4, 4, strides=2, padding="valid")(
            conv(4, 3, None)(tf.keras.layers.MaxPool2D(4)(a)))
        y = tf.keras.layers.Dense(5)(tf.keras.layers.Flatten()(tf.keras.layers.MaxPool2D(3)(b)))
    elif kind == "d2s":  # DEPTH_TO_SPACE (MediaPipe's pose detector upsamples so) and SPACE_TO_DEPTH
        d2s = tf.keras.layers.Lambda(lambda t: tf.nn.depth_to_space(t, 2))
        s2d = tf.keras.layers.Lambda(lambda t: tf.nn.space_to_depth(t, 4))
        a = d2s(conv(12)(x))  # 16x16x12 -> 32x32x3
        b = s2d(conv(4)(a))  # 32x32x4 -> 8x8x64
        y = tf.keras.layers.Dense(5)(tf.keras.layers.Flatten()(d2s(conv(8, 1)(b))))
    elif kind == "wide":  # int16: convolutions (fused RELU6), depthwise, PAD, pools, slices, binaries
        a = tf.keras.layers.Conv2D(8, 3, padding="same", activation="relu6")(x)
        d = tf.keras.layers.DepthwiseConv2D(3, strides=2, padding="same", depth_multiplier=2)(a)
        p = tf.keras.layers.MaxPool2D(2)(tf.keras.layers.ZeroPadding2D(((1, 1), (0, 2)))(d))
        s = p[:, 1:4, 0:4:2, :]
        c = tf.keras.layers.Concatenate(axis=-1)([s, s * 0.5 + 0.25])
        m = tf.keras.layers.Multiply()([c, conv(32, 1, None)(c)])
        e = tf.keras.layers.Subtract()([tf.keras.layers.Add()([m, c]), tf.keras.layers.Maximum()([m, c])])
        f = tf.keras.layers.AveragePooling2D(2, padding="same")(tf.keras.layers.Minimum()([e, c]))
        y = tf.keras.layers.Dense(6)(tf.keras.layers.Flatten()(f))
    elif kind == "wide_act":  # int16, judged by LiteRT (TFLM has no int16 RESIZE_BILINEAR): resizes, RELU, RELU6, MEAN
        a = conv(8)(x)
        up = tf.keras.layers.ReLU(6.0)(tf.keras.layers.Resizing(32, 32, interpolation="bilinear")(a * 3.0 - 1.0))
        near = tf.keras.layers.ReLU()(tf.keras.layers.Resizing(32, 32, interpolation="nearest")(a - 0.5))
        odd = tf.keras.layers.Resizing(11, 13, interpolation="bilinear")(tf.keras.layers.Add()([up, near]))
        # No FULLY_CONNECTED here: LiteRT's requantizes in double, a step off TFLM's (reference.py).
        y = tf.keras.layers.GlobalAveragePooling2D()(odd)
    elif kind == "wide_tflm":  # int16, judged by TFLM: nearest resize, RELU, RELU6, MEAN, FULLY_CONNECTED
        a = conv(8)(x)
        near = tf.keras.layers.ReLU()(tf.keras.layers.Resizing(24, 24, interpolation="nearest")(a - 0.5))
        b = tf.keras.layers.ReLU(6.0)(tf.keras.layers.Resizing(12, 12, interpolation="nearest")(near * 4.0))
        y = tf.keras.layers.Dense(6)(tf.keras.layers.GlobalAveragePooling2D()(b))
    elif kind == "wide_sig":  # int16 LOGISTIC (a gate, as PicoDet's and DBNet's heads have)
        a = conv(8, act=None)(x)
        g = tf.keras.layers.Activation("sigmoid")(a * 2.0)
        y = tf.keras.layers.Dense(6)(tf.keras.layers.Flatten()(tf.keras.layers.MaxPool2D(4)(
            tf.keras.layers.Multiply()([a, g]))))
    elif kind == "wide_tconv":  # int16 TRANSPOSE_CONV (DBNet's and selfie segmentation's upsampling)
        a = tf.keras.layers.Conv2DTranspose(6, 3, strides=2, padding="same", activation="relu")(conv(8)(x))
        b = tf.keras.layers.Conv2DTranspose(4, 4, strides=2, padding="valid")(tf.keras.layers.MaxPool2D(4)(a))
        y = tf.keras.layers.Dense(5)(tf.keras.layers.Flatten()(tf.keras.layers.MaxPool2D(3)(b)))
    elif kind == "generated":  # what -t mcu-c --kernels generated specialises, and what it must refuse
        a = tf.keras.layers.DepthwiseConv2D(3, padding="same", activation="relu")(conv(8)(x))  # 8 channels, 256 pixels
        a = conv(8, 5)(a)  # 5x5, 8 -> 8 at the same size: over its input through a ring of three rows
        # An expanding 1x1 streamed into a stride-2 depthwise (es_stream.h), over its input's end
        a = tf.keras.layers.DepthwiseConv2D(3, strides=2, padding="same")(conv(16, 1)(a))
        b = conv(12, 1, act="relu6")(a)  # 1x1 with a clamp narrower than int8
        b = tf.keras.layers.DepthwiseConv2D(5, padding="same")(b)  # 5x5, in place through a ring of three rows
        c = tf.keras.layers.DepthwiseConv2D(3, strides=2, activation="relu")(b)  # stride 2, 3x3: an odd pixel count
        c = tf.keras.layers.Dense(12, activation="relu")(c)  # fully connected over 9 rows: 4 pairs and a last one
        d = conv(7, 1, act=None)(c)  # 1x1 to an odd channel count
        e = conv(6, 1)(d)  # 7 input channels: gathered into columns
        f = tf.keras.layers.DepthwiseConv2D(3, padding="same")(e)  # 6 channels: a group of four and a tail of two
        y = tf.keras.layers.Dense(5)(tf.keras.layers.GlobalAveragePooling2D()(f))  # 6 inputs: refused
    elif kind == "heads":  # a detector's shape: a box regressor and a score head, two outputs
        a = conv(8)(x)
        boxes = tf.keras.layers.Reshape((64, 4))(conv(4, 1, None)(tf.keras.layers.MaxPool2D(2)(a)))
        scores = tf.keras.layers.Activation("sigmoid")(tf.keras.layers.Dense(3)(
            tf.keras.layers.GlobalAveragePooling2D()(a)))
        return tf.keras.Model(inp, [boxes, scores])
    else:
        raise ValueError(kind)
    return tf.keras.Model(inp, y)


def _calibrated(kind: str):  # -> (tf, tf.lite.TFLiteConverter)
    """TensorFlow's converter for the model, calibrated on 20 seeded random inputs."""
    import tensorflow as tf

    tf.keras.utils.set_random_seed(0)
    converter = tf.lite.TFLiteConverter.from_keras_model(build(kind))
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    rng = np.random.default_rng(0)
    converter.representative_dataset = lambda: ([rng.standard_normal((1, 16, 16, 3)).astype(np.float32)]
                                                for _ in range(20))
    return tf, converter


def int8_tflite(kind: str, out: Path) -> Path:
    """The model converted by TensorFlow's own converter to full INT8 (int8 in and out)."""
    tf, converter = _calibrated(kind)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = converter.inference_output_type = tf.int8
    path = out / f"{kind}.tflite"
    path.write_bytes(converter.convert())
    return path


def int16x8_tflite(kind: str, out: Path, int32_bias: bool = False) -> Path:
    """The model in TensorFlow's 16x8 scheme: int16 activations (and input and output), int8
    weights, int64 biases (int32 with ``int32_bias``, which TFLM accumulates in 32 bits)."""
    tf, converter = _calibrated(kind)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
    converter.inference_input_type = converter.inference_output_type = tf.int16
    if int32_bias:
        converter._experimental_full_integer_quantization_bias_type = tf.int32
    path = out / f"{kind}_16x8{'_b32' if int32_bias else ''}.tflite"
    path.write_bytes(converter.convert())
    return path
