"""Exact BatchNorm folding helpers (eval-mode BN is an affine map per channel)."""

from __future__ import annotations

import torch
from torch import nn

from ..layers import conv_like


def bn_affine(bn: nn.Module | None, channels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, shift) with ``bn(v) == scale * v + shift`` in eval mode; identity for None."""
    if bn is None:
        return torch.ones(channels), torch.zeros(channels)
    scale = bn.weight.detach() / torch.sqrt(bn.running_var + bn.eps)
    return scale, bn.bias.detach() - bn.running_mean * scale


def fold_conv_bn(conv: nn.Conv2d, bn: nn.Module | None) -> nn.Conv2d:
    """A new Conv2d computing ``bn(conv(x))`` (bias always present)."""
    scale, shift = bn_affine(bn, conv.out_channels)
    out = conv_like(conv, bias=True)
    with torch.no_grad():
        out.weight.copy_(conv.weight * scale.view(-1, 1, 1, 1))
        bias = conv.bias.detach() if conv.bias is not None else torch.zeros(conv.out_channels)
        out.bias.copy_(bias * scale + shift)
    return out.eval()


def fold_linear_bn(linear: nn.Linear, bn: nn.Module | None) -> nn.Linear:
    """A new Linear computing ``bn(linear(x))`` for a BatchNorm1d (or None)."""
    scale, shift = bn_affine(bn, linear.out_features)
    out = nn.Linear(linear.in_features, linear.out_features, bias=True)
    with torch.no_grad():
        out.weight.copy_(linear.weight * scale.view(-1, 1))
        bias = linear.bias.detach() if linear.bias is not None else torch.zeros(linear.out_features)
        out.bias.copy_(bias * scale + shift)
    return out.eval()
