"""The conv layer injected into every model family.

A model class asks :class:`LayerSpec` for each convolution by *role*; the spec decides
whether that position is static, DCD, DY-Conv or CondConv. Roles:

======  ==============================================================
pw      pointwise 1x1 of a MobileNetV2 expansion block (expand, project)
dw      depthwise k x k of a MobileNetV2 block
head    the 1x1 head conv before pooling (MobileNetV2)
conv    any conv inside a ResNet block (1x1 or 3x3)
cls     the classifier
======  ==============================================================

``style="release"`` reproduces the authors' published layers (docs/design.md#release-format:
their latent dims, squeeze widths, 2x2 pools, SE gate and latent BNs), so state dicts
line up; ``style="paper"`` is the plain form of Section 3 (global pool, FC/r, ReLU).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

from ..layers import CondConv2d, DCDConv2d, DCDLinear, DynamicConv2d

KINDS = ("static", "dcd", "dyconv", "condconv")

# Release constants (docs/design.md#release-format); legend:
#   MBV2_EXPAND_*: DYModule with inp < oup (pool 2x2, features x4, red starts at 8)
#   MBV2_REDUCE_*: DYModule with inp >= oup (global pool, red starts at 2)
#   CLS_DIM / CLS_SQUEEZE: DYCls latent dim and squeeze width
#   RESNET_SQUEEZE: fc_squeeze of every ResNet DCD layer
MBV2_EXPAND_POOL, MBV2_EXPAND_RED = 2, 8
MBV2_REDUCE_POOL, MBV2_REDUCE_RED = 1, 2
MIN_LATENT = 4
CLS_DIM = CLS_SQUEEZE = 32
RESNET_SQUEEZE = 16
MIN_SQUEEZE = 4


@dataclass(frozen=True)
class LayerSpec:
    """Which positions are dynamic, and how.

    Args:
        kind: ``static``, ``dcd``, ``dyconv`` or ``condconv``.
        roles: roles made dynamic (see module docstring); others stay static.
        style: DCD ``release`` (authors' layers) or ``paper`` (Section 3 form).
        fc_squeeze: the release's squeeze divisor (16 for x1.0 / ResNet, 8 smaller); the
            paper form's reduction r.
        channel_attention: Λ on (Table 1).
        channel_fusion: Φ on (Table 1).
        latent_mult: multiplier on the default latent dim L (Table 2).
        num_blocks: B diagonal blocks of the dynamic residual (Table 3a).
        joint_fusion: Eq. 8 for k x k layers instead of channel fusion alone.
        num_kernels: K of DY-Conv (4) / CondConv (8); None for the default.
    """

    kind: str = "static"
    roles: frozenset = field(default_factory=frozenset)
    style: str = "release"
    fc_squeeze: int = 16
    channel_attention: bool = True
    channel_fusion: bool = True
    latent_mult: float = 1.0
    num_blocks: int = 1
    joint_fusion: bool = False
    num_kernels: int | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {self.kind!r}")
        if self.style not in ("release", "paper"):
            raise ValueError("style must be 'release' or 'paper'")
        if not 0 < self.latent_mult <= 1.0:
            raise ValueError("latent_mult must be in (0, 1]")
        object.__setattr__(self, "roles", frozenset(self.roles))

    def is_dynamic(self, role: str) -> bool:
        if self.kind == "dcd" and not (self.channel_attention or self.channel_fusion):
            return False  # Table 1's W0 row: nothing dynamic is left
        return self.kind != "static" and role in self.roles

    # -- convolutions -------------------------------------------------------------
    def conv(
        self,
        role: str,
        in_ch: int,
        out_ch: int,
        kernel_size: int = 1,
        stride: int = 1,
        groups: int = 1,
        *,
        family: str = "mbv2",
    ) -> nn.Module:
        """A conv for ``role``; ``family`` picks the release's formulas (mbv2, basic, bottleneck)."""
        if not self.is_dynamic(role):
            return nn.Conv2d(in_ch, out_ch, kernel_size, stride, kernel_size // 2, groups=groups, bias=False)
        if self.kind == "dyconv":
            return DynamicConv2d(in_ch, out_ch, kernel_size, stride, groups=groups, num_kernels=self.num_kernels or 4)
        if self.kind == "condconv":
            return CondConv2d(in_ch, out_ch, kernel_size, stride, groups=groups, num_kernels=self.num_kernels or 8)
        kw = dict(channel_attention=self.channel_attention, channel_fusion=self.channel_fusion)
        if groups > 1:  # depthwise (Eq. 7): no release variant exists
            # The release's branch for a C -> C layer: global pool, squeeze C / fc_squeeze
            # and its SE gate (the paper style keeps the plain ReLU branch).
            lk = self._mult(max(1, kernel_size * kernel_size // 2))
            gate = "relu" if self.style == "paper" else "se"
            return DCDConv2d(
                in_ch,
                out_ch,
                kernel_size,
                stride,
                groups=groups,
                latent_dim=lk,
                reduction=self.fc_squeeze,
                gate=gate,
                **kw,
            )
        if self.style == "paper" or self.joint_fusion:
            from ..layers import default_latent_dim

            b = self.num_blocks
            lat = None if self.joint_fusion else b * self._mult(default_latent_dim(min(in_ch, out_ch) // b))
            return DCDConv2d(
                in_ch,
                out_ch,
                kernel_size,
                stride,
                latent_dim=lat,
                reduction=self.fc_squeeze,
                num_blocks=1 if self.joint_fusion else self.num_blocks,
                joint_fusion=self.joint_fusion,
                **kw,
            )
        pool, dim, squeeze = self._release_dims(family, in_ch, out_ch)
        return DCDConv2d(
            in_ch,
            out_ch,
            kernel_size,
            stride,
            latent_dim=dim,
            squeeze=squeeze,
            num_blocks=self.num_blocks,
            pool_size=pool,
            gate="se",
            latent_bn=True,
            **kw,
        )

    def _mult(self, dim: int) -> int:
        return max(1, int(round(dim * self.latent_mult)))

    def _release_dims(self, family: str, inp: int, oup: int) -> tuple[int, int, int]:
        """(pool, latent dim, squeeze) of the release's layer, with ``latent_mult``, B and Φ.

        With B diagonal blocks (Eq. 6) each block gets the latent dim the release gives a
        C_in/B -> C_out/B layer (this reproduces Table 3a's parameter counts within 2%);
        the dynamic branch keeps the full layer's squeeze width.
        """
        pool, dim, squeeze = release_dims(family, inp, oup, self.fc_squeeze)
        if not self.channel_fusion:
            # Λ alone is channel attention, pooled globally like SE and DY-Conv; the 2x2
            # pool only feeds Φ. Table 1's ΛW0 rows fit this (ResNet-18: 11.84M against
            # 11.7M; with the 2x2 pool 12.69M).
            pool = 1
        b = self.num_blocks
        if b > 1:
            dim = release_dims(family, inp // b, oup // b, self.fc_squeeze)[1]
        return pool, b * self._mult(dim), squeeze

    # -- classifier ---------------------------------------------------------------
    def classifier(self, in_f: int, out_f: int) -> nn.Module:
        if not self.is_dynamic("cls"):
            return nn.Linear(in_f, out_f)
        if self.kind == "condconv":
            return PointwiseClassifier(CondConv2d(in_f, out_f, 1, num_kernels=self.num_kernels or 8, bias=True))
        if self.kind == "dyconv":
            return PointwiseClassifier(DynamicConv2d(in_f, out_f, 1, num_kernels=self.num_kernels or 4, bias=True))
        kw = dict(
            channel_attention=self.channel_attention, channel_fusion=self.channel_fusion, num_blocks=self.num_blocks
        )
        if self.style == "paper":
            from ..layers import default_latent_dim

            b = self.num_blocks
            return DCDLinear(
                in_f,
                out_f,
                latent_dim=b * self._mult(default_latent_dim(min(in_f, out_f) // b)),
                reduction=self.fc_squeeze,
                **kw,
            )
        b = self.num_blocks
        return DCDLinear(
            in_f, out_f, latent_dim=b * self._mult(CLS_DIM // b), squeeze=CLS_SQUEEZE, gate="se", latent_bn=True, **kw
        )


class PointwiseClassifier(nn.Module):
    """A dynamic 1x1 conv used as a classifier on (B, C) features."""

    def __init__(self, conv: nn.Module):
        super().__init__()
        self.conv = conv

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.conv(x.unsqueeze(-1).unsqueeze(-1)), 1)


def make_spec(kind: str, *, default_roles: tuple[str, ...], roles=None, **knobs) -> LayerSpec:
    """A :class:`LayerSpec` for a zoo entry; ``roles=None`` takes the family default."""
    return LayerSpec(kind=kind, roles=frozenset(default_roles if roles is None else roles), **knobs)


def release_dims(family: str, inp: int, oup: int, fc_squeeze: int) -> tuple[int, int, int]:
    """(pool, latent dim, squeeze) of the authors' DYModule / conv_basic_dy / conv_dy.

    Args:
        family: ``mbv2`` (DYModule), ``basic`` (conv_basic_dy) or ``bottleneck`` (conv_dy).
        inp: input channels.
        oup: output channels.
        fc_squeeze: the release's squeeze divisor (MobileNetV2 only; ResNets use 16).
    """
    if family == "mbv2":
        if inp < oup:
            pool, mul, red = MBV2_EXPAND_POOL, 4, MBV2_EXPAND_RED
        else:
            pool, mul, red = MBV2_REDUCE_POOL, 1, MBV2_REDUCE_RED
        dim = min(inp * mul // red, oup // red)
        while dim * dim > inp * mul * 2:
            red *= 2
            dim = min(inp * mul // red, oup // red)
        dim = max(dim, MIN_LATENT)
        return pool, dim, max(max(inp * mul, dim * dim) // fc_squeeze, MIN_SQUEEZE)
    if family == "basic":
        dim = int(math.sqrt(inp * 4))
        return 2, dim, max(max(inp * 4, dim * dim) // RESNET_SQUEEZE, MIN_SQUEEZE)
    if family == "bottleneck":
        dim = int(math.sqrt(inp))
        return 1, dim, max(inp, dim * dim) // RESNET_SQUEEZE  # the release applies no floor here
    raise ValueError(f"unknown family {family!r}")
