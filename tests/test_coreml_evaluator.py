"""The numpy ML program evaluator against independent references (PyTorch, plain numpy).

Each test builds a small ML program with coremltools' MIL builder, saves it as a real
.mlpackage (weights in weight.bin), reads it back with edgeserve's reader and compares
the evaluator with torch.nn.functional computing the same thing. No Core ML needed.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgeserve.errors import ModelFileError, UnsupportedOpError

ct = pytest.importorskip("coremltools")
torch = pytest.importorskip("torch")
F = torch.nn.functional

RNG = np.random.default_rng(0)
X = RNG.standard_normal((1, 4, 9, 9)).astype(np.float32)


def build(tmp_path: Path, prog: object, name: str, precision: str = "fp32", target: object = None,
          passes: bool = False) -> Path:
    """Save a MIL program as a package, exactly as written unless ``passes``."""
    from edgeserve.converters.coreml.toolchain import captured

    with captured():
        model = ct.convert(
            prog, convert_to="mlprogram", skip_model_load=True,
            pass_pipeline=ct.PassPipeline.DEFAULT if passes else ct.PassPipeline.EMPTY,
            compute_precision=ct.precision.FLOAT32 if precision == "fp32" else ct.precision.FLOAT16,
            minimum_deployment_target=target or ct.target.iOS17,
        )
        path = tmp_path / f"{name}.mlpackage"
        model.save(str(path))
    return path


def run(path: Path, **feeds: np.ndarray) -> tuple[object, dict[str, np.ndarray]]:
    from edgeserve.converters.coreml.evaluator import MilEvaluator
    from edgeserve.converters.coreml.program import MilProgram

    program = MilProgram.load(path)
    return program, MilEvaluator(program).run(feeds)


def same_pads(n: int, k: int, s: int, d: int = 1) -> tuple[int, int]:
    total = max((-(-n // s) - 1) * s + (k - 1) * d + 1 - n, 0)
    return total // 2, total - total // 2


def t(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x))


# ----- convolution and pooling ---------------------------------------------------------------------
def test_convolutions_match_torch(tmp_path: Path) -> None:
    """One of each path of the evaluator's conv: im2col (groups 1, a kernel over 1x1), and the sum
    over kernel offsets (grouped, depthwise with custom padding, 1x1 with a stride)."""
    from coremltools.converters.mil import Builder as mb

    w_group = RNG.standard_normal((6, 2, 3, 3)).astype(np.float32)
    w_dil = RNG.standard_normal((5, 4, 3, 2)).astype(np.float32)
    w_dw = RNG.standard_normal((4, 1, 3, 3)).astype(np.float32)
    w_point = RNG.standard_normal((7, 4, 1, 1)).astype(np.float32)
    bias = RNG.standard_normal(5).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=X.shape)], opset_version=ct.target.iOS17)
    def prog(x):  # type: ignore[no-untyped-def]
        same = mb.conv(x=x, weight=w_group, strides=[2, 2], pad_type="same", groups=2, name="same")
        dilated = mb.conv(x=x, weight=w_dil, bias=bias, pad_type="valid", dilations=[2, 1], name="dilated")
        depthwise = mb.conv(x=x, weight=w_dw, pad_type="custom", pad=[1, 0, 2, 1], groups=4, name="depthwise")
        pointwise = mb.conv(x=x, weight=w_point, strides=[2, 1], pad_type="valid", name="pointwise")
        return same, dilated, depthwise, pointwise

    program, out = run(build(tmp_path, prog, "conv"), x=X)
    assert program.op_counts() == {"conv": 4}
    top, bottom = same_pads(9, 3, 2)
    expect_same = F.conv2d(F.pad(t(X), (top, bottom, top, bottom)), t(w_group), stride=2, groups=2)
    expect_dilated = F.conv2d(t(X), t(w_dil), t(bias), dilation=(2, 1))
    expect_dw = F.conv2d(F.pad(t(X), (2, 1, 1, 0)), t(w_dw), groups=4)
    np.testing.assert_allclose(out["same"], expect_same.numpy(), atol=1e-5)
    np.testing.assert_allclose(out["dilated"], expect_dilated.numpy(), atol=1e-5)
    np.testing.assert_allclose(out["depthwise"], expect_dw.numpy(), atol=1e-5)
    np.testing.assert_allclose(out["pointwise"], F.conv2d(t(X), t(w_point), stride=(2, 1)).numpy(), atol=1e-5)


def test_transposed_convolutions_match_torch(tmp_path: Path) -> None:
    """conv_transpose (PaddleOCR's text detector upsamples with it): valid, custom padding
    with groups and dilation, and an output_shape one larger than the padding leaves
    (PyTorch's output_padding)."""
    from coremltools.converters.mil import Builder as mb

    w = RNG.standard_normal((4, 3, 2, 2)).astype(np.float32)
    w_group = RNG.standard_normal((4, 2, 3, 3)).astype(np.float32)
    bias = RNG.standard_normal(3).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=X.shape)], opset_version=ct.target.iOS17)
    def prog(x):  # type: ignore[no-untyped-def]
        up = mb.conv_transpose(x=x, weight=w, bias=bias, strides=[2, 2], pad_type="valid", name="up")
        grouped = mb.conv_transpose(x=x, weight=w_group, strides=[2, 1], dilations=[1, 2], groups=2,
                                    pad_type="custom", pad=[1, 2, 0, 1], name="grouped")
        shaped = mb.conv_transpose(x=x, weight=w_group, strides=[2, 2], groups=2, pad_type="custom",
                                   pad=[1, 1, 1, 1], output_shape=[1, 4, 18, 18], name="shaped")
        return up, grouped, shaped

    program, out = run(build(tmp_path, prog, "deconv"), x=X)
    assert program.op_counts() == {"conv_transpose": 3}
    expect_up = F.conv_transpose2d(t(X), t(w), t(bias), stride=2)
    full = F.conv_transpose2d(t(X), t(w_group), stride=(2, 1), dilation=(1, 2), groups=2)
    expect_grouped = full[:, :, 1: full.shape[2] - 2, 0: full.shape[3] - 1]
    expect_shaped = F.conv_transpose2d(t(X), t(w_group), stride=2, padding=1, output_padding=1, groups=2)
    np.testing.assert_allclose(out["up"], expect_up.numpy(), atol=1e-5)
    np.testing.assert_allclose(out["grouped"], expect_grouped.numpy(), atol=1e-5)
    np.testing.assert_allclose(out["shaped"], expect_shaped.numpy(), atol=1e-5)


