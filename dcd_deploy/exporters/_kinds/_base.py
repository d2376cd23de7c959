"""What every DCD kind provides, and the parts the spatial kinds share.

A kind object is stateless: the folded tensors live on the
:class:`~dcd_deploy.exporters.DeployDCD` module (buffers, so ``.to()``, ``state_dict``
and ``deepcopy`` see them), and each method takes that module, ``m``. MAdds are counted
from the training-form layer (any device, meta included): :meth:`DCDKind.madds`.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ...layers import conv2d, explicit_pads


def adaptive_windows(size: int, out: int) -> tuple[int, int] | None:
    """(kernel, stride) of AdaptiveAvgPool over ``size`` into ``out`` bins, when uniform.

    PyTorch's bin i spans ``[floor(i·n/o), ceil((i+1)·n/o))``; a 2x2 pool over 7 gives
    overlapping windows of 4 with stride 3. Returns None when the bins differ in size.
    """
    starts = [i * size // out for i in range(out)]
    ends = [-(-(i + 1) * size // out) for i in range(out)]
    kernels = {e - s for s, e in zip(starts, ends)}
    strides = {b - a for a, b in zip(starts, starts[1:])} or {1}
    if len(kernels) != 1 or len(strides) != 1 or 0 in strides:  # stride 0: bins repeat one window
        return None
    return kernels.pop(), strides.pop()


def dense_blocks(w: torch.Tensor, groups: int) -> torch.Tensor:
    """A grouped 1x1 weight (out, in/groups, ...) as its dense block-diagonal (out, in) matrix."""
    w = w.reshape(w.shape[0], -1)  # (out, in/groups)
    if groups == 1:
        return w.clone()
    out, per_in = w.shape
    step = out // groups
    dense = w.new_zeros(out, per_in * groups)
    for g in range(groups):
        dense[g * step : (g + 1) * step, g * per_in : (g + 1) * per_in] = w[g * step : (g + 1) * step]
    return dense


def dense_phi(
    phi_w: torch.Tensor, phi_b: torch.Tensor, *, blocks: int, latent: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Φ's head for B diagonal blocks (Eq. 6) as the head of one dense L x L Φ.

    ``phi_w`` (B·Lb², S) and ``phi_b`` (B·Lb²) give each block's Lb x Lb entries, row-major;
    the result (L², S), (L²) puts them on Φ's diagonal blocks and zeros elsewhere, so the
    fused ops (one L x L Φ per sample) compute Eq. 6 exactly.
    """
    if blocks == 1:
        return phi_w, phi_b
    lat, lb = latent, latent // blocks
    w = phi_w.new_zeros(lat, lat, phi_w.shape[1])  # (L, L, S)
    b = phi_b.new_zeros(lat, lat)
    bw, bb = phi_w.view(blocks, lb, lb, -1), phi_b.view(blocks, lb, lb)
    for g in range(blocks):
        block = slice(g * lb, (g + 1) * lb)
        w[block, block] = bw[g]
        b[block, block] = bb[g]
    return w.reshape(lat * lat, -1), b.reshape(-1)


