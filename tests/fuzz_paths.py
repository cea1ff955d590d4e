"""Output folders of every shape, and special files in every path argument, for the CLI fuzz.

Each case is a folder of its own holding what a user's disk holds: `home/` (notes, a photo,
a sub-folder, a FIFO, a link to `outside/`), `outside/secret.txt`, and for some strategies an
earlier edgeserve output. A case runs one command (`convert ... -o OUT`, or a command given a
special file where a path belongs) and says what must happen: exit 0 with OUT complete, or a
refusal (exit 1 or 2). The test snapshots every case before and after the plan runs: nothing
outside OUT (and nothing at all in a refused case) may be written, moved, deleted or read.

Reads are seen through access times: each regular file's atime is set an hour before its
mtime, and Linux's relatime updates an atime that is not newer than the mtime on the next
read. `reads_detectable()` probes that on the folder's file system (noatime would hide reads;
the test says so instead of passing silently). A FIFO in `home/` is a second trip wire: opening
it for reading or writing blocks, which the plan's per-command limit reports as a hang.
"""

from __future__ import annotations

import collections
import hashlib
import os
import shutil
import socket
import stat
from pathlib import Path
from typing import Any

import numpy as np
from cli_fuzz import Plan

HOUR_NS = 3600 * 10**9

# strategy -> (what OUT is, whether the convert must succeed)
OUT_SHAPES = {
    "missing": True, "missing-nested": True, "empty": True, "earlier-output": True,
    "earlier-output-with-user-file": True, "glob-name": True,
    "home": False, "home-subfolder": False, "symlink-to-home": False, "dangling-symlink": False,
    "symlink-loop": False, "fifo": False, "regular-file": False, "under-a-file": False,
    "cwd": False, "parent-of-cwd": False, "earlier-output-holding-a-fifo": False,
    "earlier-output-holding-a-socket": False, "earlier-output-linking-out": None,
    "earlier-output-hardlinking-out": None, "long-name": False, "long-name-of-255": False,
}
# Special files given where a command takes a path: each must be refused, never opened.
SPECIALS = ("fifo", "socket", "dangling-symlink", "symlink-loop", "dev-zero", "folder", "empty-file")
ARGUMENTS = ("convert SOURCE", "convert --calib", "convert --eval", "convert -p", "convert --labels",
             "convert --sign-key", "convert --preprocess", "inspect", "verify", "verify --public-key",
             "run --input", "bench", "run")


def reads_detectable(folder: Path) -> bool:
    """True when reading a file whose atime is older than its mtime updates the atime here."""
    probe = folder / ".atime-probe"
    probe.write_bytes(b"x")
    mtime = probe.stat().st_mtime_ns
    os.utime(probe, ns=(mtime - HOUR_NS, mtime))
    probe.read_bytes()
    seen = probe.stat().st_atime_ns != mtime - HOUR_NS
    probe.unlink()
    return seen


def _user_files(case: Path) -> None:
    home, outside = case / "home", case / "outside"
    (home / "photos").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text("the user's own file, outside every OUT\n")
    (home / "notes.txt").write_text("a user's notes\n" * 40)
    (home / "photos" / "cat.jpg").write_bytes(np.random.default_rng(0).bytes(3000))
    os.mkfifo(home / "pipe")
    os.symlink("../outside/secret.txt", home / "secret-link")


def _special(kind: str, where: Path) -> Path:
    if kind == "fifo":
        os.mkfifo(where)
    elif kind == "socket":
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(where))
    elif kind == "dangling-symlink":
        os.symlink(where.name + ".nowhere", where)
    elif kind == "symlink-loop":
        os.symlink(where.name + ".b", where)
        os.symlink(where.name, where.with_name(where.name + ".b"))
    elif kind == "dev-zero":
        os.symlink("/dev/zero", where)
    elif kind == "folder":
        where.mkdir()
    else:
        where.write_bytes(b"")
    return where


