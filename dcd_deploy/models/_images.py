"""Seeded synthetic images that look to a network like normalised natural photographs.

A trained classifier's BatchNorm statistics describe ImageNet-normalised photographs:
smooth regions, object edges, a little texture, pixel values bounded in [0, 1] before
normalisation. Unbounded noise drives such a network outside its working range, where
its per-sample dynamic terms grow with the square of the input and fp32 itself stops
agreeing with fp64. So the default inputs of parity checks, benchmarks and
pseudo-training are built the way a photograph is, in RGB on [0, 1], then normalised
with the ImageNet mean and std, exactly as torchvision's preprocessing does:

1. a smooth colour field: a coarse grid of random colours, bilinearly upsampled;
2. objects: a few discs and boxes of random colour with hard edges;
3. texture: mid-frequency colour noise, a quarter of the image's resolution;
4. sensor noise: a small per-pixel term;
5. clipped to [0, 1], then ``(img - mean) / std`` per channel.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: ImageNet normalisation of torchvision's pretrained models (RGB order).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: Legend: side of the coarse colour grid; objects per image; texture and sensor-noise
#: amplitudes on the [0, 1] pixel scale; texture resolution as a fraction of the side;
#: chroma: how far a colour's channels spread around its brightness.
COLOUR_GRID = 4
OBJECTS = 3
TEXTURE_AMPLITUDE = 0.08
TEXTURE_SCALE = 4
SENSOR_NOISE = 0.02
CHROMA = 0.6


def synthetic_images(n: int, size: int | tuple[int, int], *, seed: int = 0, channels: int = 3) -> torch.Tensor:
    """``n`` seeded natural-looking images, ImageNet-normalised, shape (n, channels, H, W).

    :func:`natural_pixels` before normalisation.

    Images differ in content (so top-1 classes differ) but all lie in the value range of
    a normalised photograph: about -2.1 to 2.6 per pixel.

    Args:
        n: number of images.
        size: side in pixels, or ``(H, W)`` (any positive sizes; 1 gives one colour per
            image). A square size draws exactly what ``(size, size)`` draws.
        seed: everything drawn depends on this seed only.
        channels: 3 for RGB (ImageNet normalisation); other counts use mean 0.45 and
            std 0.225 per channel.
    """
    mean, std = _normalisation(channels)
    return (natural_pixels(n, size, seed=seed, channels=channels) - mean) / std


def natural_pixels(n: int, size: int | tuple[int, int], *, seed: int = 0, channels: int = 3) -> torch.Tensor:
    """The images of :func:`synthetic_images` as pixels: RGB on [0, 1], not normalised
    (for a model with other preprocessing, :class:`~dcd_deploy.preprocess.Preprocess`)."""
    h, w = (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))
    g = torch.Generator().manual_seed(seed)
    img = _upsample(_colours(g, n, channels, COLOUR_GRID), (h, w))
    yy = ((torch.arange(h, dtype=torch.float32) + 0.5) / h).view(1, h, 1)
    xx = ((torch.arange(w, dtype=torch.float32) + 0.5) / w).view(1, 1, w)
    for _ in range(OBJECTS):
        cx, cy, radius = (torch.rand(3, n, 1, 1, generator=g) * torch.tensor([1.0, 1.0, 0.3]).view(3, 1, 1, 1)).unbind(
            0
        )
        radius = radius + 0.05
        disc = (xx - cx) ** 2 + (yy - cy) ** 2 < radius**2  # (n, H, W)
        box = ((xx - cx).abs() < radius) & ((yy - cy).abs() < 0.6 * radius)  # (n, H, W)
        is_disc = torch.rand(n, 1, 1, generator=g) < 0.5
        mask = torch.where(is_disc, disc, box).unsqueeze(1)  # (n, 1, H, W)
        colour = _colours(g, n, channels, 1)
        img = torch.where(mask, colour.expand_as(img), img)
    coarse = (max(1, h // TEXTURE_SCALE), max(1, w // TEXTURE_SCALE))
    img = img + TEXTURE_AMPLITUDE * _upsample(torch.randn(n, channels, *coarse, generator=g), (h, w))
    img = img + SENSOR_NOISE * torch.randn(n, channels, h, w, generator=g)
    return img.clamp(0.0, 1.0)


def natural_uint8(n: int, size: int | tuple[int, int], *, seed: int = 0, channels: int = 3) -> torch.Tensor:
    """The images of :func:`natural_pixels` as a camera gives them: uint8 pixels on
    [0, 255], (n, channels, H, W); RGB for 3 channels, grey for 1."""
    return (natural_pixels(n, size, seed=seed, channels=channels) * 255).round().clamp(0, 255).to(torch.uint8)


def _colours(g: torch.Generator, n: int, channels: int, side: int) -> torch.Tensor:
    """Random colours as photographs have them: a brightness plus a smaller chroma offset."""
    brightness = torch.rand(n, 1, side, side, generator=g)
    chroma = CHROMA * (torch.rand(n, channels, side, side, generator=g) - 0.5)
    return brightness + chroma


def _upsample(x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    return F.interpolate(x, size=size, mode="bilinear", align_corners=False)


def _normalisation(channels: int) -> tuple[torch.Tensor, torch.Tensor]:
    if channels == 3:
        mean, std = IMAGENET_MEAN, IMAGENET_STD
    else:
        mean, std = (0.45,) * channels, (0.225,) * channels
    return torch.tensor(mean).view(1, -1, 1, 1), torch.tensor(std).view(1, -1, 1, 1)
