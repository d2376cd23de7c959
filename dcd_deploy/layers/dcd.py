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

from ._geometry import (
    centre_tap_pads,
    explicit_pads,
    mode_pad,
    pad_input,
    padding_mode_pads,
    pair,
    resolve_padding,
    square,
)
from .common import hsig, make_gate, place, require_rank

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


def _check_conv(
    in_channels: int,
    out_channels: int,
    kernel: tuple[int, int],
    strides: tuple[int, int],
    dilations: tuple[int, int],
    padding,
    groups: int,
    *,
    pool_size: int,
    num_blocks: int | None,
    joint_fusion: bool,
    latent_bn: bool,
    channel_fusion: bool,
):
    """Validate DCDConv2d's arguments; returns (padding resolved, depthwise, joint, num_blocks)."""
    if min(kernel + strides + dilations) < 1 or in_channels < 1 or out_channels < 1 or groups < 1:
        raise ValueError("channels, kernel_size, stride, dilation and groups must be positive")
    padding = resolve_padding(padding, kernel, dilations)
    if padding == "same" and strides != (1, 1):
        raise ValueError("padding='same' is not supported for strided convolutions (as in nn.Conv2d)")
    if pool_size not in (1, 2):
        raise ValueError("pool_size must be 1 or 2")
    if in_channels % groups or out_channels % groups:
        raise ValueError(f"groups={groups} must divide in_channels={in_channels} and out_channels={out_channels}")
    big = kernel != (1, 1)
    depthwise = groups > 1 and groups == in_channels == out_channels
    if depthwise and not big:
        raise ValueError(
            "a 1x1 depthwise DCD layer has no kernel to decompose (Eq. 7 needs k > 1); "
            "use groups < channels, or nn.Conv2d"
        )
    joint = joint_fusion and big and not depthwise
    if joint and groups != 1:
        raise ValueError("joint fusion (Eq. 8) needs groups == 1")
    if (depthwise or joint) and (num_blocks not in (None, 1) or latent_bn):
        raise ValueError("num_blocks and latent_bn apply to channel fusion only")
    channel = not (depthwise or joint)
    if channel and channel_fusion and (kernel[0] % 2 == 0 or kernel[1] % 2 == 0):
        raise ValueError(
            "k x k channel fusion puts its 1x1 residual at the centre tap and needs an odd "
            f"kernel_size, got {square(kernel)!r} (joint_fusion=True or channel_fusion=False "
            "take even sizes)"
        )
    num_blocks = 1 if not channel else (groups if num_blocks is None else num_blocks)
    if channel and (num_blocks < 1 or num_blocks % groups):
        raise ValueError(f"num_blocks={num_blocks} must be a multiple of groups={groups}")
    if in_channels % num_blocks or out_channels % num_blocks:
        raise ValueError(f"num_blocks={num_blocks} must divide in and out channels")
    return padding, depthwise, joint, num_blocks