def test_pooling_matches_torch(tmp_path: Path) -> None:
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec(shape=X.shape)], opset_version=ct.target.iOS17)
    def prog(x):  # type: ignore[no-untyped-def]
        mx = mb.max_pool(x=x, kernel_sizes=[3, 3], strides=[2, 2], pad_type="same", name="max_same")
        avg = mb.avg_pool(x=x, kernel_sizes=[3, 3], strides=[2, 2], pad_type="custom", pad=[1, 1, 1, 1],
                          exclude_padding_from_average=True, name="avg_exclude")
        avg_in = mb.avg_pool(x=x, kernel_sizes=[2, 2], strides=[2, 2], pad_type="valid", ceil_mode=True,
                             name="avg_ceil")
        return mx, avg, avg_in

    program, out = run(build(tmp_path, prog, "pool"), x=X)
    assert program.op_counts() == {"avg_pool": 2, "max_pool": 1}
    top, bottom = same_pads(9, 3, 2)
    expect_max = F.max_pool2d(F.pad(t(X), (top, bottom, top, bottom), value=-np.inf), 3, 2)
    expect_avg = F.avg_pool2d(t(X), 3, 2, padding=1, count_include_pad=False)
    np.testing.assert_allclose(out["max_same"], expect_max.numpy(), atol=1e-6)
    np.testing.assert_allclose(out["avg_exclude"], expect_avg.numpy(), atol=1e-6)
    # ceil mode keeps the last partial window: 9 -> 5 outputs
    assert out["avg_ceil"].shape == (1, 4, 5, 5)
    np.testing.assert_allclose(out["avg_ceil"][..., :4, :4], F.avg_pool2d(t(X), 2, 2).numpy(), atol=1e-6)


