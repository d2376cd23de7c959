"""CondConv (Yang et al., NeurIPS 2019): K = 8 experts, sigmoid routing (paper Eq. 1).

Routing: average pool, one FC (C -> K) with bias, sigmoid; the scores need not sum to 1.
"""

from __future__ import annotations

import torch
from torch import nn

from ._mixture import MixtureConv2d


class CondConv2d(MixtureConv2d):
    """CondConv layer.

    Args:
        in_channels: C_in.
        out_channels: C_out.
        kernel_size: k (odd); padding ``k // 2``.
        stride: stride.
        groups: convolution groups.
        num_kernels: K experts.
        bias: per-expert biases.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 1, stride: int = 1,
                 groups: int = 1, *, num_kernels: int = 8, bias: bool = False):
        super().__init__(in_channels, out_channels, kernel_size, stride, groups, num_kernels, bias)
        self.route = nn.Linear(in_channels, num_kernels)

    def routing(self, y: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.route(y))
