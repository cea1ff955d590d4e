"""One Session shared by threads: calls take turns, results stay correct, failures stay clear.

Found by a probe (issue 13): 8 threads on one Session collided on the first call, dropped
its only backend, and every later call raised a bare AssertionError.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from edgeserve.errors import BackendError
from edgeserve.runtime import Session


def test_eight_threads_get_the_single_threaded_results(digits_conversion: Path, digits_example: Path) -> None:
    frames = np.load(digits_example / "frames.npz")["frames"][:40]
    with Session(digits_conversion) as alone:
        expected = [alone.run(f)[0].copy() for f in frames]
    results: dict[tuple[int, int], np.ndarray] = {}
    errors: list[BaseException] = []
    with Session(digits_conversion) as shared:
        start = threading.Barrier(8)

        def work(worker: int) -> None:
            try:
                start.wait()  # all threads reach the first call together, as in the probe
                for round_ in range(5):
                    for i in range(worker, len(frames), 8):
                        results[(i, round_)] = shared.run(frames[i])[0]
            except BaseException as exc:  # noqa: BLE001 - reported below, with the thread's failure
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=120)
        assert not errors, errors
        assert shared.backend.startswith("litert:")  # nothing was dropped by the collision
    assert len(results) == 40 * 5
    for (i, _), got in results.items():
        np.testing.assert_array_equal(got, expected[i])  # copies: no thread saw another's output


def test_one_thread_keeps_zero_copy_outputs(digits_conversion: Path, digits_example: Path) -> None:
    frame = np.load(digits_example / "frames.npz")["frames"][0]
    with Session(digits_conversion) as session:
        first, second = session.run(frame)[0], session.run(frame)[0]
        assert np.shares_memory(first, second)  # the documented reuse, unchanged for one thread


def test_a_session_without_backends_says_so_on_every_call(digits_conversion: Path, digits_example: Path) -> None:
    frame = np.load(digits_example / "frames.npz")["frames"][0]
    with Session(digits_conversion) as session:
        session._active.close()  # as if every backend had failed at its first invoke
        session._active = None
        for _ in range(2):
            with pytest.raises(BackendError, match="no backend is left to run the model"):
                session.run(frame)


class _FailsOnce:
    """A CPU backend whose first invoke raises (a driver's bad moment), then works."""

    def __init__(self, inner: object) -> None:
        self._inner, self.invokes = inner, 0

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def invoke(self) -> None:
        self.invokes += 1
        if self.invokes == 1:
            raise RuntimeError("transient: device busy")
        self._inner.invoke()


def _profile_with_only(name: str) -> object:
    """The host profile with its backend chain replaced by ``name`` alone."""
    import dataclasses

    from edgeserve.device_profiles import load_profile

    host = load_profile("host")
    return dataclasses.replace(host, runtime=dataclasses.replace(host.runtime, backends=(name,)))


def test_a_failed_first_call_keeps_the_only_backend(digits_conversion: Path, digits_example: Path) -> None:
    """The probe's Session lost its only backend to one failed call, for good."""
    from edgeserve.runtime.backends.registry import register_backend, unregister_backend
    from edgeserve.runtime.backends.litert import LiteRTBackend

    from edgeserve.errors import InferenceError

    frame = np.load(digits_example / "frames.npz")["frames"][5]
    with Session(digits_conversion) as alone:
        expected = alone.run(frame)[0].copy()
    register_backend("test:fails-once", engine="litert", kind="cpu",
                     factory=lambda path, data, options: _FailsOnce(LiteRTBackend("litert:xnnpack", "cpu", data, options)))
    try:
        with Session(digits_conversion, _profile_with_only("test:fails-once")) as session:
            with pytest.raises(InferenceError, match=r"device busy.*it is kept, and the next call tries it again"):
                session.run(frame)
            assert session._active is not None  # still a backend to run: the same one
            np.testing.assert_array_equal(session.run(frame)[0], expected)
            reasons = [a.reason for a in session.attempts if not a.ok]
            assert reasons == ["first invoke raised RuntimeError: transient: device busy"]
    finally:
        unregister_backend("test:fails-once")


def test_a_closed_session_says_so_instead_of_asserting(digits_conversion: Path) -> None:
    session = Session(digits_conversion)
    session.close()
    for read in (lambda: session.backend, lambda: session.inputs, lambda: session.set_threads(3)):
        with pytest.raises(BackendError, match="the Session is closed"):
            read()
