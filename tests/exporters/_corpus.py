"""A corpus of networks written the way people write them, each with DCD layers.

Not the zoo: functional calls next to modules, activations the zoo never uses, squeeze
excitation through ``F.adaptive_avg_pool2d`` and ``x.mean``, channel shuffle, dense
concatenation, ConvNeXt-style LayerNorm over permuted tensors, a segmentation head with
``F.interpolate`` and a dict output, two inputs, non-square inputs, DY-Conv and CondConv
layers, and a stride-2 1x1 DCD layer (which the fused op does not take).

``CORPUS`` maps a name to a :class:`Case`: ``case.build(seed)`` returns the network with
random weights, random dynamic heads and BatchNorm statistics measured on random inputs
(every layer sees unit-scale, input-dependent activations and no fold is a no-op), and
``case.inputs(n, seed)`` a tuple of inputs of batch ``n``. Sizes are small: the whole
corpus exports in all three modes in a few minutes.

Imported as ``_corpus`` (tests/ is on ``sys.path``; see tests/_zoo.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from dcd_deploy.layers import CondConv2d, DCDConv2d, DCDLinear, DynamicConv2d

_BN = (nn.BatchNorm1d, nn.BatchNorm2d)


def dcd(cin: int, cout: int, k: int = 1, stride: int = 1, groups: int = 1, **kw) -> DCDConv2d:
    """A DCD layer as a user would write one (small squeeze so the branch is exercised)."""
    kw.setdefault("squeeze", max(4, cin // 4))
    return DCDConv2d(cin, cout, k, stride, groups=groups, **kw)


class ConvBNAct(nn.Sequential):
    def __init__(self, conv: nn.Module, cout: int, act: nn.Module | None):
        super().__init__(conv, nn.BatchNorm2d(cout), *([act] if act is not None else []))


# ------------------------------------------------------------------------ MobileNetV3-like
class SqueezeExcite(nn.Module):
    """SE through ``F.adaptive_avg_pool2d`` and ``F.hardsigmoid``."""

    def __init__(self, c: int, r: int = 4):
        super().__init__()
        self.reduce = nn.Conv2d(c, max(8, c // r), 1)
        self.expand = nn.Conv2d(max(8, c // r), c, 1)

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        s = F.relu(self.reduce(s))
        return x * F.hardsigmoid(self.expand(s))


class MBv3Block(nn.Module):
    def __init__(self, cin, hidden, cout, k, stride, se: bool):
        super().__init__()
        self.use_res = stride == 1 and cin == cout
        self.expand = ConvBNAct(dcd(cin, hidden), hidden, nn.Hardswish())
        self.dw = ConvBNAct(dcd(hidden, hidden, k, stride, groups=hidden), hidden, nn.Hardswish())
        self.se = SqueezeExcite(hidden) if se else nn.Identity()
        self.project = ConvBNAct(dcd(hidden, cout), cout, None)

    def forward(self, x):
        y = self.project(self.se(self.dw(self.expand(x))))
        return x + y if self.use_res else y


class MobileNetV3Like(nn.Module):
    """Hardswish, SE with F.adaptive_avg_pool2d, depthwise 3x3 and 5x5 DCD, a DCD classifier."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = ConvBNAct(nn.Conv2d(3, 16, 3, 2, 1, bias=False), 16, nn.Hardswish())
        self.blocks = nn.Sequential(
            MBv3Block(16, 32, 16, 3, 1, se=True),
            MBv3Block(16, 48, 24, 5, 2, se=False),
            MBv3Block(24, 48, 24, 3, 1, se=True),
        )
        self.head = ConvBNAct(nn.Conv2d(24, 64, 1, bias=False), 64, nn.Hardswish())
        self.classifier = nn.Sequential(
            nn.Linear(64, 48), nn.Hardswish(), nn.Dropout(0.2), DCDLinear(48, classes, latent_dim=4, squeeze=8)
        )

    def forward(self, x):
        x = self.head(self.blocks(self.stem(x)))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.classifier(x)


