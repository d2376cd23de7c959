"""A user's forward hooks are part of what the model computes, and of what the file does.

Oracle: the user's model itself, run eagerly with its hooks (the file must compute it),
and the same model without the hooks (which the file must then not compute).
"""

from __future__ import annotations

import functools

import numpy as np
import onnxruntime as ort
import pytest
import torch
from torch import nn

from dcd_deploy import check_parity, export_onnx, to_deploy
from dcd_deploy._hooks import has_hooks
from dcd_deploy.layers import DCDConv2d

_SEEN: list[int] = []


class _Hooked(nn.Module):
    """Hooks where users put them: on a DCD layer (output and input), on a Conv followed
    by its BatchNorm (which must then not fold), on a plain Conv, and a read-only one."""

    def __init__(self):
        super().__init__()
        self.a = DCDConv2d(3, 8, 3, padding=1)
        self.b = DCDConv2d(8, 8, 1)
        self.c = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.d = nn.Conv2d(8, 4, 1)
        self.a.register_forward_hook(lambda m, i, o: o * 0.5 + 1.0)
        self.b.register_forward_pre_hook(lambda m, i: (i[0].clamp(max=0.8),))
        self.c.register_forward_hook(lambda m, i, o: o * 2.0 - 0.3)
        self.d.register_forward_hook(lambda m, i, o: o.tanh())
        self.b.register_forward_hook(lambda m, i, o: _SEEN.append(o.dim()))  # an observer: returns None

    def forward(self, x):
        y = torch.relu(self.b(torch.relu(self.a(x))))
        return self.d(torch.relu(self.bn(self.c(y))))


def _net() -> _Hooked:
    torch.manual_seed(0)
    net = _Hooked()
    with torch.no_grad():
        net.bn.running_mean.uniform_(-0.5, 0.5)
        net.bn.running_var.uniform_(0.5, 2.0)
        net.bn.weight.uniform_(0.5, 1.5)
    return net.eval()


def _run(path, x):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]


@pytest.mark.parametrize("mode", ["standard", "fused"])
def test_hooks_are_exported_with_the_layers_they_sit_on(tmp_path, mode):
    net = _net()
    result = export_onnx(net, tmp_path / "m.onnx", input_size=(12, 14), mode=mode)
    assert result, result.parity.summary()
    x = torch.randn(2, 3, 12, 14)
    with torch.no_grad():
        want = net(x)
        bare = _net()
        for m in bare.modules():
            m._forward_hooks.clear()
            m._forward_pre_hooks.clear()
        without = bare(x)
    got = _run(tmp_path / "m.onnx", x)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)
    assert np.abs(got - without.numpy()).max() > 0.05  # the hooks matter to the output
    layers = {row.path for row in result.parity.layers if row.passed}
    assert {"a", "b", "c", "d"} <= layers, result.parity.summary()


def test_a_hook_between_a_layer_and_its_batchnorm_keeps_them_apart():
    net = _net()
    deploy = to_deploy(net, input_size=(12, 14))
    assert "c" not in deploy.folded_bn and isinstance(deploy.bn, nn.BatchNorm2d)
    assert has_hooks(deploy.a) and has_hooks(deploy.b) and has_hooks(deploy.c)
    x = torch.randn(2, 3, 12, 14)
    with torch.no_grad():
        torch.testing.assert_close(deploy(x), net(x), rtol=1e-4, atol=1e-5)
    assert has_hooks(net.a) and len(net.b._forward_hooks) == 1  # the user's model as it was


def test_a_file_without_the_hooks_fails_the_check(tmp_path):
    """The layer check reads each layer between its hooks; the end-to-end check still sees
    a file that left a hook out."""
    net = _net()
    bare = _net()
    bare.a._forward_hooks.clear()
    assert export_onnx(bare, tmp_path / "bare.onnx", input_size=(12, 14), check=False)
    report = check_parity(net, tmp_path / "bare.onnx", batch_sizes=(2,))
    assert not report, report.summary()


