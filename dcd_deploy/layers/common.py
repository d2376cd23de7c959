"""Small building blocks shared by every dynamic layer.

``HSigmoid`` is the authors' hard sigmoid, ``relu6(z + 3) / 3``: its range is 0..2,
not the usual 0..1, so a zero pre-activation gives a gain of exactly 1. ``SEGate`` is
their squeeze-FC gate ``g(y) = y * hsig(A y)`` (docs/design.md#release-format).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

#: Upper end of :func:`hsig`; ONNX's HardSigmoid saturates at 1, so lowering scales by it.
HSIG_RANGE = 2.0


def hsig(z: torch.Tensor) -> torch.Tensor:
    """Hard sigmoid with range 0..2: ``relu6(z + 3) / 3``."""
    return F.relu6(z + 3.0) / 3.0


class HSigmoid(nn.Module):
    """Module form of :func:`hsig` (kept as a module so checkpoints line up)."""

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return hsig(z)


class SEGate(nn.Module):
    """Self-gating FC: ``y * hsig(A y)``; parameter name ``fc.0`` as in the release."""

    def __init__(self, channels: int):
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(channels, channels, bias=False), HSigmoid())

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        return y * self.fc(y)


def make_gate(kind: str, channels: int) -> nn.Module:
    """The activation between the two FCs of a dynamic branch.

    Args:
        kind: ``"relu"`` (the paper's plain form) or ``"se"`` (the authors' release).
        channels: width of the squeeze FC.
    """
    if kind == "relu":
        return nn.ReLU()
    if kind == "se":
        return SEGate(channels)
    raise ValueError(f"unknown gate {kind!r}; expected 'relu' or 'se'")


def require_rank(layer: nn.Module, x: torch.Tensor, rank: int, shape: str) -> None:
    """A clear error where ``nn.Conv2d`` / ``nn.Linear`` would take other ranks (an unbatched
    image, a (B, T, C) sequence): the dynamic weights are one per sample of axis 0."""
    if x.dim() != rank:
        raise ValueError(
            f"{type(layer).__name__} takes {shape} input (its dynamic weights are one per sample), "
            f"got shape {tuple(x.shape)}"
        )


def place(layer: nn.Module, device=None, dtype=None) -> None:
    """Move a layer built on the default device and dtype to ``nn.Conv2d``'s factory
    arguments ``device`` and ``dtype`` (in place), when either is given."""
    if device is not None or dtype is not None:
        layer.to(device=device, dtype=dtype)
