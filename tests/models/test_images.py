"""synthetic_images: seeded natural-looking images in the ImageNet-normalised range."""

from __future__ import annotations

import torch

from dcd_deploy.models import synthetic_images
from dcd_deploy.models._images import IMAGENET_MEAN, IMAGENET_STD


def pixels(x: torch.Tensor) -> torch.Tensor:
    """Undo torchvision's normalisation: the [0, 1] RGB values the images were made of."""
    return x * torch.tensor(IMAGENET_STD).view(1, 3, 1, 1) + torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)


def test_seeded():
    a, b, c = synthetic_images(4, 16, seed=5), synthetic_images(4, 16, seed=5), synthetic_images(4, 16, seed=6)
    assert a.shape == (4, 3, 16, 16) and a.dtype == torch.float32
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_bounded_like_a_normalised_photograph():
    x = pixels(synthetic_images(16, 64, seed=0))
    assert x.min() >= -1e-6 and x.max() <= 1 + 1e-6
    # and they use the range: dark and bright pixels, not a grey wash
    assert x.min() < 0.1 and x.max() > 0.9


def test_smooth_with_edges_and_texture_like_a_photograph():
    x = pixels(synthetic_images(16, 128, seed=1))
    step = (x[..., 1:] - x[..., :-1]).abs()  # horizontal neighbour differences
    # Most neighbouring pixels are close (smooth regions), unlike white noise, whose
    # neighbour differences are as large as its spread (mean |a - b| = 2 sigma / sqrt(pi)).
    assert step.median() < 0.25 * x.std()
    # There are object edges: some neighbours differ by far more than the texture does.
    assert (step > 0.2).float().mean() > 1e-4
    # Images differ from each other in content.
    assert (x[0] - x[1]).abs().mean() > 0.05


def test_any_size_is_finite():
    for size in (1, 2, 7, 224):
        x = synthetic_images(2, size, seed=0)
        assert x.shape == (2, 3, size, size) and torch.isfinite(x).all()


def test_other_channel_counts():
    x = synthetic_images(2, 8, seed=0, channels=1)
    assert x.shape == (2, 1, 8, 8) and torch.isfinite(x).all()
