"""A user's model keeps its modes and state through the checks and exports: a check run
between training steps must not leave BatchNorm frozen or dropout off (nor update BN's
running statistics by running the model in train mode)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import dcd_deploy
from dcd_deploy._modes import evaluating
from dcd_deploy.layers import DCDConv2d


def _net() -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU(), DCDConv2d(8, 8), nn.BatchNorm2d(8)
    )
    net.add_module("drop", nn.Dropout(0.5))
    net.train()
    net[1].eval()  # a frozen BN, as in detection fine-tuning
    return net


def _modes(net: nn.Module) -> list[bool]:
    return [m.training for m in net.modules()]


def test_evaluating_restores_every_submodule_even_on_error():
    net = _net()
    before = _modes(net)
    with pytest.raises(RuntimeError), evaluating(net):
        assert not any(_modes(net))
        raise RuntimeError("the check failed")
    assert _modes(net) == before and before.count(False) == 1


@pytest.mark.parametrize("check", [True, False])
def test_export_leaves_the_model_as_it_was(tmp_path, check):
    net = _net()
    before, state = _modes(net), {k: v.clone() for k, v in net.state_dict().items()}
    result = dcd_deploy.export_onnx(net, tmp_path / "m.onnx", input_size=(16, 24), check=check)
    assert result, result.parity.summary()
    assert _modes(net) == before
    assert all(torch.equal(state[k], v) for k, v in net.state_dict().items())  # no BN update either


def test_check_parity_leaves_the_model_as_it_was(tmp_path):
    net = _net()
    dcd_deploy.export_onnx(net, tmp_path / "m.onnx", input_size=16, check=False)
    before = _modes(net)
    assert dcd_deploy.check_parity(net, tmp_path / "m.onnx", backends=("onnxruntime",))
    assert _modes(net) == before


def test_count_complexity_leaves_the_model_as_it_was():
    from dcd_deploy.bench.complexity import count_complexity

    net = _net()
    before = _modes(net)
    count_complexity(net, input_size=(16, 24))
    assert _modes(net) == before
