"""k x k joint fusion (paper Eq. 8): ``W0 ×₂ Λ + Φ ×₁ Q ×₂ P ×₃ R`` with Φ L x L x L_k."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...layers import conv2d
from ._base import ConvKind


class Joint(ConvKind):
    """Q (1x1) to L channels, R's L_k kernel elements per channel, Φ mixes both, P (1x1) out."""

    name = "joint"

    def fold(self, m: nn.Module, layer: nn.Module, s: torch.Tensor, head_gain: float) -> None:
        m.register_buffer("q", layer.conv_q.weight.detach().clone())  # (L, C_in, 1, 1)
        m.register_buffer("r", layer.kernel_r.detach().repeat(layer.latent_dim, 1, 1, 1))  # (L·L_k, 1, k, k)
        m.register_buffer("p", layer.conv_p.weight.detach() * s.view(-1, 1, 1, 1))  # (C_out, L, 1, 1)
        m.register_buffer("phi_w", layer.fc_phi.weight.detach() * head_gain)
        m.kernel_latent_dim = layer.form.kernel_latent_dim
        return None

    def residual(self, m: nn.Module, x: torch.Tensor, phi: torch.Tensor, h: int, w: int) -> torch.Tensor:
        b, lat, lk = x.shape[0], m.latent_dim, m.kernel_latent_dim
        z = conv2d(F.conv2d(x, m.q), m.r, None, m.stride2, m.pads, m.dilation2, lat)  # (B, L·L_k, H', W')
        u = torch.matmul(phi.view(b, lat, lat * lk), z.view(b, lat * lk, h * w))  # (B, L, N)
        return F.conv2d(u.view(b, lat, h, w), m.p)

    def emit_residual(self, m: nn.Module, s, x: str, phi: str, out: str, has_bias: bool, out_shape) -> str:
        h, w = out_shape[2], out_shape[3]
        hw = h * w if isinstance(h, int) and isinstance(w, int) else -1  # -1: symbolic sizes
        lat, lk = m.latent_dim, m.kernel_latent_dim
        z = s.op("Conv", [x, s.const("q", m.q)], kernel_shape=[1, 1])  # (B, L, H, W)
        z = s.op("Conv", [z, s.const("r", m.r)], group=lat, **self.conv_attrs(m))  # (B, L·L_k, H', W')
        z = s.op("Reshape", [z, s.ints("z_shape", [0, lat * lk, hw])])  # (B, L·L_k, N)
        phi = s.op("Reshape", [phi, s.ints("phi_shape", [0, lat, lat * lk])])  # (B, L, L·L_k)
        u = s.op("MatMul", [phi, z])  # (B, L, N)
        u = s.op("Reshape", [u, s.nchw("u_shape", [0, lat], h, w, out)])
        dyn = s.op("Conv", [u, s.const("p", m.p)], kernel_shape=[1, 1])
        return self.add_residual(m, s, dyn, out, has_bias)

    def residual_madds(self, layer: nn.Module, n_in: int, n_out: int, kk: int) -> tuple[int, int]:
        cin, cout, lat, lk = layer.in_channels, layer.out_channels, layer.latent_dim, layer.form.kernel_latent_dim
        latent = cin * lat * n_in + (lat * lk * kk + lat * lat * lk + lat * cout) * n_out  # Q, R, Φ, P
        weight = lat * lat * lk * kk + cout * lat * lat * kk + cout * lat * cin * kk  # Φ×R, ×P, ×Q
        return latent, weight

    def why_not_fused(self, m: nn.Module) -> str:
        return "joint fusion"
