"""DCDConv2d / DY-Conv / CondConv as drop-ins for nn.Conv2d: padding, dilation, stride,
groups, bias and non-square kernels, in the training form and in the deploy form.

Oracles, none of which calls the layer's forward:
* ``nn.Conv2d`` / ``F.conv2d`` itself: with the dynamic heads at zero (Λ = hsig(0) = 1,
  Φ = 0) a DCD layer is its ``W0`` convolution plus its bias;
* the paper's formula per sample: ``W(x) = Λ W0 + P Φ Qᵀ`` (Eq. 5; block-diagonal Eq. 6;
  depthwise ``P Φ Rᵀ`` Eq. 7; the tensor form Eq. 8) built explicitly, the 1x1 residual
  written into the centre tap of the k x k kernel, then one ``F.conv2d(x_b, W(x_b), b)``
  with the layer's own padding, dilation, stride and groups;
* for DY-Conv / CondConv, ``Σ π_k W_k`` per sample applied the same way.
Everything runs in float64, so any geometry mistake is O(1) while rounding is ~1e-15.
"""

from __future__ import annotations

import inspect
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dcd_deploy.exporters._deploy_dcd import DeployDCD
from dcd_deploy.exporters._deploy_mixture import DeployMixture
from dcd_deploy.layers import CondConv2d, DCDConv2d, DCDLinear, DynamicConv2d

BATCH = 3
EXACT = 1e-12  # float64; relative to the output's scale

# id: (in, out, kernel, stride, padding, dilation, groups, bias, extra DCD options, H, W)
GEOMETRIES = {
    "1x1": (16, 24, 1, 1, None, 1, 1, False, {}, 7, 6),
    "1x1-bias-stride2": (16, 24, 1, 2, 0, 1, 1, True, {}, 9, 8),
    "1x1-padded": (16, 16, 1, 1, 1, 1, 1, True, {}, 5, 6),
    "1x1-groups4": (16, 24, 1, 1, 0, 1, 4, True, {}, 6, 7),
    "1x1-groups2-B4": (16, 24, 1, 1, 0, 1, 2, False, {"num_blocks": 4}, 6, 5),
    "3x3-pad1-bias": (16, 16, 3, 1, 1, 1, 1, True, {}, 8, 7),
    "3x3-valid": (16, 12, 3, 1, "valid", 1, 1, True, {}, 9, 8),
    "3x3-pad0-stride2": (16, 12, 3, 2, 0, 1, 1, False, {}, 10, 9),
    "3x3-same-dil2": (16, 16, 3, 1, "same", 2, 1, True, {}, 9, 10),
    "3x3-pad2-dil2-stride2": (16, 16, 3, 2, 2, 2, 1, True, {}, 11, 9),
    "3x3-overpadded": (12, 16, 3, 1, 3, 1, 1, False, {}, 6, 6),
    "3x3-pad-pair-stride-pair": (16, 16, 3, (2, 1), (1, 0), (1, 2), 1, True, {}, 9, 10),
    "5x5-pad1": (12, 16, 5, 1, 1, 1, 1, True, {}, 9, 9),
    "1x3-kernel": (16, 16, (1, 3), 1, (0, 1), 1, 1, True, {}, 6, 7),
    "3x3-groups2": (16, 24, 3, 1, 1, 1, 2, True, {}, 7, 7),
    "3x3-groups4-valid-stride2": (16, 16, 3, 2, "valid", 1, 4, True, {}, 11, 10),
    "3x3-channel-multiplier": (8, 16, 3, 1, 1, 1, 8, True, {}, 6, 7),  # groups == in != out: Eq. 6, B = 8
    "dw3-pad1-stride2": (16, 16, 3, 2, 1, 1, 16, True, {}, 9, 8),
    "dw3-valid": (12, 12, 3, 1, "valid", 1, 12, False, {}, 8, 9),
    "dw3-same-dil2": (12, 12, 3, 1, "same", 2, 12, True, {}, 9, 8),
    "dw2-same-even": (12, 12, 2, 1, "same", 1, 12, True, {}, 7, 8),  # asymmetric padding
    "dw5-pad1": (12, 12, 5, 1, 1, 1, 12, True, {}, 9, 9),
    "joint3-valid": (16, 16, 3, 1, 0, 1, 1, True, {"joint_fusion": True, "latent_dim": 3}, 8, 8),
    "joint3-dil2-stride2": (16, 24, 3, 2, 2, 2, 1, False, {"joint_fusion": True, "latent_dim": 3}, 10, 9),
    "joint2-same-even": (16, 16, 2, 1, "same", 1, 1, True, {"joint_fusion": True, "latent_dim": 3}, 7, 6),
    "lam-only-4x4": (16, 16, 4, 2, 1, 1, 1, True, {"channel_fusion": False}, 9, 9),
    "release-3x3-valid": (
        16,
        32,
        3,
        1,
        "valid",
        1,
        1,
        True,
        {"gate": "se", "latent_bn": True, "pool_size": 2, "latent_dim": 6, "squeeze": 8},
        8,
        9,
    ),
    "release-3x3-dil2-stride2": (
        16,
        16,
        3,
        2,
        1,
        2,
        1,
        True,
        {"gate": "se", "latent_bn": True, "latent_dim": 4, "squeeze": 8},
        9,
        10,
    ),
}