def _out_case(strategy: str, case: Path, earlier: Path) -> tuple[Path, Path | None, list[Path]]:
    """OUT, the cwd to run in (or None), and the paths a passing run may change."""
    home = case / "home"
    if strategy == "missing":
        return case / "out", None, [case / "out"]
    if strategy == "missing-nested":
        return case / "a" / "b" / "out", None, [case / "a"]
    if strategy == "empty":
        (case / "out").mkdir()
        return case / "out", None, [case / "out"]
    if strategy.startswith("earlier-output"):
        out = case / "out"
        shutil.copytree(earlier, out, symlinks=True)
        if strategy == "earlier-output-with-user-file":
            (out / "my-notes.txt").write_text("kept by the user in the output folder\n")
        elif strategy == "earlier-output-holding-a-fifo":
            os.mkfifo(out / "mcu" / "pipe")
        elif strategy == "earlier-output-holding-a-socket":
            _special("socket", out / "reports" / "sock")
        elif strategy == "earlier-output-linking-out":
            # Files edgeserve writes, replaced by links to the user's files: a write that follows
            # a link (open for writing instead of rename) would change them.
            for name in ("manifest.json", "reports/tflite-int8.json"):
                (out / name).unlink()
                os.symlink(os.path.relpath(case / "outside" / "secret.txt", (out / name).parent), out / name)
        elif strategy == "earlier-output-hardlinking-out":
            target = out / "reports" / "tflite-int8.json"
            target.unlink()
            os.link(case / "outside" / "secret.txt", target)
        return out, None, [out]
    if strategy == "glob-name":
        # Another output's leftovers beside a folder named '?': -o '?' must not adopt them.
        other = case / "x"
        other.mkdir()
        leftover = case / f".x.replaced-{2**22 + 1}-abcd1234"
        shutil.copytree(earlier, leftover, symlinks=True)
        return case / "?", None, [case / "?"]
    if strategy == "home":
        return home, None, []
    if strategy == "home-subfolder":
        return home / "photos", None, []
    if strategy == "symlink-to-home":
        os.symlink("home", case / "out")
        return case / "out", None, []
    if strategy in ("dangling-symlink", "symlink-loop", "fifo"):
        return _special(strategy, case / "out"), None, []
    if strategy == "regular-file":
        return home / "notes.txt", None, []
    if strategy == "under-a-file":
        return home / "notes.txt" / "out", None, []
    if strategy == "cwd":
        return Path("."), home, []
    if strategy == "parent-of-cwd":
        return Path(".."), home / "photos", []
    if strategy == "long-name":
        return case / ("o" * 300), None, []
    if strategy == "long-name-of-255":  # a name the file system takes, and its staging sibling not
        return case / ("o" * 255), None, []
    raise ValueError(strategy)


def _special_case(argument: str, kind: str, case: Path, source: Path, earlier: Path,
                  image: Path) -> list[str]:
    special = _special(kind, case / "special")
    fresh = str(case / "out")
    convert = ["convert", str(source), "-t", "tflite-int8", "--calib-random", "-o", fresh, "-q"]
    if argument == "convert SOURCE":
        return ["convert", str(special), "-t", "tflite-int8", "--calib-random", "-o", fresh, "-q"]
    if argument == "convert --calib":
        return ["convert", str(source), "-t", "tflite-int8", "--calib", str(special), "-o", fresh, "-q"]
    flag = {"convert --eval": "--eval", "convert -p": "-p", "convert --labels": "--labels",
            "convert --sign-key": "--sign-key", "convert --preprocess": "--preprocess"}
    if argument in flag:
        return convert + [flag[argument], str(special)]
    if argument in ("inspect", "verify", "bench"):
        return [argument, str(special)]
    if argument == "verify --public-key":
        return ["verify", str(earlier), "--public-key", str(special)]
    if argument == "run --input":
        return ["run", str(earlier), "--input", str(special)]
    return ["run", str(special), "--input", str(image)]


def write_path_cases(testdata: Path, folder: Path, earlier: Path, count: int,
                     seed: int = 0) -> tuple[Plan, collections.Counter[str], list[dict[str, Any]]]:
    """`count` cases, every OUT shape and every (argument, special file) pair before repeats.

    Returns the plan, the strategies used, and per case: its folder, OUT, the paths a passing
    run may change, and what must happen ("ok", "refused", or None for either)."""
    source = testdata / "tflm" / "hello_world_float.tflite"
    image = folder / "frame.npy"
    folder.mkdir(parents=True)
    np.save(image, np.zeros((1, 1), np.float32))
    rng = np.random.default_rng(seed)
    pairs = [(a, k) for a in ARGUMENTS for k in SPECIALS]
    kinds = [("out", s) for s in OUT_SHAPES] + [("special", p) for p in pairs]
    order = kinds + [kinds[int(i)] for i in rng.integers(len(kinds), size=max(0, count - len(kinds)))]
    plan: Plan = []
    cases: list[dict[str, Any]] = []
    strategies: collections.Counter[str] = collections.Counter()
    for k, (what, strategy) in enumerate(order[:count]):
        case = folder / f"case-{k:03d}"
        _user_files(case)
        if what == "out":
            out, cwd, may_change = _out_case(strategy, case, earlier)
            argv = ["convert", str(source), "-t", "tflite-int8", "-t", "mcu", "--calib-random", "--no-fit-check",
                    "-o", str(out), "-q"]
            expect = {True: "ok", False: "refused", None: None}[OUT_SHAPES[strategy]]
            label = f"-o {strategy}"
        else:
            argument, kind = strategy
            argv, cwd, out, may_change, expect = _special_case(argument, kind, case, source, earlier, image), None, \
                case / "out", [], "refused"
            label = f"{argument} {kind}"
        strategies[label.split(" ", 1)[0] if what == "out" else label] += 1
        command = ["convert" if what == "out" else label.split(" ")[0], argv, None]
        if cwd is not None:
            command.append(str(cwd))
        plan.append({"file": f"{case.name} {label}", "commands": [command]})
        # Read, and no trespass: OUT's manifest (which says whether OUT is an edgeserve output),
        # the file the user gave as an argument, and a user's hard link inside OUT (OUT's file as
        # much as theirs).
        absolute_out = out if out.is_absolute() else (cwd or case) / out
        may_read = [absolute_out / "manifest.json", case / "special"]
        if strategy == "earlier-output-hardlinking-out":
            may_read.append(case / "outside" / "secret.txt")
        cases.append({"case": case, "out": absolute_out, "label": label,
                      "may_change": may_change, "may_read": may_read, "expect": expect})
    return plan, strategies, cases


