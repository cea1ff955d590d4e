"""Redirections the whole process has (fd 2, sys.stdout/stderr, the warnings filters), taken by
targets built side by side (--jobs): blocks that overlap out of order leave each thing as it was,
and each block gets what was written while it was open."""

from __future__ import annotations

import os
import sys
import threading
import warnings

import pytest

from edgeserve import console


def _crossed(enter_a, enter_b, write_a, write_b):
    """A enters, B enters, A leaves, B leaves: the order in which two threads each restoring what
    it saw would leave A's redirection in place for good."""
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    got: dict[str, object] = {}

    def a() -> None:
        with enter_a() as seen:
            write_a()
            a_in.set()
            b_in.wait()
        got["a"] = seen
        a_out.set()

    def b() -> None:
        a_in.wait()
        with enter_b() as seen:
            write_b()
            b_in.set()
            a_out.wait()
        got["b"] = seen

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return got


def test_python_stderr_is_itself_again_after_blocks_that_cross():
    before = sys.stderr
    got = _crossed(console.python_stderr, console.quiet_libraries,
                   lambda: print("from a", file=sys.stderr), lambda: print("from b", file=sys.stderr))
    assert sys.stderr is before
    assert "from a" in "".join(got["a"])  # type: ignore[arg-type]


def test_file_descriptor_2_is_itself_again_after_blocks_that_cross(tmp_path):
    before = os.fstat(2)
    got = _crossed(console.capture_native_stderr, console.capture_native_stderr,
                   lambda: os.write(2, b"native a\n"), lambda: os.write(2, b"native b\n"))
    after = os.fstat(2)
    assert (after.st_dev, after.st_ino) == (before.st_dev, before.st_ino)
    assert "native a" in got["a"].text and "native b" in got["b"].text  # type: ignore[attr-defined]


def test_warnings_filters_are_themselves_again_after_blocks_that_cross():
    before = list(warnings.filters)
    got = _crossed(console.quiet_warnings, console.quiet_warnings,
                   lambda: warnings.warn("from a", UserWarning), lambda: warnings.warn("from b", UserWarning))
    assert warnings.filters == before
    assert [str(w.message) for w in got["b"]] == ["from b"]  # type: ignore[attr-defined]
    with pytest.warns(UserWarning, match="shown again"):
        warnings.warn("shown again", UserWarning)


def test_a_targets_steps_are_shown_under_its_name_once():
    """Targets side by side interleave their progress lines: each says whose it is."""
    progress = console.Progress(enabled=False)
    with progress.collecting("coreml") as steps:
        assert progress._shown("verifying with the numpy MIL evaluator") == "coreml: verifying with the numpy MIL evaluator"
        assert progress._shown("coreml: save") == "coreml: save"
        with progress.step("coreml: save"):
            pass
    assert progress._shown("load model.onnx") == "load model.onnx"  # a shared step: nobody's
    assert [name for name, _ in steps] == ["coreml: save"]