#: The subset the paper's formula covers without the release's per-sample latent bias.
PAPER_FORM = [k for k, v in GEOMETRIES.items() if not v[8].get("latent_bn")]


def build(case: str) -> tuple[nn.Conv2d, DCDConv2d, torch.Tensor]:
    c_in, c_out, k, s, p, d, g, bias, extra, h, w = GEOMETRIES[case]
    torch.manual_seed(sum(map(ord, case)))
    conv = nn.Conv2d(c_in, c_out, k, s, 0 if p is None else p, d, g, bias=bias).double()
    if p is None:
        conv.padding = tuple(di * (ki // 2) for ki, di in zip(conv.kernel_size, conv.dilation))
    layer = DCDConv2d(c_in, c_out, k, s, p, d, g, bias, reduction=4, **extra).double()
    x = (torch.randn(BATCH, c_in, h, w) + 1.5 * torch.randn(BATCH, c_in, 1, 1)).double()
    return conv, layer, x


@torch.no_grad()
def randomize(module: nn.Module) -> nn.Module:
    """Random O(1)-effect values for every parameter and BN buffer; float64, eval mode."""
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


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    assert out.shape == ref.shape, (out.shape, ref.shape)
    return float((out - ref).abs().max() / ref.abs().max())


# ----------------------------------------------------------------------------- the paper's W(x)
def hsig(z):
    return torch.clamp(z + 3.0, 0.0, 6.0) / 3.0


def pooled(x, p):
    if p == 1:
        return x.mean(dim=(2, 3))
    return F.adaptive_avg_pool2d(x, p).flatten(1)  # channel-major (c, i, j)


def paper_kernels(layer: DCDConv2d, x: torch.Tensor) -> torch.Tensor:
    """W(x) for every sample (B, C_out, C_in / g, kh, kw), from the parameters alone."""
    w0 = layer.conv.weight
    c_out, c_in_g, kh, kw = w0.shape
    y = torch.relu(pooled(x, layer.pool_size) @ layer.fc[0].weight.T)
    kernels = []
    for n in range(x.shape[0]):
        lam = hsig(y[n] @ layer.fc_scale.weight.T) if layer.fc_scale is not None else torch.ones(c_out).double()
        kernel = lam.view(-1, 1, 1, 1) * w0
        if layer.fc_phi is not None:
            phi = y[n] @ layer.fc_phi.weight.T
            if layer.form.depthwise:  # Eq. 7: P Φ Rᵀ on the C x k² matrix
                lk = layer.latent_dim
                r_mat = layer.kernel_r.reshape(lk, kh * kw).T
                kernel = kernel + (layer.weight_p @ phi.view(lk, lk) @ r_mat.T).view(c_out, 1, kh, kw)
            elif layer.form.joint:  # Eq. 8
                p_mat, q_mat = layer.conv_p.weight[:, :, 0, 0], layer.conv_q.weight[:, :, 0, 0].T
                lat, lk = p_mat.shape[1], layer.kernel_r.shape[0]
                r_mat = layer.kernel_r.reshape(lk, kh * kw).T
                res = torch.einsum("ob,bat,ia,st->ois", p_mat, phi.view(lat, lat, lk), q_mat, r_mat)
                kernel = kernel + res.reshape(kernel.shape)
            else:  # Eq. 5 / 6, the 1x1 residual at the centre tap
                nb = layer.num_blocks
                lb = layer.latent_dim // nb
                p_rows, q_rows = layer.conv_p.weight[:, :, 0, 0], layer.conv_q.weight[:, :, 0, 0]
                phis = phi.view(nb, lb, lb)
                cob = c_out // nb
                blocks = [p_rows[b * cob : (b + 1) * cob] @ phis[b] @ q_rows[b * lb : (b + 1) * lb] for b in range(nb)]
                dense = torch.block_diag(*blocks)  # (C_out, C_in), zero outside W0's groups
                groups = layer.groups
                per_group = [
                    dense[o, (o // (c_out // groups)) * c_in_g : (o // (c_out // groups) + 1) * c_in_g]
                    for o in range(c_out)
                ]
                kernel = kernel.clone()
                kernel[:, :, kh // 2, kw // 2] += torch.stack(per_group)
                assert torch.allclose(torch.stack(per_group).abs().sum(), dense.abs().sum())
        kernels.append(kernel)
    return torch.stack(kernels)


def paper_output(layer: DCDConv2d, x: torch.Tensor, kernels: torch.Tensor) -> torch.Tensor:
    conv = layer.conv
    return torch.cat(
        [
            F.conv2d(x[n : n + 1], kernels[n], layer.bias, conv.stride, conv.padding, conv.dilation, conv.groups)
            for n in range(x.shape[0])
        ]
    )


# ----------------------------------------------------------------------------- tests
def test_drop_in_signature_of_the_issue():
    layer = DCDConv2d(64, 64, 3, padding=1, bias=True)
    conv = nn.Conv2d(64, 64, 3, padding=1, bias=True)
    assert (layer.conv.kernel_size, layer.conv.padding, layer.conv.stride) == (
        conv.kernel_size,
        conv.padding,
        conv.stride,
    )
    assert layer.bias.shape == conv.bias.shape
    layer = layer.double().eval()
    layer.zero_dynamic_heads()
    conv = conv.double()
    with torch.no_grad():
        conv.weight.copy_(layer.conv.weight)
        conv.bias.copy_(layer.bias)
        x = torch.randn(2, 64, 9, 11, dtype=torch.float64)
        assert rel_err(layer(x), conv(x)) <= EXACT


def test_defaults_are_the_papers():
    """padding None is k // 2, no bias, dense: the zoo's layers are unchanged."""
    layer = DCDConv2d(16, 16, 3, 2)
    assert layer.conv.padding == (1, 1) and layer.conv.dilation == (1, 1) and layer.bias is None
    assert (layer.kernel_size, layer.stride, layer.groups, layer.num_blocks) == (3, 2, 1, 1)
    assert "bias" not in dict(layer.named_parameters())


def test_every_argument_of_nn_conv2d_and_nn_linear_is_taken():
    """``nn.Conv2d``'s own signature is the oracle: a model written for it (``device=``,
    ``dtype=`` as factory code passes them) builds with the dynamic layers too."""
    conv = set(inspect.signature(nn.Conv2d).parameters)
    for layer in (DCDConv2d, DynamicConv2d, CondConv2d):
        assert conv <= set(inspect.signature(layer).parameters), layer.__name__
    assert set(inspect.signature(nn.Linear).parameters) <= set(inspect.signature(DCDLinear).parameters)


FACTORIES = {
    "dcd": lambda **kw: DCDConv2d(8, 16, 3, padding=1, bias=True, latent_bn=True, **kw),
    "linear": lambda **kw: DCDLinear(8, 4, **kw),
    "dyconv": lambda **kw: DynamicConv2d(8, 8, 3, bias=True, **kw),
    "condconv": lambda **kw: CondConv2d(8, 8, 1, **kw),
}


@pytest.mark.parametrize("make", FACTORIES.values(), ids=FACTORIES)
def test_device_and_dtype_make_the_layer_there(make):
    """As ``nn.Conv2d(..., dtype=torch.float64)``: every floating parameter and buffer of
    that type, the values of the layer made from the same seed and cast; ``device="meta"``
    makes no storage."""
    torch.manual_seed(0)
    want = make().double().state_dict()
    torch.manual_seed(0)
    got = make(device="cpu", dtype=torch.float64).state_dict()
    assert list(got) == list(want)
    for key, value in got.items():
        assert value.dtype == want[key].dtype and torch.equal(value, want[key]), key
    assert any(v.dtype == torch.float64 for v in got.values())
    assert all(p.is_meta for p in make(device="meta").parameters())


@pytest.mark.parametrize("case", list(GEOMETRIES))
def test_zero_heads_equal_the_convolution(case):
    conv, _, x = build(case)
    _, _, _, _, _, _, _, _, extra, _, _ = GEOMETRIES[case]
    layer = DCDConv2d.from_conv(conv, reduction=4, **extra).eval()
    with torch.no_grad():
        randomize_keeping_heads(layer)
        ref = conv(x)
        assert rel_err(layer(x), ref) <= EXACT
        layer.train()  # BN in the latent path sees zeros (or, release, a zero P): still the conv
        assert rel_err(layer(x), ref) <= EXACT


@torch.no_grad()
def randomize_keeping_heads(layer: DCDConv2d) -> None:
    """Random Q, R, P (unless from_conv zeroed P) and branch: only the zero heads keep the layer static."""
    keep = {id(layer.conv.weight)} | {id(p) for p in (layer.bias,) if p is not None}
    keep |= {id(h.weight) for h in (layer.fc_phi, layer.fc_scale) if h is not None}
    if layer.bn2 is not None:
        keep.add(id(layer.conv_p.weight))
    for p in layer.parameters():
        if id(p) not in keep:
            p.normal_(0.0, 1.0 / math.sqrt(p[0].numel()) if p.dim() >= 2 else 0.5)


@pytest.mark.parametrize("case", PAPER_FORM)
def test_layer_is_the_convolution_with_the_papers_kernel(case):
    _, layer, x = build(case)
    layer = randomize(layer)
    with torch.no_grad():
        kernels = paper_kernels(layer, x)
        out = layer(x)
        ref = paper_output(layer, x, kernels)
    assert rel_err(out, ref) <= EXACT
    # the case is meaningful: W(x) differs per sample, by more than rounding
    assert (kernels - kernels[:1]).abs().max() > 0.05 * kernels.abs().max()


def test_oracle_catches_a_misplaced_tap():
    """Guard on the oracle: the residual one tap right of the centre is visibly different."""
    _, layer, x = build("3x3-same-dil2")
    layer = randomize(layer)
    with torch.no_grad():
        kernels = paper_kernels(layer, x)
        phi = layer.fc_phi.weight.clone()
        layer.fc_phi.weight.zero_()
        residual = kernels - paper_kernels(layer, x)
        layer.fc_phi.weight.copy_(phi)
        moved = kernels - residual
        moved[:, :, :, 1, 2] += residual[:, :, :, 1, 1]
        assert rel_err(layer(x), paper_output(layer, x, kernels)) <= EXACT
        assert rel_err(layer(x), paper_output(layer, x, moved)) > 0.01


def deploy_forms(layer: DCDConv2d, bn) -> list[DeployDCD]:
    """The layer's deploy forms (latent, and weight where it has one), folded in float64."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # the fold's own constants (eye, ones)
    try:
        forms = ["latent"] + (["weight"] if DeployDCD.supports_weight_form(layer) else [])
        return [DeployDCD(layer, bn, strategy).eval() for strategy in forms]
    finally:
        torch.set_default_dtype(previous)


@pytest.mark.parametrize("case", list(GEOMETRIES))
@pytest.mark.parametrize("with_bn", [False, True], ids=["no-bn", "bn"])
def test_deploy_form_equals_training_form(case, with_bn):
    _, layer, x = build(case)
    layer = randomize(layer)
    bn = randomize(nn.BatchNorm2d(layer.out_channels)) if with_bn else None
    deploys = deploy_forms(layer, bn)
    with torch.no_grad():
        ref = layer(x) if bn is None else bn(layer(x))
        for deploy in deploys:
            assert rel_err(deploy(x), ref) <= EXACT, deploy.strategy


#: Layers of another padding mode: (GEOMETRIES case, mode). Their W(x) is the paper's, from
#: the unpadded input's pooled features; the convolution reads the input padded in the mode.
PADDING_MODE_CASES = [
    ("3x3-pad1-bias", "reflect"),
    ("3x3-pad2-dil2-stride2", "replicate"),
    ("3x3-pad-pair-stride-pair", "circular"),
    ("3x3-same-dil2", "reflect"),
    ("5x5-pad1", "circular"),
    ("1x1-padded", "replicate"),
    ("3x3-groups2", "replicate"),
    ("dw3-pad1-stride2", "reflect"),
    ("dw2-same-even", "circular"),  # asymmetric padding
    ("joint3-dil2-stride2", "reflect"),
    ("lam-only-4x4", "replicate"),
    ("release-3x3-dil2-stride2", "circular"),
]


def build_mode(case: str, mode: str) -> tuple[DCDConv2d, torch.Tensor, torch.Tensor]:
    """(layer of ``mode``, input, the input padded as ``nn.Conv2d`` of that mode pads it)."""
    conv, layer, x = build(case)
    c_in, c_out, k, s, p, d, g, bias, extra, *_ = GEOMETRIES[case]
    torch.manual_seed(1)
    layer = randomize(DCDConv2d(c_in, c_out, k, s, p, d, g, bias, mode, reduction=4, **extra))
    # nn.Conv2d's own padding of x in that mode, read back from its padding attributes
    conv = nn.Conv2d(c_in, c_out, k, s, "same" if p == "same" else 0 if p is None else p, d, g, padding_mode=mode)
    padded = F.pad(x, conv._reversed_padding_repeated_twice, mode=mode)
    return layer, x, padded


@pytest.mark.parametrize("case, mode", PADDING_MODE_CASES, ids=[f"{c}-{m}" for c, m in PADDING_MODE_CASES])
def test_a_padding_mode_pads_the_input_of_the_papers_convolution(case, mode):
    layer, x, padded = build_mode(case, mode)
    with torch.no_grad():
        out = layer(x)
        if layer.bn2 is None:  # the paper's formula (the release's latent BN: the deploy test)
            kernels = paper_kernels(layer, x)  # Λ and Φ from x itself: the pool reads no padding
            assert rel_err(out, paper_output(layer, padded, kernels)) <= EXACT
        zeros = DCDConv2d(*GEOMETRIES[case][:8], reduction=4, **GEOMETRIES[case][8]).double().eval()
        zeros.load_state_dict(layer.state_dict())
        assert zeros(x).shape == out.shape  # the same geometry as zero padding ...
        assert rel_err(zeros(x), out) > 0.01  # ... but not the same function


@pytest.mark.parametrize("case, mode", PADDING_MODE_CASES, ids=[f"{c}-{m}" for c, m in PADDING_MODE_CASES])
def test_a_padding_mode_deploy_form_equals_training_form(case, mode):
    layer, x, _ = build_mode(case, mode)
    bn = randomize(nn.BatchNorm2d(layer.out_channels))
    deploys = deploy_forms(layer, bn)
    with torch.no_grad():
        ref = bn(layer(x))
        for deploy in deploys:
            assert rel_err(deploy(x), ref) <= EXACT, deploy.strategy


def test_an_unknown_padding_mode_is_refused_as_nn_conv2d_refuses_it():
    with pytest.raises(ValueError, match="padding_mode must be one of 'zeros', 'reflect', 'replicate', 'circular'"):
        DCDConv2d(8, 8, 3, padding=1, padding_mode="mirror")
    # zero padding in any mode is no padding: nothing to pad ahead
    assert DCDConv2d(8, 8, 3, padding=0, padding_mode="reflect").mode_pads is None


def test_weight_form_only_where_it_is_one_matmul():
    assert DeployDCD.supports_weight_form(DCDConv2d(16, 16, 1, bias=True))
    assert not DeployDCD.supports_weight_form(DCDConv2d(16, 16, 1, padding=1))  # the map grows
    assert not DeployDCD.supports_weight_form(DCDConv2d(16, 16, 1, groups=2))  # block-diagonal


def test_dcd_linear_is_a_drop_in_for_linear():
    for bias in (True, False):
        layer = DCDLinear(32, 10, bias).double().eval()  # nn.Linear's positional bias
        layer.zero_dynamic_heads()
        linear = nn.Linear(32, 10, bias).double()
        with torch.no_grad():
            linear.weight.copy_(layer.cls.weight)
            if bias:
                linear.bias.copy_(layer.cls.bias)
            x = torch.randn(4, 32, dtype=torch.float64)
            assert rel_err(layer(x), linear(x)) <= EXACT


# ----------------------------------------------------------------------------- DY-Conv / CondConv
MIXTURES = {
    "dy-3x3-valid-bias": (DynamicConv2d, (8, 12, 3, 1, "valid", 1, 1), {"bias": True}, (9, 8)),
    "dy-3x3-dil2-same": (DynamicConv2d, (8, 8, 3, 1, "same", 2, 1), {}, (9, 9)),
    "dy-dw3-pad2-dil2-stride2": (DynamicConv2d, (12, 12, 3, 2, 2, 2, 12), {"bias": True}, (11, 10)),
    "cc-3x3-pad-pair-groups2": (CondConv2d, (8, 12, 3, (1, 2), (0, 1), 1, 2), {"bias": True}, (8, 9)),
    "cc-2x2-same": (CondConv2d, (8, 8, 2, 1, "same", 1, 1), {"bias": True}, (7, 6)),
    "cc-1x3": (CondConv2d, (8, 8, (1, 3), 1, (0, 1), 1, 1), {}, (5, 6)),
    "dy-3x3-reflect": (DynamicConv2d, (8, 12, 3, 1, 1, 1, 1), {"bias": True, "padding_mode": "reflect"}, (7, 8)),
    "cc-dw3-circular-stride2": (CondConv2d, (8, 8, 3, 2, (1, 2), 1, 8), {"padding_mode": "circular"}, (9, 8)),
    "cc-2x2-same-replicate": (CondConv2d, (8, 8, 2, 1, "same", 1, 1), {"padding_mode": "replicate"}, (7, 6)),
}


def padded_as_nn_conv2d(layer, x):
    """``x`` padded as ``nn.Conv2d`` of the layer's padding and mode pads it (zeros: not at
    all, the padding is F.conv2d's), and the padding left for F.conv2d."""
    if getattr(layer, "padding_mode", "zeros") == "zeros":
        return x, layer.padding
    conv = nn.Conv2d(1, 1, layer.weight.shape[-2:], padding=layer.padding, dilation=layer.dilation)
    return F.pad(x, conv._reversed_padding_repeated_twice, mode=layer.padding_mode), 0


def mixture_reference(layer, x):
    """Σ_k π_k W_k per sample, applied with F.conv2d at the layer's geometry."""
    y = x.mean(dim=(2, 3))
    if isinstance(layer, DynamicConv2d):
        hidden = torch.relu(y @ layer.fc1.weight.T + layer.fc1.bias)
        pi = torch.softmax((hidden @ layer.fc2.weight.T + layer.fc2.bias) / layer.temperature, dim=1)
    else:
        pi = torch.sigmoid(y @ layer.route.weight.T + layer.route.bias)
    outs = []
    x, padding = padded_as_nn_conv2d(layer, x)  # π from the input itself, not its padding
    for n in range(x.shape[0]):
        w = torch.einsum("k,koihw->oihw", pi[n], layer.weight)
        b = None if layer.bias is None else pi[n] @ layer.bias
        outs.append(F.conv2d(x[n : n + 1], w, b, layer.stride, padding, layer.dilation, layer.groups))
    return torch.cat(outs)


@pytest.mark.parametrize("case", list(MIXTURES))
def test_mixture_geometry_training_and_deploy_form(case):
    cls, args, kw, (h, w) = MIXTURES[case]
    torch.manual_seed(len(case))
    layer = randomize(cls(*args, **kw))
    x = (torch.randn(BATCH, args[0], h, w) + torch.randn(BATCH, args[0], 1, 1)).double()
    bn = randomize(nn.BatchNorm2d(args[1]))
    with torch.no_grad():
        ref = mixture_reference(layer, x)
        assert rel_err(layer(x), ref) <= EXACT
        assert rel_err(DeployMixture(layer, bn).double()(x), bn(ref)) <= EXACT


@pytest.mark.parametrize(
    "build_layer",
    [
        lambda: DynamicConv2d(8, 8, 3, 2, padding="same"),
        lambda: CondConv2d(8, 12, 3, groups=8),
        lambda: CondConv2d(8, 8, 3, padding="full"),
    ],
    ids=["same-strided", "groups-not-dividing", "bad-padding"],
)
def test_mixture_invalid_geometry_raises_value_error(build_layer):
    with pytest.raises(ValueError):
        build_layer()


@pytest.mark.parametrize(
    "layer, shape, expected",
    [
        (lambda: DCDConv2d(8, 8, 3, padding=1), (8, 6, 6), "DCDConv2d takes (batch, 8, H, W) input"),
        (lambda: CondConv2d(8, 8, 3, padding=1), (8, 6, 6), "CondConv2d takes (batch, 8, H, W) input"),
        (lambda: DynamicConv2d(8, 8, 1), (2, 8, 6, 6, 1), "DynamicConv2d takes (batch, 8, H, W) input"),
        (lambda: DCDLinear(8, 4), (2, 5, 8), "DCDLinear takes (batch, 8) input"),
    ],
    ids=["dcd-unbatched", "condconv-unbatched", "dyconv-5d", "linear-sequence"],
)
def test_other_ranks_than_one_dynamic_weight_per_sample_are_refused_by_name(layer, shape, expected):
    """nn.Conv2d takes an unbatched (C, H, W) image and nn.Linear a (B, T, C) sequence; these
    layers draw one weight per sample of axis 0, so they say so rather than fail deep inside."""
    with pytest.raises(ValueError) as info:
        layer()(torch.randn(*shape))
    assert str(info.value).startswith(expected) and f"got shape {shape}" in str(info.value)


# ----------------------------------------------------------------------------- ONNX emission
class GeometryNet(nn.Sequential):
    """Dynamic layers at every geometry in one chain (3 -> 24 channels, 27 -> 7x5 pixels)."""

    def __init__(self):
        super().__init__(
            nn.Conv2d(3, 16, 3, 1, 1),
            DCDConv2d(16, 16, 3, 1, "valid", bias=True, reduction=4),  # the centre tap crops
            nn.ReLU(),
            DCDConv2d(16, 16, 3, 2, 2, 2, bias=True, reduction=4, gate="se", latent_bn=True, pool_size=2),
            nn.BatchNorm2d(16),
            DCDConv2d(16, 16, 3, 1, "same", 2, 16, True, reduction=4),  # depthwise, dilated
            DCDConv2d(16, 24, 3, 1, (1, 0), 1, 4, True, reduction=4),  # grouped, block-diagonal residual
            DCDConv2d(24, 24, (1, 3), 1, (0, 1), bias=True, reduction=4),
            DCDConv2d(24, 24, 3, 1, 0, 2, joint_fusion=True, latent_dim=3, reduction=4),
            DCDConv2d(24, 24, 1, padding=1, bias=True, reduction=4),  # a padded 1x1 grows the map
            DynamicConv2d(24, 24, 3, 1, "valid", 2, bias=True),
            CondConv2d(24, 24, 2, 1, "same", groups=24, bias=True),  # asymmetric padding
            DCDConv2d(24, 24, 2, 1, "same", groups=24, bias=True, reduction=4),
        )


class PaddingModeNet(nn.Sequential):
    """Dynamic layers of the three padding modes besides zeros: one Pad (reflect, edge) or
    Slices and a Concat (circular) ahead of convolutions that pad nothing."""

    def __init__(self):
        super().__init__(
            nn.Conv2d(3, 16, 3, 1, 1),
            DCDConv2d(16, 16, 3, 1, (2, 1), 1, 1, True, "reflect", reduction=4),
            CondConv2d(16, 16, 3, 1, 1, bias=True, padding_mode="replicate"),
            DynamicConv2d(16, 16, 3, 1, (1, 0), groups=16, padding_mode="circular"),
            DCDConv2d(16, 16, 3, 2, (0, 1), 1, 16, True, "circular", reduction=4),  # depthwise
            DCDConv2d(16, 24, 3, 1, 1, joint_fusion=True, latent_dim=3, reduction=4, padding_mode="replicate"),
        )


@pytest.mark.parametrize("net, shape", [(GeometryNet, (2, 24, 7, 5)), (PaddingModeNet, (2, 24, 14, 13))])
@pytest.mark.parametrize("mode", ["standard", "function"])
def test_onnx_export_at_every_geometry(tmp_path, mode, net, shape):
    """The emitted graph (constant-weight Convs with explicit pads and dilations, a Slice
    for a cropping centre tap) computes the float64 model in ONNX Runtime."""
    import numpy as np
    import onnxruntime as ort

    from dcd_deploy import export_onnx

    torch.manual_seed(0)
    net = randomize(net()).float()
    path = tmp_path / "geometry.onnx"
    export_onnx(net, path, input_size=27, check=False, simplify=False, mode=mode)
    x = torch.randn(2, 3, 27, 27)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    with torch.no_grad():
        ref = net.double()(x.double()).numpy()
    assert out.shape == ref.shape == shape
    assert np.abs(out - ref).max() <= 1e-5 * np.abs(ref).max()


def test_padding_modes_export_with_symbolic_sides_and_run_at_other_sizes(tmp_path):
    """The padding's ONNX (Pad, or Slices and Concats) at sides the export did not see."""
    import numpy as np
    import onnxruntime as ort

    from dcd_deploy import export_onnx

    torch.manual_seed(0)
    net = randomize(PaddingModeNet()).float()
    path = tmp_path / "dynamic.onnx"
    export_onnx(net, path, input_size=(27, 30), dynamic_size=True, check=False, simplify=False)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for hw in ((27, 30), (19, 33)):
        x = torch.randn(2, 3, *hw)
        out = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
        with torch.no_grad():
            ref = net.double()(x.double()).numpy()
        net.float()
        assert out.shape == ref.shape
        assert np.abs(out - ref).max() <= 1e-5 * np.abs(ref).max()


def test_a_module_pickled_before_the_geometry_arguments_still_runs():
    """Whole-module pickles (``torch.save(model)``) of the earlier layers lack the new attributes."""
    import pickle

    layer = DCDConv2d(16, 16, 3, 2, latent_dim=4).eval()
    mixture = DynamicConv2d(8, 8, 3).eval()
    x, x2 = torch.randn(2, 16, 9, 9), torch.randn(2, 8, 7, 7)
    with torch.no_grad():
        ref, ref2 = layer(x), mixture(x2)
    for attr in ("tap_pads", "padding", "dilation", "padding_mode", "mode_pads"):
        del layer.__dict__[attr]
    del layer._parameters["bias"]
    for attr in ("dilation", "padding_mode", "mode_pads", "conv_padding"):
        del mixture.__dict__[attr]
    old, old2 = pickle.loads(pickle.dumps(layer)), pickle.loads(pickle.dumps(mixture))
    with torch.no_grad():
        assert torch.equal(old(x), ref) and torch.equal(old2(x2), ref2)
