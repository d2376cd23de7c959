"""``dcd_deploy.convert`` and ``dcd_deploy.to_static`` on networks written here.

Oracle: the original network (float64, its own nn.Conv2d layers). A freshly converted
network has Λ = 1 and Φ = 0 and must compute exactly what the original computed, at
every padding, dilation, stride, groups and bias setting; ``to_static`` must give back
``W0``'s convolution.
"""

from __future__ import annotations

import copy
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import dcd_deploy
from dcd_deploy import convert, to_static
from dcd_deploy.conversion import ConversionReport
from dcd_deploy.layers import CondConv2d, DCDConv2d, DCDLinear, DynamicConv2d

EXACT = 1e-12


class Net(nn.Module):
    """Every geometry nn.Conv2d has, some with a BN and activation after."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, 2, 1, bias=False)  # narrower than min_channels
        self.stem_bn = nn.BatchNorm2d(16)
        self.pw = nn.Conv2d(16, 32, 1, bias=True)
        self.dw = nn.Conv2d(32, 32, 3, 1, "same", dilation=2, groups=32, bias=False)
        self.dw_bn = nn.BatchNorm2d(32)
        self.valid = nn.Conv2d(32, 32, 3, padding="valid", bias=True)
        self.strided = nn.Conv2d(32, 32, 3, stride=2, padding=2, dilation=2)
        self.pair = nn.Conv2d(32, 32, (3, 3), stride=(1, 2), padding=(0, 1), dilation=(2, 1), bias=False)
        self.grouped = nn.Conv2d(32, 48, 3, padding=1, groups=4)
        self.pw_stride = nn.Conv2d(48, 32, 1, stride=2, bias=False)
        self.even = nn.Conv2d(32, 32, 2, padding=1)  # even kernel: channel fusion cannot take it
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        x = F.relu(self.stem_bn(self.stem(x)))
        x = F.relu(self.pw(x))
        x = F.relu6(self.dw_bn(self.dw(x)))
        x = self.valid(x)
        x = F.silu(self.strided(x))
        x = self.pair(x)
        x = self.grouped(x)
        x = self.pw_stride(x)
        x = self.even(x)
        return self.head(x.mean((2, 3)))


@torch.no_grad()
def trained_net(seed: int = 0) -> Net:
    torch.manual_seed(seed)
    net = Net().double()
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.normal_(0, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.uniform_(0.5, 1.5)
            m.bias.normal_(0, 0.5)
    return net.eval()


def image(seed: int = 1, size=(29, 31)) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, 3, *size, generator=g, dtype=torch.float64)


def rel_err(out, ref) -> float:
    assert out.shape == ref.shape
    return float((out - ref).detach().abs().max() / ref.detach().abs().max())


def state(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


ALL_KERNELS = dict(kernel_sizes=None)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"gate": "se", "latent_bn": True, "pool_size": 2},  # the release's latent path: P starts at 0
        {"channel_fusion": False},
        {"channel_attention": False, "reduction": 4},
    ],
    ids=["paper", "release", "lam-only", "phi-only"],
)
def test_converted_network_computes_what_the_original_computed(options):
    net, x = trained_net(), image()
    before = state(net)
    converted, report = convert(net, return_report=True, **ALL_KERNELS, **options)
    expected = {"pw", "dw", "valid", "strided", "pair", "grouped", "pw_stride"}
    if options.get("latent_bn"):
        expected -= {"dw"}  # the release's latent BNs are channel fusion only: a depthwise layer refuses them
    if options.get("channel_fusion") is False:
        expected |= {"even"}  # no centre tap needed: an even kernel converts
    assert set(report.converted) == expected
    assert set(report.skipped) == {"stem", "dw", "even"} - expected
    assert all(isinstance(converted.get_submodule(p), DCDConv2d) for p in report.converted)
    # the input is untouched
    assert all(type(m) is nn.Conv2d for m in (net.pw, net.dw, net.grouped))
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())
    with torch.no_grad():
        ref = net(x)
        assert rel_err(converted(x), ref) <= EXACT
        converted.train()  # batch statistics: the original's BNs see exactly the same tensors
        net.train()
        assert rel_err(converted(x), net(x)) <= EXACT


def test_converted_layers_keep_the_geometry_and_the_weights():
    net = trained_net()
    converted = convert(net, **ALL_KERNELS)
    for name in ("pw", "dw", "valid", "strided", "pair", "grouped", "pw_stride"):
        old, new = net.get_submodule(name), converted.get_submodule(name)
        for attr in ("kernel_size", "stride", "padding", "dilation", "groups"):
            assert getattr(new.conv, attr) == getattr(old, attr), (name, attr)
        assert torch.equal(new.conv.weight, old.weight)
        assert (new.bias is None) == (old.bias is None)
        if old.bias is not None:
            assert torch.equal(new.bias, old.bias)
        assert new.fc_scale.weight.abs().max() == 0 and new.fc_phi.weight.abs().max() == 0
        assert new.conv.weight.dtype == torch.float64
    assert converted.get_submodule("dw").form.depthwise
    assert converted.get_submodule("grouped").num_blocks == 4


def test_the_heads_learn_from_zero():
    """Zero heads are not a saddle: one backward pass reaches Λ's and Φ's heads (and P)."""
    for options in ({}, {"gate": "se", "latent_bn": True}):
        converted = convert(trained_net(), **options).train()
        converted(image()).square().sum().backward()
        layer = converted.pw
        assert layer.fc_scale.weight.grad.abs().max() > 0
        grads = [layer.conv_p.weight.grad] if options else [layer.fc_phi.weight.grad]
        assert all(g.abs().max() > 0 for g in grads)


def test_default_selection_and_report():
    net = trained_net()
    converted, report = convert(net, return_report=True)  # 1x1 only, min_channels 16
    assert report.converted == ["pw", "pw_stride"]
    assert report.skipped["stem"].startswith("kernel 3x3 not in kernel_sizes")
    assert "below min_channels" in convert(net, return_report=True, **ALL_KERNELS)[1].skipped["stem"]
    assert "centre tap" in convert(net, return_report=True, **ALL_KERNELS)[1].skipped["even"]
    assert isinstance(report, ConversionReport)
    text = str(report)
    assert text.splitlines()[0] == "converted 2 of 9 Conv2d layers"
    assert "skipped   even: kernel 2x2 not in kernel_sizes" in text
    assert type(converted.dw) is nn.Conv2d


def test_verbose_prints_the_report(capsys):
    convert(trained_net(), verbose=True)
    out = capsys.readouterr().out
    assert "converted pw" in out and "skipped   stem" in out


@pytest.mark.parametrize(
    "kw, expected",
    [
        ({"include": "p*"}, {"pw", "pair", "pw_stride"}),
        ({"include": ["pw", "grouped"]}, {"pw", "grouped"}),
        ({"include": re.compile(r"^(pw|valid)$")}, {"pw", "valid"}),
        ({"exclude": lambda path: path.startswith("pw")}, {"dw", "valid", "strided", "pair", "grouped"}),
        ({"include": "p*", "exclude": "pair"}, {"pw", "pw_stride"}),
        ({"kernel_sizes": (3,), "min_channels": 32}, {"dw", "valid", "strided", "pair", "grouped"}),
        ({"kernel_sizes": (3,), "min_channels": 33}, set()),  # every 3x3 conv has a 32-wide side
    ],
    ids=["glob", "list", "regex", "callable-exclude", "exclude-wins", "min-channels-32", "min-channels-33"],
)
def test_name_filters_and_widths(kw, expected):
    kw = {"kernel_sizes": None, **kw}
    _, report = convert(trained_net(), return_report=True, **kw)
    assert set(report.converted) == expected


def test_nested_modules_shared_modules_and_a_root_conv():
    shared = nn.Conv2d(16, 16, 1)
    net = nn.Sequential(nn.Sequential(shared, nn.ReLU()), shared).double().eval()
    converted, report = convert(net, return_report=True)
    assert report.converted == ["0.0"]  # the second path is the same module
    assert converted[0][0] is converted[1] and isinstance(converted[1], DCDConv2d)
    x = torch.randn(2, 16, 5, 5, dtype=torch.float64)
    with torch.no_grad():
        assert rel_err(converted(x), net(x)) <= EXACT
    root = nn.Conv2d(16, 16, 3, padding=1).double()
    assert isinstance(convert(root, kernel_sizes=(3,)), DCDConv2d)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_a_conv_of_another_padding_mode_converts_and_starts_as_that_conv(mode):
    """nn.Conv2d pads in its mode; the DCD layer that replaces it pads so too (W0 and the
    dynamic residual read the padded input), and to_static gives the conv back."""
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(16, 16, 3, padding=1, padding_mode=mode),
        nn.Conv2d(16, 24, 5, stride=2, padding=(2, 1), bias=False, padding_mode=mode),
    ).double()
    converted, report = convert(net, kernel_sizes=(3, 5), return_report=True)
    assert report.converted == ["0", "1"] and [m.padding_mode for m in converted] == [mode, mode]
    x = torch.randn(2, 16, 9, 13, dtype=torch.float64)  # odd sides: wrong pads change the shape
    assert converted(x).shape == net(x).shape and rel_err(converted(x), net(x)) <= EXACT
    static = to_static(converted)
    assert [m.padding_mode for m in static] == [mode, mode] and rel_err(static(x), net(x)) <= EXACT


def test_layers_already_dynamic_are_left_alone():
    net = nn.Sequential(DCDConv2d(16, 16), DynamicConv2d(16, 16), nn.Conv2d(16, 16, 1))
    _, report = convert(net, return_report=True)
    assert report.converted == ["2"] and not report.skipped  # their inner convs are theirs


def test_bad_arguments_fail_before_converting():
    with pytest.raises(TypeError, match="latnet_dim"):
        convert(trained_net(), latnet_dim=4)
    with pytest.raises(TypeError, match="include"):
        convert(trained_net(), include=3)


def test_package_exports():
    assert dcd_deploy.convert is convert and dcd_deploy.to_static is to_static
    assert dcd_deploy.convert is dcd_deploy.convert  # not shadowed by a submodule


# ----------------------------------------------------------------------------- to_static
def test_to_static_gives_w0s_convolution():
    net = trained_net()
    converted = convert(net, **ALL_KERNELS)
    with torch.no_grad():  # make the DCD layers really dynamic first
        for m in converted.modules():
            if isinstance(m, DCDConv2d):
                m.fc_scale.weight.normal_(0, 0.3)
                m.fc_phi.weight.normal_(0, 0.3)
    static = to_static(converted)
    assert not any(isinstance(m, DCDConv2d) for m in static.modules())
    assert any(isinstance(m, DCDConv2d) for m in converted.modules())  # the input is untouched
    x = image()
    with torch.no_grad():
        assert rel_err(static(x), net(x)) <= EXACT  # W0 and the bias are the original's
        assert rel_err(converted(x), net(x)) > 1e-3
    for name in ("pw", "dw", "pair", "grouped"):
        old, new = net.get_submodule(name), static.get_submodule(name)
        assert type(new) is nn.Conv2d
        assert all(
            getattr(new, a) == getattr(old, a) for a in ("kernel_size", "stride", "padding", "dilation", "groups")
        )


def test_to_static_linear_and_mixtures():
    dcd = DCDLinear(16, 10).double()
    dy = DynamicConv2d(8, 8, 3, 2, padding="valid", dilation=1, bias=True).double()
    cond = CondConv2d(8, 8, (1, 3), padding=(0, 1), groups=2, bias=True).double()
    net = nn.ModuleDict({"dcd": dcd, "dy": dy, "cond": cond}).eval()
    static = to_static(net)
    lin = static["dcd"]
    assert type(lin) is nn.Linear and torch.equal(lin.weight, dcd.cls.weight) and torch.equal(lin.bias, dcd.cls.bias)
    x = torch.randn(2, 8, 9, 9, dtype=torch.float64)
    with torch.no_grad():
        for name, layer in (("dy", dy), ("cond", cond)):
            conv = static[name]
            assert type(conv) is nn.Conv2d and conv.weight.dtype == torch.float64
            mean_w = sum(layer.weight[k] for k in range(layer.num_kernels)) / layer.num_kernels
            mean_b = sum(layer.bias[k] for k in range(layer.num_kernels)) / layer.num_kernels
            ref = F.conv2d(x, mean_w, mean_b, layer.stride, layer.padding, layer.dilation, layer.groups)
            assert rel_err(conv(x), ref) <= EXACT


def test_to_static_of_a_zoo_model_has_no_dynamic_layer_and_runs():
    model = dcd_deploy.create_model("mobilenetv2_035_dcd").eval()
    static = to_static(model)
    assert not any(isinstance(m, (DCDConv2d, DCDLinear)) for m in static.modules())
    ref = dcd_deploy.create_model("mobilenetv2_035").eval()
    assert [type(m).__name__ for m in static.modules() if isinstance(m, (nn.Conv2d, nn.Linear))] == [
        type(m).__name__ for m in ref.modules() if isinstance(m, (nn.Conv2d, nn.Linear))
    ]
    assert sum(p.numel() for p in static.parameters()) == sum(p.numel() for p in ref.parameters())
    with torch.no_grad():
        assert static(torch.randn(1, 3, 64, 64)).shape == (1, 1000)


def test_convert_a_zoo_static_model_exactly():
    net = dcd_deploy.create_model("mobilenetv2_035").double().eval()
    converted, report = convert(net, return_report=True)
    assert len(report.converted) > 20
    x = torch.randn(2, 3, 64, 64, dtype=torch.float64)
    with torch.no_grad():
        assert rel_err(converted(x), net(x)) <= 1e-10  # a deep net: rounding only


def test_a_layers_hooks_go_with_it_through_convert_and_to_static():
    """A hook changing a conv's output is part of what the network computes: the converted
    network (DCD layers starting as the static conv) and its static counterpart compute it."""
    net, x = trained_net(), image()
    net.pw.register_forward_hook(lambda m, i, o: o * 0.5 + 1.0)
    net.grouped.register_forward_pre_hook(lambda m, i: (i[0].clamp(max=0.5),))
    converted = convert(net, **ALL_KERNELS)
    assert isinstance(converted.pw, DCDConv2d) and isinstance(converted.grouped, DCDConv2d)
    static = to_static(converted)
    assert type(static.pw) is nn.Conv2d
    with torch.no_grad():
        ref = net(x)
        assert rel_err(converted(x), ref) <= EXACT
        assert rel_err(static(x), ref) <= EXACT
        bare = copy.deepcopy(converted)
        bare.pw._forward_hooks.clear()
        assert rel_err(bare(x), ref) > 1e-3  # the hook matters (EXACT is float64 rounding)
