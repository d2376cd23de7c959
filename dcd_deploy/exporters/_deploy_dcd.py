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

from ..layers.common import HSIG_RANGE, SEGate
from ..layers.dcd import DCDConv2d, DCDLinear
from ._fold import bn_affine

STRATEGIES = ("latent", "weight", "auto")


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


def prefers_weight_form(*, c_in: int, c_out: int, latent: int, hw: int) -> bool:
    """Cost model: the per-sample weight form wins when H·W > C_in·C_out / (C_in + C_out + L).

    Latent form per pixel: C_in·C_out + L·(C_in + C_out + L) MAdds; weight form: C_in·C_out
    per pixel plus C_out·C_in·L once to build W(x).
    """
    return hw * (c_in + c_out + latent) > c_in * c_out


class DeployDCD(nn.Module):
    """A DCD layer (conv or linear) lowered to constant weights.

    Args:
        layer: a :class:`DCDConv2d` or :class:`DCDLinear` in eval mode.
        bn: the BatchNorm that follows it (folded in), or None.
        strategy: ``latent`` or ``weight`` (``weight`` only for 1x1, stride 1, B = 1).
    """

    def __init__(self, layer: DCDConv2d | DCDLinear, bn: nn.Module | None = None, strategy: str = "latent"):
        super().__init__()
        linear = isinstance(layer, DCDLinear)
        if linear:
            self.kind = "linear"
        elif layer.form.depthwise:
            self.kind = "depthwise"
        elif layer.form.joint:
            self.kind = "joint"
        else:
            self.kind = "channel"
        if strategy == "weight" and not self.supports_weight_form(layer):
            strategy = "latent"
        self.strategy = strategy
        c_out = layer.out_features if linear else layer.out_channels
        self.c_out, self.latent_dim, self.num_blocks = c_out, layer.latent_dim, layer.num_blocks
        self.channel_attention, self.channel_fusion = layer.channel_attention, layer.channel_fusion
        self.pool_size = 0 if linear else layer.pool_size
        self.stride = 1 if linear else layer.stride
        self.kernel_size = 1 if linear else layer.kernel_size
        self.source_type = type(layer).__name__
        s, t = bn_affine(bn, c_out)

        # Dynamic branch: pooled features -> gated squeeze features y.
        self.se = isinstance(layer.fc[1], SEGate)
        head_gain = HSIG_RANGE if self.se else 1.0  # y_emitted = y / 2 under the SE gate
        self.register_buffer("fc1", layer.fc[0].weight.detach().clone())  # (S, C_in·p²)
        self.register_buffer("gate", layer.fc[1].fc[0].weight.detach().clone() if self.se else None)
        lam_gain = HSIG_RANGE if layer.channel_attention else 1.0
        self.register_buffer("scale_w", layer.fc_scale.weight.detach() * head_gain
                             if layer.fc_scale is not None else None)  # (C_out, S)

        w0 = (layer.cls.weight if linear else layer.conv.weight).detach()
        rows = (s * lam_gain).view(-1, *([1] * (w0.dim() - 1)))
        self.register_buffer("w0", w0 * rows)  # Λ's factor 2 and the BN scale
        b0 = layer.cls.bias.detach() * s * lam_gain if linear and layer.cls.bias is not None else None
        self.register_buffer("b0", b0)
        bias_out = t.clone()  # added once, after Λ

        for name in ("phi_w", "phi_b", "q", "q_b", "p", "r"):
            self.register_buffer(name, None)
        if layer.channel_fusion:
            phi_w = layer.fc_phi.weight.detach() * head_gain
            if self.kind in ("channel", "linear"):
                s1, t1 = bn_affine(layer.bn1, layer.latent_dim) if layer.bn1 is not None else (
                    torch.ones(layer.latent_dim), torch.zeros(layer.latent_dim))
                q = self._dense_or_grouped(layer.cls_q if linear else layer.conv_q, linear)
                p = self._dense_or_grouped(layer.cls_p if linear else layer.conv_p, linear)
                nb, lb = layer.num_blocks, layer.latent_dim // layer.num_blocks
                phi_b = torch.zeros(nb, lb, lb)
                if layer.bn2 is not None:
                    s2, t2 = bn_affine(layer.bn2, layer.latent_dim)
                    phi_w = (phi_w.view(nb, lb, lb, -1) * s2.view(nb, lb, 1, 1)).reshape(phi_w.shape)
                    phi_b = phi_b + torch.eye(lb)
                    bias_out = bias_out + s * self._apply_p(p, t2, linear, nb)
                self.register_buffer("q", q * s1.view(-1, *([1] * (q.dim() - 1))))
                self.register_buffer("q_b", t1)
                self.register_buffer("p", p * s.view(-1, *([1] * (p.dim() - 1))))
                self.register_buffer("phi_b", phi_b.reshape(-1))
            elif self.kind == "depthwise":
                self.register_buffer("r", layer.kernel_r.detach().repeat(layer.in_channels, 1, 1, 1))
                self.register_buffer("p", layer.weight_p.detach() * s.view(-1, 1))  # (C, L_k)
            else:  # joint
                self.register_buffer("q", layer.conv_q.weight.detach().clone())
                self.register_buffer("r", layer.kernel_r.detach().repeat(layer.latent_dim, 1, 1, 1))
                self.register_buffer("p", layer.conv_p.weight.detach() * s.view(-1, 1, 1, 1))
                self.kernel_latent_dim = layer.form.kernel_latent_dim
            self.register_buffer("phi_w", phi_w)
        self.register_buffer("bias", bias_out)

    @staticmethod
    def supports_weight_form(layer: nn.Module) -> bool:
        return (isinstance(layer, DCDConv2d) and layer.kernel_size == 1 and layer.stride == 1
                and layer.channel_fusion and layer.num_blocks == 1 and not layer.form.depthwise)

    @staticmethod
    def _dense_or_grouped(mod: nn.Module, linear: bool) -> torch.Tensor:
        """Q or P as a matrix; for the linear form, grouped (block-diagonal) made dense."""
        w = mod.weight.detach()
        if not linear:
            return w.clone()  # (out, in/groups, 1, 1): applied as a grouped conv
        if isinstance(mod, nn.Linear):
            return w.clone()
        groups, (out, per_in, _) = mod.groups, w.shape
        dense = torch.zeros(out, per_in * groups)
        step = out // groups
        for g in range(groups):
            dense[g * step:(g + 1) * step, g * per_in:(g + 1) * per_in] = w[g * step:(g + 1) * step, :, 0]
        return dense

    @staticmethod
    def _apply_p(p: torch.Tensor, v: torch.Tensor, linear: bool, groups: int) -> torch.Tensor:
        """P @ v for a constant latent vector v (grouped when P is a grouped conv)."""
        if linear:
            return p @ v
        return F.conv2d(v.view(1, -1, 1, 1), p, groups=groups).flatten()

    # -- PyTorch execution of the deploy form -----------------------------------
    def branch(self, x: torch.Tensor) -> torch.Tensor:
        """Gated squeeze features (already divided by 2 under the SE gate)."""
        y = x if self.kind == "linear" else torch.flatten(F.adaptive_avg_pool2d(x, self.pool_size), 1)
        y = F.linear(y, self.fc1)  # (B, S)
        if self.se:
            return y * F.hardsigmoid(F.linear(y, self.gate))
        return torch.relu(y)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        y = self.branch(x)
        lam = F.hardsigmoid(F.linear(y, self.scale_w)) if self.scale_w is not None else None  # (B, C_out)
        if self.kind == "linear":
            return self._forward_linear(x, y, lam)
        if self.strategy == "weight":
            return self._forward_weight(x, y, lam)
        pad = self.kernel_size // 2
        groups = self.w0.shape[0] if self.kind == "depthwise" else 1
        out = F.conv2d(x, self.w0, None, self.stride, pad, groups=groups)  # (B, C_out, H', W')
        if lam is not None:
            out = out * lam.view(b, -1, 1, 1)
        h, w = out.shape[-2:]
        if self.channel_fusion:
            phi = F.linear(y, self.phi_w, self.phi_b if self.kind == "channel" else None)
            if self.kind == "channel":
                nb, lb = self.num_blocks, self.latent_dim // self.num_blocks
                z = F.conv2d(x, self.q, self.q_b, self.stride, groups=nb)  # (B, L, H', W')
                u = torch.matmul(phi.view(b, nb, lb, lb), z.view(b, nb, lb, h * w))  # (B, nb, Lb, N)
                out = out + F.conv2d(u.view(b, self.latent_dim, h, w), self.p, None, groups=nb)
            elif self.kind == "depthwise":
                c, lk = self.c_out, self.latent_dim
                z = F.conv2d(x, self.r, None, self.stride, pad, groups=c)  # (B, C·L_k, H', W')
                m = torch.matmul(self.p, phi.view(b, lk, lk))  # (B, C, L_k)
                dyn = torch.matmul(m.view(b, c, 1, lk), z.view(b, c, lk, h * w))  # (B, C, 1, N)
                out = out + dyn.view(b, c, h, w)
            else:
                lat, lk = self.latent_dim, self.kernel_latent_dim
                z = F.conv2d(F.conv2d(x, self.q), self.r, None, self.stride, pad, groups=lat)  # (B, L·L_k, H', W')
                u = torch.matmul(phi.view(b, lat, lat * lk), z.view(b, lat * lk, h * w))  # (B, L, N)
                out = out + F.conv2d(u.view(b, lat, h, w), self.p)
        return out + self.bias.view(1, -1, 1, 1)

    def _forward_weight(self, x, y, lam):
        b, c_in, h, w = x.shape
        phi = F.linear(y, self.phi_w, self.phi_b).view(b, self.latent_dim, self.latent_dim)  # (B, L, L)
        pphi = torch.matmul(self.p.flatten(1), phi)  # (B, C_out, L)
        weight = torch.matmul(pphi, self.q.flatten(1))  # (B, C_out, C_in)
        w0 = self.w0.flatten(1)  # (C_out, C_in)
        weight = weight + (w0 * lam.view(b, -1, 1) if lam is not None else w0)
        bias = torch.matmul(pphi, self.q_b.view(-1, 1)) + self.bias.view(-1, 1)  # (B, C_out, 1)
        # the bias rides in the batched GEMM (one pass over the output, as a Conv's bias does)
        out = torch.baddbmm(bias, weight, x.reshape(b, c_in, h * w))  # (B, C_out, N)
        return out.view(b, self.c_out, h, w)

    def _forward_linear(self, x, y, lam):
        b = x.shape[0]
        out = F.linear(x, self.w0, self.b0)  # (B, C_out)
        if lam is not None:
            out = out * lam
        if self.channel_fusion:
            nb, lb = self.num_blocks, self.latent_dim // self.num_blocks
            z = F.linear(x, self.q, self.q_b).view(b, nb, lb, 1)  # (B, nb, Lb, 1)
            phi = F.linear(y, self.phi_w, self.phi_b).view(b, nb, lb, lb)  # (B, nb, Lb, Lb)
            u = torch.matmul(phi, z).view(b, self.latent_dim)  # (B, L)
            out = out + F.linear(u, self.p)
        return out + self.bias

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
        if self.kind == "linear":
            return self._emit_linear(s, x, y, lam)
        if self.strategy == "weight":
            return self._emit_weight(s, x, y, lam, in_shape)
        c_out, h, w = out_shape[1], out_shape[2], out_shape[3]
        hw = h * w if isinstance(h, int) and isinstance(w, int) else -1  # -1: symbolic sizes
        pad = self.kernel_size // 2
        k = self.kernel_size
        conv_attrs = dict(kernel_shape=[k, k], strides=[self.stride] * 2, pads=[pad] * 4)
        groups = c_out if self.kind == "depthwise" else 1
        has_bias = bool(self.bias.abs().max() > 0)
        inputs = [x, s.const("w0", self.w0)]
        fused_bias = has_bias and lam is None and not self.channel_fusion
        if fused_bias:
            inputs.append(s.const("bias", self.bias))
        out = s.op("Conv", inputs, group=groups, **conv_attrs)  # (B, C_out, H', W')
        if lam is not None:
            out = s.op("Mul", [out, s.op("Unsqueeze", [lam, s.ints("axes", [2, 3])])])
        if not self.channel_fusion:
            return s.op("Add", [out, s.const("bias", self.bias.view(-1, 1, 1))]) if has_bias and not fused_bias else out
        phi = self.emit_phi(s, y)
        if self.kind == "channel":
            nb, lb = self.num_blocks, self.latent_dim // self.num_blocks
            z = s.op("Conv", [x, s.const("q", self.q), s.const("q_b", self.q_b)], kernel_shape=[1, 1],
                     strides=[self.stride] * 2, group=nb)  # (B, L, H', W')
            z = s.op("Reshape", [z, s.ints("z_shape", [0, nb, lb, -1])])  # (B, nb, Lb, N)
            phi = s.op("Reshape", [phi, s.ints("phi_shape", [0, nb, lb, lb])])  # (B, nb, Lb, Lb)
            u = s.op("MatMul", [phi, z])  # (B, nb, Lb, N)
            u = s.op("Reshape", [u, s.nchw("u_shape", [0, self.latent_dim], h, w, out)])  # (B, L, H', W')
            dyn = s.op("Conv", [u, s.const("p", self.p), s.const("bias", self.bias)], kernel_shape=[1, 1],
                       group=nb)  # (B, C_out, H', W')
            return s.op("Add", [dyn, out])
        if self.kind == "depthwise":
            lk = self.latent_dim
            z = s.op("Conv", [x, s.const("r", self.r)], group=c_out, **conv_attrs)  # (B, C·L_k, H', W')
            z = s.op("Reshape", [z, s.ints("z_shape", [0, c_out, lk, hw])])  # (B, C, L_k, N)
            phi = s.op("Reshape", [phi, s.ints("phi_shape", [0, lk, lk])])  # (B, L_k, L_k)
            m = s.op("MatMul", [s.const("p", self.p), phi])  # (B, C, L_k)
            m = s.op("Unsqueeze", [m, s.ints("axes2", [2])])  # (B, C, 1, L_k)
            dyn = s.op("MatMul", [m, z])  # (B, C, 1, N)
            dyn = s.op("Reshape", [dyn, s.nchw("out_shape", [0, c_out], h, w, out)])
        else:  # joint
            lat, lk = self.latent_dim, self.kernel_latent_dim
            z = s.op("Conv", [x, s.const("q", self.q)], kernel_shape=[1, 1])  # (B, L, H, W)
            z = s.op("Conv", [z, s.const("r", self.r)], group=lat, **conv_attrs)  # (B, L·L_k, H', W')
            z = s.op("Reshape", [z, s.ints("z_shape", [0, lat * lk, hw])])  # (B, L·L_k, N)
            phi = s.op("Reshape", [phi, s.ints("phi_shape", [0, lat, lat * lk])])  # (B, L, L·L_k)
            u = s.op("MatMul", [phi, z])  # (B, L, N)
            u = s.op("Reshape", [u, s.nchw("u_shape", [0, lat], h, w, out)])
            dyn = s.op("Conv", [u, s.const("p", self.p)], kernel_shape=[1, 1])
        out = s.op("Add", [dyn, out])
        return s.op("Add", [out, s.const("bias", self.bias.view(-1, 1, 1))]) if has_bias else out

    def emit_attention(self, s, y: str) -> str | None:
        """Λ (B, C_out) from the branch features, or None when channel attention is off."""
        if self.scale_w is None:
            return None
        return s.op("HardSigmoid", [s.op("Gemm", [y, s.const("fc_scale", self.scale_w)], transB=1)],
                    alpha=1.0 / 6.0, beta=0.5)

    def emit_phi(self, s, y: str) -> str:
        """Φ' flattened (B, L²) from the branch features (bn2 and the identity folded in)."""
        bias = [s.const("fc_phi_b", self.phi_b)] if self.kind in ("channel", "linear") else []
        return s.op("Gemm", [y, s.const("fc_phi", self.phi_w)] + bias, transB=1)

    def emit_weight(self, s, lam: str | None, phi: str) -> tuple[str, str]:
        """Per-sample ``W(x) = Λ W0 + P Φ' Q`` (B, C_out, C_in) of the weight form, and ``P Φ'``."""
        lat = self.latent_dim
        phi = s.op("Reshape", [phi, s.ints("phi_shape", [0, lat, lat])])  # (B, L, L)
        pphi = s.op("MatMul", [s.const("p", self.p.flatten(1)), phi])  # (B, C_out, L)
        weight = s.op("MatMul", [pphi, s.const("q", self.q.flatten(1))])  # (B, C_out, C_in)
        w0 = s.const("w0", self.w0.flatten(1))  # (C_out, C_in)
        if lam is not None:
            w0 = s.op("Mul", [s.op("Unsqueeze", [lam, s.ints("axes", [2])]), w0])  # (B, C_out, C_in)
        return s.op("Add", [weight, w0]), pphi

    def emit_branch(self, s, x: str, in_shape) -> str:
        """Pooled features -> gated squeeze features (B, S)."""
        fc1 = self.fc1
        if self.kind == "linear":
            pooled = x
        elif self.pool_size == 1:
            # GlobalAveragePool, not ReduceMean: ONNX Runtime runs it on its blocked
            # (NCHWc) layout, so the layer's input needs no reorder back to NCHW.
            pooled = s.op("Flatten", [s.op("GlobalAveragePool", [x])], axis=1)  # (B, C)
        else:
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
            fc1 = fc1.reshape(fc1.shape[0], -1)
            pooled = s.op("AveragePool", [x], kernel_shape=kernel, strides=stride)  # (B, C, 2, 2)
            pooled = s.op("Flatten", [pooled], axis=1)  # (B, C·4), channel-major
        y = s.op("Gemm", [pooled, s.const("fc1", fc1)], transB=1)  # (B, S)
        if not self.se:
            return s.op("Relu", [y])
        gate = s.op("HardSigmoid", [s.op("Gemm", [y, s.const("gate", self.gate)], transB=1)],
                    alpha=1.0 / 6.0, beta=0.5)
        return s.op("Mul", [y, gate])

    def _emit_weight(self, s, x, y, lam, in_shape) -> str:
        c_in, h, w = in_shape[1], in_shape[2], in_shape[3]
        weight, pphi = self.emit_weight(s, lam, self.emit_phi(s, y))
        hw = h * w if isinstance(h, int) and isinstance(w, int) else -1  # -1: symbolic sizes
        xf = s.op("Reshape", [x, s.ints("x_shape", [0, c_in, hw])])  # (B, C_in, N)
        out = s.op("MatMul", [weight, xf])  # (B, C_out, N)
        bias = s.op("MatMul", [pphi, s.const("q_b", self.q_b.view(-1, 1))])  # (B, C_out, 1)
        bias = s.op("Add", [bias, s.const("bias", self.bias.view(-1, 1))])
        out = s.op("Add", [out, bias])
        return s.op("Reshape", [out, s.nchw("out_shape", [0, self.c_out], h, w, x)])

    def _emit_linear(self, s, x, y, lam) -> str:
        inputs = [x, s.const("w0", self.w0)] + ([s.const("b0", self.b0)] if self.b0 is not None else [])
        out = s.op("Gemm", inputs, transB=1)  # (B, C_out)
        if lam is not None:
            out = s.op("Mul", [out, lam])
        if self.channel_fusion:
            nb, lb = self.num_blocks, self.latent_dim // self.num_blocks
            z = s.op("Gemm", [x, s.const("q", self.q), s.const("q_b", self.q_b)], transB=1)  # (B, L)
            z = s.op("Reshape", [z, s.ints("z_shape", [0, nb, lb, 1])])  # (B, nb, Lb, 1)
            phi = s.op("Reshape", [self.emit_phi(s, y), s.ints("phi_shape", [0, nb, lb, lb])])  # (B, nb, Lb, Lb)
            u = s.op("MatMul", [phi, z])  # (B, nb, Lb, 1)
            u = s.op("Flatten", [u], axis=1)  # (B, L)
            out = s.op("Add", [s.op("Gemm", [u, s.const("p", self.p), s.const("bias", self.bias)], transB=1), out])
        elif bool(self.bias.abs().max() > 0):
            out = s.op("Add", [out, s.const("bias", self.bias)])
        return out

