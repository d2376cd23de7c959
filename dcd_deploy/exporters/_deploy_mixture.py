"""Deploy form of DY-Conv / CondConv: one stacked conv, then an attention-weighted sum.

``Σ_k π_k (W_k * x) = (W_1..W_K stacked * x) · π``: the K kernels become one Conv with
constant weights (output channel ``o·K + k``), and the per-sample mixture a MatMul of
the (B, C_out, K, N) stack with π, so any batch size works and no per-sample kernel
is ever built. A following BN scales every kernel's rows; its shift is added once.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..layers import MixtureConv2d, conv2d, explicit_pads, mode_pad, pair
from ..layers.condconv import CondConv2d
from ..layers.dyconv import DynamicConv2d
from ._fold import bn_affine
from ._padding import emit_mode_pad


class DeployMixture(nn.Module):
    """A DY-Conv or CondConv layer lowered to constant weights.

    Args:
        layer: the training-form layer, in eval mode.
        bn: the following BatchNorm (folded), or None.
    """

    def __init__(self, layer: MixtureConv2d, bn: nn.Module | None = None):
        super().__init__()
        k, c_out = layer.num_kernels, layer.out_channels
        s, t = bn_affine(bn, c_out)
        self.num_kernels, self.c_out = k, c_out
        self.stride, self.padding, self.groups = layer.stride, layer.padding, layer.groups
        self.kernel2 = kernel = tuple(layer.weight.shape[-2:])
        self.stride2, self.dilation2 = pair(layer.stride, "stride"), pair(layer.dilation, "dilation")
        # (top, left, bottom, right); a padding mode pads ahead of the convolution instead
        self.pads = explicit_pads(layer.conv_padding, kernel, self.dilation2)
        self.padding_mode, self.mode_pads = layer.padding_mode, layer.mode_pads
        self.source_type = type(layer).__name__
        w = layer.weight.detach() * s.view(1, -1, 1, 1, 1)  # (K, C_out, C_in/g, k, k)
        self.register_buffer("weight", w.transpose(0, 1).reshape(c_out * k, *w.shape[2:]))  # row o·K + k
        self.register_buffer(
            "kbias", (layer.bias.detach() * s).t().reshape(-1) if layer.bias is not None else None
        )  # (C_out·K,)
        self.register_buffer("bias", t)
        if isinstance(layer, DynamicConv2d):
            self.routing = "softmax"
            self.register_buffer("fc1_w", layer.fc1.weight.detach().clone())
            self.register_buffer("fc1_b", layer.fc1.bias.detach().clone())
            # softmax(z / τ): the temperature folds into the last FC
            self.register_buffer("fc2_w", layer.fc2.weight.detach() / layer.temperature)
            self.register_buffer("fc2_b", layer.fc2.bias.detach() / layer.temperature)
        elif isinstance(layer, CondConv2d):
            self.routing = "sigmoid"
            self.register_buffer("fc1_w", layer.route.weight.detach().clone())
            self.register_buffer("fc1_b", layer.route.bias.detach().clone())
            self.fc2_w = self.fc2_b = None
        else:
            raise TypeError(f"no deploy form for {type(layer).__name__}")

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        z = F.linear(y, self.fc1_w, self.fc1_b)
        if self.routing == "softmax":
            return torch.softmax(F.linear(torch.relu(z), self.fc2_w, self.fc2_b), dim=1)
        return torch.sigmoid(z)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        pi = self.attention(x)  # (B, K): from the input, not its padding
        stacked = conv2d(
            mode_pad(x, self.mode_pads, self.padding_mode),
            self.weight,
            self.kbias,
            self.stride2,
            self.pads,
            self.dilation2,
            self.groups,
        )  # (B, C_out·K, H', W')
        h, w = stacked.shape[-2:]
        out = torch.matmul(
            pi.view(b, 1, 1, self.num_kernels), stacked.view(b, self.c_out, self.num_kernels, h * w)
        )  # (B, C_out, 1, N)
        return out.view(b, self.c_out, h, w) + self.bias.view(1, -1, 1, 1)

    def extra_repr(self) -> str:
        return f"{self.source_type}, C_out={self.c_out}, K={self.num_kernels}"

    def emit(self, s, x: str, in_shape, out_shape) -> str:
        """Emit with standard ops (see :meth:`DeployDCD.emit` for the arguments)."""
        c_out, h, w = out_shape[1], out_shape[2], out_shape[3]
        hw = h * w if isinstance(h, int) and isinstance(w, int) else -1  # -1: symbolic sizes
        y = s.op("Flatten", [s.op("GlobalAveragePool", [x])], axis=1)  # (B, C_in); NCHWc-friendly
        z = s.op("Gemm", [y, s.const("fc1_w", self.fc1_w), s.const("fc1_b", self.fc1_b)], transB=1)
        if self.routing == "softmax":
            z = s.op("Gemm", [s.op("Relu", [z]), s.const("fc2_w", self.fc2_w), s.const("fc2_b", self.fc2_b)], transB=1)
            pi = s.op("Softmax", [z], axis=1)  # (B, K)
        else:
            pi = s.op("Sigmoid", [z])
        pi = s.op("Reshape", [pi, s.ints("pi_shape", [0, 1, 1, self.num_kernels])])  # (B, 1, 1, K)
        x, _ = emit_mode_pad(s, x, in_shape, self.mode_pads, self.padding_mode)
        inputs = [x, s.const("weight", self.weight)] + (
            [s.const("kbias", self.kbias)] if self.kbias is not None else []
        )
        stacked = s.op(
            "Conv",
            inputs,
            kernel_shape=list(self.weight.shape[-2:]),
            strides=list(self.stride2),
            pads=list(self.pads),
            group=self.groups,
            **({"dilations": list(self.dilation2)} if self.dilation2 != (1, 1) else {}),
        )  # (B, C_out·K, H', W')
        flat = s.op("Reshape", [stacked, s.ints("stack_shape", [0, c_out, self.num_kernels, hw])])
        out = s.op("MatMul", [pi, flat])  # (B, C_out, 1, N)
        out = s.op("Reshape", [out, s.nchw("out_shape", [0, c_out], h, w, stacked)])
        if bool(self.bias.abs().max() > 0):
            out = s.op("Add", [out, s.const("bias", self.bias.view(-1, 1, 1))])
        return out
