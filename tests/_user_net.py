"""A network of the user's own, written to a file as a user would, for the MODULE:FUNCTION tests.

Imported as ``_user_net`` (tests/ is on ``sys.path``, see ``_zoo``). :data:`SOURCE` is
the file's text: a small network with a stride-2 stem, one 1x1 DCD layer and a linear
head, and ``build()`` returning it. :func:`to_static` is ``dcd_deploy.to_static`` when
this version has it, else a stand-in for the tests (each ``DCDConv2d`` replaced by its
static ``W0`` convolution), so the bench side is tested before and after it lands.
"""

from __future__ import annotations

import copy
from pathlib import Path

from torch import nn

import dcd_deploy
from dcd_deploy.layers import DCDConv2d

SOURCE = """\
import torch
from torch import nn

from dcd_deploy.layers import DCDConv2d


class TinyNet(nn.Module):
    def __init__(self, num_classes=5):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.pw = DCDConv2d(8, 16)
        self.bn = nn.BatchNorm2d(16)
        self.act = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(16, num_classes)

    def forward(self, x):
        return self.head(self.pool(self.act(self.bn(self.pw(self.stem(x))))).flatten(1))


def build():
    torch.manual_seed(1)
    return TinyNet()


class nets:
    build = staticmethod(build)
"""


def write_factory(directory: Path, name: str = "tiny") -> Path:
    """``directory/name.py`` holding :data:`SOURCE`."""
    path = directory / f"{name}.py"
    path.write_text(SOURCE, encoding="utf-8")
    return path


def _standin(model: nn.Module) -> nn.Module:
    model = copy.deepcopy(model)
    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, DCDConv2d):
                setattr(module, child_name, copy.deepcopy(child.conv))
    return model


def to_static(model: nn.Module) -> nn.Module:
    real = getattr(dcd_deploy, "to_static", None)
    return real(model) if real is not None else _standin(model)


def install_to_static(monkeypatch) -> None:
    """Make ``dcd_deploy.to_static`` available (the stand-in, if this version has none)."""
    if getattr(dcd_deploy, "to_static", None) is None:
        monkeypatch.setattr(dcd_deploy, "to_static", _standin, raising=False)
