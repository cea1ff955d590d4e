"""The offline head plan against TFLM's own: equal to the byte on every real model."""

from __future__ import annotations

import pytest

from edgeserve.errors import ModelFileError
from edgeserve.converters.microcontroller.arena import PlannedBuffer, _place_greedy, align_up, plan_head
from edgeserve.tflite.model import TfliteModel

from mcu_models import INT8_MODELS  # tests/ is on sys.path

# The INT8 models, plus files TFLM also plans: the planner does not care about types,
# only sizes and lifetimes.
MODELS = [
    *INT8_MODELS,
    "tflm/audio_preprocessor_int8.tflite",
    "mlperf-tiny/vww_96_float.tflite",
    "tflm/hello_world_float.tflite",
]


@pytest.mark.parametrize("relative", MODELS)
def test_head_equals_what_tflm_allocates(testdata, relative):
    from edgeserve.converters.microcontroller import tflm

    data = (testdata / relative).read_bytes()
    reported = tflm.arena_use(data, 8 << 20)
    plan = plan_head(TfliteModel.from_bytes(data), pointer_bytes=8)
    assert plan.head_bytes == reported.head
    assert plan.head_bytes % 16 == 0


def test_head_matches_the_published_reference_table(testdata):
    # ../shared/testdata/README.md lists TFLM's head for these; no interpreter needed here.
    published = {
        "mlperf-tiny/kws_ref_model.tflite": 16000,
        "mlperf-tiny/vww_96_int8.tflite": 73728,
        "mlperf-tiny/pretrainedResnet_quant.tflite": 49152,
        "mlperf-tiny/ad01_int8.tflite": 768,
        "mlperf-tiny/str_ww_ref_model.tflite": 6656,
        "tflm/person_detect.tflite": 55296,
        "tflm/micro_speech_quantized.tflite": 5968,
        "tflm/hello_world_int8.tflite": 32,
    }
    for relative, head in published.items():
        assert plan_head(TfliteModel.from_file(testdata / relative)).head_bytes == head, relative


def test_scratch_buffers_are_planned_for_the_operator_that_asks(testdata):
    model = TfliteModel.from_file(testdata / "tflm/keyword_scrambled.tflite")
    plan = plan_head(model)
    scratch = [b for b in plan.buffers if b.tensor == -1]
    svdf = [op.index for op in model.subgraphs[0].operators if op.op_name == "SVDF"]
    # Each int8 SVDF asks for two int32 buffers: filters x batch, and units x batch.
    assert [b.operator for b in scratch] == [i for i in svdf for _ in range(2)]
    assert all(b.first == b.last == b.operator + 1 for b in scratch)
    first_svdf = model.subgraphs[0].operators[svdf[0]]
    filters = model.subgraphs[0].tensors[first_svdf.inputs[1]].shape[0]
    assert scratch[0].nbytes == 4 * filters


def _buffer(name: str, size: int, first: int, last: int, offline: int = -1) -> PlannedBuffer:
    return PlannedBuffer(name=name, tensor=0, operator=-1, nbytes=size, size=align_up(size),
                         first=first, last=last, offline_offset=offline)


def test_greedy_places_largest_first_in_the_lowest_free_gap():
    # a lives at steps 0-1, b at 1-2, c at 2-3. Largest first: a at 0. b and c tie in
    # size; TFLM takes the one added last (c) first: c does not meet a, so c goes to 0.
    # b meets both, so it goes above a: offset 112, and the head is 160 bytes.
    placed = _place_greedy([_buffer("a", 112, 0, 1), _buffer("b", 48, 1, 2), _buffer("c", 48, 2, 3)])
    assert [(b.name, b.offset) for b in placed] == [("a", 0), ("b", 112), ("c", 0)]
    assert max(b.offset + b.size for b in placed) == 160


