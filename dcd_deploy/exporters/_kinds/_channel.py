"""Channel fusion (paper Eq. 5, 6): the k x k centre-tap kind and the 1x1 pointwise kind.

The dynamic residual ``P Φ'(x) (Q x + t1)`` is a 1x1 term; a k x k layer applies it at
the centre tap with the conv's stride (Section 4.3), a block-diagonal Φ (B > 1, Eq. 6)
makes Q and P grouped 1x1 convolutions. Only the 1x1, stride-1, unpadded, B = 1 layer
has the per-sample weight form ``W(x) = Λ W0 + P Φ' Q``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...layers import pad_input
from .._fold import bn_affine
from .._fused_contract import EPILOGUE, POINTWISE
from ._base import ConvKind, dense_blocks, dense_phi


def emit_crop(s, x: str, pads) -> str:
    """Slice ``x`` by the negative entries of ``pads`` (top, left, bottom, right), if any.

    ONNX Conv pads are non-negative; a centre tap that reads inside the border (a k x k
    layer with less than the centring padding) crops the input of its 1x1 term instead.
    """
    crop = [max(0, -v) for v in pads]
    if not any(crop):
        return x
    top, left, bottom, right = crop
    ends = [-bottom if bottom else 2**62, -right if right else 2**62]
    return s.op(
        "Slice", [x, s.ints("crop_starts", [top, left]), s.ints("crop_ends", ends), s.ints("crop_axes", [2, 3])]
    )


def prefers_weight_form(*, c_in: int, c_out: int, latent: int, hw: int) -> bool:
    """The cost model: the per-sample weight form wins when H·W > C_in·C_out / (C_in + C_out + L).

    Latent form per pixel: C_in·C_out + L·(C_in + C_out + L) MAdds; weight form: C_in·C_out
    per pixel plus C_out·C_in·L once to build W(x).
    """
    return hw * (c_in + c_out + latent) > c_in * c_out


#: The largest centre-tap offset DCDConvEpilogue takes (csrc/openvino/dcd_epilogue.cpp's
#: kMaxStride, which bounds its stride and offset alike).
MAX_OFFSET = 64

#: The largest map (pixels) on which a wide stride-1 1x1 layer runs as the runtime's Conv
#: of W0 + DCDConvEpilogue rather than one DCDPointwise node (:func:`prefers_runtime_conv`).
RUNTIME_CONV_MAX_HW = 14 * 14


def prefers_runtime_conv(*, c_in: int, c_out: int, hw: int) -> bool:
    """The fused 1x1 cost rule: a wide layer on a small map is faster as the runtime's own
    1x1 Conv of W0 followed by DCDConvEpilogue than as one DCDPointwise node.

    Measured on ResNet-50 in OpenVINO, one thread (docs/performance.md, "ResNet: the k x k
    layers fused around OpenVINO's convolution"): at 14x14 and 7x7 with C 256-2048,
    OpenVINO's 1x1 convolution plus the epilogue's extra pass over the (small) output beats
    the fused GEMM; at 56x56 and 28x28 the fused GEMM wins (it writes the output once). The
    channel bounds keep the rule to the widths it was measured at: MobileNetV2's narrower
    layers (at most 960 channels) were measured too and are slower that way at 7x7, 14x14
    and 28x28 (docs/performance.md, "Round seven").
    """
    return hw <= RUNTIME_CONV_MAX_HW and min(c_in, c_out) >= 256 and max(c_in, c_out) >= 1024


class CentreTap(ConvKind):
    """k x k channel fusion: W0 * x plus the 1x1 dynamic residual at the centre tap."""

    name = "channel"

    def fold(self, m: nn.Module, layer: nn.Module, s: torch.Tensor, head_gain: float) -> torch.Tensor | None:
        lat, nb = layer.latent_dim, layer.num_blocks
        lb = lat // nb
        s1, t1 = bn_affine(layer.bn1, lat) if layer.bn1 is not None else (torch.ones(lat), torch.zeros(lat))
        q, p = layer.conv_q.weight.detach().clone(), layer.conv_p.weight.detach().clone()  # grouped 1x1
        phi_w, phi_b, extra = layer.fc_phi.weight.detach() * head_gain, torch.zeros(nb, lb, lb), None
        if layer.bn2 is not None:  # Φ' = diag(s2) Φ + I, t2 through P into the bias
            s2, t2 = bn_affine(layer.bn2, lat)
            phi_w = (phi_w.view(nb, lb, lb, -1) * s2.view(nb, lb, 1, 1)).reshape(phi_w.shape)
            phi_b = phi_b + torch.eye(lb)
            extra = s * F.conv2d(t2.view(1, -1, 1, 1), p, groups=nb).flatten()
        m.register_buffer("q", q * s1.view(-1, 1, 1, 1))
        m.register_buffer("q_b", t1)
        m.register_buffer("p", p * s.view(-1, 1, 1, 1))
        m.register_buffer("phi_b", phi_b.reshape(-1))
        m.register_buffer("phi_w", phi_w)
        return extra

    def residual(self, m: nn.Module, x: torch.Tensor, phi: torch.Tensor, h: int, w: int) -> torch.Tensor:
        b, nb = x.shape[0], m.num_blocks
        lb = m.latent_dim // nb
        z = F.conv2d(pad_input(x, m.tap_pads), m.q, m.q_b, m.stride2, groups=nb)  # (B, L, H', W')
        u = torch.matmul(phi.view(b, nb, lb, lb), z.view(b, nb, lb, h * w))  # (B, nb, Lb, N)
        return F.conv2d(u.view(b, m.latent_dim, h, w), m.p, None, groups=nb)

    def emit_residual(self, m: nn.Module, s, x: str, phi: str, out: str, has_bias: bool, out_shape) -> str:
        h, w = out_shape[2], out_shape[3]
        nb = m.num_blocks
        lb = m.latent_dim // nb
        tap = {"pads": [max(0, v) for v in m.tap_pads]} if any(v > 0 for v in m.tap_pads) else {}
        z = s.op(
            "Conv",
            [emit_crop(s, x, m.tap_pads), s.const("q", m.q), s.const("q_b", m.q_b)],
            kernel_shape=[1, 1],
            strides=list(m.stride2),
            group=nb,
            **tap,
        )  # (B, L, H', W'): centre tap
        z = s.op("Reshape", [z, s.ints("z_shape", [0, nb, lb, -1])])  # (B, nb, Lb, N)
        phi = s.op("Reshape", [phi, s.ints("phi_shape", [0, nb, lb, lb])])  # (B, nb, Lb, Lb)
        u = s.op("MatMul", [phi, z])  # (B, nb, Lb, N)
        u = s.op("Reshape", [u, s.nchw("u_shape", [0, m.latent_dim], h, w, out)])  # (B, L, H', W')
        dyn = s.op(
            "Conv", [u, s.const("p", m.p), s.const("bias", m.bias)], kernel_shape=[1, 1], group=nb
        )  # (B, C_out, H', W'), the bias added once
        return s.op("Add", [dyn, out])

    def residual_madds(self, layer: nn.Module, n_in: int, n_out: int, kk: int) -> tuple[int, int]:
        cin, cout, lat, b = layer.in_channels, layer.out_channels, layer.latent_dim, layer.num_blocks
        latent = (cin * lat + lat * lat + lat * cout) // b * n_out  # Q, Φ, P
        weight = (cout * lat * lat + cout * lat * cin) // (b * b)  # PΦ, (PΦ)Qᵀ
        return latent, weight

    # -- the fused op (docs/design.md#fused-op) -------------------------------------------
    def why_not_fused(self, m: nn.Module) -> str | None:
        (kh, kw), (sh, sw) = m.kernel2, m.stride2
        if kh % 2 == 0 or kw % 2 == 0:  # the centre tap is not a pixel
            return f"{kh}x{kw} kernel (even)"
        if sh != sw:
            return f"stride {sh}x{sw}"
        # The fused ops read x at the centre tap, row and column i * stride + offset: the
        # padding must put that tap on x's pixel grid without a ring, cropped by as much at
        # the top as at the left ("same" padding for the kernel's dilated extent: offset 0;
        # "valid": k // 2); any kernel shape and dilation are the Conv's business.
        top, left, bottom, right = m.tap_pads
        if top != left or max(m.tap_pads) > 0 or -top > MAX_OFFSET:
            return f"padding {tuple(m.pads)}"
        if not m.channel_fusion:
            return "no channel fusion"
        if m.pool_size not in (1, 2):
            return f"pool {m.pool_size}"
        return None

    def fused_op(self, m: nn.Module) -> str:
        """k x k: the runtime's Conv of W0, then DCDConvEpilogue adds the rest."""
        return EPILOGUE

    def fused_attrs(self, m: nn.Module) -> dict[str, int]:
        return {"stride": m.stride, "offset": -m.tap_pads[0]}  # the centre tap's crop (why_not_fused)

    def fused_constants(self, m: nn.Module) -> dict[str, torch.Tensor]:
        """B > 1 (Eq. 6) goes through the same ops as the dense layer with zeros off the
        blocks: Q, P and Φ's head made dense (the head's L² outputs instead of B·Lb²)."""
        # w0 is read by DCDPointwise only (1x1): the Conv + epilogue path keeps the runtime's grouped Conv
        nb = m.num_blocks
        phi_w, phi_b = dense_phi(m.phi_w, m.phi_b, blocks=nb, latent=m.latent_dim)
        return {
            "fc1": m.fc1,
            "gate": m.gate,
            "scale_w": m.scale_w,
            "phi_w": phi_w,  # (S, C_in·P²), ...
            "phi_b": phi_b,
            "q": dense_blocks(m.q, nb),
            "q_b": m.q_b,
            "p": dense_blocks(m.p, nb),  # (L, C_in), (C_out, L)
            "w0": dense_blocks(m.w0, m.groups),  # a grouped 1x1 W0 (groups | B) made dense too
            "bias": m.bias,
        }  # (C_out, C_in), (C_out,)


class Pointwise(CentreTap):
    """1x1 channel fusion (incl. block-diagonal B > 1); stride 1 and B = 1 also in the weight form."""

    def supports_weight_form(self, layer: nn.Module) -> bool:
        return (
            layer.stride == 1 and layer.channel_fusion and layer.num_blocks == 1 and not any(layer.tap_pads)
        )  # a padded 1x1 conv grows the map: not one MatMul

    def choose_form(self, layer: nn.Module, strategy: str, out_shape) -> str:
        if strategy == "latent" or not self.supports_weight_form(layer):
            return "latent"
        if strategy == "weight":
            return "weight"
        if out_shape is None or len(out_shape) != 4:
            return "latent"
        hw = out_shape[-1] * out_shape[-2]
        weight = prefers_weight_form(c_in=layer.in_channels, c_out=layer.out_channels, latent=layer.latent_dim, hw=hw)
        return "weight" if weight else "latent"

    def forward(self, m: nn.Module, x: torch.Tensor, y: torch.Tensor, lam: torch.Tensor | None) -> torch.Tensor:
        if m.strategy != "weight":
            return super().forward(m, x, y, lam)
        b, c_in, h, w = x.shape
        phi = F.linear(y, m.phi_w, m.phi_b).view(b, m.latent_dim, m.latent_dim)  # (B, L, L)
        pphi = torch.matmul(m.p.flatten(1), phi)  # (B, C_out, L)
        weight = torch.matmul(pphi, m.q.flatten(1))  # (B, C_out, C_in)
        w0 = m.w0.flatten(1)  # (C_out, C_in)
        weight = weight + (w0 * lam.view(b, -1, 1) if lam is not None else w0)
        bias = torch.matmul(pphi, m.q_b.view(-1, 1)) + m.bias.view(-1, 1)  # (B, C_out, 1)
        # the bias rides in the batched GEMM (one pass over the output, as a Conv's bias does)
        out = torch.baddbmm(bias, weight, x.reshape(b, c_in, h * w))  # (B, C_out, N)
        return out.view(b, m.c_out, h, w)

    def emit(self, m: nn.Module, s, x: str, y: str, lam: str | None, in_shape, out_shape) -> str:
        if m.strategy != "weight":
            return super().emit(m, s, x, y, lam, in_shape, out_shape)
        c_in, h, w = in_shape[1], in_shape[2], in_shape[3]
        weight, pphi = self.emit_weight(m, s, lam, m.emit_phi(s, y))
        hw = h * w if isinstance(h, int) and isinstance(w, int) else -1  # -1: symbolic sizes
        xf = s.op("Reshape", [x, s.ints("x_shape", [0, c_in, hw])])  # (B, C_in, N)
        out = s.op("MatMul", [weight, xf])  # (B, C_out, N)
        bias = s.op("MatMul", [pphi, s.const("q_b", m.q_b.view(-1, 1))])  # (B, C_out, 1)
        bias = s.op("Add", [bias, s.const("bias", m.bias.view(-1, 1))])
        out = s.op("Add", [out, bias])
        return s.op("Reshape", [out, s.nchw("out_shape", [0, m.c_out], h, w, x)])

    def emit_weight(self, m: nn.Module, s, lam: str | None, phi: str) -> tuple[str, str]:
        lat = m.latent_dim
        phi = s.op("Reshape", [phi, s.ints("phi_shape", [0, lat, lat])])  # (B, L, L)
        pphi = s.op("MatMul", [s.const("p", m.p.flatten(1)), phi])  # (B, C_out, L)
        weight = s.op("MatMul", [pphi, s.const("q", m.q.flatten(1))])  # (B, C_out, C_in)
        w0 = s.const("w0", m.w0.flatten(1))  # (C_out, C_in)
        if lam is not None:
            w0 = s.op("Mul", [s.op("Unsqueeze", [lam, s.ints("axes", [2])]), w0])  # (B, C_out, C_in)
        return s.op("Add", [weight, w0]), pphi

    def fused_op(self, m: nn.Module) -> str:
        """Stride 1: one DCDPointwise node; strided: Conv + DCDConvEpilogue as k x k."""
        return POINTWISE if m.stride == 1 else EPILOGUE
