"""Live audio for streaming models: 16 kHz mono 16-bit PCM from a microphone, or from a pipe.

The microphone is read through ALSA's ``arecord`` (alsa-utils, present on Raspberry Pi OS
and most Linux images) in a child process: a capture driver that aborts or hangs cannot
take the user's process with it, and no audio library has to be compiled for the board.
``arecord`` is asked for the model's format, so ALSA's plug layer resamples and mixes
down when the card cannot give 16 kHz mono itself.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from typing import Any, BinaryIO

from edgeserve.errors import InputError
from edgeserve.runtime.audio.pcm import SAMPLE_RATE

#: 100 ms of audio per read: detections print within a tenth of a second of the audio.
CHUNK_BYTES = SAMPLE_RATE // 10 * 2


def pcm_chunks(stream: BinaryIO, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """Raw PCM from a pipe as it arrives: each read returns what is there (``read1``), so a live
    source is processed as it speaks rather than when it closes."""
    read = getattr(stream, "read1", stream.read)
    while True:
        data = read(chunk_bytes)
        if not data:
            return
        yield data


class Microphone:
    """``with Microphone("default") as mic: for pcm in mic.chunks(): ...``

    ``device`` is an ALSA PCM name (``default``, ``hw:1,0``, ``plughw:1``; ``arecord -L`` lists
    them); ``seconds`` stops the recording after that long (None: until closed)."""

    def __init__(self, device: str = "default", seconds: float | None = None) -> None:
        self.device, self.seconds = device, seconds
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None  # arecord's stderr

    def __enter__(self) -> Microphone:
        arecord = shutil.which("arecord")
        if arecord is None:
            raise InputError("--input mic records through ALSA's arecord, which is not installed "
                             "(Debian/Raspberry Pi OS: apt install alsa-utils); or pipe raw 16 kHz 16-bit PCM "
                             "to --input -")
        command = [arecord, "-q", "-D", self.device, "-t", "raw", "-f", "S16_LE", "-r", str(SAMPLE_RATE), "-c", "1"]
        if self.seconds is not None:
            # arecord counts whole seconds; the reader below stops at the exact sample count.
            command += ["-d", str(max(1, int(-(-self.seconds // 1))))]
        # arecord's messages (overruns on a long run, ALSA's errors) go to a file, not a pipe
        # nobody reads while recording: a full pipe would stop arecord mid-stream.
        self._log = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._log)
        return self

    def chunks(self) -> Iterator[bytes]:
        proc = self._proc
        assert proc is not None and proc.stdout is not None, "use Microphone in a with block"
        left = None if self.seconds is None else int(self.seconds * SAMPLE_RATE) * 2
        for data in pcm_chunks(proc.stdout):
            if left is not None:
                data = data[:left]
                left -= len(data)
            if data:
                yield data
            if left == 0:
                return
        code = proc.wait()
        if code != 0:
            raise InputError(f"--input mic: arecord could not record from ALSA device '{self.device}': "
                             f"{self._reason(code)} (arecord -L lists the devices; choose one with --input mic:DEVICE)")

    def __exit__(self, *exc: object) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        self._log.close()

    def _reason(self, code: int) -> str:
        """arecord's own last line ("arecord: main:831: audio open error: No such file or directory"),
        without ALSA's library chatter before it."""
        self._log.seek(0)
        lines = [ln.strip() for ln in self._log.read().decode(errors="replace").splitlines() if ln.strip()]
        last = lines[-1] if lines else f"exit status {code}"
        return last.split(": ", 2)[-1] if last.startswith("arecord: ") else last
