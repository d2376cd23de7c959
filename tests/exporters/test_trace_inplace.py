"""Activations called with ``inplace=True`` are traced as the out-of-place call and a copy.

Oracles: the dispatcher's own record of the ops a call runs (no in-place activation
overload under the mode, one without it), eager PyTorch for the values (in place, the
input tensor itself holds the result), and the same export with the mode switched off
(the same ONNX graph, op for op).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from dcd_deploy import export_onnx
from dcd_deploy.exporters import _trace
from dcd_deploy.layers import DCDConv2d

#: Every activation the mode handles, with its arguments before ``inplace``.
CALLS = {
    F.threshold: (0.1, -1.0),
    F.relu: (),
    F.hardtanh: (-0.5, 0.5),
    F.relu6: (),
    F.elu: (0.7,),
    F.selu: (),
    F.celu: (0.9,),
    F.leaky_relu: (0.2,),
    F.rrelu: (0.1, 0.3, False),  # not training: a fixed slope
    F.hardsigmoid: (),
    F.hardswish: (),
    F.silu: (),
    F.mish: (),
}


class _Ops(TorchDispatchMode):
    """The ATen overloads a call dispatches."""

    def __init__(self):
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func._schema.name.split("::")[1] + ("." + func._overloadname if func._overloadname else ""))
        return func(*args, **(kwargs or {}))


def _in_place_activation(names: list[str]) -> list[str]:
    return [n for n in names if n.split(".")[0].endswith("_") and not n.startswith("copy_")]


def test_every_handled_activation_is_tested():
    assert set(CALLS) == set(_trace._INPLACE_ACTIVATIONS)


@pytest.mark.parametrize("keyword", [False, True], ids=["positional", "keyword"])
@pytest.mark.parametrize("func", list(CALLS), ids=lambda f: f.__name__)
def test_in_place_call_runs_out_of_place_then_copies(func, keyword):
    args = CALLS[func]
    x0 = torch.randn(2, 3, 5, 4, dtype=torch.float64) * 3
    want = func(x0.clone(), *args)  # out of place, without the mode

    def call(x):
        return func(x, *args, inplace=True) if keyword else func(x, *args, True)

    x = x0.clone()
    with _Ops() as plain:
        call(x)
    assert _in_place_activation(plain.names), plain.names  # the detector sees the in-place form
    assert torch.equal(x, want)

    x = x0.clone()
    with _trace._InPlaceAsCopy(), _Ops() as ops:
        out = call(x)
    assert out is x and torch.equal(x, want)  # the caller's tensor holds the result
    assert not _in_place_activation(ops.names), ops.names
    assert ops.names[-1] == "copy_.default"


def test_calls_without_inplace_are_left_alone():
    x = torch.randn(2, 3, 4, 4)
    with _trace._InPlaceAsCopy(), _Ops() as ops:
        y = F.relu6(x)
        z = F.hardtanh(x, -1.0, 1.0, False)
        w = torch.relu(x)
    assert not [n for n in ops.names if n.startswith("copy")], ops.names
    assert y is not x and z is not x and w is not x


class InPlaceNet(nn.Module):
    """Activations in place as torchvision writes them, and code that relies on the side effect."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU6(inplace=True))
        self.dcd = DCDConv2d(8, 16)
        self.bn = nn.BatchNorm2d(16)
        self.act = nn.Hardswish(inplace=True)
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        y = self.act(self.bn(self.dcd(self.stem(x))))
        F.leaky_relu(y, 0.1, True)  # the result is dropped: only the side effect counts
        y = y + F.elu(y, 0.5, inplace=True)  # y is read, then changed in place, then added to itself
        return self.head(y.mean((2, 3)))


def _net() -> nn.Module:
    torch.manual_seed(3)
    net = InPlaceNet()
    for bn in (net.stem[1], net.bn):
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    return net.eval()


class _Off(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def test_network_with_in_place_activations_exports_what_pytorch_computes(tmp_path, monkeypatch):
    net = _net()
    x = torch.randn(3, 3, 20, 28)
    with torch.no_grad():
        want = net(x.clone()).numpy()

    result = export_onnx(net, tmp_path / "m.onnx", input_size=(20, 28), simplify=False)
    assert result.parity
    sess = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

    # The same graph as the in-place trace, op for op.
    monkeypatch.setattr(_trace, "_InPlaceAsCopy", _Off)
    plain = export_onnx(net, tmp_path / "plain.onnx", input_size=(20, 28), simplify=False, check=False)
    ops = [n.op_type for n in onnx.load(str(result.path)).graph.node]
    assert ops == [n.op_type for n in onnx.load(str(plain.path)).graph.node]
