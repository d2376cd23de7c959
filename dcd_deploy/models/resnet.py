"""ResNet (He et al. 2016) with an injected conv layer: static, DCD, DY-Conv and
CondConv share this one class.

Module names follow the authors' release (``layerN.M.convK``, ``classifier.1``); their
DCD layers call Q and P ``q`` and ``p``, which the release loader renames to
``conv_q``/``conv_p`` (:mod:`dcd_deploy.models.authors`).
"""

from __future__ import annotations

import functools

from torch import nn

from ..errors import UnsupportedInputError
from ._factory import LayerSpec, make_spec
from ._registry import register_variants
from .mobilenetv2 import _init_weights

# Legend: stage widths (planes) and, per depth, (block type, blocks per stage).
PLANES = (64, 128, 256, 512)
DEPTHS = {
    10: ("basic", (1, 1, 1, 1)),
    18: ("basic", (2, 2, 2, 2)),
    34: ("basic", (3, 4, 6, 3)),
    50: ("bottleneck", (3, 4, 6, 3)),
    101: ("bottleneck", (3, 4, 23, 3)),
    152: ("bottleneck", (3, 8, 36, 3)),
}
STEM_CHANNELS = 64
#: The release pools the last 7x7 map with a fixed AvgPool2d(7): 224x224 input only.
FIXED_POOL = 7


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(
        self, inplanes: int, planes: int, stride: int, downsample, spec: LayerSpec, stride_in_1x1: bool = False
    ):
        super().__init__()
        self.conv1 = spec.conv("conv", inplanes, planes, 3, stride, family="basic")
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU()
        self.conv2 = spec.conv("conv", planes, planes, 3, 1, family="basic")
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(
        self, inplanes: int, planes: int, stride: int, downsample, spec: LayerSpec, stride_in_1x1: bool = False
    ):
        super().__init__()
        s1, s3 = (stride, 1) if stride_in_1x1 else (1, stride)
        self.conv1 = spec.conv("conv", inplanes, planes, 1, s1, family="bottleneck")
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = spec.conv("conv", planes, planes, 3, s3, family="bottleneck")
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = spec.conv("conv", planes, planes * 4, 1, 1, family="bottleneck")
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU()
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + identity)


class ResNet(nn.Module):
    """ResNet.

    Args:
        spec: the injected conv layer.
        depth: 10, 18, 34, 50, 101 or 152.
        num_classes: classifier outputs.
        dropout: dropout before the classifier (kept as ``classifier.0``).
        fixed_pool: pool the final map with the release's fixed 7x7 average (224x224
            input only) instead of a global average.
        stride_in_1x1: bottleneck stride on the first 1x1 (the original ResNet-50 the
            paper's 3.8G MAdds counts) instead of on the 3x3 (the release).
    """

    def __init__(
        self,
        spec: LayerSpec,
        depth: int,
        num_classes: int = 1000,
        dropout: float = 0.0,
        fixed_pool: bool = False,
        stride_in_1x1: bool = False,
    ):
        super().__init__()
        kind, counts = DEPTHS[depth]
        block = BasicBlock if kind == "basic" else Bottleneck
        self.spec, self.depth, self.fixed_pool = spec, depth, fixed_pool
        self.conv1 = nn.Conv2d(3, STEM_CHANNELS, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(STEM_CHANNELS)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        inplanes = STEM_CHANNELS
        for i, (planes, n) in enumerate(zip(PLANES, counts)):
            stride = 1 if i == 0 else 2
            blocks = []
            for j in range(n):
                s = stride if j == 0 else 1
                down = None
                if s != 1 or inplanes != planes * block.expansion:
                    down = nn.Sequential(
                        nn.Conv2d(inplanes, planes * block.expansion, 1, s, bias=False),
                        nn.BatchNorm2d(planes * block.expansion),
                    )
                blocks.append(block(inplanes, planes, s, down, spec, stride_in_1x1))
                inplanes = planes * block.expansion
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
        self.avgpool = nn.AvgPool2d(FIXED_POOL, stride=1) if fixed_pool else nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(dropout), spec.classifier(inplanes, num_classes))
        self.num_features = inplanes
        _init_weights(self)

    def check_input_size(self, size: int) -> None:
        """Raise :class:`UnsupportedInputError` for a size the final pool cannot take."""
        final = size
        for _ in range(5):  # stem conv, max pool and three strided stages halve it
            final = (final - 1) // 2 + 1
        if size < 1 or (self.fixed_pool and final != FIXED_POOL):
            raise UnsupportedInputError(
                f"input size {size} gives a {final}x{final} final map, but this ResNet pools with a "
                f"fixed {FIXED_POOL}x{FIXED_POOL} average (as the authors' release); use 193-224"
            )

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.classifier(self.avgpool(x).flatten(1))


DEFAULT_ROLES = {"static": (), "dcd": ("conv", "cls"), "dyconv": ("conv",), "condconv": ("conv", "cls")}


def _resnet(
    kind: str,
    *,
    depth: int,
    num_classes: int = 1000,
    dropout: float = 0.0,
    roles=None,
    fixed_pool: bool | None = None,
    stride_in_1x1: bool = False,
    **knobs,
) -> ResNet:
    knobs.setdefault("fc_squeeze", 16)
    spec = make_spec(kind, default_roles=DEFAULT_ROLES[kind], roles=roles, **knobs)
    if fixed_pool is None:
        fixed_pool = kind == "dcd"  # the release's DCD ResNets pool with a fixed 7x7
    return ResNet(spec, depth, num_classes, dropout, fixed_pool, stride_in_1x1)


for _depth in (10, 18, 50):
    register_variants(f"resnet{_depth}", functools.partial(_resnet, depth=_depth), f"ResNet-{_depth}")