# ------------------------------------------------------------------------ EfficientNet-like
class MBConv(nn.Module):
    """SiLU, SE through ``x.mean((2, 3), keepdim=True)``, a stride-2 1x1 DCD shortcut."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        hidden = cin * 4
        self.expand = dcd(cin, hidden)
        self.bn0 = nn.BatchNorm2d(hidden)
        self.dw = nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False)
        self.bn1 = nn.BatchNorm2d(hidden)
        self.se_reduce = nn.Conv2d(hidden, 8, 1)
        self.se_expand = nn.Conv2d(8, hidden, 1)
        self.project = dcd(hidden, cout)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(dcd(cin, cout, 1, stride), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.silu(self.bn0(self.expand(x)))
        y = F.silu(self.bn1(self.dw(y)))
        s = y.mean((2, 3), keepdim=True)
        y = y * torch.sigmoid(self.se_expand(F.silu(self.se_reduce(s))))
        y = self.bn2(self.project(y))
        return y + (x if self.shortcut is None else self.shortcut(x))


class EfficientNetLike(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = ConvBNAct(nn.Conv2d(3, 16, 3, 2, 1, bias=False), 16, nn.SiLU())
        self.stage1 = MBConv(16, 16, 1)
        self.stage2 = MBConv(16, 24, 2)
        self.fc = nn.Linear(24, classes)

    def forward(self, x):
        x = self.stage2(self.stage1(self.stem(x)))
        return self.fc(torch.flatten(x.mean((2, 3)), 1))


# ------------------------------------------------------------------------ ShuffleNet-like
def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    b, c, h, w = x.shape
    x = x.reshape(b, groups, c // groups, h, w)
    x = torch.transpose(x, 1, 2).contiguous()
    return x.view(b, -1, h, w)


class ShuffleUnit(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        half = c // 2
        self.branch = nn.Sequential(
            dcd(half, half),
            nn.BatchNorm2d(half),
            nn.ReLU(inplace=True),
            nn.Conv2d(half, half, 3, 1, 1, groups=half, bias=False),
            nn.BatchNorm2d(half),
            dcd(half, half),
            nn.BatchNorm2d(half),
            nn.ReLU(inplace=True),
        )

    def forward(self, x):
        a, b = x.chunk(2, dim=1)
        return channel_shuffle(torch.cat((a, self.branch(b)), dim=1), 2)


class ShuffleNetLike(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = ConvBNAct(nn.Conv2d(3, 24, 3, 2, 1, bias=False), 24, nn.ReLU(inplace=True))
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.units = nn.Sequential(ShuffleUnit(24), ShuffleUnit(24))
        self.fc = nn.Linear(24, classes)

    def forward(self, x):
        x = self.units(self.pool(self.stem(x)))
        return self.fc(x.mean([2, 3]))


# ------------------------------------------------------------------------ DenseNet-like
class DenseLayer(nn.Module):
    """Pre-activation (BN before the conv: nothing to fold), a 3x3 DCD layer."""

    def __init__(self, cin: int, growth: int):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(cin)
        self.conv1 = dcd(cin, 2 * growth)
        self.norm2 = nn.BatchNorm2d(2 * growth)
        self.conv2 = dcd(2 * growth, growth, 3)

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        x = torch.cat(features, 1)
        x = self.conv1(F.relu(self.norm1(x)))
        return self.conv2(F.relu(self.norm2(x)))


class DenseNetLike(nn.Module):
    def __init__(self, classes: int = 10, growth: int = 8):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, 2, 1, bias=False)
        self.layers = nn.ModuleList([DenseLayer(16 + i * growth, growth) for i in range(3)])
        c = 16 + 3 * growth
        self.transition = nn.Sequential(
            nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, 24, 1, bias=False), nn.AvgPool2d(2, 2)
        )
        self.norm = nn.BatchNorm2d(24)
        self.classifier = nn.Linear(24, classes)

    def forward(self, x):
        features = [self.stem(x)]
        for layer in self.layers:
            features.append(layer(features))
        x = F.relu(self.norm(self.transition(torch.cat(features, 1))))
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(x, (1, 1)), 1))


# ------------------------------------------------------------------------ ConvNeXt-like
class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over channels of an NCHW tensor, through permute (ConvNeXt's way)."""

    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.dwconv = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c, eps=1e-6)
        self.pwconv1 = nn.Linear(c, 4 * c)
        self.act = nn.GELU()
        self.pwconv2 = dcd(4 * c, c)  # the block's projection, a DCD layer in NCHW
        self.gamma = nn.Parameter(torch.full((c,), 0.5))

    def forward(self, x):
        y = self.dwconv(x)
        y = y.permute(0, 2, 3, 1)  # (N, H, W, C)
        y = self.act(self.pwconv1(self.norm(y)))
        y = self.pwconv2(y.permute(0, 3, 1, 2))
        return x + self.gamma.view(1, -1, 1, 1) * y


