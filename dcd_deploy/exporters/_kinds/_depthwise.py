"""k x k depthwise DCD (paper Eq. 7): ``W(x) = Λ W0 + P Φ(x) Rᵀ``, R squeezing kernel elements.

Fused (``DCDDepthwise``, docs/design.md#fused-op) in the weight form, the cheap one for a
depthwise layer: the per-sample kernel is C x k² values.
"""

from __future__ import annotations

import torch
from torch import nn

from ...layers import conv2d
from .._fused_contract import DEPTHWISE
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

    # -- the fused op (docs/design.md#fused-op) -------------------------------------------
    def why_not_fused(self, m: nn.Module) -> str | None:
        (kh, kw), (sh, sw), (dh, dw) = m.kernel2, m.stride2, m.dilation2
        if kh != kw:
            return f"depthwise {kh}x{kw} kernel"
        if sh != sw:
            return f"depthwise stride {sh}x{sw}"
        if dh != dw:
            return f"depthwise dilation {dh}x{dw}"
        if min(m.pads) < 0 or max(m.pads) > 64:  # the op's pads are ONNX Conv's, 0-64
            return f"depthwise padding {tuple(m.pads)}"
        if max(kh, sh, dh) > 64:
            return f"depthwise {kh}x{kh} kernel, stride {sh}, dilation {dh}"
        if not m.channel_fusion:
            return "depthwise without channel fusion"
        if m.pool_size not in (1, 2):
            return f"pool {m.pool_size}"
        return None

    def fused_op(self, m: nn.Module) -> str:
        """One DCDDepthwise node (weight form)."""
        return DEPTHWISE

    def fused_attrs(self, m: nn.Module) -> dict:
        """The node's geometry attributes (pads as ONNX Conv's: top, left, bottom, right)."""
        return dict(kernel=m.kernel2[0], stride=m.stride2[0], dilation=m.dilation2[0], pads=list(m.pads))

    def fused_constants(self, m: nn.Module) -> dict[str, torch.Tensor]:
        lk, kk = m.latent_dim, m.kernel2[0] * m.kernel2[1]
        return {
            "fc1": m.fc1,
            "gate": m.gate,
            "scale_w": m.scale_w,
            "phi_w": m.phi_w,  # (L², S)
            "phi_b": torch.zeros(lk * lk) if m.phi_b is None else m.phi_b,
            "p": m.p,  # (C, L)
            "w0": m.w0.reshape(m.c_out, kk),  # (C, k²)
            "bias": m.bias,
            "r": m.r[:lk].reshape(lk, kk),  # (L, k²): R, repeated per channel in the deploy form
        }