def test_buffers_never_alive_together_share_bytes():
    placed = _place_greedy([
        _buffer("x", 64, 0, 3), _buffer("early", 32, 0, 0), _buffer("y", 64, 0, 3), _buffer("late", 32, 1, 1),
    ])
    offsets = {b.name: b.offset for b in placed}
    # Of the two 64s, y (added later) goes first: y 0, x 64. "late" and "early" both
    # meet x and y, so they go above them, and since they are never alive at the same
    # step they share the same 32 bytes.
    assert offsets == {"y": 0, "x": 64, "late": 128, "early": 128}


def test_offline_planned_offsets_are_kept():
    placed = _place_greedy([_buffer("online", 32, 0, 1), _buffer("fixed", 32, 0, 1, offline=256)])
    offsets = {b.name: b.offset for b in placed}
    assert offsets == {"fixed": 256, "online": 0}


def test_dynamic_shapes_are_refused_with_the_tensor_named(testdata):
    import dataclasses

    model = TfliteModel.from_file(testdata / "tflm/hello_world_int8.tflite")
    graph = model.subgraphs[0]
    broken = dataclasses.replace(graph.tensors[graph.inputs[0]], shape=(-1, 1))
    tensors = tuple(broken if t.index == broken.index else t for t in graph.tensors)
    model = dataclasses.replace(model, subgraphs=(dataclasses.replace(graph, tensors=tensors),))
    with pytest.raises(ModelFileError, match="dynamic shape"):
        plan_head(model)


@pytest.mark.slow
def test_scratch_of_mean_and_transpose_conv_matches_tflm(tmp_path):
    """A Keras model whose int8 kernels ask for scratch (MEAN, TRANSPOSE_CONV), planned exactly."""
    import keras

    from edgeserve.converters.microcontroller import tflm
    from edgeserve.conversion.convert import convert

    inputs = keras.Input((12, 12, 3))
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inputs)
    up = keras.layers.Conv2DTranspose(4, 3, strides=2, padding="same")(x)
    pooled = keras.layers.GlobalAveragePooling2D()(up)  # MEAN over H, W
    outputs = keras.layers.Dense(5)(pooled)
    source = tmp_path / "scratchy.keras"
    keras.Model(inputs, outputs).save(source)

    convert(source, ["tflite-int8"], tmp_path / "out", calib_random=True, options={"max_drop": 100.0})
    data = (tmp_path / "out" / "model_int8.tflite").read_bytes()
    model = TfliteModel.from_bytes(data)
    assert {"MEAN", "TRANSPOSE_CONV"} <= set(model.op_counts())
    plan = plan_head(model, pointer_bytes=8)
    scratch = {b.name.split(" #")[0] for b in plan.buffers if b.tensor == -1}
    assert scratch == {"MEAN", "TRANSPOSE_CONV"}
    use = tflm.arena_use(data, 1 << 20)
    assert plan.head_bytes == use.head
    # The tail too (TRANSPOSE_CONV's OpData, options and per-channel arrays), against the wheel.
    from edgeserve.converters.tflm.persistent import estimate_arena

    assert estimate_arena(model, use.head, pointer_bytes=8, recording=True).tail_bytes == use.tail


def test_depth_to_space_and_space_to_depth_tail_matches_tflm(tmp_path):
    """DEPTH_TO_SPACE and SPACE_TO_DEPTH (MediaPipe's pose detector upsamples with the first)
    keep their options and a copy of the output's dims in the tail: planned as the wheel has it."""
    import mcu_c_models

    from edgeserve.converters.microcontroller import tflm
    from edgeserve.converters.tflm.persistent import estimate_arena

    path = mcu_c_models.int8_tflite("d2s", tmp_path)
    data = path.read_bytes()
    model = TfliteModel.from_bytes(data)
    assert {"DEPTH_TO_SPACE", "SPACE_TO_DEPTH"} <= set(model.op_counts())
    use = tflm.arena_use(data, 1 << 20)
    assert plan_head(model, pointer_bytes=8).head_bytes == use.head
    assert estimate_arena(model, use.head, pointer_bytes=8, recording=True).tail_bytes == use.tail
