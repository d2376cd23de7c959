"""FastMeta: the ops it answers on meta tensors give what PyTorch's own meta run gives,
and nothing changes off the meta device."""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from dcd_deploy import create_model
from dcd_deploy._meta import FastMeta
from dcd_deploy.bench import complexity


def _calls(x):
    """(name, call, in place) triples: every op FastMeta answers, as models and their init
    call it; an in-place call returns its own tensor, the others a new one."""
    c = x.shape[1]
    mean, var, w, b = (torch.ones(c, device=x.device) for _ in range(4))
    return [
        ("batch_norm eval", lambda t: F.batch_norm(t, mean, var, w, b, False), False),
        ("batch_norm train", lambda t: F.batch_norm(t, mean.clone(), var.clone(), w, b, True), False),
        ("module BN", nn.BatchNorm2d(c).to(x.device).eval(), False),
        ("ReLU6", nn.ReLU6(), False),
        ("ReLU6 in place", nn.ReLU6(inplace=True), True),
        ("hardtanh", lambda t: F.hardtanh(t, -2.0, 2.0), False),
        ("hardtanh kw in place", lambda t: F.hardtanh(t, inplace=True), True),
        ("relu", F.relu, False),
        ("relu in place", lambda t: F.relu(t, True), True),
        ("ReLU in place", nn.ReLU(inplace=True), True),
        ("torch.relu", torch.relu, False),
        ("torch.relu_", torch.relu_, True),
        ("init normal_", lambda t: nn.init.normal_(t, 0.0, 0.1), True),
        ("init kaiming_uniform_", lambda t: nn.init.kaiming_uniform_(t, a=5**0.5), True),
        ("init zeros_", nn.init.zeros_, True),
        ("Tensor.fill_", lambda t: t.fill_(3.0), True),
        ("Tensor.uniform_", lambda t: t.uniform_(), True),
    ]


def _layout(t: torch.Tensor) -> tuple:
    return t.shape, t.stride(), t.dtype, t.device


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_meta_answers_are_what_torch_gives(layout):
    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    for name, call, in_place in _calls(torch.empty(2, 8, 5, 7, device="meta")):
        x = torch.empty(2, 8, 5, 7, device="meta").to(memory_format=fmt)
        want = call(x.clone())
        y = x.clone()
        with FastMeta():
            got = call(y)
        assert _layout(got) == _layout(want), name
        assert (got is y) == in_place, name


def test_off_the_meta_device_every_op_runs():
    torch.manual_seed(1)
    x = torch.randn(2, 8, 5, 7) * 4
    for name, call, _ in _calls(x):
        torch.manual_seed(2)
        want = call(x.clone())
        torch.manual_seed(2)
        with FastMeta():
            got = call(x.clone())
        assert torch.equal(got, want), name


def test_a_model_built_under_it_has_every_parameter_and_buffer():
    with torch.device("meta"):
        plain = create_model("mobilenetv2_050_dcd")
    with torch.device("meta"), FastMeta():
        fast = create_model("mobilenetv2_050_dcd")
    shapes = {k: (v.shape, v.dtype) for k, v in plain.state_dict().items()}
    assert {k: (v.shape, v.dtype) for k, v in fast.state_dict().items()} == shapes
    torch.manual_seed(3)
    real = create_model("mobilenetv2_035")
    torch.manual_seed(3)
    with FastMeta():  # on the CPU the initialisation is drawn as ever
        again = create_model("mobilenetv2_035")
    assert all(torch.equal(a, b) for a, b in zip(real.state_dict().values(), again.state_dict().values(), strict=True))


@pytest.mark.parametrize("name", ["mobilenetv2_050_dcd", "resnet18_dcd", "mobilenetv2_035_condconv"])
def test_counts_are_those_of_a_plain_meta_run(monkeypatch, name):
    with torch.device("meta"):
        model = create_model(name)
    size = (224, 192) if "mobilenet" in name else 224  # the DCD ResNets pool a fixed 7x7
    fast = complexity.count_complexity(model, input_size=size)
    monkeypatch.setattr(complexity, "FastMeta", contextlib.nullcontext)
    plain = complexity.count_complexity(model, input_size=size)
    assert fast == plain
