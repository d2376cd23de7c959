"""BatchNorm folding against PyTorch's own fusion helpers (torch.nn.utils.fusion)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_eval, fuse_linear_bn_eval

from dcd_deploy.exporters._fold import bn_affine, fold_conv_bn, fold_linear_bn


def _randomized_bn(bn: nn.Module, seed: int) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    n = bn.num_features
    with torch.no_grad():
        bn.weight.copy_(0.5 + torch.rand(n, generator=g))
        bn.bias.copy_(torch.randn(n, generator=g))
        bn.running_mean.copy_(torch.randn(n, generator=g))
        bn.running_var.copy_(0.1 + torch.rand(n, generator=g))
    return bn.eval()


@pytest.mark.parametrize("groups, bias", [(1, False), (1, True), (8, False)])
def test_conv_fold_equals_torch_fusion(groups, bias):
    conv = nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=groups, bias=bias).eval()
    bn = _randomized_bn(nn.BatchNorm2d(16), seed=groups + bias)
    ours, theirs = fold_conv_bn(conv, bn), fuse_conv_bn_eval(conv, bn)
    torch.testing.assert_close(ours.weight, theirs.weight)
    torch.testing.assert_close(ours.bias, theirs.bias)
    x = torch.randn(2, 8, 9, 9, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(ours(x), bn(conv(x)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bias", [False, True])
def test_linear_fold_equals_torch_fusion(bias):
    linear = nn.Linear(12, 6, bias=bias).eval()
    bn = _randomized_bn(nn.BatchNorm1d(6), seed=3 + bias)
    ours, theirs = fold_linear_bn(linear, bn), fuse_linear_bn_eval(linear, bn)
    torch.testing.assert_close(ours.weight, theirs.weight)
    torch.testing.assert_close(ours.bias, theirs.bias)


def test_no_bn_is_the_identity():
    scale, shift = bn_affine(None, 5)
    assert torch.equal(scale, torch.ones(5)) and torch.equal(shift, torch.zeros(5))
