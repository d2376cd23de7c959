"""DCDConv2d / DCDLinear against an independent dense reference (paper Eq. 5-8).

The reference below never calls the layer's forward (nor its sub-modules): it reads
the parameters, runs the dynamic branch by hand, builds the dense per-sample kernel
W(x) (and, for the release's latent BatchNorms, a per-sample bias) with the paper's
formulas, and applies it with one ``F.conv2d`` / matrix product per sample.

Conventions that the paper leaves open, taken from docs/design.md#release-format:
* hsig(z) = relu6(z + 3) / 3 (range 0..2); SE gate g(y) = y * hsig(A y);
* Φ is the row-major view of ``fc_phi``'s output: Φ[i, j] = phi[i * L + j], the row
  index being the output latent channel; for Eq. 8, Φ[b, a, t] = phi[(b * L + a) * L_k + t]
  (b output latent, a input latent, t latent kernel element);
* a 2x2 adaptive pool is flattened channel-major (c * 4 + i * 2 + j), PyTorch's
  adaptive windows being [floor(i H / 2), ceil((i + 1) H / 2)).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dcd_deploy.layers import DCDConv2d, DCDLinear, default_kernel_latent_dim, default_latent_dim

BATCH = 4
REL_TOL = 1e-8  # float64 throughout; any formula error is O(1) relative


# ----------------------------------------------------------------------------- reference
def ref_hsig(z):
    return torch.clamp(z + 3.0, 0.0, 6.0) / 3.0


def ref_pool(x, p):
    """Adaptive average pool to p x p, flattened channel-major: (B, C * p * p)."""
    b, c, h, w = x.shape
    cells = []
    for i in range(p):
        h0, h1 = (i * h) // p, -(-((i + 1) * h) // p)
        for j in range(p):
            w0, w1 = (j * w) // p, -(-((j + 1) * w) // p)
            cells.append(x[:, :, h0:h1, w0:w1].mean(dim=(2, 3)))
    return torch.stack(cells, dim=2).reshape(b, c * p * p)


def ref_branch(layer, pooled, gate):
    """y = act(FC1 pooled); act is ReLU (paper) or y * hsig(A y) (release SE gate)."""
    h = pooled @ layer.fc[0].weight.T
    if gate == "relu":
        return h.clamp_min(0.0)
    a = layer.fc[1].fc[0].weight
    return h * ref_hsig(h @ a.T)


def bn_affine(bn):
    """Eval-mode BatchNorm as z -> s * z + t."""
    s = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    return s, bn.bias - bn.running_mean * s


def latent_residual(p_mat, phi, q_mat, bn1=None, bn2=None):
    """One block's dense residual (C_out_b x C_in_b) and its bias (C_out_b).

    Plain: P Φ Qᵀ, no bias. Release (z = bn1(Qᵀx), v = bn2(Φ z) + z, out = P v):
    P (diag(s2) Φ + I) diag(s1) Qᵀ with bias P ((diag(s2) Φ + I) t1 + t2).
    """
    if bn1 is None:
        return p_mat @ phi @ q_mat.T, torch.zeros(p_mat.shape[0], dtype=p_mat.dtype)
    (s1, t1), (s2, t2) = bn1, bn2
    mix = torch.diag(s2) @ phi + torch.eye(phi.shape[0], dtype=phi.dtype)
    return p_mat @ mix @ torch.diag(s1) @ q_mat.T, p_mat @ (mix @ t1 + t2)


def block_residual(p_full, q_full, phi_flat, nb, bn1=None, bn2=None):
    """⊕_b P_b Φ_b Q_bᵀ (Eq. 6) from grouped-conv weights.

    p_full: (C_out, L / nb) rows of each P_b stacked; q_full: (L, C_in / nb) rows of
    each Q_bᵀ stacked (the grouped 1x1 conv weights).
    """
    c_out, lb = p_full.shape
    cob = c_out // nb
    phis = phi_flat.reshape(nb, lb, lb)
    mats, biases = [], []
    for b in range(nb):
        p_b = p_full[b * cob : (b + 1) * cob]  # (C_out/B, L/B)
        q_b = q_full[b * lb : (b + 1) * lb].T  # (C_in/B, L/B)
        bn1_b = None if bn1 is None else tuple(v[b * lb : (b + 1) * lb] for v in bn1)
        bn2_b = None if bn2 is None else tuple(v[b * lb : (b + 1) * lb] for v in bn2)
        m, bias = latent_residual(p_b, phis[b], q_b, bn1_b, bn2_b)
        mats.append(m)
        biases.append(bias)
    return torch.block_diag(*mats), torch.cat(biases)


def reference_conv(layer, x, *, gate, pool_size, form, num_blocks=1, latent_bn=False, attention=True, fusion=True):
    """Per-sample dense W(x) applied with F.conv2d. Returns (out, kernels, residuals)."""
    k, stride = layer.conv.kernel_size[0], layer.conv.stride[0]
    groups = layer.conv.groups
    w0 = layer.conv.weight  # (C_out, C_in / g, k, k)
    c_out = w0.shape[0]
    y = ref_branch(layer, ref_pool(x, pool_size), gate)
    outs, kernels, residuals = [], [], []
    for n in range(x.shape[0]):
        lam = ref_hsig(y[n] @ layer.fc_scale.weight.T) if attention else torch.ones(c_out, dtype=x.dtype)
        w = lam.view(-1, 1, 1, 1) * w0
        res = torch.zeros_like(w)
        bias = torch.zeros(c_out, dtype=x.dtype)
        if fusion:
            phi_flat = y[n] @ layer.fc_phi.weight.T
            if form == "channel":  # Eq. 5 / 6; k x k: 1x1 residual at the centre tap
                bns = (bn_affine(layer.bn1), bn_affine(layer.bn2)) if latent_bn else (None, None)
                m, bias = block_residual(
                    layer.conv_p.weight[:, :, 0, 0], layer.conv_q.weight[:, :, 0, 0], phi_flat, num_blocks, *bns
                )
                res[:, :, k // 2, k // 2] = m
            elif form == "depthwise":  # Eq. 7: C x k² matrices, R is k² x L_k
                lk = layer.weight_p.shape[1]
                r_mat = layer.kernel_r.reshape(lk, k * k).T
                m = layer.weight_p @ phi_flat.reshape(lk, lk) @ r_mat.T  # (C, k²)
                res = m.reshape(c_out, 1, k, k)
            elif form == "joint":  # Eq. 8: W[o,i,s] += Σ P[o,b] Φ[b,a,t] Q[i,a] R[s,t]
                p_mat = layer.conv_p.weight[:, :, 0, 0]  # (C_out, L)
                q_mat = layer.conv_q.weight[:, :, 0, 0].T  # (C_in, L)
                lat = p_mat.shape[1]
                lk = layer.kernel_r.shape[0]
                r_mat = layer.kernel_r.reshape(lk, k * k).T  # (k², L_k)
                phi = phi_flat.reshape(lat, lat, lk)
                res = torch.einsum("ob,bat,ia,st->ois", p_mat, phi, q_mat, r_mat).reshape(w.shape)
            else:
                raise AssertionError(form)
        kernel = w + res
        outs.append(F.conv2d(x[n : n + 1], kernel, bias, stride, k // 2, 1, groups))
        kernels.append(kernel)
        residuals.append(res)
    return torch.cat(outs), torch.stack(kernels), torch.stack(residuals)


def reference_linear(layer, x, *, gate, num_blocks=1, latent_bn=False, attention=True, fusion=True):
    """out = (Λ W + ⊕ P_b Φ_b Q_bᵀ) x + Λ ⊙ b (+ latent-BN bias), per sample."""
    y = ref_branch(layer, x, gate)
    w, b0 = layer.cls.weight, layer.cls.bias
    outs, kernels = [], []
    for n in range(x.shape[0]):
        lam = ref_hsig(y[n] @ layer.fc_scale.weight.T) if attention else torch.ones(w.shape[0], dtype=x.dtype)
        kernel = lam[:, None] * w
        bias = lam * b0 if b0 is not None else torch.zeros_like(lam)
        if fusion:
            p_full = layer.cls_p.weight.reshape(w.shape[0], -1)
            q_full = layer.cls_q.weight.reshape(p_full.shape[1] * num_blocks, -1)
            bns = (bn_affine(layer.bn1), bn_affine(layer.bn2)) if latent_bn else (None, None)
            m, extra = block_residual(p_full, q_full, y[n] @ layer.fc_phi.weight.T, num_blocks, *bns)
            kernel = kernel + m
            bias = bias + extra
        outs.append(kernel @ x[n] + bias)
        kernels.append(kernel)
    return torch.stack(outs), torch.stack(kernels)


# ----------------------------------------------------------------------------- helpers
@torch.no_grad()
def randomize(module):
    """Random non-zero values for every parameter and BN buffer; float64, eval mode."""
    for p in module.parameters():
        if p.dim() >= 2:
            p.normal_(0.0, 1.0 / math.sqrt(p[0].numel()))
        else:
            p.normal_(0.0, 0.5)
    for m in module.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.weight.uniform_(0.5, 1.5)
            m.bias.normal_(0.0, 0.5)
            m.running_mean.normal_(0.0, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    return module.double().eval()


def make_input(b, c, h, w):
    """Per-sample, per-channel offsets so pooled features (hence Λ, Φ) differ in O(1)."""
    return (torch.randn(b, c, h, w) + 1.5 * torch.randn(b, c, 1, 1)).double()


def assert_rel_close(out, ref, tol=REL_TOL):
    assert out.shape == ref.shape
    scale = ref.abs().max().item()
    assert scale > 0
    err = (out - ref).abs().max().item()
    assert err <= tol * scale, f"max abs err {err:.3e} vs output scale {scale:.3e}"


def assert_dynamic(kernels, residuals=None, base=None):
    """The test is meaningful: W(x) differs per sample and the residual is not negligible."""
    assert (kernels - kernels[:1]).abs().max() > 0.05 * kernels.abs().max()
    if residuals is not None:
        assert residuals.norm() > 0.1 * base.norm()


# ----------------------------------------------------------------------------- DCDConv2d
# id: (ctor args, ctor kwargs, reference form, input H x W)
CONV_CASES = {
    # Table 1 rows, 1x1 general form (Eq. 5)
    "1x1-lam-phi": ((24, 32), {}, "channel", (7, 7)),
    "1x1-phi-only": ((24, 32), {"channel_attention": False}, "channel", (7, 7)),
    "1x1-lam-only": ((24, 32), {"channel_fusion": False}, "channel", (7, 7)),
    "1x1-reduce-stride2-odd": ((40, 16), {"stride": 2}, "channel", (9, 11)),
    "1x1-se-gate": ((24, 32), {"gate": "se", "reduction": 4}, "channel", (6, 8)),
    # sparse dynamic residual (Eq. 6)
    "1x1-B2": ((24, 32), {"num_blocks": 2, "latent_dim": 8}, "channel", (7, 7)),
    "1x1-B4-phi-only": ((32, 48), {"num_blocks": 4, "latent_dim": 8, "channel_attention": False}, "channel", (5, 7)),
    # depthwise (Eq. 7)
    "dw3": ((16, 16, 3, 1), {"groups": 16, "reduction": 4}, "depthwise", (7, 7)),
    "dw3-stride2-odd": ((16, 16, 3, 2), {"groups": 16, "reduction": 4}, "depthwise", (9, 7)),
    "dw5": ((12, 12, 5, 1), {"groups": 12, "reduction": 2}, "depthwise", (8, 9)),
    "dw5-stride2-phi-only": (
        (12, 12, 5, 2),
        {"groups": 12, "reduction": 2, "channel_attention": False},
        "depthwise",
        (11, 11),
    ),
    # k x k by channel fusion alone (1x1 residual at the centre tap)
    "3x3-channel": ((16, 24, 3, 1), {"reduction": 4}, "channel", (7, 7)),
    "3x3-channel-stride2-odd": ((16, 24, 3, 2), {"reduction": 4}, "channel", (9, 11)),
    "5x5-channel-stride2": ((16, 16, 5, 2), {"reduction": 4}, "channel", (10, 9)),
    # joint fusion (Eq. 8)
    "3x3-joint": ((32, 32, 3, 1), {"joint_fusion": True, "reduction": 4}, "joint", (7, 7)),
    "3x3-joint-stride2": (
        (24, 40, 3, 2),
        {"joint_fusion": True, "latent_dim": 3, "kernel_latent_dim": 5, "reduction": 4},
        "joint",
        (9, 8),
    ),
    "5x5-joint": ((24, 24, 5, 1), {"joint_fusion": True, "latent_dim": 2, "reduction": 4}, "joint", (7, 6)),
    # the authors' release variant (SE gate, latent BNs, 2x2 pool where they use it)
    "release-expand-pool2": (
        (16, 48),
        {"pool_size": 2, "gate": "se", "latent_bn": True, "latent_dim": 6, "squeeze": 16},
        "channel",
        (7, 7),
    ),
    "release-reduce-pool1": (
        (48, 16),
        {"gate": "se", "latent_bn": True, "latent_dim": 4, "squeeze": 12},
        "channel",
        (7, 7),
    ),
    "release-3x3-stride2-pool2": (
        (16, 16, 3, 2),
        {"pool_size": 2, "gate": "se", "latent_bn": True, "latent_dim": 8, "squeeze": 8},
        "channel",
        (9, 9),
    ),
    "release-B2": (
        (16, 32),
        {"pool_size": 2, "gate": "se", "latent_bn": True, "latent_dim": 8, "num_blocks": 2, "squeeze": 16},
        "channel",
        (5, 6),
    ),
}


@pytest.mark.parametrize("case", list(CONV_CASES), ids=list(CONV_CASES))
def test_conv_matches_dense_reference(case):
    args, kw, form, (h, w) = CONV_CASES[case]
    layer = randomize(DCDConv2d(*args, **kw))
    x = make_input(BATCH, args[0], h, w)
    with torch.no_grad():
        out = layer(x)
        ref, kernels, residuals = reference_conv(
            layer,
            x,
            gate=kw.get("gate", "relu"),
            pool_size=kw.get("pool_size", 1),
            form=form,
            num_blocks=kw.get("num_blocks", 1),
            latent_bn=kw.get("latent_bn", False),
            attention=kw.get("channel_attention", True),
            fusion=kw.get("channel_fusion", True),
        )
    stride = args[3] if len(args) > 3 else kw.get("stride", 1)
    k = args[2] if len(args) > 2 else 1
    expected_hw = ((h + 2 * (k // 2) - k) // stride + 1, (w + 2 * (k // 2) - k) // stride + 1)
    assert out.shape == (BATCH, args[1], *expected_hw)
    assert_rel_close(out, ref)
    if kw.get("channel_attention", True) or kw.get("channel_fusion", True):
        assert_dynamic(kernels, residuals if kw.get("channel_fusion", True) else None, layer.conv.weight)


def test_reference_detects_transposed_phi():
    """Guard on the oracle itself: a transposed Φ is visibly different from the layer."""
    layer = randomize(DCDConv2d(24, 32, latent_dim=6))
    x = make_input(BATCH, 24, 5, 5)
    with torch.no_grad():
        out = layer(x)
        w = layer.fc_phi.weight.view(6, 6, -1).transpose(0, 1).reshape(36, -1).clone()
        layer.fc_phi.weight.copy_(w)
        ref, _, _ = reference_conv(layer, x, gate="relu", pool_size=1, form="channel")
    assert (out - ref).abs().max() > 0.01 * ref.abs().max()


def test_release_form_has_per_sample_bias():
    """With latent BNs, W(x) x alone is not the output: the bias P((s2Φ+I)t1+t2) differs per sample."""
    layer = randomize(DCDConv2d(16, 32, gate="se", latent_bn=True, latent_dim=4, squeeze=8))
    x = make_input(2, 16, 5, 5)
    with torch.no_grad():
        out = layer(x)
        _, kernels, _ = reference_conv(layer, x, gate="se", pool_size=1, form="channel", latent_bn=True)
        no_bias = torch.cat([F.conv2d(x[n : n + 1], kernels[n]) for n in range(2)])
    bias = (out - no_bias)[:, :, 2, 2]  # (2, C_out)
    assert bias.abs().max() > 0.01 * out.abs().max()
    assert (bias[0] - bias[1]).abs().max() > 0.01 * bias.abs().max()


# ----------------------------------------------------------------------------- DCDLinear
LINEAR_CASES = {
    "plain": ((64, 40), {}),
    "phi-only": ((64, 40), {"channel_attention": False}),
    "lam-only": ((64, 40), {"channel_fusion": False}),
    "B2": ((64, 40), {"latent_dim": 8, "num_blocks": 2}),
    "release": ((64, 40), {"latent_dim": 8, "squeeze": 16, "gate": "se", "latent_bn": True}),
    "release-B2": ((64, 40), {"latent_dim": 8, "squeeze": 16, "gate": "se", "latent_bn": True, "num_blocks": 2}),
    "no-bias": ((48, 24), {"bias": False, "gate": "se"}),
}


@pytest.mark.parametrize("case", list(LINEAR_CASES), ids=list(LINEAR_CASES))
def test_linear_matches_dense_reference(case):
    args, kw = LINEAR_CASES[case]
    layer = randomize(DCDLinear(*args, **kw))
    x = (torch.randn(BATCH, args[0]) + 1.0).double() * torch.rand(BATCH, 1).double().add(0.5)
    with torch.no_grad():
        out = layer(x)
        ref, kernels = reference_linear(
            layer,
            x,
            gate=kw.get("gate", "relu"),
            num_blocks=kw.get("num_blocks", 1),
            latent_bn=kw.get("latent_bn", False),
            attention=kw.get("channel_attention", True),
            fusion=kw.get("channel_fusion", True),
        )
    assert out.shape == (BATCH, args[1])
    assert_rel_close(out, ref)
    assert_dynamic(kernels)


# ----------------------------------------------------------------------------- defaults
def hand_latent_dim(c):
    """floor(C / 2^m) with m = floor(log2 sqrt C), in integers: the largest m with 4^m <= C."""
    m = 0
    while 4 ** (m + 1) <= c:
        m += 1
    return c // 2**m


@pytest.mark.parametrize(
    "c, expected",
    [(1, 1), (2, 2), (3, 3), (4, 2), (15, 7), (16, 4), (63, 15), (64, 8), (96, 12), (160, 20), (320, 20), (1280, 40)],
)
def test_default_latent_dim_hand_values(c, expected):
    assert hand_latent_dim(c) == expected  # the oracle agrees with the hand computation
    assert default_latent_dim(c) == expected


def test_default_latent_dim_satisfies_paper_constraint_and_formula():
    for c in range(1, 5000):
        lat = default_latent_dim(c)
        assert lat == hand_latent_dim(c), c
        assert lat * lat <= 4 * c  # L < 2 sqrt(C): halving stopped as soon as 2^m <= sqrt C < 2^(m+1)


@pytest.mark.parametrize("k, expected", [(1, 1), (3, 4), (5, 12), (7, 24)])
def test_default_kernel_latent_dim(k, expected):
    assert default_kernel_latent_dim(k) == expected


def test_layers_use_paper_default_dims():
    assert DCDConv2d(64, 96).latent_dim == 8  # L of min(C_in, C_out)
    assert DCDConv2d(160, 160).latent_dim == 20
    assert DCDConv2d(16, 16, 3, groups=16).latent_dim == 4  # depthwise: L_k = floor(9 / 2)
    assert DCDConv2d(16, 16, 5, groups=16).latent_dim == 12
    joint = DCDConv2d(64, 64, 3, joint_fusion=True)  # L = default(C / L_k) = default(16) = 4
    assert (joint.latent_dim, joint.form.kernel_latent_dim) == (4, 4)
    assert joint.latent_dim**2 * joint.form.kernel_latent_dim <= 64  # L² L_k <= C (Section 4.3)
    assert DCDLinear(1280, 1000).latent_dim == 62  # L of min(in, out) = 1000 // 2^4


# ----------------------------------------------------------------------------- params
def n_params(m):
    return sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize("c, r", [(64, 16), (256, 16), (96, 8)])
def test_param_count_matches_section_3_3(c, r):
    """C² + 2CL + (2C + L²) C / r for a 1x1 layer with Λ and Φ and no biases."""
    lat = hand_latent_dim(c)
    layer = DCDConv2d(c, c, reduction=r, pool_size=1, gate="relu", latent_bn=False)
    assert layer.latent_dim == lat
    assert n_params(layer) == c * c + 2 * c * lat + (2 * c + lat * lat) * c // r


@pytest.mark.parametrize("attention, fusion", [(True, True), (True, False), (False, True)])
def test_param_count_per_table1_row(attention, fusion):
    """Each Table 1 row pays only for what it uses: W0, [Λ] the C/r FC and its C-output head,
    [Φ] P, Q and the L²-output head; the static row is just W0."""
    c, r = 64, 16
    lat, sq = hand_latent_dim(c), c // r
    layer = DCDConv2d(c, c, reduction=r, channel_attention=attention, channel_fusion=fusion)
    expected = c * c
    if attention or fusion:
        expected += c * sq  # the first FC
    if attention:
        expected += sq * c
    if fusion:
        expected += 2 * c * lat + sq * lat * lat
    assert n_params(layer) == expected


# ----------------------------------------------------------------------------- invalid configs
@pytest.mark.parametrize(
    "build",
    [
        lambda: DCDConv2d(8, 8, 2),  # even kernel with channel fusion (no centre tap)
        lambda: DCDConv2d(8, 8, (3, 2)),  # even kernel along one axis
        lambda: DCDConv2d(8, 12, 3, groups=8),  # groups does not divide the outputs
        lambda: DCDConv2d(8, 8, 3, groups=2, joint_fusion=True),  # joint fusion is dense only
        lambda: DCDConv2d(12, 12, 1, groups=2, num_blocks=3),  # B not a multiple of groups
        lambda: DCDConv2d(8, 8, 1, groups=8),  # depthwise 1x1
        lambda: DCDConv2d(8, 8, 3, 2, padding="same"),  # as nn.Conv2d: no strided "same"
        lambda: DCDConv2d(8, 8, 3, padding="full"),
        lambda: DCDConv2d(8, 8, 3, padding=-1),
        lambda: DCDConv2d(8, 8, 3, dilation=0),
        lambda: DCDConv2d(12, 12, num_blocks=5),  # B does not divide channels
        lambda: DCDConv2d(16, 24, latent_dim=6, num_blocks=4),  # B does not divide L
        lambda: DCDConv2d(16, 16, 3, groups=16, num_blocks=2),  # B only for channel fusion
        lambda: DCDConv2d(16, 16, pool_size=3),
        lambda: DCDConv2d(16, 16, gate="sigmoid"),
        lambda: DCDLinear(10, 12, num_blocks=4),
        lambda: DCDLinear(16, 16, latent_dim=6, num_blocks=4),
        lambda: DCDConv2d(16, 16, channel_attention=False, channel_fusion=False),  # static: use Conv2d
        lambda: DCDLinear(16, 16, channel_attention=False, channel_fusion=False),
    ],
    ids=[
        "even-k",
        "even-k-pair",
        "groups-not-dividing",
        "joint-grouped",
        "B-not-multiple-of-groups",
        "dw-1x1",
        "same-strided",
        "bad-padding-string",
        "negative-padding",
        "zero-dilation",
        "B-channels",
        "B-latent",
        "B-depthwise",
        "pool-3",
        "bad-gate",
        "linear-B-channels",
        "linear-B-latent",
        "both-off",
        "linear-both-off",
    ],
)
def test_invalid_config_raises_value_error(build):
    with pytest.raises(ValueError):
        build()
