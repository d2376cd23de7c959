"""The DCD classifier (Table 3b "CLS"): Eq. 5 at 1x1 resolution, ``Λ ⊙ (W0 x + b) + P Φ' Q x``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .._fold import bn_affine
from .._fused_contract import EPILOGUE
from ._base import DCDKind, dense_blocks, dense_phi


def _dense(mod: nn.Module) -> torch.Tensor:
    """Q or P as a matrix; block-diagonal (a grouped Conv1d) made dense."""
    return dense_blocks(mod.weight.detach(), 1 if isinstance(mod, nn.Linear) else mod.groups)


class Linear(DCDKind):
    """Gemm of W0 (its bias scaled by Λ), and the latent path as Gemms and one batched MatMul."""

    name = "linear"

    def geometry(self, layer: nn.Module) -> dict:
        return dict(
            c_out=layer.out_features,
            pool_size=0,
            stride=1,
            kernel_size=1,
            groups=1,
            kernel2=(1, 1),
            stride2=(1, 1),
            dilation2=(1, 1),
            pads=(0, 0, 0, 0),
            tap_pads=(0, 0, 0, 0),
        )

    def static_weights(self, layer: nn.Module):
        bias = layer.cls.bias.detach() if layer.cls.bias is not None else None
        return layer.cls.weight.detach(), bias, None

    def fold(self, m: nn.Module, layer: nn.Module, s: torch.Tensor, head_gain: float) -> torch.Tensor | None:
        lat, nb = layer.latent_dim, layer.num_blocks
        lb = lat // nb
        s1, t1 = bn_affine(layer.bn1, lat) if layer.bn1 is not None else (torch.ones(lat), torch.zeros(lat))
        q, p = _dense(layer.cls_q), _dense(layer.cls_p)  # (L, C_in), (C_out, L)
        phi_w, phi_b, extra = layer.fc_phi.weight.detach() * head_gain, torch.zeros(nb, lb, lb), None
        if layer.bn2 is not None:  # Φ' = diag(s2) Φ + I, t2 through P into the bias
            s2, t2 = bn_affine(layer.bn2, lat)
            phi_w = (phi_w.view(nb, lb, lb, -1) * s2.view(nb, lb, 1, 1)).reshape(phi_w.shape)
            phi_b = phi_b + torch.eye(lb)
            extra = s * (p @ t2)
        m.register_buffer("q", q * s1.view(-1, 1))
        m.register_buffer("q_b", t1)
        m.register_buffer("p", p * s.view(-1, 1))
        m.register_buffer("phi_b", phi_b.reshape(-1))
        m.register_buffer("phi_w", phi_w)
        return extra

    def pooled(self, m: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return x

    def emit_pooled(self, m: nn.Module, s, x: str, in_shape) -> tuple[str, torch.Tensor]:
        return x, m.fc1

    def forward(self, m: nn.Module, x: torch.Tensor, y: torch.Tensor, lam: torch.Tensor | None) -> torch.Tensor:
        b = x.shape[0]
        out = F.linear(x, m.w0, m.b0)  # (B, C_out)
        if lam is not None:
            out = out * lam
        if m.channel_fusion:
            nb, lb = m.num_blocks, m.latent_dim // m.num_blocks
            z = F.linear(x, m.q, m.q_b).view(b, nb, lb, 1)  # (B, nb, Lb, 1)
            phi = F.linear(y, m.phi_w, m.phi_b).view(b, nb, lb, lb)  # (B, nb, Lb, Lb)
            u = torch.matmul(phi, z).view(b, m.latent_dim)  # (B, L)
            out = out + F.linear(u, m.p)
        return out + m.bias

    def emit(self, m: nn.Module, s, x: str, y: str, lam: str | None, in_shape, out_shape) -> str:
        inputs = [x, s.const("w0", m.w0)] + ([s.const("b0", m.b0)] if m.b0 is not None else [])
        out = s.op("Gemm", inputs, transB=1)  # (B, C_out)
        if lam is not None:
            out = s.op("Mul", [out, lam])
        if m.channel_fusion:
            nb, lb = m.num_blocks, m.latent_dim // m.num_blocks
            z = s.op("Gemm", [x, s.const("q", m.q), s.const("q_b", m.q_b)], transB=1)  # (B, L)
            z = s.op("Reshape", [z, s.ints("z_shape", [0, nb, lb, 1])])  # (B, nb, Lb, 1)
            phi = s.op("Reshape", [m.emit_phi(s, y), s.ints("phi_shape", [0, nb, lb, lb])])  # (B, nb, Lb, Lb)
            u = s.op("MatMul", [phi, z])  # (B, nb, Lb, 1)
            u = s.op("Flatten", [u], axis=1)  # (B, L)
            out = s.op("Add", [s.op("Gemm", [u, s.const("p", m.p), s.const("bias", m.bias)], transB=1), out])
        elif bool(m.bias.abs().max() > 0):
            out = s.op("Add", [out, s.const("bias", m.bias)])
        return out

    def emit_static(self, m: nn.Module, s, x: str) -> str:
        bias = m.bias + (m.b0 if m.b0 is not None else 0.0)
        return s.op("Gemm", [x, s.const("w0", m.w0), s.const("bias", bias)], transB=1)

    def madds(self, layer: nn.Module, n_in: int, n_out: int) -> tuple[int, int]:
        """Latent only: at 1x1 resolution forming ``W(x)`` always costs more than applying it."""
        cin, cout, lat = layer.in_features, layer.out_features, layer.latent_dim
        total = cin * cout
        if layer.channel_attention:
            total += cout
        if layer.channel_fusion:
            total += (cin * lat + lat * lat + lat * cout) // layer.num_blocks
        return total, total

    # -- the fused op (docs/design.md#fused-op) -------------------------------------------
    def why_not_fused(self, m: nn.Module) -> str | None:
        return None if m.channel_fusion else "no channel fusion"

    def fused_op(self, m: nn.Module) -> str:
        """The runtime's Gemm of W0 (+ b0), then DCDConvEpilogue at 1x1 spatial size."""
        return EPILOGUE

    def fused_constants(self, m: nn.Module) -> dict[str, torch.Tensor]:
        phi_w, phi_b = dense_phi(m.phi_w, m.phi_b, blocks=m.num_blocks, latent=m.latent_dim)
        return {
            "fc1": m.fc1,  # (S, C_in): the "pool" of a 1x1 map is x itself
            "gate": m.gate,
            "scale_w": m.scale_w,
            "phi_w": phi_w,
            "phi_b": phi_b,
            "q": m.q,  # (L, C_in), dense
            "q_b": m.q_b,
            "p": m.p,  # (C_out, L), dense
            "bias": m.bias,
        }
