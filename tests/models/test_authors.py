"""The authors' release format: our layers are theirs, and their files load into equal models.

The oracles below re-implement the release's layers from docs/design.md#release-format alone
(no code from ``dcd_deploy.layers``); loading one of our layers' state dicts into them
strictly and getting the same outputs shows the names, shapes and maths all agree.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from _zoo import ZooCache
from torch import nn

from dcd_deploy import create_model, load_checkpoint, pseudo_train, save_checkpoint
from dcd_deploy.errors import CheckpointError, StateDictMismatchError
from dcd_deploy.models import LayerSpec, synthetic_images
from dcd_deploy.models.authors import (
    build_from_release,
    build_model,
    release_arch,
    save_release_checkpoint,
    to_release_state_dict,
)

# -- oracles (docs/design.md#release-format) ------------------------------------------


def hsig(z):
    return F.relu6(z + 3) / 3  # range 0..2


class Gate(nn.Module):
    """g(y) = y * hsig(A y); A is ``fc.0`` inside the release's ``fc.1``."""

    def __init__(self, channels):
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(channels, channels, bias=False))

    def forward(self, y):
        return y * hsig(self.fc(y))


class OracleDynamicConv(nn.Module):
    """The release's dynamic conv: out = conv_p(bn2(Φ z) + z) + Λ ⊙ conv(x), z = bn1(conv_q(x))."""

    def __init__(self, inp, oup, *, kernel, stride, pool, mul, dim, squeeze):
        super().__init__()
        self.dim = dim
        self.conv = nn.Conv2d(inp, oup, kernel, stride, kernel // 2, bias=False)
        self.conv_q = nn.Conv2d(inp, dim, 1, stride, bias=False)
        self.bn1 = nn.BatchNorm2d(dim)
        self.pool = nn.AdaptiveAvgPool2d(pool)
        self.fc = nn.Sequential(nn.Linear(inp * mul, squeeze, bias=False), Gate(squeeze))
        self.fc_phi = nn.Linear(squeeze, dim * dim, bias=False)
        self.fc_scale = nn.Linear(squeeze, oup, bias=False)
        self.conv_p = nn.Conv2d(dim, oup, 1, bias=False)
        self.bn2 = nn.BatchNorm1d(dim)

    def forward(self, x):
        b = x.shape[0]
        y = self.fc(self.pool(x).view(b, -1))  # channel-major: c*4 + i*2 + j for the 2x2 pool
        scale = hsig(self.fc_scale(y)).view(b, -1, 1, 1)
        phi = self.fc_phi(y).view(b, self.dim, self.dim)
        z = self.bn1(self.conv_q(x))
        h, w = z.shape[2:]
        z = z.view(b, self.dim, h * w)
        z = self.bn2(torch.bmm(phi, z)) + z
        return self.conv_p(z.view(b, self.dim, h, w)) + scale * self.conv(x)


def oracle_dymodule(inp, oup, fc_squeeze):
    """MobileNetV2's ``DYModule(inp, oup, fc_squeeze)``."""
    mul, red, pool = (4, 8, 2) if inp < oup else (1, 2, 1)
    dim = min(inp * mul // red, oup // red)
    while dim * dim > 2 * inp * mul:
        red *= 2
        dim = min(inp * mul // red, oup // red)
    dim = max(dim, 4)
    squeeze = max(max(inp * mul, dim * dim) // fc_squeeze, 4)
    return OracleDynamicConv(inp, oup, kernel=1, stride=1, pool=pool, mul=mul, dim=dim, squeeze=squeeze)


def oracle_conv_basic_dy(inp, oup, stride):
    """ResNet BasicBlock's 3x3 ``conv_basic_dy`` (its Q and P are called q and p there)."""
    dim = int(math.sqrt(4 * inp))
    squeeze = max(max(4 * inp, dim * dim) // 16, 4)
    return OracleDynamicConv(inp, oup, kernel=3, stride=stride, pool=2, mul=4, dim=dim, squeeze=squeeze)


def oracle_conv_dy(inp, oup, kernel, stride):
    """ResNet Bottleneck's ``conv_dy`` (no floor on the squeeze width)."""
    dim = int(math.sqrt(inp))
    squeeze = max(inp, dim * dim) // 16
    return OracleDynamicConv(inp, oup, kernel=kernel, stride=stride, pool=1, mul=1, dim=dim, squeeze=squeeze)


class OracleDYCls(nn.Module):
    """``DYCls(inp, oup)``: the 1x1 case on (B, inp) features, latent and squeeze 32."""

    def __init__(self, inp, oup):
        super().__init__()
        self.cls = nn.Linear(inp, oup)
        self.cls_q = nn.Linear(inp, 32, bias=False)
        self.cls_p = nn.Linear(32, oup, bias=False)
        self.fc = nn.Sequential(nn.Linear(inp, 32, bias=False), Gate(32))
        self.fc_phi = nn.Linear(32, 32 * 32, bias=False)
        self.fc_scale = nn.Linear(32, oup, bias=False)
        self.bn1 = nn.BatchNorm1d(32)
        self.bn2 = nn.BatchNorm1d(32)

    def forward(self, x):
        y = self.fc(x)
        phi = self.fc_phi(y).view(-1, 32, 32)
        z = self.bn1(self.cls_q(x))
        z = self.bn2(torch.bmm(phi, z.unsqueeze(2)).squeeze(2)) + z
        return self.cls_p(z) + hsig(self.fc_scale(y)) * self.cls(x)


def randomize(module, seed):
    """Random weights and BN statistics (so no BN is an identity), in place."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in module.state_dict().items():
            if not t.is_floating_point():
                continue
            if name.endswith("running_var"):
                t.copy_(0.5 + torch.rand(t.shape, generator=g, dtype=t.dtype))
            elif t.dim() > 1:
                t.copy_(torch.randn(t.shape, generator=g, dtype=t.dtype) / math.sqrt(t[0].numel()))
            else:
                t.copy_(0.5 * torch.randn(t.shape, generator=g, dtype=t.dtype))
    return module


def assert_oracle_agrees(ours, oracle, x):
    ours = randomize(ours.double(), seed=1).eval()
    oracle.double().load_state_dict(ours.state_dict(), strict=True)
    oracle.eval()
    with torch.no_grad():
        torch.testing.assert_close(ours(x.double()), oracle(x.double()), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(
    "inp, oup, fc_squeeze",
    [
        (16, 96, 8),  # inp < oup: 2x2 pool over 7x7 (overlapping windows), features x4
        (160, 960, 16),  # inp < oup where dim² > 2·inp·m doubles red twice
        (96, 24, 8),  # inp >= oup: global pool
        (960, 160, 16),  # inp >= oup where red doubles
    ],
)
def test_our_pointwise_layer_is_the_release_dymodule(inp, oup, fc_squeeze):
    ours = LayerSpec(kind="dcd", roles={"pw"}, fc_squeeze=fc_squeeze).conv("pw", inp, oup)
    x = torch.randn(2, inp, 7, 7, generator=torch.Generator().manual_seed(0))
    assert_oracle_agrees(ours, oracle_dymodule(inp, oup, fc_squeeze), x)


@pytest.mark.parametrize(
    "family, inp, oup, kernel, stride",
    [("basic", 16, 32, 3, 2), ("basic", 32, 32, 3, 1), ("bottleneck", 64, 64, 3, 2), ("bottleneck", 256, 64, 1, 1)],
)
def test_our_resnet_layers_are_the_release_layers(family, inp, oup, kernel, stride):
    ours = LayerSpec(kind="dcd", roles={"conv"}).conv("conv", inp, oup, kernel, stride, family=family)
    oracle = oracle_conv_basic_dy(inp, oup, stride) if family == "basic" else oracle_conv_dy(inp, oup, kernel, stride)
    x = torch.randn(2, inp, 8, 8, generator=torch.Generator().manual_seed(0))
    assert_oracle_agrees(ours, oracle, x)


@pytest.mark.parametrize("inp, oup", [(1280, 10), (512, 1000)])
def test_our_classifier_is_the_release_dycls(inp, oup):
    ours = LayerSpec(kind="dcd", roles={"cls"}).classifier(inp, oup)
    x = torch.randn(4, inp, generator=torch.Generator().manual_seed(0))
    assert_oracle_agrees(ours, OracleDYCls(inp, oup), x)


# -- release files ------------------------------------------------------------------


def with_weights(arch, size, seed, **config):
    """A zoo model with non-trivial weights (pseudo-trained: about 2 s for a DCD ResNet-18
    at 224 on one thread)."""
    return pseudo_train(create_model(arch, **config), seed=seed, input_size=size)


@pytest.fixture(scope="module")
def trained():
    """Zoo models with non-trivial weights, built once per module (never modified):
    ``trained(arch, **config)``, each with its own seed, at ``_zoo.input_size``."""
    return ZooCache(seed=None, build=with_weights)


def assert_same_weights(loaded, model):
    expected, got = model.state_dict(), loaded.state_dict()
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert torch.equal(got[key], value), key


def input_for(arch):
    return synthetic_images(1, 224, seed=5) if arch.startswith("resnet") else synthetic_images(2, 64, seed=5)


@pytest.mark.parametrize(
    "arch, config, dropout, data_parallel",
    [
        ("mobilenetv2_100_dcd", {}, True, True),  # the published layout
        ("mobilenetv2_050_dcd", {}, True, True),
        ("mobilenetv2_035_dcd", {}, True, True),
        ("mobilenetv2_050_dcd", {}, False, True),
        ("mobilenetv2_035_dcd", {}, True, False),
        ("mobilenetv2_100_dcd", {"fc_squeeze": 8, "num_classes": 10}, False, False),  # not the width's default
        ("resnet18_dcd", {}, True, True),
        ("resnet18_dcd", {}, False, False),
    ],
)
def test_release_checkpoint_loads_into_an_equal_model(tmp_path, trained, arch, config, dropout, data_parallel):
    model = trained(arch, **config)
    save_release_checkpoint(model, tmp_path / "release.pth.tar", dropout=dropout, data_parallel=data_parallel)

    raw = torch.load(tmp_path / "release.pth.tar", weights_only=True)
    assert set(raw) == {"epoch", "arch", "state_dict", "best_prec1", "optimizer"}
    assert raw["arch"] == ("mobilenetv2_dcd" if arch.startswith("mobilenetv2") else arch)
    keys = list(raw["state_dict"])
    prefix = "module." if data_parallel else ""
    assert all(k.startswith(prefix) and not k.startswith(prefix + "module.") for k in keys)
    assert f"{prefix}classifier.{1 if dropout else 0}.cls.weight" in keys
    if arch.startswith("resnet"):
        assert f"{prefix}layer1.0.conv1.q.weight" in keys and f"{prefix}layer4.1.conv2.p.weight" in keys
        assert not any("conv_q" in k or "conv_p" in k for k in keys)

    loaded = load_checkpoint(tmp_path / "release.pth.tar")
    assert loaded.arch == arch
    expected = {"num_classes": config.get("num_classes", 1000), "dropout": 0.1 if dropout else 0.0}
    if arch.startswith("mobilenetv2"):
        expected["fc_squeeze"] = config.get("fc_squeeze", 16 if arch == "mobilenetv2_100_dcd" else 8)
    assert loaded.config == expected
    assert not loaded.training
    assert_same_weights(loaded, model)
    if dropout:  # one forward per architecture is enough once the weights are equal
        x = input_for(arch)
        with torch.no_grad():
            out = model(x)
            assert torch.isfinite(out).all()
            assert torch.equal(loaded(x), out)


def test_release_file_reloads_from_our_format(tmp_path, trained):
    model = trained("mobilenetv2_050_dcd")
    save_release_checkpoint(model, tmp_path / "release.pth.tar", dropout=False)
    ours = save_checkpoint(load_checkpoint(tmp_path / "release.pth.tar"), tmp_path / "ours.pt")
    again = load_checkpoint(ours)
    assert again.config == {"num_classes": 1000, "dropout": 0.0, "fc_squeeze": 8}
    assert_same_weights(again, model)


def test_plain_release_state_dict_with_family_arch(tmp_path, trained):
    model = trained("mobilenetv2_035_dcd")
    torch.save(to_release_state_dict(model, dropout=False), tmp_path / "sd.pt")
    assert load_checkpoint(tmp_path / "sd.pt", arch="mobilenetv2_dcd").arch == "mobilenetv2_035_dcd"
    assert load_checkpoint(tmp_path / "sd.pt", arch="mobilenetv2_035_dcd").arch == "mobilenetv2_035_dcd"
    with pytest.raises(StateDictMismatchError, match="does not fit mobilenetv2_050_dcd"):
        load_checkpoint(tmp_path / "sd.pt", arch="mobilenetv2_050_dcd")


def test_resnet_depth_outside_the_zoo_round_trips(tmp_path):
    model = build_model("resnet34_dcd", num_classes=10)
    assert (model.arch, model.config) == ("resnet34_dcd", {"num_classes": 10})
    assert (model.depth, model.fixed_pool) == (34, True)
    from_release = build_from_release("resnet34_dcd", to_release_state_dict(model))
    assert from_release.arch == "resnet34_dcd"
    assert from_release.config == {"num_classes": 10, "dropout": 0.1}
    loaded = load_checkpoint(save_checkpoint(from_release, tmp_path / "ours.pt"))
    assert (loaded.arch, loaded.config) == ("resnet34_dcd", from_release.config)
    assert_same_weights(loaded, model)


@pytest.mark.parametrize(
    "arch, config",
    [
        ("resnet10_dcd", {}),  # no such depth in the release
        ("mobilenetv2_050", {}),  # static
        ("mobilenetv2_050_dcd", {"latent_mult": 0.5}),
        ("resnet18_dcd", {"fixed_pool": False}),
    ],
)
def test_models_the_release_cannot_represent(arch, config):
    with pytest.raises(CheckpointError, match="no equivalent in the authors' release"):
        release_arch(create_model(arch, **config))


def test_widths_are_told_apart_by_the_whole_channel_table():
    # x0.5 and x0.35 share their stem (16) and first block (8); their second block differs.
    sd050 = to_release_state_dict(create_model("mobilenetv2_050_dcd"))
    sd035 = to_release_state_dict(create_model("mobilenetv2_035_dcd"))
    assert sd050["module.features.0.0.weight"].shape == sd035["module.features.0.0.weight"].shape
    assert build_from_release("mobilenetv2_dcd", sd050).arch == "mobilenetv2_050_dcd"
    assert build_from_release("mobilenetv2_dcd", sd035).arch == "mobilenetv2_035_dcd"


def test_release_state_dict_that_fits_no_variant():
    sd = to_release_state_dict(create_model("mobilenetv2_035_dcd"), prefix="")
    sd["features.4.conv.6.conv.weight"] = torch.zeros(20, 96, 1, 1)
    with pytest.raises(CheckpointError, match="channel counts fit none of x1.0, x0.5, x0.35"):
        build_from_release("mobilenetv2_dcd", sd)
    del sd["classifier.1.cls.weight"]
    with pytest.raises(CheckpointError, match="no DCD classifier"):
        build_from_release("mobilenetv2_dcd", sd)
    with pytest.raises(CheckpointError, match="unknown release arch 'mobilenetv3_dcd'"):
        build_from_release("mobilenetv3_dcd", sd)


def test_release_mismatch_names_the_keys():
    sd = to_release_state_dict(create_model("mobilenetv2_035_dcd"))
    del sd["module.features.3.conv.0.fc_phi.weight"]
    with pytest.raises(StateDictMismatchError, match=r"1 missing \(features\.3\.conv\.0\.fc_phi\.weight\)"):
        build_from_release("mobilenetv2_dcd", sd)