def _latent_dims(
    in_channels: int,
    out_channels: int,
    kernel: tuple[int, int],
    groups: int,
    num_blocks: int,
    *,
    depthwise: bool,
    joint: bool,
    latent_dim: int | None,
    kernel_latent_dim: int | None,
):
    """(L, L_k): the arguments', or the paper's defaults (Section 3.2, 4.2, 4.3)."""
    k_lat = 1
    k_elems = kernel[0] * kernel[1]
    if depthwise:
        latent = latent_dim or max(1, k_elems // 2)
    elif joint:
        k_lat = kernel_latent_dim or max(1, k_elems // 2)
        latent = latent_dim or default_latent_dim(max(1, min(in_channels, out_channels) // k_lat))
    elif groups > 1:
        latent = latent_dim or num_blocks * default_latent_dim(min(in_channels, out_channels) // num_blocks)
    else:
        latent = latent_dim or default_latent_dim(min(in_channels, out_channels))
    if latent % num_blocks:
        raise ValueError(f"num_blocks={num_blocks} must divide latent_dim={latent}")
    return latent, k_lat


@dataclass(frozen=True)
class DCDForm:
    """Which of the paper's forms a layer takes (derived from its arguments)."""

    depthwise: bool  # Eq. 7: groups == in == out and k > 1
    joint: bool  # Eq. 8: k > 1, joint channel and kernel-element fusion
    latent_dim: int  # L (or L_k for depthwise)
    kernel_latent_dim: int  # L_k for Eq. 8; 1 otherwise

    @property
    def kind(self) -> str:
        """``depthwise`` (Eq. 7), ``joint`` (Eq. 8) or ``channel`` (Eq. 5, 6; the centre tap)."""
        return "depthwise" if self.depthwise else "joint" if self.joint else "channel"


class _DCDBase(nn.Module):
    """Dynamic branch and latent fusion shared by ``DCDConv2d`` and ``DCDLinear``.

    The branch maps pooled features ``y`` to ``Λ`` (via ``fc_scale``) and ``Φ`` (via
    ``fc_phi``); the paper's second FC with ``C + L²`` outputs is split into those two
    heads so each keeps its own name.
    """

    def _build_branch(
        self,
        *,
        in_features: int,
        out_channels: int,
        phi_numel: int,
        squeeze: int,
        gate: str,
        channel_attention: bool,
        channel_fusion: bool,
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

    A drop-in for ``nn.Conv2d``: the first nine arguments have its names, order and
    meaning, and the layer computes the convolution ``y = W(x) * x + b`` with the
    per-sample kernel ``W(x)`` of Eq. 5-8 (docs/design.md#the-dcd-layer).

    Args:
        in_channels: C_in.
        out_channels: C_out.
        kernel_size: k, an int or a pair. The k x k channel-fusion form puts its 1x1
            residual at the centre tap and so needs odd sizes; depthwise (Eq. 7), joint
            (Eq. 8) and Λ-only layers take any size.
        stride: an int or a pair; the residual uses it too.
        padding: an int, a pair, ``"same"`` or ``"valid"`` (``nn.Conv2d``'s meaning).
            None: ``dilation·(k // 2)`` per axis, the paper's ``k // 2``.
        dilation: an int or a pair.
        groups: 1 (dense); ``in_channels == out_channels`` with k > 1 (depthwise, Eq. 7);
            any other g dividing both: ``W0`` is grouped and the dynamic residual is
            block-diagonal with ``num_blocks`` blocks (Eq. 6, default g), so ``W(x)`` keeps
            the grouped structure. Joint fusion needs ``groups == 1``.
        bias: a learnable bias added after the dynamic convolution (not scaled by Λ).
        padding_mode: ``"zeros"``, ``"reflect"``, ``"replicate"`` or ``"circular"``, as
            ``nn.Conv2d``: the padded input feeds the whole of ``W(x) * x`` (``W0`` and the
            dynamic residual), while the branch pools the input itself.
        latent_dim: L (L_k for depthwise). Default: the paper's (Section 3.2, 4.2, 4.3);
            with groups g > 1, B times the paper's L for one block's width.
        reduction: r, the first FC's reduction of its input features.
        squeeze: width of the first FC; overrides ``reduction``.
        num_blocks: B diagonal blocks of the dynamic residual (Eq. 6); must divide
            C_in, C_out and L, and be a multiple of ``groups``. Default: ``groups`` (1).
        channel_attention: use Λ(x); off gives ``W0 + PΦQᵀ``.
        channel_fusion: use PΦQᵀ; off gives ``ΛW0``.
        joint_fusion: for k > 1, the tensor form of Eq. 8 instead of channel fusion alone.
        kernel_latent_dim: L_k for ``joint_fusion`` (default ``floor(k_h·k_w/2)``).
        pool_size: 1 (global average) or 2 (2x2 adaptive, flattened channel-major).
        gate: activation between the FCs, ``"relu"`` (paper) or ``"se"`` (release).
        latent_bn: the release's ``bn1``/``bn2`` and identity in the latent path.
        device: ``nn.Conv2d``'s factory argument: where the parameters are made.
        dtype: ``nn.Conv2d``'s factory argument: their floating-point type.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int] = 1,
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] | str | None = None,
        dilation: int | tuple[int, int] = 1,
        groups: int = 1,
        bias: bool = False,
        padding_mode: str = "zeros",
        *,
        latent_dim: int | None = None,
        reduction: int = 16,
        squeeze: int | None = None,
        num_blocks: int | None = None,
        channel_attention: bool = True,
        channel_fusion: bool = True,
        joint_fusion: bool = False,
        kernel_latent_dim: int | None = None,
        pool_size: int = 1,
        gate: str = "relu",
        latent_bn: bool = False,
        device=None,
        dtype=None,
    ):
        super().__init__()
        kernel, strides, dilations = (
            pair(v, n) for v, n in ((kernel_size, "kernel_size"), (stride, "stride"), (dilation, "dilation"))
        )
        padding, depthwise, joint, num_blocks = _check_conv(
            in_channels,
            out_channels,
            kernel,
            strides,
            dilations,
            padding,
            groups,
            pool_size=pool_size,
            num_blocks=num_blocks,
            joint_fusion=joint_fusion,
            latent_bn=latent_bn,
            channel_fusion=channel_fusion,
        )
        _require_dynamic(channel_attention, channel_fusion)

        self.in_channels, self.out_channels = in_channels, out_channels
        # ints when square: the zoo's code, the counters and the exporters read them so
        self.kernel_size, self.stride, self.dilation = square(kernel), square(strides), square(dilations)
        self.padding, self.groups = padding, groups
        self.pool_size, self.num_blocks = pool_size, num_blocks
        self.channel_attention, self.channel_fusion = channel_attention, channel_fusion
        latent, k_lat = _latent_dims(
            in_channels,
            out_channels,
            kernel,
            groups,
            num_blocks,
            depthwise=depthwise,
            joint=joint,
            latent_dim=latent_dim,
            kernel_latent_dim=kernel_latent_dim,
        )
        self.form = DCDForm(depthwise=depthwise, joint=joint, latent_dim=latent, kernel_latent_dim=k_lat)
        self.latent_dim = latent

        self._build_conv(kernel, strides, dilations, padding_mode)
        self.pool = nn.AdaptiveAvgPool2d(pool_size)
        pooled = in_channels * pool_size * pool_size
        # Static factors of the dynamic residual; none exist without channel fusion.
        self.conv_q = self.conv_p = self.bn1 = self.bn2 = self.kernel_r = self.weight_p = None
        phi_numel = self._build_factors(kernel, strides, latent_bn) if channel_fusion else 0
        self._build_branch(
            in_features=pooled,
            out_channels=out_channels,
            phi_numel=phi_numel,
            squeeze=squeeze or max(pooled // reduction, MIN_SQUEEZE),
            gate=gate,
            channel_attention=channel_attention,
            channel_fusion=channel_fusion,
        )
        self.register_parameter("bias", nn.Parameter(torch.empty(out_channels)) if bias else None)
        self.reset_parameters()
        place(self, device, dtype)

    def _build_conv(self, kernel, strides, dilations, padding_mode: str) -> None:
        """``W0``'s convolution, the padding mode's pads and the centre tap's."""
        self.padding_mode, self.mode_pads = padding_mode_pads(
            padding_mode, explicit_pads(self.padding, kernel, dilations)
        )
        # a padding mode pads the input once, ahead of W0 and the residual, which then pad nothing
        padding = self.padding if self.mode_pads is None else (0, 0)
        self.conv = nn.Conv2d(
            self.in_channels, self.out_channels, kernel, strides, padding, dilations, self.groups, bias=False
        )
        #: Padding of the input for the 1x1 residual at the centre tap (negative: a crop).
        self.tap_pads = centre_tap_pads(explicit_pads(padding, kernel, dilations), kernel, dilations)

    def _build_factors(self, kernel: tuple[int, int], strides: tuple[int, int], latent_bn: bool) -> int:
        """The static factors of the dynamic residual (its form's); returns Φ's numel."""
        return getattr(self, f"_build_{self.form.kind}")(kernel, strides, latent_bn)

    def _build_depthwise(self, kernel: tuple[int, int], strides: tuple[int, int], latent_bn: bool) -> int:
        latent = self.latent_dim
        self.kernel_r = nn.Parameter(torch.empty(latent, 1, *kernel))  # R: (L_k, 1, k, k)
        self.weight_p = nn.Parameter(torch.empty(self.out_channels, latent))  # P: (C, L_k)
        return latent * latent

    def _build_joint(self, kernel: tuple[int, int], strides: tuple[int, int], latent_bn: bool) -> int:
        latent, k_lat = self.latent_dim, self.form.kernel_latent_dim
        self.conv_q = nn.Conv2d(self.in_channels, latent, 1, bias=False)
        self.kernel_r = nn.Parameter(torch.empty(k_lat, 1, *kernel))  # R: (L_k, 1, k, k)
        self.conv_p = nn.Conv2d(latent, self.out_channels, 1, bias=False)
        return latent * latent * k_lat

    def _build_channel(self, kernel: tuple[int, int], strides: tuple[int, int], latent_bn: bool) -> int:
        latent, nb = self.latent_dim, self.num_blocks
        self.conv_q = nn.Conv2d(self.in_channels, latent, 1, strides, groups=nb, bias=False)
        self.conv_p = nn.Conv2d(latent, self.out_channels, 1, groups=nb, bias=False)
        if latent_bn:
            self.bn1 = nn.BatchNorm2d(latent)
            self.bn2 = nn.BatchNorm1d(latent)
        return latent * latent // nb

    def __setstate__(self, state: dict) -> None:
        # A module pickled before padding, dilation and bias existed had k // 2, 1, none.
        super().__setstate__(state)
        if "tap_pads" not in self.__dict__:
            self.padding, self.dilation, self.tap_pads = self.conv.padding, 1, (0, 0, 0, 0)
            self._parameters.setdefault("bias", None)
        if "mode_pads" not in self.__dict__:  # before padding_mode: zeros
            self.padding_mode, self.mode_pads = "zeros", None

    @classmethod
    def from_conv(cls, conv: nn.Conv2d, **options) -> DCDConv2d:
        """A DCD layer that starts out computing exactly what ``conv`` computes.

        ``W0`` and the bias are copied; the dynamic heads are zeroed so that Λ = hsig(0) = 1
        and Φ = 0. With the release's latent path (``latent_bn``) the identity
        ``bn2(Φ z) + z`` survives Φ = 0, so ``P`` starts at zero too (it still learns:
        its gradient is the latent ``z``). The new layer has ``conv``'s dtype and device.

        Args:
            conv: an ``nn.Conv2d`` (any padding mode).
            **options: the keyword-only options of :class:`DCDConv2d`.
        """
        layer = cls(
            conv.in_channels,
            conv.out_channels,
            conv.kernel_size,
            conv.stride,
            conv.padding,
            conv.dilation,
            conv.groups,
            conv.bias is not None,
            conv.padding_mode,
            **options,
        )
        layer.to(device=conv.weight.device, dtype=conv.weight.dtype)
        with torch.no_grad():
            layer.conv.weight.copy_(conv.weight)
            if conv.bias is not None:
                layer.bias.copy_(conv.bias)
            layer.zero_dynamic_heads()
            if layer.bn2 is not None:
                nn.init.zeros_(layer.conv_p.weight)
        return layer.train(conv.training)

    def reset_parameters(self) -> None:
        """Kaiming-style init for the static factors (the release's conv init); the bias
        as ``nn.Conv2d`` initialises its own."""
        for p in (self.kernel_r, self.weight_p):
            if p is not None:
                nn.init.normal_(p, 0.0, math.sqrt(2.0 / p[0].numel() / max(1, p.shape[0])))
        if self.bias is not None:
            bound = 1.0 / math.sqrt(self.conv.weight[0].numel())
            nn.init.uniform_(self.bias, -bound, bound)

    def pooled_features(self, x: torch.Tensor) -> torch.Tensor:
        """Input of the dynamic branch: (B, C_in * pool²), channel-major."""
        return torch.flatten(self.pool(x), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        require_rank(self, x, 4, f"(batch, {self.in_channels}, H, W)")
        b = x.shape[0]
        y = self.fc(self.pooled_features(x))  # (B, S): from the input, not its padding
        x = mode_pad(x, self.mode_pads, self.padding_mode)
        out = self.conv(x)  # (B, C_out, H', W')
        lam = self.attention(y)
        if lam is not None:
            out = out * lam.view(b, -1, 1, 1)  # Λ ⊙ (W0 * x)
        if self.channel_fusion:
            out = out + self._residual(x, y, b, *out.shape[-2:])
        if self.bias is not None:
            out = out + self.bias.view(1, -1, 1, 1)
        return out

    def _residual(self, x: torch.Tensor, y: torch.Tensor, b: int, h: int, w: int) -> torch.Tensor:
        """The dynamic residual's output (B, C_out, H', W') for branch features y."""
        return getattr(self, f"_residual_{self.form.kind}")(x, self.fc_phi(y), b, h, w)

    def _residual_depthwise(self, x: torch.Tensor, phi_flat: torch.Tensor, b: int, h: int, w: int) -> torch.Tensor:
        """Eq. 7: per channel, Φ mixes the L_k responses to the latent kernel elements R."""
        conv, lk, c = self.conv, self.latent_dim, self.in_channels
        basis = self.kernel_r.repeat(c, 1, 1, 1)  # (C * L_k, 1, k, k)
        z = F.conv2d(x, basis, None, conv.stride, conv.padding, conv.dilation, groups=c)
        z = z.view(b, c, lk, h * w)  # (B, C, L_k, N)
        phi = phi_flat.view(b, 1, lk, lk)  # (B, 1, L_k, L_k)
        u = torch.matmul(phi, z)  # (B, C, L_k, N)
        dyn = (self.weight_p.view(1, c, lk, 1) * u).sum(2)  # (B, C, N)
        return dyn.view(b, c, h, w)

    def _residual_joint(self, x: torch.Tensor, phi_flat: torch.Tensor, b: int, h: int, w: int) -> torch.Tensor:
        """Eq. 8: Q to L channels, R's L_k kernel elements each, Φ over both, P out."""
        conv, lat, lk = self.conv, self.latent_dim, self.form.kernel_latent_dim
        z = self.conv_q(x)  # (B, L, H, W)
        basis = self.kernel_r.repeat(lat, 1, 1, 1)  # (L * L_k, 1, k, k)
        z = F.conv2d(z, basis, None, conv.stride, conv.padding, conv.dilation, groups=lat)
        phi = phi_flat.view(b, lat, lat * lk)  # (B, L_out, L_in * L_k)
        u = torch.matmul(phi, z.view(b, lat * lk, h * w))  # (B, L, N)
        return self.conv_p(u.view(b, lat, h, w))

    def _residual_channel(self, x: torch.Tensor, phi_flat: torch.Tensor, b: int, h: int, w: int) -> torch.Tensor:
        """Eq. 5, 6: the 1x1 latent path, at the centre tap of a k x k layer."""
        z = self.conv_q(pad_input(x, self.tap_pads))  # (B, L, H', W'): the centre tap's 1x1 view
        if self.bn1 is not None:
            z = self.bn1(z)
        u = self._fuse_latent(phi_flat, z.view(b, self.latent_dim, h * w))  # (B, L, N)
        return self.conv_p(u.view(b, self.latent_dim, h, w))

    def extra_repr(self) -> str:
        kind = self.form.kind
        geometry = f"k={self.kernel_size}, s={self.stride}"
        if self.padding != tuple(d * (k // 2) for k, d in zip(self.conv.kernel_size, self.conv.dilation)):
            geometry += f", padding={self.padding}"
        if self.dilation != 1:
            geometry += f", dilation={self.dilation}"
        if self.groups != 1:
            geometry += f", groups={self.groups}"
        if self.bias is not None:
            geometry += ", bias=True"
        if self.padding_mode != "zeros":
            geometry += f", padding_mode={self.padding_mode}"
        return (
            f"{self.in_channels}, {self.out_channels}, {geometry}, "
            f"form={kind}, L={self.latent_dim}, B={self.num_blocks}, pool={self.pool_size}, "
            f"Λ={self.channel_attention}, Φ={self.channel_fusion}"
        )


class DCDLinear(_DCDBase):
    """The DCD classifier: Eq. 5 at 1x1 resolution (Table 3b "CLS").

    A drop-in for ``nn.Linear`` (same first three arguments). As in the release's
    classifier, ``out = Λ ⊙ (W0 x + b) + P Φ Qᵀ x``: Λ scales the static bias too.

    Args:
        in_features: input features.
        out_features: classes.
        bias: bias of the static classifier ``cls``.
        latent_dim: L; default the paper's L for ``min(in, out)``.
        reduction: r for the first FC.
        squeeze: explicit first-FC width (the release uses 32).
        num_blocks: B diagonal blocks of the dynamic residual.
        channel_attention: use Λ(x).
        channel_fusion: use PΦQᵀ.
        gate: ``"relu"`` or ``"se"``.
        latent_bn: the release's ``bn1``/``bn2`` and identity.
        device: ``nn.Linear``'s factory argument: where the parameters are made.
        dtype: ``nn.Linear``'s factory argument: their floating-point type.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        latent_dim: int | None = None,
        reduction: int = 16,
        squeeze: int | None = None,
        num_blocks: int = 1,
        channel_attention: bool = True,
        channel_fusion: bool = True,
        gate: str = "relu",
        latent_bn: bool = False,
        device=None,
        dtype=None,
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
            in_features=in_features,
            out_channels=out_features,
            phi_numel=latent * latent // num_blocks,
            squeeze=squeeze,
            gate=gate,
            channel_attention=channel_attention,
            channel_fusion=channel_fusion,
        )
        place(self, device, dtype)

    def _project(self, layer: nn.Module, v: torch.Tensor) -> torch.Tensor:
        """Apply ``cls_q``/``cls_p`` to (B, F) features, dense or block-diagonal."""
        if isinstance(layer, nn.Linear):
            return layer(v)
        return layer(v.unsqueeze(-1)).squeeze(-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        require_rank(self, x, 2, f"(batch, {self.in_features})")
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
        return (
            f"{self.in_features}, {self.out_features}, L={self.latent_dim}, B={self.num_blocks}, "
            f"Λ={self.channel_attention}, Φ={self.channel_fusion}"
        )
