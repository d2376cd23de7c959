"""DY-Conv (Chen et al., CVPR 2020): K = 4 kernels, softmax attention (paper Eq. 1).

Attention: average pool, FC (C -> C/r), ReLU, FC (-> K), softmax(z / τ). Training
anneals τ from 30 to 1; a trained model runs with the final temperature.
"""

from __future__ import annotations

import torch
from torch import nn

from ._mixture import MixtureConv2d
from .common import place

#: Smallest hidden width of the attention MLP.
MIN_HIDDEN = 4


class DynamicConv2d(MixtureConv2d):
    """DY-Conv layer.

    Args:
        in_channels: C_in.
        out_channels: C_out.
        kernel_size: k (an int or a pair).
        stride: stride (an int or a pair).
        padding: as in ``nn.Conv2d`` (int, pair, ``"same"``, ``"valid"``); None is
            ``dilation·(k // 2)``.
        dilation: an int or a pair.
        groups: convolution groups (depthwise when equal to the channels).
        num_kernels: K.
        reduction: r of the attention MLP.
        temperature: τ of the softmax.
        bias: per-kernel biases.
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
        num_kernels: int = 4,
        reduction: int = 4,
        temperature: float = 1.0,
        bias: bool = False,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ):
        super().__init__(
            in_channels, out_channels, kernel_size, stride, padding, dilation, groups, num_kernels, bias, padding_mode
        )
        hidden = max(in_channels // reduction, MIN_HIDDEN)
        self.temperature = float(temperature)
        self.fc1 = nn.Linear(in_channels, hidden)
        self.fc2 = nn.Linear(hidden, num_kernels)
        place(self, device, dtype)

    def routing(self, y: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.fc2(torch.relu(self.fc1(y))) / self.temperature, dim=1)
