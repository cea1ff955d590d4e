"""MobileNetV3-Small as the paper specifies it, randomly initialised (what torchvision's
``mobilenet_v3_small(weights=None)`` gives; torchvision itself does not import here: the
registry's wheels are CUDA builds that do not load beside the CPU torch build).

Architecture: Howard et al., "Searching for MobileNetV3" (ICCV 2019), Table 2 (bneck
kernel, expansion, output channels, squeeze-and-excite, activation, stride) and section
5.2 (SE bottleneck a quarter of the expansion, rounded to 8; hard-sigmoid gate). The
classifier follows the paper's 1x1 "NBN" convolutions as linear layers; initialisation is
He-normal (fan-out) for convolutions, BN scale 1 and bias 0, and PyTorch's default for the
linear layers. (torchvision draws those from N(0, 0.01), which leaves an untrained network's
1,000 outputs equal to within 1e-9: a top-1 comparison on such outputs could not fail.)
"""

from __future__ import annotations

import torch
from torch import nn

# kernel, expansion, out, SE, activation ("RE" ReLU, "HS" hard-swish), stride (Table 2)
SMALL = [
    (3, 16, 16, True, "RE", 2), (3, 72, 24, False, "RE", 2), (3, 88, 24, False, "RE", 1),
    (5, 96, 40, True, "HS", 2), (5, 240, 40, True, "HS", 1), (5, 240, 40, True, "HS", 1),
    (5, 120, 48, True, "HS", 1), (5, 144, 48, True, "HS", 1), (5, 288, 96, True, "HS", 2),
    (5, 576, 96, True, "HS", 1), (5, 576, 96, True, "HS", 1),
]


def _round8(channels: float) -> int:
    return max(8, int(channels + 4) // 8 * 8)


def _conv_bn(cin: int, cout: int, kernel: int, stride: int, groups: int, act: str | None) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
                               nn.BatchNorm2d(cout)]
    if act:
        layers.append(nn.Hardswish() if act == "HS" else nn.ReLU())
    return nn.Sequential(*layers)


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        squeeze = _round8(channels / 4)
        self.reduce, self.expand = nn.Conv2d(channels, squeeze, 1), nn.Conv2d(squeeze, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.mean(dim=(2, 3), keepdim=True)
        return x * nn.functional.hardsigmoid(self.expand(nn.functional.relu(self.reduce(s))))


class Bottleneck(nn.Module):
    def __init__(self, cin: int, kernel: int, expansion: int, cout: int, se: bool, act: str, stride: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        if expansion != cin:
            layers.append(_conv_bn(cin, expansion, 1, 1, 1, act))
        layers.append(_conv_bn(expansion, expansion, kernel, stride, expansion, act))
        if se:
            layers.append(SqueezeExcite(expansion))
        layers.append(_conv_bn(expansion, cout, 1, 1, 1, None))
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.residual else y


class MobileNetV3Small(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [_conv_bn(3, 16, 3, 2, 1, "HS")]
        cin = 16
        for kernel, expansion, cout, se, act, stride in SMALL:
            layers.append(Bottleneck(cin, kernel, expansion, cout, se, act, stride))
            cin = cout
        layers.append(_conv_bn(cin, 576, 1, 1, 1, "HS"))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Linear(576, 1024), nn.Hardswish(), nn.Linear(1024, classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).mean(dim=(2, 3)))


def with_photo_statistics(module: nn.Module, crops: torch.Tensor, batch: int = 20) -> nn.Module:
    """``module`` in eval mode with its BatchNorm statistics averaged over ``crops``: with fresh
    statistics an untrained network gives every image the same class, and a comparison of
    its outputs could not fail."""
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.momentum = None  # a plain average over the batches below
            m.reset_running_stats()
    module.train()
    with torch.no_grad():
        for i in range(0, len(crops), batch):
            module(crops[i:i + batch])
    return module.eval()
