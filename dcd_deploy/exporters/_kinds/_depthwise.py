"""k x k depthwise DCD (paper Eq. 7): ``W(x) = Λ W0 + P Φ(x) Rᵀ``, R squeezing kernel elements."""

from __future__ import annotations

import torch
from torch import nn

from ...layers import conv2d
from ._base import ConvKind


class Depthwise(ConvKind):
    """Per channel c: ``Σ_l (P Φ)[c, l] (R_l * x_c)``; L_k latent kernel elements."""

    name = "depthwise"

    def fold(self, m: nn.Module, layer: nn.Module, s: torch.Tensor, head_gain: float) -> None:
        m.register_buffer("r", layer.kernel_r.detach().repeat(layer.in_channels, 1, 1, 1))  # (C·L_k, 1, k, k)
        m.register_buffer("p", layer.weight_p.detach() * s.view(-1, 1))  # (C, L_k)
        m.register_buffer("phi_w", layer.fc_phi.weight.detach() * head_gain)
        return None

    def residual(self, m: nn.Module, x: torch.Tensor, phi: torch.Tensor, h: int, w: int) -> torch.Tensor:
        b, c, lk = x.shape[0], m.c_out, m.latent_dim
        z = conv2d(x, m.r, None, m.stride2, m.pads, m.dilation2, c)  # (B, C·L_k, H', W')
        pm = torch.matmul(m.p, phi.view(b, lk, lk))  # (B, C, L_k)
        dyn = torch.matmul(pm.view(b, c, 1, lk), z.view(b, c, lk, h * w))  # (B, C, 1, N)
        return dyn.view(b, c, h, w)

    def emit_residual(self, m: nn.Module, s, x: str, phi: str, out: str, has_bias: bool, out_shape) -> str:
        c_out, h, w = out_shape[1], out_shape[2], out_shape[3]
        hw = h * w if isinstance(h, int) and isinstance(w, int) else -1  # -1: symbolic sizes
        lk = m.latent_dim
        z = s.op("Conv", [x, s.const("r", m.r)], group=c_out, **self.conv_attrs(m))  # (B, C·L_k, H', W')
        z = s.op("Reshape", [z, s.ints("z_shape", [0, c_out, lk, hw])])  # (B, C, L_k, N)
        phi = s.op("Reshape", [phi, s.ints("phi_shape", [0, lk, lk])])  # (B, L_k, L_k)
        pm = s.op("MatMul", [s.const("p", m.p), phi])  # (B, C, L_k)
        pm = s.op("Unsqueeze", [pm, s.ints("axes2", [2])])  # (B, C, 1, L_k)
        dyn = s.op("MatMul", [pm, z])  # (B, C, 1, N)
        dyn = s.op("Reshape", [dyn, s.nchw("out_shape", [0, c_out], h, w, out)])
        return self.add_residual(m, s, dyn, out, has_bias)

    def residual_madds(self, layer: nn.Module, n_in: int, n_out: int, kk: int) -> tuple[int, int]:
        cin, lat = layer.in_channels, layer.latent_dim
        latent = (cin * lat * kk + cin * lat * lat + cin * lat) * n_out  # R conv, Φ, P
        weight = cin * lat * lat + cin * lat * kk  # PΦ, (PΦ)Rᵀ
        return latent, weight

    def why_not_fused(self, m: nn.Module) -> str:
        return "depthwise"
