"""Networks whose ``forward`` takes one dict, as a data loader hands a batch over.

Imported as ``_dict_net`` (see ``_zoo``) by the API tests, and by the factory file the
CLI tests write (``from _dict_net import build``), so both test the same network.
"""

from __future__ import annotations

import torch
from torch import nn

from dcd_deploy.layers import DCDConv2d


class MaskedNet(nn.Module):
    """An image and its mask in one dict (``batch["image"]``, ``batch["mask"]``)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), DCDConv2d(8, 16))
        self.head = nn.Conv2d(16, 4, 1)

    def forward(self, batch):
        return self.head(self.body(batch["image"]) * batch["mask"])


class OneKey(nn.Module):
    """A dict of one key (``batch["image"]``)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), DCDConv2d(8, 16))

    def forward(self, batch):
        return self.body(batch["image"]).mean((2, 3))


class TwoViews(nn.Module):
    """A list of two images (``forward(self, views)``: stereo pairs, multi-crop)."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(), DCDConv2d(8, 8))
        self.fc = nn.Linear(16, 2)

    def forward(self, views):
        a, b = (self.enc(v).mean((2, 3)) for v in views)
        return self.fc(torch.cat([a, b], 1))


def build() -> MaskedNet:
    """A MaskedNet whose DCD layer's dynamic heads (zero at construction) matter."""
    torch.manual_seed(0)
    model = MaskedNet()
    with torch.no_grad():
        for p in model.body[3].parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def one_key() -> OneKey:
    torch.manual_seed(1)
    return OneKey()


def two_views() -> TwoViews:
    torch.manual_seed(2)
    return TwoViews()
