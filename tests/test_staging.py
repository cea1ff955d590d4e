"""A conversion changes OUT all at once or not at all (issue 13: interrupts and files).

Probe findings this answers: Ctrl-C or a crash left whole mcu/ folders the manifest did not
list; files were written 0600 whatever the umask; `-o some_file/sub` failed with a traceback
after the whole conversion; killed runs left `.partial` files and /tmp folders behind.
"""

from __future__ import annotations

import hashlib
import shutil
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgeserve.cli import cli
from edgeserve.manifest.staging import clean_leftovers

MODEL = "tflm/hello_world_int8.tflite"


def tree(root: Path) -> dict[str, str]:
    """Relative path -> sha256 (or "dir") of everything under ``root``."""
    return {p.relative_to(root).as_posix(): ("dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*"))}


def convert_args(testdata: Path, out: Path) -> list[str]:
    return ["convert", str(testdata / MODEL), "-t", "mcu", "--no-fit-check", "-o", str(out)]


def siblings(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}."))


def test_an_output_path_that_cannot_be_a_folder_is_refused_first(testdata: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "some_file"
    blocker.write_text("not a folder")
    itself = CliRunner().invoke(cli, convert_args(testdata, blocker))
    assert itself.exit_code == 2 and "is a file" in itself.output  # click's own check of -o
    inside = CliRunner().invoke(cli, convert_args(testdata, blocker / "sub"))
    assert inside.exit_code == 1, inside.output
    assert "cannot hold folders" in inside.stderr and "Traceback" not in inside.output
    assert blocker.read_text() == "not a folder"


def test_files_follow_the_umask(testdata: Path, tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        out = tmp_path / "OUT"
        assert CliRunner().invoke(cli, convert_args(testdata, out)).exit_code == 0
    finally:
        os.umask(previous)
    modes = {p.relative_to(out).as_posix(): p.stat().st_mode & 0o777 for p in out.rglob("*")}
    assert modes["manifest.json"] == 0o644 and modes["mcu"] == 0o755
    assert set(modes.values()) == {0o644, 0o755}, modes
    assert (out.stat().st_mode & 0o777) == 0o755
    assert siblings(out) == []  # no staging or scratch folder left beside it


def test_a_single_file_written_atomically_follows_the_umask(tmp_path: Path) -> None:
    """A file written in place (a profile's HTML report, a fixture) is not left 0600, the
    mode of the temporary file it was renamed from (issue 27)."""
    from edgeserve.atomic import write_text

    previous = os.umask(0o027)
    try:
        report = write_text(tmp_path / "report.html", "<html></html>")
    finally:
        os.umask(previous)
    assert report.stat().st_mode & 0o777 == 0o640 and report.read_text() == "<html></html>"


def test_an_interrupt_leaves_out_as_it_was(testdata: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "OUT"
    assert CliRunner().invoke(cli, convert_args(testdata, out)).exit_code == 0
    (out / "notes.txt").write_text("the user's own file")
    before = tree(out)

    from edgeserve.converters.tflm import converter

    def interrupted(self, ctx, *args, **kwargs):
        (ctx.out_dir / "mcu" / "half_written.cc").write_text("// a file the interrupt cut short")
        raise KeyboardInterrupt

    monkeypatch.setattr(converter.McuConverter, "emit", interrupted, raising=False)
    monkeypatch.setattr(converter.McuConverter, "convert", interrupted)
    result = CliRunner().invoke(cli, [*convert_args(testdata, out), "--name", "other"])
    assert result.exit_code == 130
    assert result.stderr.strip().splitlines()[-1] == "error: interrupted; nothing was changed"
    assert tree(out) == before
    assert siblings(out) == []


# Runs the CLI with every atomic file write counted; the K-th write kills the process
# (SIGKILL, no cleanup) after its temporary file is complete and before it is renamed.
_KILL_AT_WRITE = """
import atexit, contextlib, os, signal, sys
import edgeserve.atomic as atomic
k, count, original = int(sys.argv[1]), [0], atomic.atomic_path

@contextlib.contextmanager
def counted(final):
    count[0] += 1
    with original(final) as tmp:
        yield tmp
        if count[0] == k:
            os.kill(os.getpid(), signal.SIGKILL)

atomic.atomic_path = counted
atexit.register(lambda: print("writes", count[0]))
from edgeserve.cli import main
sys.argv = ["edgeserve", *sys.argv[2:]]
main()
"""


def test_a_kill_at_every_file_write_leaves_out_as_before_or_complete(testdata: Path, tmp_path: Path) -> None:
    out = tmp_path / "OUT"
    assert CliRunner().invoke(cli, convert_args(testdata, out)).exit_code == 0
    (out / "notes.txt").write_text("the user's own file")
    before = tree(out)
    shutil.copytree(out, tmp_path / "saved", symlinks=True)
    args = [*convert_args(testdata, out), "--name", "renamed"]

    def convert_killed_at(k: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", _KILL_AT_WRITE, str(k), *args], capture_output=True,
                              text=True, timeout=300, check=False)

    counted = convert_killed_at(0)  # no kill: how many writes a whole conversion makes
    assert counted.returncode == 0, counted.stderr
    writes = int(counted.stdout.split("writes")[-1])
    assert writes >= 8, counted.stdout  # the mcu sources, the report and the manifest at least
    print(f"killed at each of {writes} writes")
    complete = tree(out)
    assert complete != before and "mcu/renamed_model_data.cc" in complete
    shutil.rmtree(out)  # back to the first build, then a kill at each write in turn
    shutil.copytree(tmp_path / "saved", out, symlinks=True)
    assert tree(out) == before
    for k in range(1, writes + 1):
        killed = convert_killed_at(k)
        assert killed.returncode == -signal.SIGKILL, (k, killed.stderr[-500:])
        assert tree(out) == before, f"OUT changed by a run killed at write {k} of {writes}"
        clean_leftovers(out)
        assert siblings(out) == [], siblings(out)


def test_leftovers_of_dead_runs_are_removed_or_restored(tmp_path: Path) -> None:
    out = tmp_path / "OUT"
    dead = 2 ** 22 + 12345  # above the default pid_max: no such process
    stale = tmp_path / f".OUT.staging-{dead}-abcd"
    (stale / "mcu").mkdir(parents=True)
    (stale / "mcu" / ".x.cc.abc.partial").write_text("half")
    replaced = tmp_path / f".OUT.replaced-{dead}-ef01"
    replaced.mkdir()
    (replaced / "manifest.json").write_text("{}")
    live = tmp_path / f".OUT.staging-{os.getpid()}-2345"  # this process: still running
    live.mkdir()
    done = clean_leftovers(out)
    assert sorted(p.name for p in done) == sorted([stale.name, replaced.name])
    assert not stale.exists() and live.exists()
    assert (out / "manifest.json").read_text() == "{}"  # killed between the two renames: put back


# ----- what OUT may be (issue 47: `-o ~` copied the home folder and swapped the copy in) ----------
def _listing(root: Path) -> list[tuple[str, int, int]]:
    """Every entry under root with its inode and mtime: a copy-and-swap changes both."""
    entries = [root, *sorted(root.rglob("*"))]
    return [(p.relative_to(root).as_posix(), p.lstat().st_ino, p.lstat().st_mtime_ns) for p in entries]


def _refused(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "edgeserve", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd)
    assert done.returncode == 1, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    return done


def test_a_folder_that_is_not_an_edgeserve_output_is_refused_untouched(testdata: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("secret")
    (home / "notes.txt").write_text("mine")
    (home / "link").symlink_to(home / "notes.txt")
    (home / "manifest.json").write_text('{"schema": "someone else\'s"}')  # a manifest, not ours
    before = _listing(home)
    done = _refused(convert_args(testdata, home))
    assert "is not an edgeserve output" in done.stderr and ".ssh" in done.stderr and "notes.txt" in done.stderr
    assert _listing(home) == before and siblings(home) == []


@pytest.mark.parametrize("out", [".", "..", "sub/.."])
def test_a_folder_holding_the_current_folder_is_refused(testdata: Path, tmp_path: Path, out: str) -> None:
    here = tmp_path / "work" / "here"
    (here / "sub").mkdir(parents=True)
    before = _listing(tmp_path)
    done = _refused(convert_args(testdata, Path(out)), cwd=here)
    assert "holds the current folder" in done.stderr
    assert _listing(tmp_path) == before


def test_a_symlinked_out_is_refused_and_what_it_points_to_is_untouched(testdata: Path, tmp_path: Path) -> None:
    real = tmp_path / "real"
    assert CliRunner().invoke(cli, convert_args(testdata, real)).exit_code == 0  # an edgeserve output
    (tmp_path / "link").symlink_to(real)
    before = _listing(real)
    done = _refused(convert_args(testdata, tmp_path / "link"))
    assert "is a symbolic link" in done.stderr
    assert _listing(real) == before and (tmp_path / "link").is_symlink()


def test_a_special_file_in_an_output_is_named_and_never_opened(testdata: Path, tmp_path: Path) -> None:
    """A FIFO in OUT used to hang the copy into the staging folder (a device node filled the disk)."""
    out = tmp_path / "out"
    assert CliRunner().invoke(cli, convert_args(testdata, out)).exit_code == 0
    os.mkfifo(out / "mcu" / "pipe")
    before = _listing(out)
    done = _refused(convert_args(testdata, out))  # a hang here would be the 120 s timeout
    assert "pipe, which is a FIFO" in done.stderr
    assert _listing(out) == before


def test_an_empty_folder_and_an_earlier_output_are_taken(testdata: Path, tmp_path: Path) -> None:
    from edgeserve.manifest.staging import check_output_path

    empty = tmp_path / "empty"
    empty.mkdir()
    check_output_path(empty)
    assert CliRunner().invoke(cli, convert_args(testdata, empty)).exit_code == 0
    check_output_path(empty)  # now an edgeserve output: converting into it again is how targets are added
    assert CliRunner().invoke(cli, convert_args(testdata, empty)).exit_code == 0


def test_a_glob_character_in_out_matches_no_other_outputs_leftovers(tmp_path: Path) -> None:
    """`-o '?'` took another output's `.a.replaced-*` folder for its own and put it back as '?'."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    other = tmp_path / f".a.replaced-{dead}-0000abcd"
    other.mkdir()
    assert clean_leftovers(tmp_path / "?") == []
    assert other.is_dir() and not (tmp_path / "?").exists()


def test_a_place_this_user_cannot_write_or_reach_is_refused_before_any_work() -> None:
    """Found before the model loads (it used to be a PermissionError after the whole conversion).
    Run as nobody: root may write anywhere."""
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("needs root to run the check as another user")
    root = Path(tempfile.mkdtemp(prefix="edgeserve-locked-"))
    try:
        root.chmod(0o755)
        (root / "locked").mkdir(mode=0o755)  # root's: nobody may look in, not write
        (root / "closed").mkdir(mode=0o700)  # nobody may not even look in
        said = {}
        for name in ("locked", "closed"):
            probe = ("from pathlib import Path\nfrom edgeserve.errors import InputError\n"
                     "from edgeserve.manifest.staging import check_output_path\n"
                     f"try:\n    check_output_path(Path({str(root / name / 'out')!r}))\n"
                     "except InputError as e:\n    print(e)\n")
            done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable,
                                   "-c", probe], capture_output=True, text=True, timeout=120,
                                  env={**os.environ, "HOME": "/tmp"}, cwd="/")
            assert done.returncode == 0, done.stderr
            said[name] = done.stdout
        assert f"cannot write in {root / 'locked'}" in said["locked"]
        assert f"cannot reach the output folder {root / 'closed' / 'out'}: permission denied" in said["closed"]
    finally:
        shutil.rmtree(root)


def test_the_longest_name_taken_leaves_room_for_both_siblings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An OUT name is taken only when the staging and the replaced folder beside it fit the file
    system's name limit too ("replaced" is one byte longer than "staging"): the longest name taken
    can have both made, one byte more is refused before any work."""
    import os

    from edgeserve.errors import InputError
    from edgeserve.manifest.staging import _REPLACED, _STAGING, _SIBLING_EXTRA, _sibling, check_output_path

    import edgeserve.manifest.staging

    monkeypatch.setattr(edgeserve.manifest.staging.os, "getpid", lambda: 9_999_999)  # the longest pid Linux gives
    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    longest = tmp_path / ("o" * (limit - _SIBLING_EXTRA))
    check_output_path(longest)
    for kind in (_STAGING, _REPLACED):
        sibling = _sibling(longest, kind)
        sibling.mkdir()  # would raise OSError (name too long) if the check let too long a name through
        sibling.rmdir()
    with pytest.raises(InputError, match="choose a shorter name with -o"):
        check_output_path(tmp_path / ("o" * (limit - _SIBLING_EXTRA + 1)))