# ----- everything else a converted CNN/MLP uses ------------------------------------------------------
def test_normalization_activations_reductions_and_shapes_match(tmp_path: Path) -> None:
    from coremltools.converters.mil import Builder as mb

    gamma = RNG.standard_normal(9).astype(np.float32)
    beta = RNG.standard_normal(9).astype(np.float32)
    mean, var = RNG.standard_normal(4).astype(np.float32), RNG.random(4).astype(np.float32) + 0.5
    w = RNG.standard_normal((7, 36)).astype(np.float32)
    b = RNG.standard_normal(7).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=X.shape)], opset_version=ct.target.iOS17)
    def prog(x):  # type: ignore[no-untyped-def]
        outs = {
            "layer_norm": mb.layer_norm(x=x, axes=[-1], gamma=gamma, beta=beta, epsilon=1e-5),
            "batch_norm": mb.batch_norm(x=x, mean=mean, variance=var, epsilon=1e-3),
            "gelu": mb.gelu(x=x, mode="EXACT"),
            "gelu_tanh": mb.gelu(x=x, mode="TANH_APPROXIMATION"),
            "silu": mb.silu(x=x),
            "sigmoid": mb.sigmoid(x=x),
            "leaky": mb.leaky_relu(x=x, alpha=0.2),
            "clip": mb.clip(x=x, alpha=-0.5, beta=0.7),
            "softmax": mb.softmax(x=x, axis=1),
            "mean": mb.reduce_mean(x=x, axes=[2, 3], keep_dims=True),
            "max": mb.reduce_max(x=x, axes=[1]),
            "transpose": mb.transpose(x=x, perm=[0, 2, 3, 1]),
            "pad_reflect": mb.pad(x=x, pad=[1, 2, 0, 1], mode="reflect"),
            "pad_const": mb.pad(x=x, pad=[2, 0, 1, 1], mode="constant", constant_val=3.0),
            "slice": mb.slice_by_index(x=x, begin=[0, 1, 2, 0], end=[1, 3, 9, 5], stride=[1, 1, 2, 1],
                                       begin_mask=[False, False, False, True], end_mask=[True, False, True, False],
                                       squeeze_mask=[True, False, False, False]),
            "slice_size": mb.slice_by_size(x=x, begin=[0, 1, 3, 2], size=[1, 2, -1, 4]),
            "crop": mb.crop(x=x, crop_height=[1, 2], crop_width=[3, 0]),  # Keras's Cropping1D (SpliceAI)
            "concat": mb.concat(values=[x, mb.mul(x=x, y=2.0)], axis=1),
            "upsample": mb.upsample_nearest_neighbor(x=x, scale_factor_height=2, scale_factor_width=3),
            # What coremltools makes of F.interpolate(bilinear) (MediaPipe's pose detector, via ONNX).
            "bilinear": mb.upsample_bilinear(x=x, scale_factor_height=2, scale_factor_width=3, align_corners=False),
            "bilinear_corners": mb.upsample_bilinear(x=x, scale_factor_height=2.0, scale_factor_width=1.5,
                                                     align_corners=True),
        }
        flat = mb.reshape(x=mb.slice_by_size(x=x, begin=[0, 0, 0, 0], size=[1, 4, 3, 3]), shape=[1, 36])
        outs["linear"] = mb.linear(x=flat, weight=w, bias=b)
        outs["matmul"] = mb.matmul(x=mb.reshape(x=flat, shape=[1, 6, 6]), y=mb.reshape(x=flat, shape=[1, 6, 6]),
                                   transpose_y=True)
        parts = mb.split(x=x, split_sizes=[1, 3], axis=1)
        outs["split_1"], outs["split_3"] = parts[0], parts[1]
        return tuple(mb.identity(x=v, name=k) for k, v in outs.items())

    program, out = run(build(tmp_path, prog, "misc"), x=X)
    tx = t(X)
    flat = X[:, :, :3, :3].reshape(1, 36)
    expected = {
        "layer_norm": F.layer_norm(tx, (9,), t(gamma), t(beta), eps=1e-5),
        "batch_norm": (tx - t(mean)[:, None, None]) / torch.sqrt(t(var)[:, None, None] + 1e-3),
        "gelu": F.gelu(tx), "gelu_tanh": F.gelu(tx, approximate="tanh"), "silu": F.silu(tx),
        "sigmoid": torch.sigmoid(tx), "leaky": F.leaky_relu(tx, 0.2), "clip": tx.clamp(-0.5, 0.7),
        "softmax": torch.softmax(tx, 1), "mean": tx.mean((2, 3), keepdim=True), "max": tx.amax(1),
        "transpose": tx.permute(0, 2, 3, 1), "pad_reflect": F.pad(tx, (0, 1, 1, 2), mode="reflect"),
        "pad_const": F.pad(tx, (1, 1, 2, 0), value=3.0), "slice": tx[0, 1:3, 2::2, :5],
        "slice_size": tx[:, 1:3, 3:, 2:6], "crop": tx[:, :, 1:7, 3:], "concat": torch.cat([tx, 2 * tx], 1),
        "upsample": tx.repeat_interleave(2, 2).repeat_interleave(3, 3),
        "bilinear": F.interpolate(tx, scale_factor=(2, 3), mode="bilinear", align_corners=False),
        "bilinear_corners": F.interpolate(tx, size=(18, 13), mode="bilinear", align_corners=True),
        "linear": t(flat) @ t(w).T + t(b),
        "matmul": t(flat.reshape(1, 6, 6)) @ t(flat.reshape(1, 6, 6)).transpose(1, 2),
        "split_1": tx[:, :1], "split_3": tx[:, 1:],
    }
    assert set(out) == set(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(out[name], value.numpy(), atol=2e-5, err_msg=name)
    counts = program.op_counts()
    for op in ("layer_norm", "batch_norm", "gelu", "softmax", "pad", "slice_by_index", "split", "linear", "matmul",
               "crop"):
        assert op in counts, op


# ----- fp16 storage and the dequantize ops ------------------------------------------------------------
def test_fp16_program_is_rounded_like_core_ml(tmp_path: Path) -> None:
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 8))], opset_version=ct.target.iOS17)
    def prog(x):  # type: ignore[no-untyped-def]
        return mb.mul(x=mb.add(x=x, y=1e-4), y=3.0, name="y")

    x = np.array([[1.0, 2.0, 1000.0, 0.1, -3.3, 7.0, 1e-3, 65000.0]], np.float32)
    program, out = run(build(tmp_path, prog, "fp16", precision="fp16", passes=True), x=x)
    assert "cast" in program.op_counts()  # fp32 input cast to fp16 inside the program
    with np.errstate(over="ignore"):
        expect = ((x.astype(np.float16).astype(np.float32) + np.float32(np.float16(1e-4))).astype(np.float16)
                  .astype(np.float32) * 3).astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(out["y"].astype(np.float32), expect)  # 65000*3 overflows fp16: inf, as on device
    assert np.isinf(out["y"][0, -1])