class ConvNeXtLike(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 4, 4), LayerNorm2d(16, eps=1e-6))
        self.stage = nn.Sequential(ConvNeXtBlock(16), ConvNeXtBlock(16))
        self.down = nn.Sequential(LayerNorm2d(16, eps=1e-6), nn.Conv2d(16, 32, 2, 2))
        self.block = ConvNeXtBlock(32)
        self.head_norm = nn.LayerNorm(32)
        self.head = nn.Linear(32, classes)

    def forward(self, x):
        x = self.block(self.down(self.stage(self.stem(x))))
        return self.head(self.head_norm(x.mean([-2, -1])))


# ------------------------------------------------------------------------ segmentation
class SegNetLike(nn.Module):
    """Encoder with 3x3 and 1x1 DCD layers, F.interpolate back to the input, a dict output."""

    def __init__(self, classes: int = 5):
        super().__init__()
        self.enc1 = ConvBNAct(dcd(3, 16, 3, 2), 16, nn.ReLU())
        self.enc2 = ConvBNAct(dcd(16, 32, 3, 2), 32, nn.ReLU())
        self.context = ConvBNAct(dcd(32, 32), 32, nn.ReLU6())
        self.fuse = ConvBNAct(nn.Conv2d(48, 32, 3, padding=1, bias=False), 32, nn.ReLU())
        self.classifier = nn.Conv2d(32, classes, 1)
        self.aux = nn.Conv2d(32, classes, 1)

    def forward(self, x):
        size = x.shape[-2:]
        f1 = self.enc1(x)
        f2 = self.context(self.enc2(f1))
        up = F.interpolate(f2, size=f1.shape[-2:], mode="bilinear", align_corners=False)
        y = self.fuse(torch.cat([up, f1], dim=1))
        out = F.interpolate(self.classifier(y), size=size, mode="bilinear", align_corners=False)
        return {"out": out, "aux": self.aux(f2)}


# ------------------------------------------------------------------------ two inputs
class TwoInputNet(nn.Module):
    """RGB and depth images in, fused by cat; a tuple (logits, embedding) out."""

    def __init__(self, classes: int = 7):
        super().__init__()
        self.rgb = ConvBNAct(nn.Conv2d(3, 16, 3, 2, 1, bias=False), 16, nn.ReLU())
        self.depth = ConvBNAct(nn.Conv2d(1, 8, 3, 2, 1, bias=False), 8, nn.ReLU())
        self.mix = ConvBNAct(dcd(24, 32), 32, nn.ReLU())
        self.dw = ConvBNAct(dcd(32, 32, 3, 1, groups=32), 32, nn.ReLU())
        self.embed = nn.Linear(32, 16)
        self.cls = DCDLinear(16, classes, latent_dim=4, squeeze=4)

    def forward(self, rgb, depth):
        x = torch.cat([self.rgb(rgb), self.depth(depth)], 1)
        x = self.dw(self.mix(x))
        e = F.relu(self.embed(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)))
        return self.cls(e), e


# ------------------------------------------------------------------------ non-square, mixtures
class NonSquareNet(nn.Module):
    """A 48x64 input; DY-Conv and CondConv next to DCD; F.relu, torch.flatten, MaxPool."""

    def __init__(self, classes: int = 6):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, 1, 1)
        self.pool = nn.MaxPool2d(2)
        self.dy = DynamicConv2d(16, 24, 3, stride=2)
        self.dy_bn = nn.BatchNorm2d(24)
        self.cond = CondConv2d(24, 24, 1)
        self.cond_bn = nn.BatchNorm2d(24)
        self.pw = dcd(24, 32, gate="se", latent_bn=True, pool_size=2)
        self.pw_bn = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32 * 3 * 4, classes)

    def forward(self, x):
        x = self.pool(F.relu(self.conv(x)))
        x = F.relu(self.dy_bn(self.dy(x)))
        x = F.relu(self.cond_bn(self.cond(x)))
        x = F.relu(self.pw_bn(self.pw(x)))
        x = F.adaptive_avg_pool2d(x, (3, 4))
        return self.fc(torch.flatten(x, 1))


