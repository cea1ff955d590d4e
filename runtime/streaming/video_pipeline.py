"""Pipelined video: frame n+1 is captured and preprocessed while frame n is in invoke().

A producer thread pulls frames from the source (decoding a video or reading a camera) and
preprocesses each into a staging buffer shaped like the model input; the caller's thread
copies a staged input into the engine, invokes and dequantizes. The two overlap on a
multi-core board because OpenCV's resize and the engine's invoke release the GIL.

- Bounded queue. A file's frames all arrive, in order (the producer waits). A live
  camera's newest frame wins: when the queue is full the oldest staged frame is dropped
  and counted, so latency does not grow behind a slow model.
- Results come in input order with each frame's index (gaps where a live frame dropped).
- Stopping: the end of the source, closing the generator (break), Ctrl-C, or an error in
  either thread stops the producer, joins it, and closes the source (a camera is
  released); an error in the producer is raised in the caller's thread.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

_END = object()


@dataclasses.dataclass
class StreamStats:
    frames_in: int = 0  # taken from the source
    frames_out: int = 0  # inferred and yielded
    dropped: int = 0  # live sources: staged frames replaced by newer ones


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def stream(session: Any, source: Iterable[np.ndarray], *, live: bool = False, depth: int = 2,
           stats: StreamStats | None = None) -> Iterator[tuple[int, list[np.ndarray]]]:
    """Yield ``(frame index, outputs)`` for every frame of ``source`` (see the module docstring).

    ``outputs`` are the Session's reused arrays: copy them to keep them past the next frame.
    """
    stats = stats if stats is not None else StreamStats()
    detail = session.inputs[0]
    pool: queue.SimpleQueue[np.ndarray] = queue.SimpleQueue()
    for _ in range(depth + 2):  # depth staged, one being filled, one being copied in
        pool.put(np.empty(detail.shape, detail.dtype))
    staged: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()
    frames = iter(source)

    def produce() -> None:
        try:
            for index, frame in enumerate(frames):
                if stop.is_set():
                    return
                stats.frames_in += 1
                buffer = pool.get()
                session.preprocess_into(frame, buffer)
                item = (index, buffer)
                if live:
                    while True:
                        try:
                            staged.put_nowait(item)
                            break
                        except queue.Full:
                            try:  # the oldest staged frame makes room for the newest
                                _, old = staged.get_nowait()
                                pool.put(old)
                                stats.dropped += 1
                            except queue.Empty:
                                pass
                else:
                    while not stop.is_set():
                        try:
                            staged.put(item, timeout=0.1)
                            break
                        except queue.Full:
                            continue
            _put_final(staged, _END, stop)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            _put_final(staged, _Failure(exc), stop)
        finally:
            close = getattr(frames, "close", None)
            if close is not None:  # a generator over a camera releases it in its finally
                close()

    worker = threading.Thread(target=produce, name="edgeserve-stream-producer", daemon=True)
    worker.start()
    try:
        while True:
            item = staged.get()
            if item is _END:
                return
            if isinstance(item, _Failure):
                raise item.exc
            index, buffer = item
            outputs = session.run_staged(buffer)
            pool.put(buffer)
            stats.frames_out += 1
            yield index, outputs
    finally:
        stop.set()
        while True:  # unblock a producer waiting on a full queue
            try:
                staged.get_nowait()
            except queue.Empty:
                break
        worker.join(timeout=10)


def _put_final(staged: queue.Queue[Any], item: Any, stop: threading.Event) -> None:
    """The last item (end or failure) must arrive unless the consumer already stopped."""
    while not stop.is_set():
        try:
            staged.put(item, timeout=0.1)
            return
        except queue.Full:
            continue