def test_int8_weight_and_activation_dequantization(tmp_path: Path) -> None:
    from coremltools.converters.mil import Builder as mb

    q = RNG.integers(-127, 128, (6, 8)).astype(np.int8)
    zero = np.array([0, 1, -2, 3, 0, -1], np.int8)
    scale = (RNG.random(6) * 0.05 + 0.01).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 8))], opset_version=ct.target.iOS17)
    def prog(x):  # type: ignore[no-untyped-def]
        weight = mb.constexpr_affine_dequantize(quantized_data=q, zero_point=zero, scale=scale, axis=0)
        y = mb.linear(x=x, weight=weight, name="dense")
        yq = mb.quantize(input=y, scale=np.float32(0.05), output_dtype="int8", name="yq")
        return y, mb.dequantize(input=yq, scale=np.float32(0.05), name="ydq")

    x = RNG.standard_normal((1, 8)).astype(np.float32) * 4
    program, out = run(build(tmp_path, prog, "int8"), x=x)
    assert program.op_counts() == {"constexpr_affine_dequantize": 1, "dequantize": 1, "linear": 1, "quantize": 1}
    weight = (q.astype(np.float32) - zero[:, None]) * scale[:, None]
    dense = x @ weight.T
    np.testing.assert_allclose(out["dense"], dense, rtol=1e-5, atol=1e-5)
    expect_q = np.clip(np.rint(dense / 0.05), -128, 127)  # round half to even, saturate
    assert np.abs(dense).max() > 128 * 0.05  # the test input does saturate
    np.testing.assert_allclose(out["ydq"], expect_q * np.float32(0.05), rtol=1e-6)