def snapshot(root: Path) -> dict[str, tuple]:
    """Every path under root (links not followed): kind, mode, inode, size, mtime, atime, and a
    regular file's sha256 (taken after the atime, so hashing does not hide a read)."""
    seen: dict[str, tuple] = {}
    for where, folders, files in os.walk(root):
        for name in folders + files:
            path = os.path.join(where, name)
            info = os.lstat(path)
            entry: tuple = (stat.S_IFMT(info.st_mode), info.st_mode, info.st_ino, info.st_size, info.st_mtime_ns,
                            info.st_atime_ns if stat.S_ISREG(info.st_mode) else None)
            if stat.S_ISREG(info.st_mode):
                with open(path, "rb") as f:
                    entry += (hashlib.sha256(f.read()).hexdigest(),)
            elif stat.S_ISLNK(info.st_mode):
                entry += (os.readlink(path),)
            seen[os.path.relpath(path, root)] = entry
    return seen


def age_access_times(root: Path, taken: dict[str, tuple]) -> None:
    """Set every regular file's atime an hour before its mtime, so the next read moves it, and
    record that in `taken` (a snapshot of root: its hashing read every file)."""
    for rel, entry in taken.items():
        if entry[0] == stat.S_IFREG:
            aged = entry[4] - HOUR_NS
            os.utime(root / rel, ns=(aged, entry[4]), follow_symlinks=False)
            taken[rel] = entry[:5] + (aged,) + entry[6:]


def differences(before: dict[str, tuple], after: dict[str, tuple], root: Path,
                may_change: list[Path], may_read: list[Path] = ()) -> list[str]:
    """What changed under root outside the paths a run may change, in words."""
    allowed = [os.path.relpath(p, root) for p in may_change]
    readable = {os.path.relpath(p, root) for p in may_read}

    def free(rel: str) -> bool:
        return any(rel == a or rel.startswith(a + os.sep) for a in allowed)

    found = []
    for rel in sorted(set(before) | set(after)):
        if free(rel):
            continue
        old, new = before.get(rel), after.get(rel)
        if old is None:
            found.append(f"{rel}: created")
        elif new is None:
            found.append(f"{rel}: deleted or moved")
        elif old[:5] + old[6:] != new[:5] + new[6:]:
            found.append(f"{rel}: changed")
        elif old[5] != new[5] and rel not in readable:
            found.append(f"{rel}: read")
    return found


def build_earlier(testdata: Path, out: Path) -> Path:
    """An earlier edgeserve output, as the user's disk holds one (a second: no TensorFlow)."""
    from click.testing import CliRunner

    from edgeserve.cli import cli

    made = CliRunner().invoke(cli, ["convert", str(testdata / "tflm" / "hello_world_float.tflite"), "-t", "tflite-int8",
                                    "-t", "mcu", "--calib-random", "--no-fit-check", "-o", str(out), "-q"])
    assert made.exit_code == 0, made.output
    return out


def run_path_cases(testdata: Path, folder: Path, count: int, seed: int, per_command: float) -> dict[str, Any]:
    """Write the cases, run them, and judge each: its outcome against what its case says, and
    the disk around it against the snapshot taken before. What benchmarks/fuzz_cli.py prints
    and tests/test_cli_fuzz.py asserts."""
    from cli_fuzz import run_plan

    earlier = build_earlier(testdata, folder / "earlier")
    plan, strategies, cases = write_path_cases(testdata, folder / "cases", earlier, count, seed)
    before = {str(c["case"]): snapshot(c["case"]) for c in cases}
    for c in cases:
        age_access_times(c["case"], before[str(c["case"])])
    rows, failure = run_plan(plan, folder / "work", per_command)
    reads = reads_detectable(folder)
    wrong, trespass, outcomes = [], [], collections.Counter()
    for case, row in zip(cases, rows):
        (outcome,) = row["outcomes"].values()
        got = "ok" if outcome == "exit 0" else "refused"
        outcomes[got] += 1
        if case["expect"] not in (None, got) or (got == "ok" and not (case["out"] / "manifest.json").is_file()):
            wrong.append((row["file"], outcome))
        found = differences(before[str(case["case"])], snapshot(case["case"]), case["case"],
                            case["may_change"] if got == "ok" else [], case["may_read"])
        found = [f for f in found if reads or not f.endswith(": read")]
        if found:
            trespass.append((row["file"], found[:4]))
    return {"rows": rows, "failure": failure, "strategies": strategies, "outcomes": dict(outcomes),
            "wrong_outcome": wrong, "trespass": trespass, "reads_checked": reads}
