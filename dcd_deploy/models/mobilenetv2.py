"""MobileNetV2 (Sandler et al. 2018) with an injected conv layer: static, DCD,
DY-Conv and CondConv share this one class.

Module names follow the authors' release (``features.N.conv.M``, ``conv``,
``classifier.1``), so their DCD state dicts load without renaming.
"""

from __future__ import annotations

import functools

from torch import nn

from ._factory import LayerSpec, make_spec
from ._registry import register_variants

# Inverted residual settings; legend: t expansion, c output channels (x1.0),
# n repeats, s stride of the first repeat.
BLOCKS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))
STEM_CHANNELS = 32
HEAD_CHANNELS = 1280
DIVISOR = 8


def make_divisible(v: float, divisor: int = DIVISOR) -> int:
    """Round to a multiple of ``divisor``, never more than 10% down (TF's rule)."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def _bn_act(ch: int) -> list[nn.Module]:
    return [nn.BatchNorm2d(ch), nn.ReLU6()]


class InvertedResidual(nn.Module):
    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int, spec: LayerSpec):
        super().__init__()
        hidden = int(round(inp * expand_ratio))
        self.identity = stride == 1 and inp == oup
        dw = spec.conv("dw", hidden, hidden, 3, stride, groups=hidden)
        if expand_ratio == 1:
            layers = [dw, *_bn_act(hidden), spec.conv("pw0", hidden, oup), nn.BatchNorm2d(oup)]
        else:
            layers = [
                spec.conv("pw", inp, hidden),
                *_bn_act(hidden),
                dw,
                *_bn_act(hidden),
                spec.conv("pw", hidden, oup),
                nn.BatchNorm2d(oup),
            ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.identity else self.conv(x)


class MobileNetV2(nn.Module):
    """MobileNetV2.

    Args:
        spec: the injected conv layer (see :class:`LayerSpec`).
        width_mult: channel multiplier.
        num_classes: classifier outputs.
        dropout: dropout before the classifier (always present, so it sits at
            ``classifier.1`` as in the published checkpoints).
    """

    def __init__(self, spec: LayerSpec, width_mult: float = 1.0, num_classes: int = 1000, dropout: float = 0.0):
        super().__init__()
        self.spec, self.width_mult = spec, width_mult
        inp = make_divisible(STEM_CHANNELS * width_mult)
        layers: list[nn.Module] = [nn.Sequential(nn.Conv2d(3, inp, 3, 2, 1, bias=False), *_bn_act(inp))]
        for t, c, n, s in BLOCKS:
            oup = make_divisible(c * width_mult)
            for i in range(n):
                layers.append(InvertedResidual(inp, oup, s if i == 0 else 1, t, spec))
                inp = oup
        self.features = nn.Sequential(*layers)
        head = make_divisible(HEAD_CHANNELS * width_mult) if width_mult > 1.0 else HEAD_CHANNELS
        self.conv = nn.Sequential(spec.conv("head", inp, head), *_bn_act(head))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(dropout), spec.classifier(head, num_classes))
        self.num_features = head
        _init_weights(self)

    def forward(self, x):
        x = self.conv(self.features(x))
        return self.classifier(self.avgpool(x).flatten(1))


def _init_weights(model: nn.Module) -> None:
    """The release's initialisation (He-normal convs, N(0, 0.01) linears), except
    that DCD heads start at zero so an untrained model is finite in eval mode."""
    import math

    from ..layers import DCDConv2d, DCDLinear

    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
            nn.init.normal_(m.weight, 0.0, math.sqrt(2.0 / n))
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, (nn.BatchNorm2d, nn.BatchNorm1d)):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.01)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    for m in model.modules():
        if isinstance(m, (DCDConv2d, DCDLinear)):
            m.zero_dynamic_heads()


# Roles made dynamic by default per kind; the paper puts DCD on pointwise layers and
# the classifier (Table 4); DY-Conv on every block conv, CondConv also on the head
# and classifier (the splits that fit the paper's parameter counts).
DEFAULT_ROLES = {
    "static": (),
    "dcd": ("pw", "cls"),
    "dyconv": ("pw", "pw0", "dw"),
    "condconv": ("pw", "pw0", "dw", "head", "cls"),
}
# fc_squeeze of the release per width (Section 5: r = 16 for x1.0, 8 for smaller).
FC_SQUEEZE = {1.0: 16, 0.5: 8, 0.35: 8}


def _mobilenetv2(
    kind: str, *, width: float, num_classes: int = 1000, dropout: float = 0.0, roles=None, **knobs
) -> MobileNetV2:
    knobs.setdefault("fc_squeeze", FC_SQUEEZE[width])
    spec = make_spec(kind, default_roles=DEFAULT_ROLES[kind], roles=roles, **knobs)
    return MobileNetV2(spec, width, num_classes, dropout)


for _tag, _width in (("100", 1.0), ("050", 0.5), ("035", 0.35)):
    register_variants(f"mobilenetv2_{_tag}", functools.partial(_mobilenetv2, width=_width), f"MobileNetV2 x{_width}")