class DCDKind:
    """One DCD layer kind in deploy form: folding, forward, emission, MAdds, fused contract."""

    #: Label of the kind (records, function names, ``extra_repr``); never switched on.
    name: ClassVar[str]

    def supports_weight_form(self, layer: nn.Module) -> bool:
        """Whether the per-sample weight form exists for ``layer`` (training form)."""
        return False

    def choose_form(self, layer: nn.Module, strategy: str, out_shape) -> str:
        """The form a ``strategy`` (``latent`` / ``weight`` / ``auto``) gives ``layer``."""
        return "latent"

    def geometry(self, layer: nn.Module) -> dict:
        """The deploy module's geometry attributes, read from the training layer."""
        raise NotImplementedError

    def static_weights(self, layer: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """(W0, the bias Λ scales, the bias added after Λ) of the training layer."""
        raise NotImplementedError

    def fold(self, m: nn.Module, layer: nn.Module, s: torch.Tensor, head_gain: float) -> torch.Tensor | None:
        """Register the dynamic residual's folded buffers on ``m`` (channel fusion only).

        Args:
            m: the deploy module.
            layer: the training layer.
            s: the following BN's scale (ones without one).
            head_gain: factor of the heads that read the gated features.

        Returns:
            What the folding adds to the output bias, or None.
        """
        raise NotImplementedError

    def pooled(self, m: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """The dynamic branch's input (B, C_in·P²)."""
        raise NotImplementedError

    def emit_pooled(self, m: nn.Module, s, x: str, in_shape) -> tuple[str, torch.Tensor]:
        """Emitted branch input and the first FC's weight matching its layout."""
        raise NotImplementedError

    def forward(self, m: nn.Module, x: torch.Tensor, y: torch.Tensor, lam: torch.Tensor | None) -> torch.Tensor:
        """The layer from its input x, branch features y and Λ (or None)."""
        raise NotImplementedError

    def emit(self, m: nn.Module, s, x: str, y: str, lam: str | None, in_shape, out_shape) -> str:
        """Emit the layer after its branch; returns the output name."""
        raise NotImplementedError

    def emit_weight(self, m: nn.Module, s, lam: str | None, phi: str) -> tuple[str, str]:
        """The weight form's per-sample ``W(x)`` and ``P Φ'`` (kinds with a weight form)."""
        raise ValueError(f"a {self.name} DCD layer has no weight form")

    def emit_static(self, m: nn.Module, s, x: str) -> str:
        """``W0`` alone (BN folded, bias fused), as the static model has it."""
        raise NotImplementedError

    def madds(self, layer: nn.Module, n_in: int, n_out: int) -> tuple[int, int]:
        """(latent, weight) MAdds of one call on one sample, the dynamic branch excluded.

        Args:
            layer: the training layer.
            n_in: input pixels H·W (1 for a linear layer).
            n_out: output pixels H'·W'.
        """
        raise NotImplementedError

    def why_not_fused(self, m: nn.Module) -> str | None:
        """Why the fused mode leaves ``m`` as standard ops (None when it fuses)."""
        return self.name

    def fused_op(self, m: nn.Module) -> str:
        """The fused op type of a fusable ``m``."""
        raise ValueError(f"a {self.name} DCD layer is not fused")

    def fused_constants(self, m: nn.Module) -> dict[str, torch.Tensor]:
        """The fused node's constant inputs by contract name (:mod:`.._fused_contract`)."""
        raise ValueError(f"a {self.name} DCD layer is not fused")

    def fused_attrs(self, m: nn.Module) -> dict[str, int]:
        """A ``DCDConvEpilogue`` node's own attributes (after pool, se, attention, residual, activation)."""
        raise ValueError(f"a {self.name} DCD layer is not fused around a convolution")

    def emit_fused_latent(self, m: nn.Module, s, x: str) -> str | None:
        """The latent input ``z`` (NCHW) a ``DCDConvEpilogue`` node reads in place of ``Q x_s``, or None."""
        return None


class ConvKind(DCDKind):
    """What the convolution kinds share: the W0 conv, Λ, the pooled branch input."""

    def geometry(self, layer: nn.Module) -> dict:
        conv = layer.conv
        kernel2, stride2, dilation2 = conv.kernel_size, conv.stride, conv.dilation
        # Geometry as nn.Conv2d has it: pairs, and the padding as (top, left, bottom, right).
        return dict(
            c_out=layer.out_channels,
            pool_size=layer.pool_size,
            stride=layer.stride,
            kernel_size=layer.kernel_size,
            groups=layer.groups,
            kernel2=kernel2,
            stride2=stride2,
            dilation2=dilation2,
            pads=explicit_pads(conv.padding, kernel2, dilation2),
            tap_pads=layer.tap_pads,
            # a padding mode other than zeros: the input padded so ahead of W0 and the residual
            padding_mode=layer.padding_mode,
            mode_pads=layer.mode_pads,
        )

    def static_weights(self, layer: nn.Module):
        bias = layer.bias.detach() if layer.bias is not None else None  # not scaled by Λ
        return layer.conv.weight.detach(), None, bias

    def pooled(self, m: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(F.adaptive_avg_pool2d(x, m.pool_size), 1)

    def emit_pooled(self, m: nn.Module, s, x: str, in_shape) -> tuple[str, torch.Tensor]:
        fc1 = m.fc1
        if m.pool_size == 1:
            # GlobalAveragePool, not ReduceMean: ONNX Runtime runs it on its blocked
            # (NCHWc) layout, so the layer's input needs no reorder back to NCHW.
            return s.op("Flatten", [s.op("GlobalAveragePool", [x])], axis=1), fc1  # (B, C)
        c, h, w = in_shape[1], in_shape[2], in_shape[3]
        kernel, stride, fc1 = [], [], fc1.view(fc1.shape[0], c, 2, 2)
        for axis, n in ((2, h), (3, w)):
            if n == 1:  # both bins see the one row/column: sum the FC's weights instead
                fc1 = fc1.sum(axis, keepdim=True)
                kernel.append(1)
                stride.append(1)
                continue
            kernel_n, stride_n = adaptive_windows(n, 2)
            kernel.append(kernel_n)
            stride.append(stride_n)
        pooled = s.op("AveragePool", [x], kernel_shape=kernel, strides=stride)  # (B, C, 2, 2)
        return s.op("Flatten", [pooled], axis=1), fc1.reshape(fc1.shape[0], -1)  # (B, C·4), channel-major

    def forward(self, m: nn.Module, x: torch.Tensor, y: torch.Tensor, lam: torch.Tensor | None) -> torch.Tensor:
        b = x.shape[0]
        out = conv2d(x, m.w0, None, m.stride2, m.pads, m.dilation2, m.groups)  # (B, C_out, H', W')
        if lam is not None:
            out = out * lam.view(b, -1, 1, 1)
        if m.channel_fusion:
            phi = F.linear(y, m.phi_w, m.phi_b)  # (B, Φ's numel)
            out = out + self.residual(m, x, phi, *out.shape[-2:])
        return out + m.bias.view(1, -1, 1, 1)

    def residual(self, m: nn.Module, x: torch.Tensor, phi: torch.Tensor, h: int, w: int) -> torch.Tensor:
        """The dynamic residual (B, C_out, H', W') for the flattened Φ' (B, ·)."""
        raise NotImplementedError

    @staticmethod
    def conv_attrs(m: nn.Module) -> dict:
        attrs = dict(kernel_shape=list(m.kernel2), strides=list(m.stride2), pads=list(m.pads))
        if m.dilation2 != (1, 1):
            attrs["dilations"] = list(m.dilation2)
        return attrs

    def emit(self, m: nn.Module, s, x: str, y: str, lam: str | None, in_shape, out_shape) -> str:
        has_bias = bool(m.bias.abs().max() > 0)
        inputs = [x, s.const("w0", m.w0)]
        fused_bias = has_bias and lam is None and not m.channel_fusion
        if fused_bias:
            inputs.append(s.const("bias", m.bias))
        out = s.op("Conv", inputs, group=m.groups, **self.conv_attrs(m))  # (B, C_out, H', W')
        if lam is not None:
            out = s.op("Mul", [out, s.op("Unsqueeze", [lam, s.ints("axes", [2, 3])])])
        if not m.channel_fusion:
            return s.op("Add", [out, s.const("bias", m.bias.view(-1, 1, 1))]) if has_bias and not fused_bias else out
        return self.emit_residual(m, s, x, m.emit_phi(s, y), out, has_bias, out_shape)

    def emit_residual(self, m: nn.Module, s, x: str, phi: str, out: str, has_bias: bool, out_shape) -> str:
        """Add the dynamic residual (and the bias) to the static term ``out``."""
        raise NotImplementedError

    @staticmethod
    def add_residual(m: nn.Module, s, dyn: str, out: str, has_bias: bool) -> str:
        out = s.op("Add", [dyn, out])
        return s.op("Add", [out, s.const("bias", m.bias.view(-1, 1, 1))]) if has_bias else out

    def emit_static(self, m: nn.Module, s, x: str) -> str:
        k, pad = m.kernel_size, m.kernel_size // 2
        return s.op(
            "Conv",
            [x, s.const("w0", m.w0), s.const("bias", m.bias)],
            group=m.groups,
            kernel_shape=[k, k],
            strides=[m.stride] * 2,
            pads=[pad] * 4,
        )

    def madds(self, layer: nn.Module, n_in: int, n_out: int) -> tuple[int, int]:
        cin, cout = layer.in_channels, layer.out_channels
        kh, kw = layer.conv.kernel_size
        w0_numel = cout * (cin // layer.groups) * kh * kw
        latent = weight = w0_numel * n_out  # the W0 conv, or the one W(x) conv
        if layer.channel_attention:
            latent += cout * n_out  # Λ ⊙ (W0 * x)
            weight += w0_numel  # Λ ⊙ W0
        if layer.channel_fusion:
            dyn_latent, dyn_weight = self.residual_madds(layer, n_in, n_out, kh * kw)
            latent, weight = latent + dyn_latent, weight + dyn_weight
        return latent, weight

    def residual_madds(self, layer: nn.Module, n_in: int, n_out: int, kk: int) -> tuple[int, int]:
        """(latent, weight) MAdds of the dynamic residual (docs of bench/complexity.py)."""
        raise NotImplementedError
