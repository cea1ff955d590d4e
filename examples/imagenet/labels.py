"""ImageNet-1k class names, one per line in the models' output order, for `edgeserve run --labels`.

An ImageNet classifier (MobileNetV2 from TFLM's examples, a Keras application, a torchvision
or timm model) gives 1000 scores in the order of the sorted WordNet synset ids. The list is
not in any runtime package, so it is taken from the timm wheel on PyPI, which ships the
synsets (``timm/data/_info/imagenet_synsets.txt``) and their WordNet lemmas
(``imagenet_synset_to_lemma.txt``): ``pip download --no-deps``, read with zipfile; nothing is
installed. Line 282 (index 281) is "tabby"; a model with 1001 outputs (class 0 "background",
TF-Slim's checkpoints) takes ``--background``::

    python examples/imagenet/labels.py imagenet_labels.txt
    edgeserve run mobilenet_v2_quantized_1x3x224x224.tflite --input cat.jpg --labels imagenet_labels.txt \\
        --layout nchw --crop center --crop-fraction 0.875 --mean 0.485,0.456,0.406 --std 0.229,0.224,0.225
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

TIMM = "timm==1.0.31"
SYNSETS = "timm/data/_info/imagenet_synsets.txt"
LEMMAS = "timm/data/_info/imagenet_synset_to_lemma.txt"


def download_wheel(into: Path) -> Path:
    """The timm wheel, downloaded by pip into ``into``."""
    command = [sys.executable, "-m", "pip", "download", TIMM, "--no-deps", "--only-binary=:all:", "--quiet",
               "-d", str(into)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wheels = sorted(into.glob("timm-*.whl"))
    if done.returncode != 0 or not wheels:
        last = (done.stderr.strip().splitlines() or ["no wheel written"])[-1]
        raise SystemExit(f"error: pip could not download {TIMM} (--no-deps): {last}")
    return wheels[0]


def class_names(wheel: Path, *, background: bool = False) -> list[str]:
    """The 1000 (or, with ``background``, 1001) short class names in output order."""
    with zipfile.ZipFile(wheel) as archive:
        synsets = archive.read(SYNSETS).decode().split()
        lemmas = dict(line.split("\t", 1) for line in archive.read(LEMMAS).decode().splitlines() if "\t" in line)
    if len(synsets) != 1000 or synsets != sorted(synsets):
        raise SystemExit(f"error: {wheel.name}: expected the 1000 sorted ImageNet-1k synsets, got {len(synsets)}")
    names = [lemmas[s].split(",")[0].strip() for s in synsets]  # "tabby, tabby cat" -> "tabby"
    return ["background", *names] if background else names


def write_atomically(path: Path, lines: list[str]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="text file to write, one class name per line")
    parser.add_argument("--wheel", type=Path, help="a timm wheel already downloaded (default: pip download it)")
    parser.add_argument("--background", action="store_true", help="1001 lines, 'background' first")
    args = parser.parse_args(argv)
    if args.wheel is not None:
        names = class_names(args.wheel, background=args.background)
    else:
        with tempfile.TemporaryDirectory() as scratch:
            names = class_names(download_wheel(Path(scratch)), background=args.background)
    write_atomically(args.out, names)
    print(f"{args.out}: {len(names)} ImageNet class names from {TIMM}")


if __name__ == "__main__":
    main()
