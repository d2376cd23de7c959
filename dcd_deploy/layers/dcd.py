"""Dynamic Convolution Decomposition layers (paper Eq. 5-8).

One layer, ``DCDConv2d``, covers every form in the paper:

* 1x1, general form (Eq. 5): ``W(x) = Λ(x) W0 + P Φ(x) Qᵀ``;
* sparse dynamic residual (Eq. 6): ``Φ`` block-diagonal with ``num_blocks`` blocks,
  each ``P_b Φ_b Q_bᵀ`` (Q and P become grouped 1x1 convolutions);
* k x k depthwise (Eq. 7): ``W(x) = Λ(x) W0 + P Φ(x) Rᵀ`` with ``R`` (k² x L_k)
  squeezing kernel elements, ``L_k = floor(k²/2)``;
* k x k by channel fusion alone (Section 4.3): a 1x1 dynamic residual at the centre
  tap, with the convolution's stride;
* k x k joint fusion (Eq. 8): ``W0 ×₂ Λ + Φ ×₁ Q ×₂ P ×₃ R`` with ``Φ`` L x L x L_k.

``DCDLinear`` is the classifier form: the 1x1 case at 1x1 resolution.

The authors' released variant (docs/design.md#release-format) is the same layer configured with
``gate="se"``, ``latent_bn=True`` (``z = bn1(Qᵀx)``, ``v = bn2(Φ z) + z``) and, for
MobileNetV2 expansions and ResNet basic blocks, ``pool_size=2``; the parameter names
(``conv``, ``conv_q``, ``conv_p``, ``bn1``, ``bn2``, ``fc.0``, ``fc.1.fc.0``,
``fc_phi``, ``fc_scale``; ``cls*`` in the classifier) are theirs, so their state dicts
load as they are.

The forward pass is the training form, the latent path as the authors execute it;
:mod:`dcd_deploy.exporters` lowers it for deployment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .common import hsig, make_gate

#: Smallest width of the squeeze FC, as in the authors' code.
MIN_SQUEEZE = 4


def default_latent_dim(channels: int) -> int:
    """The paper's default L: halve C until it is below sqrt(C) (Section 3.2).

    ``L = floor(C / 2^floor(log2 sqrt C))``.
    """
    if channels < 1:
        raise ValueError("channels must be positive")
    return max(1, channels // (2 ** int(math.floor(math.log2(math.sqrt(channels))))))


def default_kernel_latent_dim(kernel_size: int) -> int:
    """The paper's default L_k = floor(k²/2) latent kernel elements (Eq. 7, 8)."""
    return max(1, kernel_size * kernel_size // 2)


def _require_dynamic(channel_attention: bool, channel_fusion: bool) -> None:
    if not (channel_attention or channel_fusion):
        raise ValueError("with Λ and Φ both off a DCD layer is static: use nn.Conv2d / nn.Linear")


@dataclass(frozen=True)
class DCDForm:
    """Which of the paper's forms a layer takes (derived from its arguments)."""

    depthwise: bool  # Eq. 7: groups == in == out and k > 1
    joint: bool  # Eq. 8: k > 1, joint channel and kernel-element fusion
    latent_dim: int  # L (or L_k for depthwise)
    kernel_latent_dim: int  # L_k for Eq. 8; 1 otherwise


class _DCDBase(nn.Module):
    """Dynamic branch and latent fusion shared by ``DCDConv2d`` and ``DCDLinear``.

    The branch maps pooled features ``y`` to ``Λ`` (via ``fc_scale``) and ``Φ`` (via
    ``fc_phi``); the paper's second FC with ``C + L²`` outputs is split into those two
    heads so each keeps its own name.
    """

    def _build_branch(
        self, *, in_features: int, out_channels: int, phi_numel: int, squeeze: int,
        gate: str, channel_attention: bool, channel_fusion: bool,
    ) -> None:
        self.fc = nn.Sequential(nn.Linear(in_features, squeeze, bias=False), make_gate(gate, squeeze))
        self.fc_phi = nn.Linear(squeeze, phi_numel, bias=False) if channel_fusion else None
        self.fc_scale = nn.Linear(squeeze, out_channels, bias=False) if channel_attention else None

    def zero_dynamic_heads(self) -> None:
        """Start as a static layer: Φ = 0 and Λ = hsig(0) = 1 until trained.

        With random heads an untrained deep net overflows in eval mode (the per-sample
        terms compound through BN running statistics); zero heads keep it finite.
        """
        for head in (self.fc_phi, self.fc_scale):
            if head is not None:
                nn.init.zeros_(head.weight)

    def attention(self, y: torch.Tensor) -> torch.Tensor | None:
        """Λ(x) as a (B, C_out) tensor, or None when channel attention is off."""
        return None if self.fc_scale is None else hsig(self.fc_scale(y))

    def _fuse_latent(self, phi_flat: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """Apply block-diagonal Φ (and the release's bn2 + identity) to latent z.

        Args:
            phi_flat: (B, nb * Lb * Lb) raw ``fc_phi`` output.
            z: (B, L, N) latent features, L = nb * Lb.
        """
        b, latent, n = z.shape
        nb = self.num_blocks
        lb = latent // nb
        phi = phi_flat.view(b, nb, lb, lb)  # (B, nb, Lb, Lb)
        u = torch.matmul(phi, z.view(b, nb, lb, n)).view(b, latent, n)  # (B, L, N)
        if self.bn2 is not None:
            u = self.bn2(u) + z
        return u


class DCDConv2d(_DCDBase):
    """A DCD convolution (paper Eq. 5-8; the form follows from the arguments).

    Args:
        in_channels: C_in.
        out_channels: C_out.
        kernel_size: k (odd); padding is ``k // 2``.
        stride: convolution stride; the 1x1 residual of a k x k layer uses it too.
        groups: 1 (dense) or ``in_channels == out_channels`` (depthwise, Eq. 7).
        latent_dim: L (L_k for depthwise). Default: the paper's (Section 3.2, 4.2, 4.3).
        reduction: r, the first FC's reduction of its input features.
        squeeze: width of the first FC; overrides ``reduction``.
        num_blocks: B diagonal blocks of the dynamic residual (Eq. 6); must divide
            C_in, C_out and L.
        channel_attention: use Λ(x); off gives ``W0 + PΦQᵀ``.
        channel_fusion: use PΦQᵀ; off gives ``ΛW0``.
        joint_fusion: for k > 1, the tensor form of Eq. 8 instead of channel fusion alone.
        kernel_latent_dim: L_k for ``joint_fusion`` (default ``floor(k²/2)``).
        pool_size: 1 (global average) or 2 (2x2 adaptive, flattened channel-major).
        gate: activation between the FCs, ``"relu"`` (paper) or ``"se"`` (release).
        latent_bn: the release's ``bn1``/``bn2`` and identity in the latent path.
    """

    def __init__(
        self, in_channels: int, out_channels: int, kernel_size: int = 1, stride: int = 1,
        groups: int = 1, *, latent_dim: int | None = None, reduction: int = 16,
        squeeze: int | None = None, num_blocks: int = 1, channel_attention: bool = True,
        channel_fusion: bool = True, joint_fusion: bool = False,
        kernel_latent_dim: int | None = None, pool_size: int = 1, gate: str = "relu",
        latent_bn: bool = False,
    ):
        super().__init__()
        if kernel_size % 2 == 0:
            raise ValueError("DCDConv2d needs an odd kernel_size (the residual sits at the centre tap)")
        if pool_size not in (1, 2):
            raise ValueError("pool_size must be 1 or 2")
        depthwise = groups > 1
        if depthwise and not (groups == in_channels == out_channels):
            raise ValueError("grouped DCD is supported only as depthwise (groups == in == out)")
        if depthwise and kernel_size == 1:
            raise ValueError("a depthwise DCD layer needs kernel_size > 1")
        joint = joint_fusion and kernel_size > 1 and not depthwise
        if (depthwise or joint) and (num_blocks != 1 or latent_bn):
            raise ValueError("num_blocks and latent_bn apply to channel fusion only")
        if in_channels % num_blocks or out_channels % num_blocks:
            raise ValueError(f"num_blocks={num_blocks} must divide in and out channels")
        _require_dynamic(channel_attention, channel_fusion)

        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.groups = kernel_size, stride, groups
        self.pool_size, self.num_blocks = pool_size, num_blocks
        self.channel_attention, self.channel_fusion = channel_attention, channel_fusion

        k_lat = 1
        if depthwise:
            latent = latent_dim or default_kernel_latent_dim(kernel_size)
        elif joint:
            k_lat = kernel_latent_dim or default_kernel_latent_dim(kernel_size)
            latent = latent_dim or default_latent_dim(max(1, min(in_channels, out_channels) // k_lat))
        else:
            latent = latent_dim or default_latent_dim(min(in_channels, out_channels))
        if latent % num_blocks:
            raise ValueError(f"num_blocks={num_blocks} must divide latent_dim={latent}")
        self.form = DCDForm(depthwise=depthwise, joint=joint, latent_dim=latent, kernel_latent_dim=k_lat)
        self.latent_dim = latent

        pad = kernel_size // 2
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride, pad, groups=groups, bias=False)
        self.pool = nn.AdaptiveAvgPool2d(pool_size)
        pooled = in_channels * pool_size * pool_size
        squeeze = squeeze or max(pooled // reduction, MIN_SQUEEZE)

        # Static factors of the dynamic residual; none exist without channel fusion.
        self.conv_q = self.conv_p = self.bn1 = self.bn2 = None
        self.kernel_r = self.weight_p = None
        if channel_fusion:
            if depthwise:
                self.kernel_r = nn.Parameter(torch.empty(latent, 1, kernel_size, kernel_size))  # R: (L_k, 1, k, k)
                self.weight_p = nn.Parameter(torch.empty(out_channels, latent))  # P: (C, L_k)
                phi_numel = latent * latent
            elif joint:
                self.conv_q = nn.Conv2d(in_channels, latent, 1, bias=False)
                self.kernel_r = nn.Parameter(torch.empty(k_lat, 1, kernel_size, kernel_size))  # R: (L_k, 1, k, k)
                self.conv_p = nn.Conv2d(latent, out_channels, 1, bias=False)
                phi_numel = latent * latent * k_lat
            else:
                self.conv_q = nn.Conv2d(in_channels, latent, 1, stride, groups=num_blocks, bias=False)
                self.conv_p = nn.Conv2d(latent, out_channels, 1, groups=num_blocks, bias=False)
                phi_numel = latent * latent // num_blocks
                if latent_bn:
                    self.bn1 = nn.BatchNorm2d(latent)
                    self.bn2 = nn.BatchNorm1d(latent)
        else:
            phi_numel = 0
        self._build_branch(
            in_features=pooled, out_channels=out_channels, phi_numel=phi_numel, squeeze=squeeze,
            gate=gate, channel_attention=channel_attention, channel_fusion=channel_fusion,
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Kaiming-style init for the static factors (the release's conv init)."""
        for p in (self.kernel_r, self.weight_p):
            if p is not None:
                nn.init.normal_(p, 0.0, math.sqrt(2.0 / p[0].numel() / max(1, p.shape[0])))

    def pooled_features(self, x: torch.Tensor) -> torch.Tensor:
        """Input of the dynamic branch: (B, C_in * pool²), channel-major."""
        return torch.flatten(self.pool(x), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        out = self.conv(x)  # (B, C_out, H', W')
        y = self.fc(self.pooled_features(x))  # (B, S)
        lam = self.attention(y)
        if lam is not None:
            out = out * lam.view(b, -1, 1, 1)  # Λ ⊙ (W0 * x)
        if not self.channel_fusion:
            return out
        h, w = out.shape[-2:]
        phi_flat = self.fc_phi(y)
        if self.form.depthwise:
            lk = self.latent_dim
            c = self.in_channels
            basis = self.kernel_r.repeat(c, 1, 1, 1)  # (C * L_k, 1, k, k)
            z = F.conv2d(x, basis, None, self.stride, self.kernel_size // 2, groups=c)
            z = z.view(b, c, lk, h * w)  # (B, C, L_k, N)
            phi = phi_flat.view(b, 1, lk, lk)  # (B, 1, L_k, L_k)
            u = torch.matmul(phi, z)  # (B, C, L_k, N)
            dyn = (self.weight_p.view(1, c, lk, 1) * u).sum(2)  # (B, C, N)
            return out + dyn.view(b, c, h, w)
        if self.form.joint:
            lat, lk = self.latent_dim, self.form.kernel_latent_dim
            z = self.conv_q(x)  # (B, L, H, W)
            basis = self.kernel_r.repeat(lat, 1, 1, 1)  # (L * L_k, 1, k, k)
            z = F.conv2d(z, basis, None, self.stride, self.kernel_size // 2, groups=lat)
            phi = phi_flat.view(b, lat, lat * lk)  # (B, L_out, L_in * L_k)
            u = torch.matmul(phi, z.view(b, lat * lk, h * w))  # (B, L, N)
            return out + self.conv_p(u.view(b, lat, h, w))
        z = self.conv_q(x)  # (B, L, H', W')
        if self.bn1 is not None:
            z = self.bn1(z)
        u = self._fuse_latent(phi_flat, z.view(b, self.latent_dim, h * w))  # (B, L, N)
        return out + self.conv_p(u.view(b, self.latent_dim, h, w))

    def extra_repr(self) -> str:
        kind = "depthwise" if self.form.depthwise else "joint" if self.form.joint else "channel"
        return (f"{self.in_channels}, {self.out_channels}, k={self.kernel_size}, s={self.stride}, "
                f"form={kind}, L={self.latent_dim}, B={self.num_blocks}, pool={self.pool_size}, "
                f"Λ={self.channel_attention}, Φ={self.channel_fusion}")


class DCDLinear(_DCDBase):
    """The DCD classifier: Eq. 5 at 1x1 resolution (Table 3b "CLS").

    Args:
        in_features: input features.
        out_features: classes.
        latent_dim: L; default the paper's L for ``min(in, out)``.
        reduction: r for the first FC.
        squeeze: explicit first-FC width (the release uses 32).
        num_blocks: B diagonal blocks of the dynamic residual.
        channel_attention: use Λ(x).
        channel_fusion: use PΦQᵀ.
        gate: ``"relu"`` or ``"se"``.
        latent_bn: the release's ``bn1``/``bn2`` and identity.
        bias: bias of the static classifier ``cls``.
    """

    def __init__(
        self, in_features: int, out_features: int, *, latent_dim: int | None = None,
        reduction: int = 16, squeeze: int | None = None, num_blocks: int = 1,
        channel_attention: bool = True, channel_fusion: bool = True, gate: str = "relu",
        latent_bn: bool = False, bias: bool = True,
    ):
        super().__init__()
        _require_dynamic(channel_attention, channel_fusion)
        latent = latent_dim or default_latent_dim(min(in_features, out_features))
        if in_features % num_blocks or out_features % num_blocks or latent % num_blocks:
            raise ValueError(f"num_blocks={num_blocks} must divide in, out and latent dims")
        self.in_features, self.out_features = in_features, out_features
        self.latent_dim, self.num_blocks = latent, num_blocks
        self.channel_attention, self.channel_fusion = channel_attention, channel_fusion
        self.cls = nn.Linear(in_features, out_features, bias=bias)
        self.cls_q = self.cls_p = self.bn1 = self.bn2 = None
        if channel_fusion:
            if num_blocks == 1:
                self.cls_q = nn.Linear(in_features, latent, bias=False)
                self.cls_p = nn.Linear(latent, out_features, bias=False)
            else:  # block-diagonal Q and P as grouped 1x1 convolutions
                self.cls_q = nn.Conv1d(in_features, latent, 1, groups=num_blocks, bias=False)
                self.cls_p = nn.Conv1d(latent, out_features, 1, groups=num_blocks, bias=False)
            if latent_bn:
                self.bn1 = nn.BatchNorm1d(latent)
                self.bn2 = nn.BatchNorm1d(latent)
        squeeze = squeeze or max(in_features // reduction, MIN_SQUEEZE)
        self._build_branch(
            in_features=in_features, out_channels=out_features,
            phi_numel=latent * latent // num_blocks, squeeze=squeeze, gate=gate,
            channel_attention=channel_attention, channel_fusion=channel_fusion,
        )

    def _project(self, layer: nn.Module, v: torch.Tensor) -> torch.Tensor:
        """Apply ``cls_q``/``cls_p`` to (B, F) features, dense or block-diagonal."""
        if isinstance(layer, nn.Linear):
            return layer(v)
        return layer(v.unsqueeze(-1)).squeeze(-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        out = self.cls(x)  # (B, C_out)
        y = self.fc(x)  # (B, S)
        lam = self.attention(y)
        if lam is not None:
            out = out * lam
        if not self.channel_fusion:
            return out
        z = self._project(self.cls_q, x)  # (B, L)
        if self.bn1 is not None:
            z = self.bn1(z)
        u = self._fuse_latent(self.fc_phi(y), z.view(b, self.latent_dim, 1))  # (B, L, 1)
        return out + self._project(self.cls_p, u.view(b, self.latent_dim))

    def extra_repr(self) -> str:
        return (f"{self.in_features}, {self.out_features}, L={self.latent_dim}, B={self.num_blocks}, "
                f"Λ={self.channel_attention}, Φ={self.channel_fusion}")
