"""How a model's input images are made from pixels: scale, channel order, mean and std.

A network sees images the way it was trained on them: ImageNet-normalised RGB
(torchvision), [0, 1] or [0, 255] pixels, [-1, 1] (Inception, TF), BGR with Caffe's
means. A parity check on images the model was not trained on checks it outside its
working range (where its own fp32 evaluation may be far off the exact result), so the
built-in images and the user's uint8 images go through the model's preprocessing::

    x = (pixels * scale - mean) / std        pixels in [0, 1], RGB, then reordered to BGR if bgr

``mean`` and ``std`` are per channel in the model's channel order and in the units of
``pixels * scale``. :data:`PRESETS` names the usual ones; ``imagenet`` is the default
and what the built-in images always were. ``uint8`` is a model that takes the camera's
pixels as they are (``dtype`` uint8, its normalisation inside ``forward``): its images
are ``round(pixels * 255)`` as uint8, and the export traces it with a uint8 input.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from .errors import DCDDeployError

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Preprocess:
    """A model's input preprocessing (see the module docstring).

    Attributes:
        mean: per-channel mean, model channel order, in units of ``pixels * scale``.
        std: per-channel std, same order and units.
        scale: what a full-intensity pixel is worth (1 for [0, 1], 255 for [0, 255]).
        bgr: the model takes BGR (channels reversed).
        name: a preset's name, or ``custom``.
        dtype: ``float32``, or ``uint8`` for a model that takes pixels as they are
            (mean 0, std 1, scale 255: ``apply`` rounds and casts).
    """

    mean: tuple[float, ...] = (0.485, 0.456, 0.406)
    std: tuple[float, ...] = (0.229, 0.224, 0.225)
    scale: float = 1.0
    bgr: bool = False
    name: str = "imagenet"
    dtype: str = "float32"

    def __post_init__(self):
        if self.dtype not in ("float32", "uint8"):
            raise DCDDeployError(f"preprocessing dtype {self.dtype!r}; expected float32 or uint8")
        if self.dtype == "uint8" and (set(self.mean) != {0.0} or set(self.std) != {1.0} or self.scale != 255):
            raise DCDDeployError("uint8 takes the pixels as they are (0-255); it has no mean, std or scale to set")
        if len(self.mean) != len(self.std) or not self.mean:
            raise DCDDeployError(
                f"preprocessing needs one mean and one std per channel, got {len(self.mean)} and {len(self.std)}"
            )
        if not all(s > 0 for s in self.std) or not self.scale > 0:
            raise DCDDeployError("preprocessing std and scale must be positive")
        if not all(abs(v) < 1e6 for v in (*self.mean, *self.std, self.scale)):
            raise DCDDeployError("preprocessing mean, std and scale must be finite and below 1e6")

    def apply(self, pixels: torch.Tensor) -> torch.Tensor:
        """(N, C, H, W) RGB pixels in [0, 1] -> what the model takes."""
        import torch  # here: the commands read the presets before they load torch

        c = pixels.shape[1]
        if c != len(self.mean) and self.dtype != "uint8":  # pixels, RGB or grey, need no mean
            raise DCDDeployError(f"preprocessing {self.name} has {len(self.mean)} channels; the images have {c}")
        x = pixels if self.scale == 1 else pixels * self.scale
        if self.bgr:
            x = x.flip(1)
        if self.dtype == "uint8":
            return x.round().clamp(0, 255).to(torch.uint8)
        mean = torch.tensor(self.mean, dtype=x.dtype).view(1, -1, 1, 1)
        std = torch.tensor(self.std, dtype=x.dtype).view(1, -1, 1, 1)
        return (x - mean) / std

    def describe(self) -> str:
        """``imagenet (scale 1, mean 0.485,0.456,0.406, std 0.229,0.224,0.225, RGB)``."""

        def fmt(v):
            return ",".join(f"{x:g}" for x in v)

        if self.dtype == "uint8":
            return f"{self.name} (pixels 0-255 as uint8, {'BGR' if self.bgr else 'RGB'}; the model normalises them)"
        return (
            f"{self.name} (scale {self.scale:g}, mean {fmt(self.mean)}, std {fmt(self.std)}, "
            f"{'BGR' if self.bgr else 'RGB'})"
        )

    def to_dict(self) -> dict:
        return asdict(self)


_IMAGENET_MEAN, _IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
#: Named preprocessings (``--preprocess NAME``).
PRESETS = {
    "imagenet": Preprocess(),
    "unit": Preprocess((0.0, 0.0, 0.0), (1.0, 1.0, 1.0), 1.0, False, "unit"),
    "0-255": Preprocess((0.0, 0.0, 0.0), (1.0, 1.0, 1.0), 255.0, False, "0-255"),
    "inception": Preprocess((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 1.0, False, "inception"),
    "bgr-imagenet": Preprocess(
        tuple(255 * m for m in reversed(_IMAGENET_MEAN)),
        tuple(255 * s for s in reversed(_IMAGENET_STD)),
        255.0,
        True,
        "bgr-imagenet",
    ),
    "caffe": Preprocess((103.939, 116.779, 123.68), (1.0, 1.0, 1.0), 255.0, True, "caffe"),
    "uint8": Preprocess((0.0, 0.0, 0.0), (1.0, 1.0, 1.0), 255.0, False, "uint8", "uint8"),
}


def make_preprocess(
    preset: str | Preprocess | None = None, *, mean=None, std=None, scale=None, bgr: bool | None = None
) -> Preprocess:
    """A preset (default ``imagenet``) with any of its fields overridden.

    Raises:
        DCDDeployError: an unknown preset or invalid values.
    """
    if isinstance(preset, Preprocess):
        base = preset
    else:
        name = preset or "imagenet"
        if name not in PRESETS:
            raise DCDDeployError(f"unknown preprocessing {name!r}; expected one of {', '.join(PRESETS)}")
        base = PRESETS[name]
    if mean is None and std is None and scale is None and bgr is None:
        return base
    if base.dtype == "uint8":
        if mean is not None or std is not None or scale is not None:
            raise DCDDeployError("uint8 takes the pixels as they are (0-255); it has no mean, std or scale to set")
        return Preprocess(base.mean, base.std, base.scale, bool(bgr), "custom", "uint8")
    return Preprocess(
        tuple(float(v) for v in (base.mean if mean is None else mean)),
        tuple(float(v) for v in (base.std if std is None else std)),
        float(base.scale if scale is None else scale),
        base.bgr if bgr is None else bool(bgr),
        "custom",
    )