class _HookNeck(nn.Module):
    """Backbone features handed to the neck by hooks closing over the model, as feature
    extractors do: ``forward`` reads back what the hooks stored in ``self.features``."""

    def __init__(self):
        super().__init__()
        self.c1 = DCDConv2d(3, 8, 3, stride=2, padding=1)
        self.c2 = DCDConv2d(8, 16, 3, stride=2, padding=1)
        self.lateral = nn.Conv2d(8, 16, 1)
        self.features: dict[str, torch.Tensor] = {}

        def keep(name):
            def hook(module, args, output):
                self.features[name] = output  # the model itself, by closure

            return hook

        self.c1.register_forward_hook(keep("c1"))
        self.c2.register_forward_hook(keep("c2"))

    def forward(self, x):
        self.c2(torch.relu(self.c1(x)))
        p2 = self.features["c2"]
        return self.lateral(self.features["c1"]) + nn.functional.interpolate(p2, scale_factor=2.0), p2


@pytest.mark.parametrize("mode", ["standard", "fused"])
def test_hooks_closing_over_the_model_act_on_each_copy(tmp_path, mode):
    """Every copy (deploy form, float64 reference) has hooks writing into itself: the copy's
    forward once found ``self.features`` empty ("does not run on its example inputs:
    'c2'"), and a trace in this process left symbolic tensors in the user's model."""
    torch.manual_seed(0)
    net = _HookNeck().eval()
    result = export_onnx(net, tmp_path / "m.onnx", input_size=(16, 24), mode=mode)  # traced in this process
    assert result, result.parity.summary()
    x = torch.randn(2, 3, 16, 24)
    with torch.no_grad():
        want = net(x)
    sess = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-4, atol=1e-5)
    assert all(type(v) is torch.Tensor and v.dtype == torch.float32 for v in net.features.values())
    deploy = to_deploy(net, input_size=(16, 24))
    deploy(x)
    assert torch.equal(net.features["c2"], want[1])  # the copy's hooks wrote into the copy


class _HelperNeck(nn.Module):
    """Hooks reaching the model one step removed: through a helper closing over it (the
    hook a lambda calling ``save``) and through a partial of a bound method."""

    def __init__(self):
        super().__init__()
        self.c1 = DCDConv2d(3, 8, 3, stride=2, padding=1)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1)
        self.features: dict[str, torch.Tensor] = {}

        def save(name, output):
            self.features[name] = output

        self.c1.register_forward_hook(lambda m, i, o: save("c1", o))
        self.c2.register_forward_hook(functools.partial(self._keep, "c2"))

    def _keep(self, name, module, args, output):
        self.features[name] = output

    def forward(self, x):
        self.c2(torch.relu(self.c1(x)))
        return self.features["c1"].mean((2, 3)) + self.features["c2"].amax((2, 3))


def test_hooks_reaching_the_model_through_a_helper_act_on_each_copy(tmp_path):
    """The copy's lambda once called the user's ``save``, which wrote into the user's model:
    the copy's ``forward`` found its ``self.features`` empty ("'c1'")."""
    torch.manual_seed(0)
    net = _HelperNeck().eval()
    result = export_onnx(net, tmp_path / "m.onnx", input_size=(16, 20))
    assert result, result.parity.summary()
    x = torch.randn(2, 3, 16, 20)
    with torch.no_grad():
        want = net(x)
    np.testing.assert_allclose(_run(tmp_path / "m.onnx", x), want.numpy(), rtol=1e-4, atol=1e-5)
    net.features.clear()
    deploy = to_deploy(net, input_size=(16, 20))
    with torch.no_grad():
        deploy(x)
    assert net.features == {} and set(deploy.features) == {"c1", "c2"}


def test_copy_model_rebinds_a_recursive_helper_once():
    """A helper that calls itself (a cycle through its own closure) is rebuilt once, and
    still reaches the copy; a hook reaching nothing of the model stays the same object."""
    from dcd_deploy._hooks import copy_model

    net = nn.Sequential(nn.Conv2d(3, 4, 1), nn.ReLU())
    net.seen = []

    def count(n):
        return count(n - 1) if n else net.seen

    def hook(m, i, o):
        count(2).append(o.shape[1])

    def plain(m, i, o):
        return o + 1

    net[0].register_forward_hook(hook)
    net[1].register_forward_hook(plain)
    copy = copy_model(net)
    copy(torch.zeros(1, 3, 2, 2))
    assert net.seen == [] and copy.seen == [4]
    assert next(iter(copy[1]._forward_hooks.values())) is plain
