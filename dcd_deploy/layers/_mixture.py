"""Vanilla dynamic convolution: K kernels mixed by input attention (paper Eq. 1).

``W(x) = Σ_k π_k(x) W_k``. DY-Conv and CondConv differ only in how π is computed, so
they share this base and each supplies :meth:`routing`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ._geometry import explicit_pads, mode_pad, padding_mode_pads, pair, resolve_padding, square
from .common import require_rank


class MixtureConv2d(nn.Module):
    """Base of :class:`DynamicConv2d` and :class:`CondConv2d`.

    ``weight`` is (K, C_out, C_in / groups, k, k). Kernel size, stride, padding,
    dilation, groups and padding mode have ``nn.Conv2d``'s meaning (ints when square);
    padding None is ``dilation·(k // 2)``. A padding mode other than zeros pads the input
    ahead of the convolution; the routing pools the input itself.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride,
        padding,
        dilation,
        groups: int,
        num_kernels: int,
        bias: bool,
        padding_mode: str = "zeros",
    ):
        super().__init__()
        kernel, strides, dilations = (
            pair(v, n) for v, n in ((kernel_size, "kernel_size"), (stride, "stride"), (dilation, "dilation"))
        )
        if min(kernel + strides + dilations) < 1 or groups < 1:
            raise ValueError("kernel_size, stride, dilation and groups must be positive")
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"groups={groups} must divide in_channels={in_channels} and out_channels={out_channels}")
        padding = resolve_padding(padding, kernel, dilations)
        if padding == "same" and strides != (1, 1):
            raise ValueError("padding='same' is not supported for strided convolutions (as in nn.Conv2d)")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.groups = square(kernel), square(strides), groups
        self.padding, self.dilation = padding, square(dilations)
        self.padding_mode, self.mode_pads = padding_mode_pads(padding_mode, explicit_pads(padding, kernel, dilations))
        self.conv_padding = padding if self.mode_pads is None else (0, 0)  # the mode's pads come first
        self.num_kernels = num_kernels
        self.weight = nn.Parameter(torch.empty(num_kernels, out_channels, in_channels // groups, *kernel))
        self.bias = nn.Parameter(torch.zeros(num_kernels, out_channels)) if bias else None
        fan_out = kernel[0] * kernel[1] * out_channels // groups
        nn.init.normal_(self.weight, 0.0, math.sqrt(2.0 / fan_out))
        self.pool = nn.AdaptiveAvgPool2d(1)

    def __setstate__(self, state: dict) -> None:
        # A module pickled before dilation existed had dilation 1.
        super().__setstate__(state)
        self.__dict__.setdefault("dilation", 1)
        if "mode_pads" not in self.__dict__:  # before padding_mode: zeros
            self.padding_mode, self.mode_pads, self.conv_padding = "zeros", None, self.padding

    def routing(self, y: torch.Tensor) -> torch.Tensor:
        """π(x) as (B, K) from pooled features (B, C_in)."""
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        require_rank(self, x, 4, f"(batch, {self.in_channels}, H, W)")
        b, c, h, w = x.shape
        pi = self.routing(torch.flatten(self.pool(x), 1))  # (B, K): from the input, not its padding
        x = mode_pad(x, self.mode_pads, self.padding_mode)
        h, w = x.shape[-2:]
        weight = torch.matmul(pi, self.weight.view(self.num_kernels, -1))  # (B, C_out * C_in/g * k * k)
        weight = weight.view(b * self.out_channels, *self.weight.shape[2:])  # (B * C_out, C_in/g, k, k)
        out = F.conv2d(
            x.reshape(1, b * c, h, w),
            weight,
            None,
            self.stride,
            self.conv_padding,
            self.dilation,
            groups=b * self.groups,
        )  # (1, B * C_out, H', W')
        out = out.view(b, self.out_channels, out.shape[-2], out.shape[-1])  # (B, C_out, H', W')
        if self.bias is not None:
            out = out + torch.matmul(pi, self.bias).view(b, -1, 1, 1)
        return out

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, k={self.kernel_size}, s={self.stride}, "
            f"padding={self.padding}, dilation={self.dilation}, groups={self.groups}, K={self.num_kernels}"
            + (f", padding_mode={self.padding_mode}" if self.padding_mode != "zeros" else "")
        )
