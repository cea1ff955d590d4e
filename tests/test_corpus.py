"""The corpus matrix (issue 24): the real models of tests/corpus.py through every target, with
`edgeserve convert` as a user runs it (one process per model, all eight targets requested).

`make test` (what CI runs, in 90 minutes on 2 cores) takes all thirteen. Their converts take 34
minutes of wall time two at a time on 2 cores (2026-11-28) and the rest of the suite about 57,
too long one after the other; so the converts start with the session and run beside the other
tests at the lowest CPU priority (conftest.py, corpus.start_in_background), in the third of the
two cores those leave idle, and these tests, moved to the end of the run, collect their rows.
`make test-corpus` runs this file alone; EDGESERVE_CORPUS=name,name takes those models only.

Each cell is asserted as measured (README, "Real models through every target"): a built
artifact with the figure its check measured against the source run in its own framework
(a floor below the measurement), or a refusal, failure or "not built" whose one `error:` line
names the operator, the route or the bound. No cell may end in a traceback. The floors are
the measured figures less a margin for a library update's rounding, not bounds chosen to pass.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import Future
from pathlib import Path

import pytest
from corpus import CORPUS, TARGETS, clear_when_settled

pytestmark = pytest.mark.slow

OK, FAILED, REFUSED, NOT_BUILT = "ok", "failed", "refused", "not built"

_ASKED = set(os.environ.get("EDGESERVE_CORPUS", "all").split(",")) - {""}
_CHOSEN = {m.name for m in CORPUS} if _ASKED in ({"all"}, set()) else _ASKED
# Longest first, so the two converts that run at a time end together (seconds of one convert of
# all eight targets, all thirteen two at a time, 2026-11-28: docs/sources.md's table).
SECONDS = {"layout_detector": 1081, "ocr_text_detector": 563, "pose_detection": 444, "ocr_text_direction": 306,
           "palm_detection_lite": 273, "hand_landmark_lite": 252, "selfie_segmentation": 222, "image_orientation": 189,
           "blazeface": 172, "fer_emotion": 144, "mtcnn_onet": 109, "silero_vad": 98}
SELECTED = tuple(sorted((m for m in CORPUS if m.name in _CHOSEN), key=lambda m: -SECONDS.get(m.name, 0)))
BIT_EXACT = {"bit_exact": True}


def floor(sqnr_db: float | None = None, top1: float | None = None, **exact: object) -> dict[str, object]:
    return {"sqnr_db": sqnr_db, "top1_agreement": top1, **exact}


# model -> target -> (status, what the cell must show): for "ok", the floors of its figures;
# otherwise a phrase its reason must contain.
EXPECTED: dict[str, dict[str, tuple[str, object]]] = {
    # The three SSD detectors: the decoder's outputs judged by detections matched to the float
    # model's (edgeserve/quality/detections.py); "detection_match" floors the matched share, "sqnr_db" the worst output.
    "blazeface": {
        "tflite-int8": (OK, floor(sqnr_db=9.0, detection_match=0.95)),  # 10.6 dB, 100 % (score error 0.05)
        "mcu": (OK, floor(bit_exact=True)),
        "mcu-c": (OK, floor(bit_exact=True)),
        "coreml": (OK, floor(sqnr_db=58.5, detection_match=0.95)),  # measured 60.5 dB, 100 %
        "onnx": (OK, floor(sqnr_db=122.0, detection_match=0.95)),  # measured 123.5 dB, 100 %
        "onnx-int8": (OK, floor(sqnr_db=9.0, detection_match=0.95)),  # 10.8 dB, 100 % (score error 0.05)
        "executorch": (OK, floor(exact=True, xnnpack_share=0.96, detection_match=0.95)),  # XNNPACK 98 %
        # XNNPACK refuses its INT8 depthwise convolutions at load time: portable kernels, said so.
        "executorch-int8": (OK, floor(sqnr_db=9.5, xnnpack_share=0.0, detection_match=0.95)),  # 11.3 dB, 100 %
    },
    # MediaPipe's palm detector takes [0, 1] (palm_detection_cpu.pbtxt; fed [-1, 1] before, its
    # activations reached 32,000 and INT8 invented palms). The photos hold one palm the float model
    # finds, so its detection cells turn on that one. int8 activations lose it; the int16x8 remedy
    # (PRELU rewritten for it) keeps it, at 23.9 dB. TFLM has no int16 RESIZE_BILINEAR: -t mcu runs
    # its two in int8 between requantizations (converters/tflm/int8_islands.py), judged as tflite-int8.
    "palm_detection_lite": {
        "tflite-int8": (OK, floor(sqnr_db=22.0, detection_match=0.95)),  # 23.9 dB, 1 of 1 (int16x8)
        # 23.7 dB, 1 of 1 (score error 0.03); TFLM within 239 int16 steps (< 1 int8 step) of LiteRT
        "mcu": (OK, floor(sqnr_db=22.0, detection_match=0.95)),
        # mcu-c's int16 kernels, judged by LiteRT's reference kernels (TFLM cannot run the int16 resize).
        "mcu-c": (OK, floor(bit_exact=True)),
        "coreml": (OK, floor(sqnr_db=56.0, detection_match=0.95)),  # measured 57.6 dB, 100 %
        "onnx": (OK, floor(sqnr_db=118.0, detection_match=0.95)),  # measured 119.5 dB, 100 %
        # int8 activations lose the palm (0 of 1, 12.5 dB); the int16-activation remedy keeps it.
        "onnx-int8": (OK, floor(sqnr_db=22.0, detection_match=0.95, activations="int16")),  # 23.9 dB, 1 of 1
        "executorch": (OK, floor(exact=True, xnnpack_share=0.4, detection_match=0.95)),  # XNNPACK 45 %
        # static int8: 0 of 1 found, 13.1 dB; dynamic int8 activations keep it (XNNPACK has no int16)
        "executorch-int8": (OK, floor(sqnr_db=22.5, detection_match=0.95, xnnpack_share=0.6,
                                      activations="int8 dynamic")),  # 25.5 dB, 1 of 1, XNNPACK 65 %
    },
    # Judged at MediaPipe's own threshold, 0.2 (pose_detection_cpu.pbtxt). int8 activations keep
    # 78 % of the float detections; int16 (DEPTH_TO_SPACE rewritten for it) 89 %, score error 0.065.
    "pose_detection": {
        "tflite-int8": (OK, floor(sqnr_db=9.0, detection_match=0.85)),  # 9.9 dB, 88.6 % (int16x8)
        "mcu": (OK, floor(sqnr_db=8.5, detection_match=0.85)),  # 9.9 dB, 88.6 %; its 2 resizes in int8 as the palm's
        "mcu-c": (OK, floor(bit_exact=True)),  # as the palm detector's
        "coreml": (OK, floor(sqnr_db=50.5, detection_match=0.95)),  # measured 52.7 dB, 100 %
        "onnx": (OK, floor(sqnr_db=115.5, detection_match=0.95)),  # measured 117.0 dB, 100 %
        # int8 activations: 68.6 %, score error 0.130; int16 activations: 91 %, score error 0.06
        "onnx-int8": (OK, floor(sqnr_db=8.5, detection_match=0.85, activations="int16")),  # 9.9 dB, 91 %
        "executorch": (OK, floor(exact=True, xnnpack_share=0.96, detection_match=0.95)),  # XNNPACK 99 %
        # static int8: 38.9 % (portable kernels); dynamic: 94.9 % (score error 0.03), XNNPACK 99.5 %
        "executorch-int8": (OK, floor(sqnr_db=18.5, detection_match=0.9, xnnpack_share=0.97,
                                      activations="int8 dynamic")),  # 20.5 dB
    },
    # On hands (hand_crops): every output passes the default 10 dB in INT8, the world landmarks
    # (Identity_3) last; on the photo views, which hold no hand, it passed only with 8 float layers.
    "hand_landmark_lite": {
        "tflite-int8": (OK, floor(sqnr_db=10.0, activations="int8")),  # measured 10.9 dB
        "mcu": (OK, floor(bit_exact=False)),  # TFLM within 1 step of LiteRT's reference kernels
        "mcu-c": (OK, floor(bit_exact=True)),  # bit-exact with TFLM; 1.77 G Cortex-M4 instructions
        "coreml": (OK, floor(sqnr_db=50.0)),  # measured 51.7 dB
        "onnx": (OK, floor(sqnr_db=107.0)),  # measured 109.0 dB
        "onnx-int8": (OK, floor(sqnr_db=10.0, activations="int8")),  # measured 10.9 dB
        "executorch": (OK, floor(sqnr_db=108.5, xnnpack_share=0.9)),  # measured 110.4 dB, XNNPACK 92 %
        # static int8: 8.8 dB (world landmarks); dynamic: 27.3 dB worst output, XNNPACK 97 %
        "executorch-int8": (OK, floor(sqnr_db=25.5, xnnpack_share=0.95, activations="int8 dynamic")),
    },
    # int8 activations measure 5.0 dB; int16 (HARD_SWISH rewritten for it) 18.6 dB.
    "selfie_segmentation": {
        "tflite-int8": (OK, floor(sqnr_db=17.0)),  # measured 18.6 dB (int16x8)
        # measured 46.96 dB on a fresh install (2026-11-29: numpy 2.4.6, onnxruntime 1.32): 47.19 with the
        # evaluator before its convolutions were summed over kernel offsets, 49.1 on the install before
        "coreml": (OK, floor(sqnr_db=45.5)),
        "onnx": (OK, floor(sqnr_db=105.0)),  # measured 107.0 dB
        "onnx-int8": (OK, floor(sqnr_db=17.0, activations="int16")),  # 18.5 dB (int8 activations: 6.2 dB)
        "executorch": (OK, floor(exact=True, xnnpack_share=0.97)),  # measured XNNPACK 99 %
        # static int8: 4.1 dB; dynamic: 20.0 dB, XNNPACK 99.8 %
        "executorch-int8": (OK, floor(sqnr_db=18.5, xnnpack_share=0.97, activations="int8 dynamic")),
        "mcu": (OK, floor(sqnr_db=17.0)),  # 18.7 dB, its 3 resizes in int8 as the palm's; TFLM within 126 int16 steps
        "mcu-c": (OK, floor(bit_exact=True)),  # LiteRT's reference kernels judge it, as the palm's
    },
    "ocr_text_direction": {
        "tflite-int8": (OK, floor(sqnr_db=15.5, top1=0.84)),  # measured 17.0 dB, top-1 90.6 %
        "mcu": (OK, floor(bit_exact=True)),
        "mcu-c": (OK, floor(bit_exact=True)),
        "coreml": (OK, floor(sqnr_db=42.5, top1=0.93)),  # measured 44.3 dB, top-1 100.0 %
        "onnx": (OK, floor(sqnr_db=131.5, top1=0.93)),  # measured 133.2 dB, top-1 100.0 %
        "onnx-int8": (OK, floor(sqnr_db=14.5, top1=0.84)),  # measured 16.4 dB, top-1 90.6 %
        # measured 118.0 dB, top-1 100.0 %, XNNPACK 100 %
        "executorch": (OK, floor(sqnr_db=116.5, top1=0.93, xnnpack_share=0.97)),
        # measured 18.9 dB, top-1 90.6 %, XNNPACK 100 %
        "executorch-int8": (OK, floor(sqnr_db=17.0, top1=0.84, xnnpack_share=0.97)),
    },
    # On rendered pages (and a few photos): int8 activations 8.2 dB; int16 (HARD_SWISH rewritten
    # for it) 24.9 dB, and TFLM's int16 kernels within one int16 step of LiteRT's.
    "ocr_text_detector": {
        "tflite-int8": (OK, floor(sqnr_db=23.0, activations="int16")),  # measured 24.9 dB (int16x8)
        "coreml": (OK, floor(sqnr_db=40.0)),  # measured 42.0 dB
        "onnx": (OK, floor(sqnr_db=136.0)),  # measured 137.8 dB
        "onnx-int8": (OK, floor(sqnr_db=23.0, activations="int16")),  # 24.7 dB (int8 activations: 5.9 dB)
        "executorch": (OK, floor(sqnr_db=113.5, xnnpack_share=0.93)),  # measured 115.4 dB, XNNPACK 94 %
        # Both forms were 0.0 dB while XNNPACK's quantizer floored weight scales at 2**-12: the head
        # convolution's weights (its batch norm folded in) reach 2e-4 and rounded to zero. Now static
        # simulates at 6.0 dB; dynamic 22.4 dB, XNNPACK 96 % (docs/executorch.md).
        "executorch-int8": (OK, floor(sqnr_db=20.5, xnnpack_share=0.9, activations="int8 dynamic")),
        "mcu": (OK, floor(bit_exact=False)),  # max diff 1 int16 step
        "mcu-c": (OK, floor(bit_exact=True)),  # int16 kernels, bit-exact with TFLM's
    },
    # On rendered pages: int8 activations lose the class scores (0.7 dB); int16 keep them at 15.0 dB.
    # TFLM's int16 kernels differ from LiteRT's by 34 int16 steps (0.13 of an int8 step), within
    # the mcu check's bound.
    "layout_detector": {
        "tflite-int8": (OK, floor(sqnr_db=13.5, activations="int16")),  # measured 15.0 dB (int16x8)
        "coreml": (OK, floor(sqnr_db=35.5)),  # measured 37.4 dB
        "onnx": (OK, floor(exact=True)),
        "onnx-int8": (OK, floor(sqnr_db=13.5, activations="int16")),  # 15.3 dB (int8 activations: 1.8 dB)
        "executorch": (OK, floor(sqnr_db=97.5, xnnpack_share=0.93)),  # measured 99.4 dB, XNNPACK 95 %
        # static int8: 1.4 dB (judged in torch, not lowered); dynamic int8 measured 20.9 dB, XNNPACK 93 %,
        # once its 98 written-out hard-swishes are one operator each (its .pte failed every execute before)
        "executorch-int8": (OK, floor(sqnr_db=19.0, xnnpack_share=0.91, activations="int8 dynamic")),
        "mcu": (OK, floor(bit_exact=False)),  # max diff 34 int16 steps
        "mcu-c": (OK, floor(bit_exact=True)),  # int16; its 23 MB arena is past the emulated board
    },
    "image_orientation": {
        "tflite-int8": (OK, floor(sqnr_db=12.0, top1=0.87)),  # measured 13.6 dB, top-1 93.8 %
        "mcu": (OK, floor(bit_exact=True)),
        "mcu-c": (OK, floor(bit_exact=True)),
        "coreml": (OK, floor(sqnr_db=54.0, top1=0.93)),  # measured 55.7 dB, top-1 100.0 %
        "onnx": (OK, floor(exact=True, top1=0.93)),  # measured top-1 100.0 %
        "onnx-int8": (OK, floor(sqnr_db=9.5, top1=0.8)),  # measured 11.1 dB, top-1 87.5 %
        # measured 121.6 dB, top-1 100.0 %, XNNPACK 99 %
        "executorch": (OK, floor(sqnr_db=120.0, top1=0.93, xnnpack_share=0.97)),
        # measured 15.8 dB, top-1 87.5 %, XNNPACK 100 %
        "executorch-int8": (OK, floor(sqnr_db=14.0, top1=0.8, xnnpack_share=0.97)),
    },
    # --input-value sr=16000 --batch-axis state=1 --batch-axis stateN=1, its input 576 samples as
    # its own wrapper feeds it (64 of context, then the chunk), on speech: every INT8 format keeps
    # int8 activations. Its STFT's reflect pad is one GATHER_ND with constant indices (the ONNX
    # reader's); TFLM's SQRT is float only, so -t mcu looks the int8 SQRT up in a table of LiteRT's
    # results (converters/tflm/int8_lookup.py). mcu-c reads its two inputs (samples, state) back to
    # back and has both kernels; TFLM cannot run the int8 SQRT, so LiteRT's reference kernels judge it.
    "silero_vad": {
        "tflite-int8": (OK, floor(sqnr_db=14.5, activations="int8")),  # measured 16.0 dB
        "mcu": (OK, floor(sqnr_db=14.5)),  # measured 16.0 dB (the lookup gives LiteRT's SQRT exactly), TFLM bit-exact
        "mcu-c": (OK, floor(bit_exact=True)),  # 2,064-byte arena; 8.0 M Cortex-M4 instructions per chunk
        "coreml": (OK, floor(sqnr_db=66.5)),  # measured 68.5 dB
        "onnx": (OK, floor(exact=True)),
        "onnx-int8": (OK, floor(sqnr_db=14.5, activations="int8")),  # measured 16.3 dB
        "executorch": (OK, floor(sqnr_db=132.5, xnnpack_share=0.33)),  # measured 134.7 dB, XNNPACK 36 %
        "executorch-int8": (OK, floor(sqnr_db=14.5, xnnpack_share=0.58, activations="int8 static")),  # 16.5 dB, 62 %
    },
    "mtcnn_onet": {
        # Judged on held-out samples (issue 48), int8 fails: the face-probability channel of the
        # softmax sits under 1/64 of its range there (0 dB; it had passed at 25.1 dB on the
        # calibration samples themselves); int16 activations pass.
        "tflite-int8": (OK, floor(sqnr_db=33.0, activations="int16")),  # measured 34.9 dB
        "mcu": (OK, floor(bit_exact=False)),  # TFLM's int16 kernels within 3 steps of LiteRT's
        "mcu-c": (REFUSED, "no kernel for SOFTMAX (operator 31) on int16 tensors"),
        "coreml": (OK, floor(sqnr_db=65.5)),  # measured 67.8 dB
        "onnx": (OK, floor(sqnr_db=127.5)),  # measured 130.3 dB
        "onnx-int8": (OK, floor(sqnr_db=33.0, activations="int16")),  # measured 34.9 dB
        "executorch": (OK, floor(sqnr_db=122.5, xnnpack_share=0.0)),  # measured 124.3 dB, XNNPACK 0 %
        "executorch-int8": (OK, floor(sqnr_db=25.5, xnnpack_share=0.0)),  # measured 27.4 dB, XNNPACK 0 %
    },
    "fer_emotion": {
        "tflite-int8": (OK, floor(sqnr_db=23.0, top1=0.84)),  # measured 24.9 dB, top-1 90.6 %
        "mcu": (OK, floor(bit_exact=True)),
        "mcu-c": (OK, floor(bit_exact=True)),
        "coreml": (OK, floor(sqnr_db=53.0, top1=0.93)),  # measured 54.6 dB, top-1 100.0 %
        "onnx": (OK, floor(sqnr_db=123.5, top1=0.93)),  # measured 125.3 dB, top-1 100.0 %
        "onnx-int8": (OK, floor(sqnr_db=23.0, top1=0.84)),  # measured 24.7 dB, top-1 90.6 %
        # Keras -> SavedModel -> tf2onnx -> ONNX reader -> torch.export, judged against TensorFlow
        "executorch": (OK, floor(sqnr_db=124.0, top1=0.93, xnnpack_share=0.85)),  # 126.5 dB, XNNPACK 88 %
        "executorch-int8": (OK, floor(sqnr_db=21.5, top1=0.84, xnnpack_share=0.9)),  # 23.3 dB, 90.6 %, XNNPACK 95 %
    },
    "alexa_wake_word": {
        "mcu": (OK, floor(bit_exact=True)),
        "mcu-c": (OK, floor(bit_exact=True)),
        "tflite-int8": (REFUSED, 'already a full-integer'),
        "coreml": (REFUSED, 'full-integer .tflite'),
        "onnx": (REFUSED, 'full-integer .tflite'),
        "executorch": (REFUSED, 'full-integer .tflite'),
        "executorch-int8": (REFUSED, 'full-integer .tflite'),
        "onnx-int8": (NOT_BUILT, 'was refused'),
    },
}


@pytest.fixture(scope="module")
def rows(corpus_beside_the_tests: dict[str, Future]) -> dict[str, dict]:
    """Every selected model's row, from the converts conftest.py started with the session (two at
    a time at the lowest CPU priority, beside the other tests; these tests run last)."""
    done = {name: future.result() for name, future in corpus_beside_the_tests.items()}
    record = os.environ.get("EDGESERVE_CORPUS_JSON")  # the README matrix is read from a run's rows
    if record:
        Path(record).write_text("".join(json.dumps(done[m.name]) + "\n" for m in SELECTED if m.name in done),
                                encoding="utf-8")
    return done


def test_the_corpus_holds_the_models_and_source_kinds_the_issue_names() -> None:
    """Issue 24: at least twelve real models, of every source kind a user brings and of every
    kind of model it names; `make test` (what CI runs) takes every one."""
    kinds = {m.family.split(", ")[-1].split(" (")[0] for m in CORPUS}
    assert kinds == {"float .tflite", "ONNX", "PyTorch .pt2", "Keras 2 .h5", "full-INT8 .tflite"}, kinds
    families = [m.family for m in CORPUS]
    for named in ("with PRELU", "transposed conv", "text-direction classifier, ONNX", "LSTM", "detector (DBNet), ONNX",
                  "layout detector (PP-PicoDet), ONNX"):
        assert any(named in f for f in families), named
    assert len(CORPUS) >= 12 and len({m.name for m in CORPUS}) == len(CORPUS)
    assert set(SECONDS) | {"alexa_wake_word"} == {m.name for m in CORPUS}  # the order knows every model
    if "EDGESERVE_CORPUS" not in os.environ:
        assert {m.name for m in SELECTED} == {m.name for m in CORPUS}  # make test takes them all


def test_a_settled_models_folder_is_cleared_and_an_unsettled_one_kept(tmp_path: Path, monkeypatch) -> None:
    """The corpus frees a model's disk once its row says how every cell ended (ok, failed with its
    figures, refused or not built by name), keeping the manifest; a traceback, an error, or
    EDGESERVE_KEEP_CORPUS keeps it all."""
    monkeypatch.delenv("EDGESERVE_KEEP_CORPUS", raising=False)

    def folder(name: str) -> Path:
        (tmp_path / name / "out" / "verify").mkdir(parents=True)
        (tmp_path / name / "out" / "manifest.json").write_text('{"artifacts": []}')
        (tmp_path / name / "out" / "verify" / "onnx.npz").write_bytes(b"x" * 1000)
        return tmp_path / name

    settled = {"cells": {"onnx": {"status": "ok"}, "mcu": {"status": "refused"}, "coreml": {"status": "failed"}}}
    assert clear_when_settled(folder("a"), settled)
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["manifest.json"]
    assert (tmp_path / "a" / "manifest.json").read_text() == '{"artifacts": []}'
    failed = {"cells": {"onnx": {"status": "ok"}, "mcu": {"status": "traceback"}}}
    assert not clear_when_settled(folder("b"), failed)
    assert not clear_when_settled(folder("c"), {"outcome": "error", "message": "exit 1"})
    monkeypatch.setenv("EDGESERVE_KEEP_CORPUS", "1")
    assert not clear_when_settled(folder("d"), settled)
    assert all((tmp_path / n / "out" / "verify" / "onnx.npz").is_file() for n in "bcd")


@pytest.mark.parametrize("model", SELECTED, ids=[m.name for m in SELECTED])
def test_every_cell_converts_and_agrees_or_is_refused_by_name(model, rows: dict[str, dict]) -> None:
    row = rows[model.name]
    if row.get("outcome") == "skip":
        pytest.skip(row["message"])
    assert "outcome" not in row, row["message"]  # the model's preparation failed
    assert row["exit_code"] in (0, 1), row["stderr_tail"]
    cells = row["cells"]
    assert set(cells) == set(TARGETS), cells
    assert row.get("contract") == [], row.get("contract")  # the manifest as the schema and the typed record say
    tracebacks = [t for t, c in cells.items() if c["status"] == "traceback"]
    assert not tracebacks, row["stderr_tail"]
    if any(c["status"] != OK for c in cells.values()):
        assert row["exit_code"] == 1 and row["errors"], row  # every refusal ends in one error line
    expected = EXPECTED[model.name]
    for target in TARGETS:
        cell, (status, detail) = cells[target], expected[target]
        assert cell["status"] == status, (target, cell)
        if status != OK:
            assert str(detail) in cell["reason"], (target, cell["reason"])
            continue
        for key, bound in dict(detail).items():  # type: ignore[call-overload]
            if bound is None:
                continue
            if isinstance(bound, (bool, str)):
                assert cell[key] == bound, (target, key, cell)
            else:
                assert cell[key] is not None and cell[key] >= bound, (target, key, cell)
