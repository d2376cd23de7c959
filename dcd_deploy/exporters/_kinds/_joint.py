"""k x k joint fusion (paper Eq. 8): ``W0 ×₂ Λ + Φ ×₁ Q ×₂ P ×₃ R`` with Φ L x L x L_k.

In the fused mode the layer is fused around the runtime's convolutions: the graph keeps
``W0 * x`` and the latent ``z = R(Q x)`` (L·L_k channels at the output's resolution) as
standard Convs, and one ``DCDConvEpilogue`` node with ``latent_input = 1`` adds
``Λ ⊙ conv + P Φ'(x) z + bias`` (docs/design.md#fused-op).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...layers import conv2d
from .._fused_contract import EPILOGUE
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
        z = self.emit_latent(m, s, x)  # (B, L·L_k, H', W')
        z = s.op("Reshape", [z, s.ints("z_shape", [0, lat * lk, hw])])  # (B, L·L_k, N)
        phi = s.op("Reshape", [phi, s.ints("phi_shape", [0, lat, lat * lk])])  # (B, L, L·L_k)
        u = s.op("MatMul", [phi, z])  # (B, L, N)
        u = s.op("Reshape", [u, s.nchw("u_shape", [0, lat], h, w, out)])
        dyn = s.op("Conv", [u, s.const("p", m.p)], kernel_shape=[1, 1])
        return self.add_residual(m, s, dyn, out, has_bias)

    def emit_latent(self, m: nn.Module, s, x: str) -> str:
        """``z = R(Q x)`` (B, L·L_k, H', W'): Q's 1x1 conv, then each latent channel's L_k
        kernel elements as a grouped conv with the layer's geometry."""
        z = s.op("Conv", [x, s.const("q", m.q)], kernel_shape=[1, 1])  # (B, L, H, W)
        return s.op("Conv", [z, s.const("r", m.r)], group=m.latent_dim, **self.conv_attrs(m))

    def residual_madds(self, layer: nn.Module, n_in: int, n_out: int, kk: int) -> tuple[int, int]:
        cin, cout, lat, lk = layer.in_channels, layer.out_channels, layer.latent_dim, layer.form.kernel_latent_dim
        latent = cin * lat * n_in + (lat * lk * kk + lat * lat * lk + lat * cout) * n_out  # Q, R, Φ, P
        weight = lat * lat * lk * kk + cout * lat * lat * kk + cout * lat * cin * kk  # Φ×R, ×P, ×Q
        return latent, weight

    # -- the fused op (docs/design.md#fused-op) -------------------------------------------
    def why_not_fused(self, m: nn.Module) -> str | None:
        # any geometry: W0 and z are the graph's own Convs, the node reads them pixel by pixel
        if not m.channel_fusion:
            return "no channel fusion"
        if m.pool_size not in (1, 2):
            return f"pool {m.pool_size}"
        return None

    def fused_op(self, m: nn.Module) -> str:
        """The runtime's Convs of W0 and of z, then DCDConvEpilogue (``latent_input = 1``)."""
        return EPILOGUE

    def fused_attrs(self, m: nn.Module) -> dict[str, int]:
        return {"latent_input": 1}

    def emit_fused_latent(self, m: nn.Module, s, x: str) -> str:
        return self.emit_latent(m, s, x)

    def fused_constants(self, m: nn.Module) -> dict[str, torch.Tensor]:
        return {
            "fc1": m.fc1,
            "gate": m.gate,
            "scale_w": m.scale_w,
            "phi_w": m.phi_w,  # (L·L·L_k, S): Φ' (L x L·L_k) row-major
            "phi_b": torch.zeros(m.phi_w.shape[0], dtype=m.phi_w.dtype),  # no latent BN here
            "p": m.p.flatten(1),  # (C_out, L)
            "bias": m.bias,
        }
