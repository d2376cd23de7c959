"""Deploy form of a DCD layer: constant weights, BNs folded, two exact forms.

Training form (paper Eq. 5): ``y = bn(Λ ⊙ (W0 * x) + P v)`` with the release's latent
``v = bn2(Φ z) + z``, ``z = bn1(Qᵀ x)``. Everything affine is folded:

* the following BN (scale s, shift t) scales W0's and P's rows, t becomes P's bias;
* ``bn1`` folds into Q (scale s1) and a latent bias t1;
* ``bn2`` and the identity fold into Φ: ``Φ' = diag(s2) Φ + I`` by scaling ``fc_phi``'s
  rows and giving it the flattened identity as bias; its shift t2 joins P's bias;
* the release's hard sigmoid ``hsig = 2 · HardSigmoid`` puts its factor 2 into W0 (Λ)
  and, for the SE gate, into the heads that read the gated features.

Two exact ways to apply the layer (docs/design.md#deploy-form):

* ``latent``: ``Λ ⊙ (W0 * x) + P (Φ' (Q x + t1))``: every Conv keeps constant weights;
* ``weight`` (1x1, stride 1, B = 1): ``W(x) = Λ W0 + P Φ' Q`` formed per sample from
  the pooled features and applied as one batched MatMul.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..layers import mode_pad
from ..layers.common import HSIG_RANGE, SEGate
from ..layers.dcd import DCDConv2d, DCDLinear
from ._fold import bn_affine
from ._kinds import adaptive_windows, deploy_kind, emit_crop, prefers_weight_form
from ._padding import emit_mode_pad

STRATEGIES = ("latent", "weight", "auto")
__all__ = ["DeployDCD", "STRATEGIES", "adaptive_windows", "emit_crop", "prefers_weight_form"]


class DeployDCD(nn.Module):
    """A DCD layer (conv or linear) lowered to constant weights.

    What is shared by every kind lives here (the dynamic branch, Λ, W0 and the output
    bias); what differs is delegated to the layer's kind (:mod:`._kinds`), chosen once.

    Args:
        layer: a :class:`DCDConv2d` or :class:`DCDLinear` in eval mode.
        bn: the BatchNorm that follows it (folded in), or None.
        strategy: ``latent`` or ``weight`` (``weight`` only for 1x1, stride 1, B = 1).
    """

    def __init__(self, layer: DCDConv2d | DCDLinear, bn: nn.Module | None = None, strategy: str = "latent"):
        super().__init__()
        self.form_kind = deploy_kind(layer)
        self.kind = self.form_kind.name  # a label (records, names); the behaviour is form_kind's
        self.strategy = strategy if strategy != "weight" or self.form_kind.supports_weight_form(layer) else "latent"
        self.padding_mode, self.mode_pads = "zeros", None  # a conv kind's geometry may say otherwise
        for name, value in self.form_kind.geometry(layer).items():
            setattr(self, name, value)
        self.latent_dim, self.num_blocks = layer.latent_dim, layer.num_blocks
        self.channel_attention, self.channel_fusion = layer.channel_attention, layer.channel_fusion
        self.source_type = type(layer).__name__
        s, t = bn_affine(bn, self.c_out)
        head_gain = self._fold_branch(layer)
        lam_gain = HSIG_RANGE if layer.channel_attention else 1.0
        w0, b0, own_bias = self.form_kind.static_weights(layer)
        self.register_buffer("w0", w0 * (s * lam_gain).view(-1, *([1] * (w0.dim() - 1))))  # Λ's 2, the BN scale
        self.register_buffer("b0", b0 * s * lam_gain if b0 is not None else None)
        bias_out = t.clone()  # added once, after Λ
        if own_bias is not None:
            bias_out = bias_out + s * own_bias
        for name in ("phi_w", "phi_b", "q", "q_b", "p", "r"):
            self.register_buffer(name, None)
        if layer.channel_fusion:
            extra = self.form_kind.fold(self, layer, s, head_gain)
            if extra is not None:
                bias_out = bias_out + extra
        self.register_buffer("bias", bias_out)

    def _fold_branch(self, layer: nn.Module) -> float:
        """Register the branch's FCs; returns the gain of the heads reading its features."""
        self.se = isinstance(layer.fc[1], SEGate)
        head_gain = HSIG_RANGE if self.se else 1.0  # y_emitted = y / 2 under the SE gate
        self.register_buffer("fc1", layer.fc[0].weight.detach().clone())  # (S, C_in·p²)
        self.register_buffer("gate", layer.fc[1].fc[0].weight.detach().clone() if self.se else None)
        self.register_buffer(
            "scale_w", layer.fc_scale.weight.detach() * head_gain if layer.fc_scale is not None else None
        )  # (C_out, S)
        return head_gain

    @staticmethod
    def supports_weight_form(layer: nn.Module) -> bool:
        """Whether the training layer ``layer`` has the per-sample weight form."""
        return isinstance(layer, (DCDConv2d, DCDLinear)) and deploy_kind(layer).supports_weight_form(layer)

    # -- PyTorch execution of the deploy form -----------------------------------
    def branch(self, x: torch.Tensor) -> torch.Tensor:
        """Gated squeeze features (already divided by 2 under the SE gate)."""
        y = F.linear(self.form_kind.pooled(self, x), self.fc1)  # (B, S)
        if self.se:
            return y * F.hardsigmoid(F.linear(y, self.gate))
        return torch.relu(y)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.branch(x)
        lam = F.hardsigmoid(F.linear(y, self.scale_w)) if self.scale_w is not None else None  # (B, C_out)
        return self.form_kind.forward(self, mode_pad(x, self.mode_pads, self.padding_mode), y, lam)

    def extra_repr(self) -> str:
        return f"{self.kind}, strategy={self.strategy}, C_out={self.c_out}, L={self.latent_dim}"

    # -- ONNX emission -----------------------------------------------------------
    def emit(self, s, x: str, in_shape, out_shape) -> str:
        """Emit this layer with standard ops; returns the output name.

        Args:
            s: a :class:`~dcd_deploy.exporters._builder.Scope`.
            x: input tensor name.
            in_shape: static input shape (batch entry ignored).
            out_shape: static output shape.
        """
        y = self.emit_branch(s, x, in_shape)
        lam = self.emit_attention(s, y)
        x, in_shape = emit_mode_pad(s, x, in_shape, self.mode_pads, self.padding_mode)
        return self.form_kind.emit(self, s, x, y, lam, in_shape, out_shape)

    def emit_attention(self, s, y: str) -> str | None:
        """Λ (B, C_out) from the branch features, or None when channel attention is off."""
        if self.scale_w is None:
            return None
        return s.op(
            "HardSigmoid", [s.op("Gemm", [y, s.const("fc_scale", self.scale_w)], transB=1)], alpha=1.0 / 6.0, beta=0.5
        )

    def emit_phi(self, s, y: str) -> str:
        """Φ' flattened (B, ·) from the branch features (bn2 and the identity folded in)."""
        bias = [s.const("fc_phi_b", self.phi_b)] if self.phi_b is not None else []
        return s.op("Gemm", [y, s.const("fc_phi", self.phi_w)] + bias, transB=1)

    def emit_weight(self, s, lam: str | None, phi: str) -> tuple[str, str]:
        """Per-sample ``W(x) = Λ W0 + P Φ' Q`` (B, C_out, C_in) of the weight form, and ``P Φ'``."""
        return self.form_kind.emit_weight(self, s, lam, phi)

    def emit_static(self, s, x: str) -> str:
        """``W0`` alone (BN folded, bias fused), as the static model has it (``dcd-bench --floor``)."""
        return self.form_kind.emit_static(self, s, x)

    def emit_branch(self, s, x: str, in_shape) -> str:
        """Pooled features -> gated squeeze features (B, S)."""
        pooled, fc1 = self.form_kind.emit_pooled(self, s, x, in_shape)
        y = s.op("Gemm", [pooled, s.const("fc1", fc1)], transB=1)  # (B, S)
        if not self.se:
            return s.op("Relu", [y])
        gate = s.op("HardSigmoid", [s.op("Gemm", [y, s.const("gate", self.gate)], transB=1)], alpha=1.0 / 6.0, beta=0.5)
        return s.op("Mul", [y, gate])
