"""pseudo_train: deterministic, and it leaves DCD models whose dynamic path matters."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dcd_deploy.layers import DCDConv2d, DCDLinear
from dcd_deploy.models import create_model, pseudo_train, synthetic_images
from dcd_deploy.models._pseudo_train import CALIB_BATCH_SIZE, CALIB_BATCHES

# (model, input size): the DCD ResNets pool with a fixed 7x7 average, so 224.
DCD_CASES = [("mobilenetv2_050_dcd", 64), ("resnet18_dcd", 224)]


def trained(name, size, seed=0, init_seed=0):
    torch.manual_seed(init_seed)  # pseudo_train must not depend on the model's initial draw
    return pseudo_train(create_model(name), seed=seed, input_size=size)


def dcd_layers(model):
    return [m for m in model.modules() if isinstance(m, (DCDConv2d, DCDLinear))]


def bns(model):
    return [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


def test_deterministic_in_seed_and_independent_of_initial_weights():
    a = trained("mobilenetv2_035_dcd", 32, seed=3, init_seed=1).state_dict()
    b = trained("mobilenetv2_035_dcd", 32, seed=3, init_seed=2).state_dict()
    c = trained("mobilenetv2_035_dcd", 32, seed=4, init_seed=1).state_dict()
    assert a.keys() == b.keys() == c.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    float_keys = [k for k in a if a[k].is_floating_point()]
    differing = [k for k in float_keys if not torch.equal(a[k], c[k])]
    assert len(differing) == len(float_keys)  # every weight and BN statistic is redrawn


def test_returns_the_same_model_in_eval_mode():
    model = create_model("mobilenetv2_035_dcd")
    model.train()
    out = pseudo_train(model, seed=0, input_size=32)
    assert out is model
    assert not any(m.training for m in model.modules())


def test_weights_are_bit_identical_whatever_the_thread_count():
    saved = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = trained("mobilenetv2_035_dcd", 32, seed=2).state_dict()
        torch.set_num_threads(2)
        two = trained("mobilenetv2_035_dcd", 32, seed=2).state_dict()
        assert torch.get_num_threads() == 2  # the caller's count is restored
    finally:
        torch.set_num_threads(saved)
    for k in one:
        assert torch.equal(one[k], two[k]), k


@pytest.fixture(scope="module", params=DCD_CASES, ids=[n for n, _ in DCD_CASES])
def trained_dcd(request):
    name, size = request.param
    torch.manual_seed(0)
    model = trained(name, size)
    with torch.no_grad():
        logits = model(synthetic_images(8, size, seed=99))
    return model, size, logits


def test_logits_are_finite_and_varied(trained_dcd):
    model, size, logits = trained_dcd
    assert logits.shape == (8, 1000)
    assert torch.isfinite(logits).all()
    assert len(set(logits.argmax(dim=1).tolist())) >= 3


@pytest.mark.parametrize("head", ["fc_phi", "fc_scale"])
def test_dynamic_heads_matter(trained_dcd, head):
    """Zeroing every Φ head (Φ = 0) or Λ head (Λ = hsig(0) = 1) moves the logits by > 10%."""
    model, size, logits = trained_dcd
    layers = dcd_layers(model)
    assert layers
    saved = [getattr(m, head).weight.detach().clone() for m in layers]
    assert all(s.abs().max() > 0 for s in saved)
    try:
        with torch.no_grad():
            for m in layers:
                getattr(m, head).weight.zero_()
            changed = model(synthetic_images(8, size, seed=99))
    finally:
        with torch.no_grad():
            for m, s in zip(layers, saved):
                getattr(m, head).weight.copy_(s)
    assert torch.isfinite(changed).all()
    assert (changed - logits).abs().max() > 0.1 * logits.abs().max()


def test_bn_statistics_are_calibrated(trained_dcd):
    model, size, _ = trained_dcd
    norms = bns(model)
    assert norms
    for bn in norms:
        assert bn.running_mean.abs().max() > 0
        assert not torch.allclose(bn.running_var, torch.ones_like(bn.running_var))
        assert (bn.running_var > 0).all()
        assert not torch.allclose(bn.weight, torch.ones_like(bn.weight))  # random affine


def test_bn_statistics_are_the_calibration_batch_moments():
    """Running stats are the average of the per-batch moments over the calibration batches
    (not an exponential average): recomputed by hand for the stem BN, whose input is the
    stem conv of the images. Batch count, size and seeds (seed * 1000 + i) are the module's."""
    model = trained("mobilenetv2_035_dcd", 32, seed=2)
    conv, bn = model.features[0][0], model.features[0][1]
    means, variances = [], []
    with torch.no_grad():
        for i in range(CALIB_BATCHES):
            z = conv(synthetic_images(CALIB_BATCH_SIZE, 32, seed=2 * 1000 + i))
            means.append(z.mean(dim=(0, 2, 3)))
            variances.append(z.var(dim=(0, 2, 3), unbiased=True))
    assert torch.allclose(bn.running_mean, torch.stack(means).mean(0), rtol=1e-4, atol=1e-5)
    hand_var = torch.stack(variances).mean(0)
    typical = hand_var > 0.5 * hand_var.mean()  # channels no variance floor could touch
    assert typical.sum() >= hand_var.numel() // 2
    assert torch.allclose(bn.running_var[typical], hand_var[typical], rtol=1e-4, atol=1e-5)
