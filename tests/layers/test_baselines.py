"""DY-Conv and CondConv (paper Eq. 1) against a dense per-sample reference.

The reference computes the routing π(x) by hand from the layer's parameters (DY-Conv:
avg pool, FC, ReLU, FC, softmax(z / τ); CondConv: avg pool, FC, sigmoid), aggregates
W(x) = Σ_k π_k W_k and b(x) = Σ_k π_k b_k, and applies one ``F.conv2d`` per sample.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from dcd_deploy.layers import CondConv2d, DynamicConv2d

BATCH = 4
REL_TOL = 1e-8  # float64


@torch.no_grad()
def randomize(layer):
    for p in layer.parameters():
        if p.dim() >= 2 and p is not layer.weight:
            p.normal_(0.0, 2.0 / math.sqrt(p.shape[1]))  # routing FCs: O(1) logits
        elif p is layer.weight:
            p.normal_(0.0, 1.0 / math.sqrt(p[0, 0].numel()))
        else:
            p.normal_(0.0, 0.5)
    return layer.double().eval()


def make_input(b, c, h, w):
    return (torch.randn(b, c, h, w) + 1.5 * torch.randn(b, c, 1, 1)).double()


def ref_routing(layer, x):
    y = x.mean(dim=(2, 3))
    if isinstance(layer, DynamicConv2d):
        hidden = torch.clamp_min(y @ layer.fc1.weight.T + layer.fc1.bias, 0.0)
        logits = (hidden @ layer.fc2.weight.T + layer.fc2.bias) / layer.temperature
        e = torch.exp(logits - logits.max(dim=1, keepdim=True).values)
        return e / e.sum(dim=1, keepdim=True)
    z = y @ layer.route.weight.T + layer.route.bias
    return 1.0 / (1.0 + torch.exp(-z))


def reference(layer, x):
    pi = ref_routing(layer, x)
    k = layer.weight.shape[-1]
    outs = []
    for n in range(x.shape[0]):
        w = sum(pi[n, j] * layer.weight[j] for j in range(layer.weight.shape[0]))
        b = None if layer.bias is None else sum(pi[n, j] * layer.bias[j] for j in range(layer.bias.shape[0]))
        outs.append(F.conv2d(x[n : n + 1], w, b, layer.stride, k // 2, 1, layer.groups))
    return torch.cat(outs), pi


def assert_rel_close(out, ref):
    assert out.shape == ref.shape
    scale = ref.abs().max().item()
    assert scale > 0
    assert (out - ref).abs().max().item() <= REL_TOL * scale


# id: (class, args, kwargs, H x W)
CASES = {
    "dy-1x1": (DynamicConv2d, (16, 24), {}, (7, 7)),
    "dy-3x3-dense-bias": (DynamicConv2d, (8, 12, 3), {"bias": True}, (8, 8)),
    "dy-3x3-stride2-odd": (DynamicConv2d, (8, 12, 3, 2), {"bias": True}, (9, 11)),
    "dy-dw3": (DynamicConv2d, (12, 12, 3, 1), {"groups": 12}, (7, 7)),
    "dy-dw5-stride2": (DynamicConv2d, (12, 12, 5, 2), {"groups": 12, "bias": True}, (11, 10)),
    "dy-temperature-30": (DynamicConv2d, (16, 16, 3), {"temperature": 30.0}, (6, 6)),
    "cc-1x1": (CondConv2d, (16, 24), {}, (7, 7)),
    "cc-3x3-bias": (CondConv2d, (8, 12, 3), {"bias": True}, (8, 8)),
    "cc-3x3-stride2-odd": (CondConv2d, (8, 12, 3, 2), {"bias": True}, (9, 11)),
    "cc-dw3-stride2": (CondConv2d, (12, 12, 3, 2), {"groups": 12, "bias": True}, (7, 9)),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_matches_dense_reference(case):
    cls, args, kw, (h, w) = CASES[case]
    layer = randomize(cls(*args, **kw))
    expected_k = 4 if cls is DynamicConv2d else 8  # paper: DY-Conv K = 4, CondConv K = 8
    assert layer.weight.shape[0] == expected_k
    x = make_input(BATCH, args[0], h, w)
    with torch.no_grad():
        out = layer(x)
        ref, pi = reference(layer, x)
    assert_rel_close(out, ref)
    assert (pi - pi[:1]).abs().max() > 1e-3  # routing really differs per sample


def test_dyconv_attention_is_a_distribution_and_temperature_flattens_it():
    layer = randomize(DynamicConv2d(16, 16, 3, num_kernels=4))
    x = make_input(8, 16, 5, 5)
    with torch.no_grad():
        y = x.mean(dim=(2, 3))
        pi1 = layer.routing(y)
        layer.temperature = 30.0
        pi30 = layer.routing(y)
    for pi in (pi1, pi30):
        assert pi.shape == (8, 4)
        assert (pi > 0).all()
        assert torch.allclose(pi.sum(dim=1), torch.ones(8, dtype=pi.dtype), atol=1e-12)
    assert torch.allclose(pi30, ref_routing(layer, x), atol=1e-12)

    # softmax(z / τ) has an entropy increasing in τ (dH/dτ = Var_π(z) / τ³ >= 0)
    def entropy(p):
        return -(p * p.log()).sum(dim=1)

    assert (entropy(pi30) > entropy(pi1)).all()
    assert (pi30 - pi1).abs().max() > 0.05
    assert (entropy(pi30) <= math.log(4) + 1e-12).all()


def test_dyconv_temperature_argument_matches_hand_softmax():
    layer = randomize(DynamicConv2d(8, 8, 1, temperature=5.0))
    x = make_input(3, 8, 4, 4)
    with torch.no_grad():
        hidden = torch.relu(x.mean(dim=(2, 3)) @ layer.fc1.weight.T + layer.fc1.bias)
        logits = hidden @ layer.fc2.weight.T + layer.fc2.bias
        expected = torch.softmax(logits / 5.0, dim=1)
        assert torch.allclose(layer.routing(x.mean(dim=(2, 3))), expected, atol=1e-12)
        assert not torch.allclose(expected, torch.softmax(logits, dim=1), atol=1e-3)


def test_condconv_routing_is_independent_sigmoids():
    layer = randomize(CondConv2d(16, 16, 3, num_kernels=8))
    x = make_input(8, 16, 5, 5)
    with torch.no_grad():
        pi = layer.routing(x.mean(dim=(2, 3)))
    assert torch.allclose(pi, ref_routing(layer, x), atol=1e-12)
    assert ((pi > 0) & (pi < 1)).all()
    assert (pi.sum(dim=1) - 1.0).abs().max() > 0.1  # not normalised to 1


@pytest.mark.parametrize("cls, k", [(DynamicConv2d, 4), (CondConv2d, 8)])
def test_param_count_is_k_times_the_kernel_plus_routing(cls, k):
    """K C_out C_in k² kernel parameters (paper: 'KC²' for vanilla dynamic convolution)."""
    layer = cls(32, 32, 1)
    routing = sum(p.numel() for n, p in layer.named_parameters() if n not in ("weight", "bias"))
    assert layer.weight.numel() == k * 32 * 32
    if cls is DynamicConv2d:  # FC C -> C/4 (bias), FC -> K (bias)
        assert routing == 32 * 8 + 8 + 8 * k + k
    else:  # one FC C -> K with bias
        assert routing == 32 * k + k
