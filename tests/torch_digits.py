"""A small PyTorch CNN trained in the test session on scikit-learn's 8x8 digits (seeded, seconds).

The digits are shown as RGB frames with ImageNet-style per-channel normalization, in
PyTorch's NCHW layout: what a torchvision-style model expects from a camera.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from edgeserve.preprocess import PreprocessSpec

SPEC = PreprocessSpec(color="rgb", layout="nchw", mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))


@dataclasses.dataclass
class TorchExample:
    root: Path  # digits.pt2, digits.pt (traced), calib.npz, eval.npz (x, y)
    frames: np.ndarray  # uint8, N x 8 x 8 x 3 (RGB), the held-out digits
    labels: np.ndarray  # their labels
    module: object  # the trained torch.nn.Module (eval mode)


def frames_and_labels() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    gray = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)
    return np.repeat(gray[..., None], 3, axis=3), digits.target.astype(np.int64)


def build(root: Path, epochs: int = 4) -> TorchExample:
    import torch

    frames, labels = frames_and_labels()
    order = np.random.default_rng(0).permutation(len(frames))
    test, train = order[:200], order[200:]
    spec = SPEC.bind_to_input((1, 3, 8, 8))
    x = np.concatenate([spec.apply(f) for f in frames])  # N x 3 x 8 x 8, normalized
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
        torch.nn.Linear(16, 10), torch.nn.Softmax(dim=-1),
    )
    optimizer = torch.optim.Adam(net.parameters(), 1e-2)
    xt, yt = torch.from_numpy(x[train]), torch.from_numpy(labels[train])
    for _ in range(epochs):
        for i in range(0, len(xt), 128):
            optimizer.zero_grad()
            loss = torch.nn.functional.nll_loss(torch.log(net(xt[i:i + 128]) + 1e-9), yt[i:i + 128])
            loss.backward()
            optimizer.step()
    net.eval()
    example_input = (torch.zeros(1, 3, 8, 8),)
    torch.export.save(torch.export.export(net, example_input), root / "digits.pt2")
    torch.jit.trace(net, example_input).save(str(root / "digits.pt"))
    np.savez(root / "calib.npz", x=x[train][:200])
    np.savez(root / "eval.npz", x=x[test], y=labels[test])
    return TorchExample(root, frames[test], labels[test], net)