def test_blockwise_dequantization_ios18(tmp_path: Path) -> None:
    from coremltools.converters.mil import Builder as mb

    data = RNG.integers(-8, 8, (4, 8)).astype(np.int8)
    scale = (RNG.random((4, 2)) + 0.5).astype(np.float32)
    offset = RNG.integers(-2, 3, (4, 2)).astype(np.int8)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 8))], opset_version=ct.target.iOS18)
    def prog(x):  # type: ignore[no-untyped-def]
        weight = mb.constexpr_blockwise_shift_scale(data=data, scale=scale, offset=offset)
        return mb.linear(x=x, weight=weight, name="dense")

    x = RNG.standard_normal((1, 8)).astype(np.float32)
    program, out = run(build(tmp_path, prog, "blockwise", target=ct.target.iOS18), x=x)
    assert "constexpr_blockwise_shift_scale" in program.op_counts()
    weight = (data.astype(np.float32) - np.repeat(offset, 4, axis=1)) * np.repeat(scale, 4, axis=1)
    np.testing.assert_allclose(out["dense"], x @ weight.T, rtol=1e-5, atol=1e-5)


# ----- refusing what it cannot do ----------------------------------------------------------------------
def test_an_op_without_implementation_is_refused_by_name(tmp_path: Path) -> None:
    from coremltools.converters.mil import Builder as mb

    from edgeserve.converters.coreml.evaluator import MilEvaluator, unsupported_ops
    from edgeserve.converters.coreml.program import MilProgram

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 8))], opset_version=ct.target.iOS17)
    def prog(x):  # type: ignore[no-untyped-def]
        return mb.cumsum(x=mb.relu(x=x), axis=1, name="y")

    program = MilProgram.load(build(tmp_path, prog, "cumsum"))
    assert unsupported_ops(program) == ["cumsum"]
    with pytest.raises(UnsupportedOpError) as err:
        MilEvaluator(program)
    assert err.value.op == "cumsum"
    assert "not verified: op cumsum" in str(err.value) and "conv" in err.value.supported


def test_damaged_weight_file_is_a_model_file_error(tmp_path: Path) -> None:
    from coremltools.converters.mil import Builder as mb

    from edgeserve.converters.coreml.program import MilProgram

    weight = RNG.standard_normal((16, 32)).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 32))], opset_version=ct.target.iOS17)
    def prog(x):  # type: ignore[no-untyped-def]
        return mb.linear(x=x, weight=weight, name="y")

    package = build(tmp_path, prog, "dense")
    blob = next(package.rglob("weight.bin"))
    data = bytearray(blob.read_bytes())
    count, version = struct.unpack_from("<II", data, 0)
    assert version == 2
    # Walk the file independently of edgeserve's reader: 64-byte metadata, then the data.
    entries, offset = {}, 64
    for _ in range(count):
        sentinel, _dtype, size, data_offset = struct.unpack_from("<IIQQ", data, offset)
        assert sentinel == 0xDEADBEEF
        entries[size] = (offset, data_offset)
        offset = -(-(data_offset + size) // 64) * 64
    meta_offset, data_offset = entries[weight.nbytes]
    stored = np.frombuffer(bytes(data[data_offset:data_offset + weight.nbytes]), np.float32).reshape(16, 32)
    np.testing.assert_array_equal(stored, weight)
    bad = tmp_path / "bad.mlpackage"
    shutil.copytree(package, bad)
    bad_blob = next(bad.rglob("weight.bin"))
    damaged = bytearray(data)
    damaged[meta_offset:meta_offset + 4] = b"\0\0\0\0"  # the weight blob's sentinel
    bad_blob.write_bytes(bytes(damaged))
    with pytest.raises(ModelFileError, match="bad sentinel"):
        MilProgram.load(bad)
    bad_blob.write_bytes(bytes(data[:data_offset + 100]))  # truncated inside the weight
    with pytest.raises(ModelFileError, match="bytes"):
        MilProgram.load(bad)
    manifest = bad / "Manifest.json"
    info = json.loads(manifest.read_text())
    info["rootModelIdentifier"] = "nope"
    manifest.write_text(json.dumps(info))
    with pytest.raises(ModelFileError, match="Manifest.json is damaged"):
        MilProgram.load(bad)


def test_importing_the_target_and_evaluator_imports_no_framework(tmp_path: Path) -> None:
    heavy = ("tensorflow", "keras", "coremltools", "torch")
    code = ("import sys, json, edgeserve.converters.coreml, edgeserve.converters.coreml.evaluator, edgeserve.converters.coreml.program, "
            "edgeserve.converters.coreml.frontend, edgeserve.converters.coreml.quantize, edgeserve.converters.coreml.toolchain; "
            f"print(json.dumps([m for m in {heavy!r} if m in sys.modules]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []
