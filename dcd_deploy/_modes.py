"""A user's module in eval mode for the length of a check, its own modes restored after."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import nn


@contextlib.contextmanager
def evaluating(model: nn.Module) -> Iterator[nn.Module]:
    """``model`` in eval mode inside the block; afterwards every submodule's ``training``
    flag is what it was, so a check or an export run between training steps leaves
    BatchNorm and dropout as the training loop set them (frozen BN layers included)."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield model
    finally:
        for m, training in modes:
            m.training = training
