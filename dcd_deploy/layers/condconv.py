"""CondConv (Yang et al., NeurIPS 2019): K = 8 experts, sigmoid routing (paper Eq. 1).

Routing: average pool, one FC (C -> K) with bias, sigmoid; the scores need not sum to 1.
"""

from __future__ import annotations

import torch
from torch import nn

from ._mixture import MixtureConv2d
from .common import place


class CondConv2d(MixtureConv2d):
    """CondConv layer.

    Args:
        in_channels: C_in.
        out_channels: C_out.
        kernel_size: k (an int or a pair).
        stride: stride (an int or a pair).
        padding: as in ``nn.Conv2d`` (int, pair, ``"same"``, ``"valid"``); None is
            ``dilation·(k // 2)``.
        dilation: an int or a pair.
        groups: convolution groups.
        num_kernels: K experts.
        bias: per-expert biases.
        padding_mode: ``nn.Conv2d``'s (zeros, reflect, replicate, circular).
        device: ``nn.Conv2d``'s factory argument: where the parameters are made.
        dtype: ``nn.Conv2d``'s factory argument: their floating-point type.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size=1,
        stride=1,
        padding=None,
        dilation=1,
        groups: int = 1,
        *,
        num_kernels: int = 8,
        bias: bool = False,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ):
        super().__init__(
            in_channels, out_channels, kernel_size, stride, padding, dilation, groups, num_kernels, bias, padding_mode
        )
        self.route = nn.Linear(in_channels, num_kernels)
        place(self, device, dtype)

    def routing(self, y: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.route(y))
