"""Deterministic stand-in for training: non-trivial weights and calibrated BN statistics.

No ImageNet weights exist here, and an untrained DCD net in eval mode can overflow (the
per-sample Λ and Φ terms compound through BatchNorm running statistics). Tests and
demos still need a model whose dynamic path matters, so ``pseudo_train``:

1. redraws every weight from a seeded generator, with the dynamic branch's heads
   (Λ, Φ, DY-Conv/CondConv routing) scaled so they vary visibly from input to input
   without making the untrained net chaotic;
2. gives every BatchNorm a random affine (so folding it is not a no-op), with the
   release's latent ``bn2`` kept at a modest gain so the net is not chaotic;
3. recalibrates BatchNorm running statistics on seeded natural-looking synthetic images
   (:mod:`._images`, the parity check's default inputs too), which is what keeps
   eval-mode activations finite whatever the depth, and puts those images in the
   model's working range as training on photographs would.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .._threads import preparation_threads
from ..layers import CondConv2d, DCDConv2d, DCDLinear, DynamicConv2d, MixtureConv2d
from ._images import synthetic_images

#: Legend: std of Λ/Φ heads' weights, number and size of calibration batches.
HEAD_STD = 0.5
CALIB_BATCHES = 3
CALIB_BATCH_SIZE = 8
#: Gain range of the release's latent ``bn2``: it normalises Φz, so its weight alone sets
#: how much Φ contributes; a full gain makes an untrained 34-layer net chaotic. Depthwise
#: DCD layers (no bn2) get it on P.
LATENT_GAIN = (0.1, 0.3)
#: Running variances are floored at this fraction of their layer's mean: a channel that
#: never varied on synthetic data would otherwise amplify rounding noise by 1/sqrt(eps).
VAR_FLOOR = 0.05


@torch.no_grad()
def pseudo_train(model: nn.Module, seed: int = 0, *, input_size: int = 224) -> nn.Module:
    """Give ``model`` seeded non-trivial weights and calibrated BN statistics (in place).

    Args:
        model: any zoo model (or module built from this package's layers).
        seed: everything drawn depends on this seed only.
        input_size: side of the synthetic calibration images.

    Returns:
        The same model, in eval mode; its weights are bit-identical for a given seed
        whatever torch's thread count (calibration runs on one thread).
    """
    with preparation_threads():  # calibration sums depend on how many threads split them
        _draw_weights(model, seed)
        recalibrate_bn(model, seed=seed, input_size=input_size)
    return model.eval()


def _draw_weights(model: nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    heads = set()  # layers whose output sets a per-sample coefficient: kept modest
    for m in model.modules():
        if isinstance(m, (DCDConv2d, DCDLinear)):
            heads.update(id(h.weight) for h in (m.fc_phi, m.fc_scale) if h is not None)
        elif isinstance(m, DynamicConv2d):
            heads.add(id(m.fc2.weight))
        elif isinstance(m, CondConv2d):
            heads.add(id(m.route.weight))
    for p in model.parameters():
        if p.dim() <= 1:
            continue
        fan_in = p[0].numel()
        std = HEAD_STD / math.sqrt(fan_in) if id(p) in heads else math.sqrt(2.0 / fan_in)
        p.copy_(torch.randn(p.shape, generator=g) * std)
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for bn in bns:
        bn.weight.copy_(0.5 + torch.rand(bn.weight.shape, generator=g))
        bn.bias.copy_(0.1 * torch.randn(bn.bias.shape, generator=g))
    lo, hi = LATENT_GAIN
    for m in model.modules():
        if isinstance(m, (DCDConv2d, DCDLinear)) and m.bn2 is not None:
            m.bn2.weight.copy_(lo + (hi - lo) * torch.rand(m.bn2.weight.shape, generator=g))
            m.bn2.bias.mul_(lo)
        elif isinstance(m, DCDConv2d) and m.weight_p is not None:
            # Eq. 7 has no bn2 to set Φ's share: give P the same modest gain instead.
            m.weight_p.mul_(lo + (hi - lo) * torch.rand(m.weight_p.shape[0], 1, generator=g))
    for m in model.modules():
        if isinstance(m, (nn.Linear, MixtureConv2d)) and getattr(m, "bias", None) is not None:
            m.bias.copy_(0.05 * torch.randn(m.bias.shape, generator=g))


@torch.no_grad()
def recalibrate_bn(
    model: nn.Module,
    *,
    seed: int = 0,
    input_size: int = 224,
    batches: int = CALIB_BATCHES,
    batch_size: int = CALIB_BATCH_SIZE,
) -> None:
    """Reset BN running statistics to their average over seeded synthetic batches."""
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    saved = [bn.momentum for bn in bns]
    model.eval()
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None  # cumulative average over the calibration batches
        bn.train()
    try:
        for i in range(batches):
            model(synthetic_images(batch_size, input_size, seed=seed * 1000 + i))
    finally:
        for bn, mom in zip(bns, saved):
            bn.momentum = mom
            bn.running_var.clamp_(min=VAR_FLOOR * bn.running_var.mean().item())
        model.eval()