# ------------------------------------------------------------------------ ResNet-like, strided 1x1
class Bottleneck(nn.Module):
    """The original ResNet bottleneck: the stride in the first 1x1 (a stride-2 1x1 DCD)."""

    def __init__(self, cin, mid, cout, stride):
        super().__init__()
        self.conv1 = dcd(cin, mid, 1, stride)
        self.bn1 = nn.BatchNorm2d(mid)
        self.conv2 = dcd(mid, mid, 3, num_blocks=1)
        self.bn2 = nn.BatchNorm2d(mid)
        self.conv3 = dcd(mid, cout, num_blocks=2, latent_dim=8)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.down is None else self.down(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNetLike(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = ConvBNAct(nn.Conv2d(3, 16, 3, 2, 1, bias=False), 16, nn.ReLU(inplace=True))
        self.layer1 = Bottleneck(16, 8, 32, 1)
        self.layer2 = Bottleneck(32, 16, 32, 2)
        self.layer3 = nn.Sequential(dcd(32, 32), nn.BatchNorm2d(32))  # fused with the ReLU below
        self.fc = nn.Linear(32, classes)

    def forward(self, x):
        x = self.layer2(self.layer1(self.stem(x)))
        x = torch.relu(self.layer3(x) + x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# ------------------------------------------------------------------------ the corpus
@dataclass(frozen=True)
class Case:
    """One corpus network: its class, input shapes (batch excluded), and fused-mode facts."""

    make: Callable[[], nn.Module]
    shapes: tuple[tuple[int, ...], ...]

    def inputs(self, n: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
        g = torch.Generator().manual_seed(seed)
        return tuple(torch.randn(n, *s, generator=g) for s in self.shapes)

    def build(self, seed: int = 0) -> nn.Module:
        return randomized(self.make(), self, seed)

    @property
    def input_size(self) -> tuple[int, int]:
        return self.shapes[0][-2:]


def randomized(module: nn.Module, case: Case, seed: int = 0) -> nn.Module:
    """Random weights (dynamic heads included), random BN affines, BN statistics from
    random inputs: unit-scale, input-dependent activations everywhere."""
    g = torch.Generator().manual_seed(seed)
    bns = [m for m in module.modules() if isinstance(m, _BN)]
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("gamma"):
                continue
            if p.dim() > 1:
                gain = 0.3 if name.endswith(("fc_phi.weight", "fc_scale.weight")) else 1.0  # dynamic, not wild
                p.copy_(torch.randn(p.shape, generator=g) * gain * math.sqrt(1.0 / p[0].numel()))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
        for m in module.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.copy_(0.5 + torch.rand(m.weight.shape, generator=g))
        for bn in bns:
            bn.weight.copy_(0.5 + torch.rand(bn.weight.shape, generator=g))
            bn.reset_running_stats()
            bn.momentum = None  # cumulative average
        module.eval()
        for bn in bns:
            bn.train()
        for i in range(3):
            module(*case.inputs(8, seed=1000 + seed * 10 + i))
        for bn in bns:
            bn.running_var.clamp_(min=0.05 * float(bn.running_var.mean()))
    return module.eval()


CORPUS: dict[str, Case] = {
    "mobilenetv3_like": Case(MobileNetV3Like, ((3, 48, 48),)),
    "efficientnet_like": Case(EfficientNetLike, ((3, 32, 32),)),
    "shufflenet_like": Case(ShuffleNetLike, ((3, 32, 32),)),
    "densenet_like": Case(DenseNetLike, ((3, 32, 32),)),
    "convnext_like": Case(ConvNeXtLike, ((3, 32, 32),)),
    "segnet_like": Case(SegNetLike, ((3, 32, 48),)),
    "two_input": Case(TwoInputNet, ((3, 32, 32), (1, 32, 32))),
    "nonsquare": Case(NonSquareNet, ((3, 48, 64),)),
    "resnet_like": Case(ResNetLike, ((3, 32, 32),)),
}

#: Fused mode: DCD layers that stay standard ops, with the reason the export gives.
UNFUSED = {
    "efficientnet_like": {},
    "shufflenet_like": {},
    "densenet_like": {},
    "convnext_like": {},
    "segnet_like": {},
    "nonsquare": {},
    "resnet_like": {},
    "mobilenetv3_like": {},
    "two_input": {},
}
