"""``to_deploy``: a new, BatchNorm-free module computing what the original computes.

Oracles: the original PyTorch model (training form, eval mode) run in float64, the
cost rule of docs/design.md#deploy-form evaluated by hand, PyTorch's own adaptive pooling,
and eval-mode BatchNorm written out as ``gamma (z - mean) / sqrt(var + eps) + beta``.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from _zoo import ZooCache, input_size
from torch import nn

from dcd_deploy import create_model, list_models, to_deploy
from dcd_deploy.errors import ExportError, UnsupportedInputError
from dcd_deploy.exporters._deploy_dcd import DeployDCD, adaptive_windows, prefers_weight_form
from dcd_deploy.exporters._deploy_mixture import DeployMixture
from dcd_deploy.layers import CondConv2d, DCDConv2d, DCDLinear, DynamicConv2d, MixtureConv2d
from dcd_deploy.models import synthetic_images
from dcd_deploy.parity import DEFAULT_K

DYNAMIC = (DCDConv2d, DCDLinear, MixtureConv2d)
BN = (nn.BatchNorm1d, nn.BatchNorm2d)
#: Deploy form folded and run in float64 vs the original in float64: the algebra is
#: exact, so only float64 rounding separates them (measured <= 2e-12 over the zoo).
REL_TOL_EXACT = 1e-9
#: The float32 deploy form (what ships) vs the float64 original: within 1e-4 of the
#: output scale, or within the parity gate's k times the original's own float32 error
#: where the model itself is that ill-conditioned (the product's rule, dcd_deploy.parity).
REL_TOL = 1e-4
FP32_SLACK = DEFAULT_K


def cases():
    out = []
    for name in list_models():
        strategies = ("latent", "weight", "auto") if name.endswith("_dcd") else ("auto",)
        for strategy in strategies:
            marks = [pytest.mark.slow] if name.startswith("resnet50") else []
            out.append(pytest.param(name, strategy, marks=marks, id=f"{name}-{strategy}"))
    return out


#: One pseudo-trained model at a time (cases are grouped by model), at ``input_size``
#: (the smallest input the comparison is meaningful at).
trained = ZooCache(keep_one=True)
#: The latest zoo model's :class:`Reference` on the zoo test's images, by model name.
_references: dict[str, Reference] = {}


def zoo_reference(name: str, model: nn.Module, x: torch.Tensor) -> Reference:
    ref = _references.get(name)
    if ref is None or ref.model is not model:
        _references.clear()
        ref = _references[name] = Reference(model, x)
    return ref


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref.double()).abs().max() / ref.double().abs().max())


def dynamic_paths(model: nn.Module) -> dict[str, nn.Module]:
    return {name: m for name, m in model.named_modules() if isinstance(m, (DCDConv2d, DCDLinear))}


def weight_form_possible(layer: nn.Module) -> bool:
    """1x1, stride 1, dense Q/P (B = 1), channel fusion: the only layers W(x) can be built for."""
    return (
        isinstance(layer, DCDConv2d)
        and layer.conv.kernel_size == (1, 1)
        and layer.conv.stride == (1, 1)
        and layer.conv_q is not None
        and layer.conv_q.groups == 1
        and layer.kernel_r is None
    )


def to_deploy64(model: nn.Module, model64: nn.Module | None = None, **kwargs) -> tuple[nn.Module, nn.Module]:
    """(original, deploy form) with every fold computed in float64; ``model64``: the
    original's float64 copy when the caller has one already."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # the lowering's own constants (eye, ones, example input)
    try:
        if model64 is None:
            model64 = copy.deepcopy(model).double()
        return model64, to_deploy(model64, **kwargs)
    finally:
        torch.set_default_dtype(previous)


class Reference:
    """The original's side of :func:`assert_same_function` for ``model`` on ``x``: its
    float64 copy and its float64 and float32 outputs. They do not depend on the strategy,
    so a zoo DCD model's three cases compute them once (to_deploy leaves its input as it
    was, which the zoo test asserts)."""

    def __init__(self, model: nn.Module, x: torch.Tensor):
        self.model, self.x = model, x
        self.model64 = copy.deepcopy(model).double()
        with torch.no_grad():
            self.ref64 = self.model64(x.double())
            self.ref32 = model(x)


def assert_same_function(model, deploy, x, reference: Reference | None = None, **kwargs):
    """Exact in float64; in float32 as close as the original's own float32 evaluation."""
    if reference is None:
        reference = Reference(model, x)
    assert reference.model is model and torch.equal(reference.x, x)
    model64, deploy64 = to_deploy64(model, reference.model64, **kwargs)
    assert {t.dtype for t in deploy64.state_dict().values() if t.is_floating_point()} == {torch.float64}
    ref64, ref32 = reference.ref64, reference.ref32
    with torch.no_grad():
        out64 = deploy64(x.double())
        out32 = deploy(x)
    assert torch.isfinite(ref64).all()
    assert out32.shape == ref64.shape
    assert out32.dtype == torch.float32
    assert rel_err(out64, ref64) <= REL_TOL_EXACT
    own = rel_err(ref32, ref64)
    assert rel_err(out32, ref64) <= max(REL_TOL, FP32_SLACK * own), own
    return ref64


def assert_deploy_form(deploy: nn.Module) -> None:
    """No BatchNorm, Dropout or training-form dynamic layer is left, as module or call."""
    leftovers = [(n, type(m).__name__) for n, m in deploy.named_modules() if isinstance(m, (*BN, nn.Dropout, *DYNAMIC))]
    assert leftovers == []
    # and no call to one in an eager forward (deploy forms are plain modules, no graph)
    from torch.overrides import TorchFunctionMode

    calls = set()

    class Record(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            calls.add(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    size = deploy.input_size
    h, w = (size, size) if isinstance(size, int) else size
    with torch.no_grad(), Record():
        deploy(torch.zeros(2, 3, h, w))
    assert not calls & {"batch_norm", "dropout", "dropout2d"}


# ------------------------------------------------------------------------ zoo models
@pytest.mark.parametrize("name, strategy", cases())
def test_zoo_model_lowers_to_an_equal_bn_free_module(name, strategy):
    model = trained(name)
    size = input_size(name)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    n_bn = sum(isinstance(m, BN) for m in model.modules())

    deploy = to_deploy(model, strategy=strategy, input_size=size)

    # A new module; the original is untouched and still in training form.
    assert deploy is not model
    after = model.state_dict()
    assert after.keys() == before.keys()
    assert all(torch.equal(after[k], before[k]) for k in before)
    assert sum(isinstance(m, BN) for m in model.modules()) == n_bn > 0
    original = {t.data_ptr() for t in model.state_dict().values() if t.numel()}
    assert not original & {t.data_ptr() for t in deploy.state_dict().values() if t.numel()}
    assert_deploy_form(deploy)

    # Every DCD layer has a recorded form, under its original path.
    layers = dynamic_paths(model)
    assert set(deploy.strategies) == set(layers)
    assert set(deploy.strategies.values()) <= {"latent", "weight"}
    for path, layer in layers.items():
        lowered = deploy.get_submodule(path)
        assert isinstance(lowered, DeployDCD)
        assert lowered.strategy == deploy.strategies[path]
        if strategy == "latent" or not weight_form_possible(layer):
            assert deploy.strategies[path] == "latent", path
        elif strategy == "weight":
            assert deploy.strategies[path] == "weight", path
    mixtures = [n for n, m in model.named_modules() if isinstance(m, MixtureConv2d)]
    assert all(isinstance(deploy.get_submodule(n), DeployMixture) for n in mixtures)

    # Same function: exact in float64, and as accurate as the original in float32.
    x = synthetic_images(4, size, seed=123)
    reference = zoo_reference(name, model, x)
    ref = assert_same_function(model, deploy, x, reference, strategy=strategy, input_size=size)
    assert ref.shape == (4, 1000)


def test_dcd_model_without_any_weight_capable_layer_is_all_latent():
    model = create_model("resnet18_dcd")  # every DCD conv is 3x3, the classifier is linear
    deploy = to_deploy(model, strategy="weight", input_size=224)
    assert set(deploy.strategies.values()) == {"latent"}


def test_non_dcd_models_have_no_strategies():
    deploy = to_deploy(create_model("mobilenetv2_035_dyconv"), input_size=64)
    assert deploy.strategies == {}


def test_bad_arguments():
    model = create_model("resnet10_dcd")
    with pytest.raises(ExportError, match="unknown strategy 'fast'"):
        to_deploy(model, strategy="fast", input_size=224)
    with pytest.raises(UnsupportedInputError, match="fixed 7x7"):
        to_deploy(model, input_size=64)


# ------------------------------------------------------------------------ cost model
def rule(c_in, c_out, latent, hw):
    """docs/design.md#deploy-form: the weight form wins when H·W > C_in·C_out / (C_in + C_out + L)."""
    return hw > c_in * c_out / (c_in + c_out + latent)


@pytest.mark.parametrize(
    "c_in, c_out, latent, hw, expected",
    [
        (16, 96, 8, 112 * 112, True),  # MobileNetV2's first expansion: 1536 / 120 = 12.8 < 12544
        (960, 160, 40, 7 * 7, False),  # last projection: 153600 / 1160 = 132 > 49
        (160, 960, 20, 7 * 7, False),  # last expansion: 153600 / 1140 = 135 > 49
        (320, 1280, 20, 7 * 7, False),  # 409600 / 1620 = 253 > 49
        (24, 144, 8, 56 * 56, True),
        (4, 4, 8, 1, False),  # 16 / 16 = 1: a tie goes to the latent form
        (4, 4, 8, 2, True),
        (96, 576, 40, 14 * 14, True),  # 55296 / 712 = 77.7 < 196
        (576, 96, 40, 14 * 14, True),
        (576, 160, 40, 7 * 7, False),  # 92160 / 776 = 118.8 > 49
    ],
)
def test_prefers_weight_form_hand_cases(c_in, c_out, latent, hw, expected):
    assert rule(c_in, c_out, latent, hw) is expected
    assert prefers_weight_form(c_in=c_in, c_out=c_out, latent=latent, hw=hw) is expected


def test_prefers_weight_form_matches_the_rule_everywhere():
    for c_in in (1, 3, 8, 16, 24, 96, 160, 960):
        for c_out in (1, 4, 16, 96, 320, 1280):
            for latent in (1, 4, 8, 20, 40):
                for hw in (1, 4, 9, 16, 49, 196, 784, 3136, 12544):
                    assert prefers_weight_form(c_in=c_in, c_out=c_out, latent=latent, hw=hw) == rule(
                        c_in, c_out, latent, hw
                    ), (c_in, c_out, latent, hw)


def test_auto_picks_what_the_rule_says_for_every_layer_of_mobilenetv2_100_dcd_at_224():
    model = create_model("mobilenetv2_100_dcd")
    seen = {}
    hooks = [
        m.register_forward_hook(lambda mod, inp, out, name=name: seen.__setitem__(name, tuple(out.shape)))
        for name, m in dynamic_paths(model).items()
    ]
    with torch.no_grad():
        model(torch.zeros(1, 3, 224, 224))
    for h in hooks:
        h.remove()

    expected = {}
    for name, layer in dynamic_paths(model).items():
        if isinstance(layer, DCDLinear) or not weight_form_possible(layer):
            expected[name] = "latent"
            continue
        _, c_out, h, w = seen[name]
        c_in, latent = layer.conv.in_channels, layer.conv_q.out_channels
        expected[name] = "weight" if rule(c_in, c_out, latent, h * w) else "latent"

    # Spot checks by hand: the first expansion (16 -> 96 at 112x112) and the last layers at 7x7.
    assert expected["features.2.conv.0"] == "weight" and seen["features.2.conv.0"][2:] == (112, 112)
    assert expected["features.17.conv.0"] == "latent" and seen["features.17.conv.0"][2:] == (7, 7)
    assert expected["features.17.conv.6"] == "latent"
    assert expected["classifier.1"] == "latent"
    assert {"weight", "latent"} <= set(expected.values())

    deploy = to_deploy(model, strategy="auto", input_size=224)
    assert deploy.strategies == expected


# ------------------------------------------------------------------------ adaptive windows
def torch_bins(n, o):
    """PyTorch's adaptive bins: [floor(i n / o), ceil((i + 1) n / o))."""
    return [(math.floor(i * n / o), math.ceil((i + 1) * n / o)) for i in range(o)]


def test_adaptive_windows_hand_cases():
    assert torch_bins(7, 2) == [(0, 4), (3, 7)]
    assert adaptive_windows(7, 2) == (4, 3)  # overlapping windows
    assert torch_bins(8, 2) == [(0, 4), (4, 8)]
    assert adaptive_windows(8, 2) == (4, 4)
    assert torch_bins(5, 3) == [(0, 2), (1, 4), (3, 5)]  # sizes 2, 3, 2
    assert adaptive_windows(5, 3) is None
    assert torch_bins(5, 2) == [(0, 3), (2, 5)]
    assert adaptive_windows(5, 2) == (3, 2)
    assert adaptive_windows(3, 2) == (2, 1)
    assert adaptive_windows(7, 1) == (7, 1)
    assert adaptive_windows(14, 7) == (2, 2)


def avg_pool_equals_adaptive(n, o, kernel, stride):
    x = torch.arange(n, dtype=torch.float64).view(1, 1, n) ** 2 + 1
    pooled = F.avg_pool1d(x, kernel, stride)
    return pooled.shape == (1, 1, o) and torch.allclose(pooled, F.adaptive_avg_pool1d(x, o))


@pytest.mark.parametrize("n", range(1, 17))
def test_adaptive_windows_reproduce_pytorch_exactly_when_found(n):
    for o in range(1, n + 1):
        got = adaptive_windows(n, o)
        some = [(k, s) for k in range(1, n + 1) for s in range(1, n + 1) if avg_pool_equals_adaptive(n, o, k, s)]
        if got is None:
            assert some == [], (n, o)  # no plain AveragePool could do it
        else:
            assert avg_pool_equals_adaptive(n, o, *got), (n, o, got)


def test_adaptive_windows_upsampling_is_not_a_pool():
    assert not avg_pool_equals_adaptive(1, 2, 1, 1)
    assert adaptive_windows(1, 2) is None


# ------------------------------------------------------------------------ a hand-built net
class SmallNet(nn.Module):
    """Conv-BN-ReLU6, the release's DCD 1x1 (2x2 pool, SE gate, latent BNs) + BN, a 3x3 DCD
    with stride 2 + BN, global pool, dropout and a DCD classifier + BatchNorm1d."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, 1, 1, bias=False)
        self.stem_bn = nn.BatchNorm2d(8)
        self.act = nn.ReLU6()
        self.dcd = DCDConv2d(8, 16, 1, latent_dim=4, squeeze=6, pool_size=2, gate="se", latent_bn=True)
        self.dcd_bn = nn.BatchNorm2d(16)
        self.relu = nn.ReLU()
        self.dcd3 = DCDConv2d(16, 12, 3, 2, latent_dim=4, squeeze=5, pool_size=2, gate="se", latent_bn=True)
        self.dcd3_bn = nn.BatchNorm2d(12)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.drop = nn.Dropout(0.5)
        self.head = DCDLinear(12, 10, latent_dim=4, squeeze=4, gate="se", latent_bn=True)
        self.head_bn = nn.BatchNorm1d(10)

    def forward(self, x):
        x = self.act(self.stem_bn(self.stem(x)))
        x = self.relu(self.dcd_bn(self.dcd(x)))
        x = self.relu(self.dcd3_bn(self.dcd3(x)))
        return self.head_bn(self.head(self.drop(torch.flatten(self.pool(x), 1))))


def randomized(module: nn.Module, size: int, seed: int = 0) -> nn.Module:
    """Random weights (dynamic heads included), random BN affines, and BN statistics
    measured on random inputs of side ``size``, so every layer sees unit-scale,
    input-dependent activations and no fold is a no-op."""
    g = torch.Generator().manual_seed(seed)
    bns = [m for m in module.modules() if isinstance(m, BN)]
    with torch.no_grad():
        for p in module.parameters():
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=g) * math.sqrt(2.0 / p[0].numel()))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
        for bn in bns:
            bn.weight.copy_(0.5 + torch.rand(bn.weight.shape, generator=g))
            bn.reset_running_stats()
            bn.momentum = None  # cumulative average
        module.eval()
        for bn in bns:
            bn.train()
        for _ in range(4):
            module(torch.randn(16, 3, size, size, generator=g))
        for bn in bns:
            bn.running_var.clamp_(min=0.05 * float(bn.running_var.mean()))
    return module.eval()


def small_net(size: int, seed: int = 0) -> SmallNet:
    return randomized(SmallNet(), size, seed)


@pytest.mark.parametrize("size", [7, 5, 3, 1])
@pytest.mark.parametrize("strategy", ["latent", "weight", "auto"])
def test_small_net_folds_exactly_at_odd_sizes(size, strategy):
    net = small_net(size)
    deploy = to_deploy(net, strategy=strategy, input_size=size)
    assert_deploy_form(deploy)
    assert set(deploy.strategies) == {"dcd", "dcd3", "head"}
    assert deploy.strategies["dcd3"] == deploy.strategies["head"] == "latent"
    if strategy != "auto":
        assert deploy.strategies["dcd"] == strategy
    else:  # 8 -> 16, L = 4 at size x size: weight form iff size² > 128 / 28
        assert deploy.strategies["dcd"] == ("weight" if size * size > 128 / 28 else "latent")
    x = torch.randn(6, 3, size, size, generator=torch.Generator().manual_seed(size))
    ref = assert_same_function(net, deploy, x, strategy=strategy, input_size=size)
    assert ref.shape == (6, 10)
    with torch.no_grad():
        assert rel_err(deploy(x), ref) <= 1e-5  # a small, well-conditioned net


def test_small_net_bn_after_a_conv_becomes_its_bias():
    net = small_net(7)
    deploy = to_deploy(net, strategy="latent", input_size=7)
    stem = deploy.get_submodule("stem")
    assert isinstance(stem, nn.Conv2d) and stem.bias is not None
    bn = net.stem_bn
    gamma_over_sigma = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    torch.testing.assert_close(stem.weight, net.stem.weight * gamma_over_sigma.view(-1, 1, 1, 1))
    torch.testing.assert_close(stem.bias, bn.bias - bn.running_mean * gamma_over_sigma)
    # The DCD layer's following BN (and its latent BNs) are gone; so are the Dropout and BN1d.
    # (the module keeps its class and forward: a folded BN is an Identity at its path)
    assert all(isinstance(getattr(deploy, n), nn.Identity) for n in ("stem_bn", "dcd_bn", "head_bn", "drop"))
    assert isinstance(deploy.get_submodule("dcd"), DeployDCD)
    assert deploy.get_submodule("dcd").kind == "channel"
    assert deploy.get_submodule("head").kind == "linear"


def test_dcd_layer_then_bn_equals_bn_written_out():
    """A DCD layer followed by BN: the pair, lowered, equals BN(layer(x)) computed by hand."""
    net = small_net(7, seed=3)
    layer, bn = net.dcd, net.dcd_bn
    pair = nn.Sequential(nn.Conv2d(3, 8, 1, bias=False), layer, bn).eval()
    pair[0].weight.data.copy_(torch.randn(8, 3, 1, 1, generator=torch.Generator().manual_seed(1)))
    pair64, deploy64 = to_deploy64(pair, strategy="latent", input_size=7)
    x = torch.randn(3, 3, 7, 7, generator=torch.Generator().manual_seed(2)).double()
    with torch.no_grad():
        z = pair64[:2](x)  # before the BN
        by_hand = (z - bn.running_mean.double().view(1, -1, 1, 1)) / torch.sqrt(
            bn.running_var.double().view(1, -1, 1, 1) + bn.eps
        ) * bn.weight.double().view(1, -1, 1, 1) + bn.bias.double().view(1, -1, 1, 1)
        out = deploy64(x)
    assert rel_err(out, by_hand) <= REL_TOL_EXACT


def test_small_net_dynamic_path_is_material():
    """The test net is not secretly static: freezing Λ and Φ changes its output."""
    net = small_net(7)
    frozen = copy.deepcopy(net)
    with torch.no_grad():
        for layer in (frozen.dcd, frozen.dcd3, frozen.head):
            layer.fc_phi.weight.zero_()
            layer.fc_scale.weight.zero_()
        x = torch.randn(4, 3, 7, 7, generator=torch.Generator().manual_seed(0))
        assert rel_err(frozen(x), net(x)) > 0.1


# ------------------------------------------------------------------------ every other form
class FormsNet(nn.Module):
    """One layer of each form the zoo's defaults never build, some with a BN after, some not.

    Depthwise DCD (Eq. 7, stride 2), joint fusion (Eq. 8, 2x2 pool), block-diagonal
    residual (Eq. 6, B = 2), Λ only, Φ only (3x3, release latent BNs), the paper's plain
    1x1 (ReLU gate, global pool; the weight form applies), depthwise DY-Conv with biases
    and a temperature, CondConv, and a block-diagonal DCD classifier.
    """

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, 1, 1)
        self.stem_bn = nn.BatchNorm2d(8)
        self.dw = DCDConv2d(8, 8, 3, 2, groups=8, squeeze=4)
        self.dw_bn = nn.BatchNorm2d(8)
        self.joint = DCDConv2d(8, 12, 3, 1, joint_fusion=True, latent_dim=4, pool_size=2, squeeze=6)
        self.joint_bn = nn.BatchNorm2d(12)
        self.blocks = DCDConv2d(12, 12, 1, num_blocks=2, latent_dim=4, squeeze=4)
        self.lam = DCDConv2d(12, 16, 1, channel_fusion=False, squeeze=4)
        self.lam_bn = nn.BatchNorm2d(16)
        self.phi = DCDConv2d(
            16, 16, 3, channel_attention=False, latent_dim=4, squeeze=4, pool_size=2, gate="se", latent_bn=True
        )
        self.pw = DCDConv2d(16, 16, 1, latent_dim=4, squeeze=4)
        self.pw_bn = nn.BatchNorm2d(16)
        self.dy = DynamicConv2d(16, 16, 3, 1, groups=16, num_kernels=3, temperature=4.0, bias=True)
        self.dy_bn = nn.BatchNorm2d(16)
        self.cond = CondConv2d(16, 16, 1, num_kernels=2, bias=True)
        self.relu = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = DCDLinear(16, 10, num_blocks=2, latent_dim=4, squeeze=4)

    def forward(self, x):
        r = self.relu
        x = r(self.stem_bn(self.stem(x)))
        x = r(self.dw_bn(self.dw(x)))
        x = r(self.joint_bn(self.joint(x)))
        x = r(self.blocks(x))
        x = r(self.lam_bn(self.lam(x)))
        x = r(self.phi(x))
        x = r(self.pw_bn(self.pw(x)))
        x = r(self.dy_bn(self.dy(x)))
        x = self.cond(x)
        return self.head(torch.flatten(self.pool(x), 1))


def forms_net(size: int, seed: int = 0) -> FormsNet:
    return randomized(FormsNet(), size, seed)


@pytest.mark.parametrize("size", [9, 7, 5, 2, 1])
@pytest.mark.parametrize("strategy", ["latent", "weight", "auto"])
def test_every_dcd_form_lowers_exactly(size, strategy):
    net = forms_net(size)
    deploy = to_deploy(net, strategy=strategy, input_size=size)
    assert_deploy_form(deploy)
    kinds = {name: deploy.get_submodule(name).kind for name in ("dw", "joint", "blocks", "lam", "phi", "pw", "head")}
    assert kinds == {
        "dw": "depthwise",
        "joint": "joint",
        "blocks": "channel",
        "lam": "channel",
        "phi": "channel",
        "pw": "channel",
        "head": "linear",
    }
    only_pw = {
        "latent": "latent",
        "weight": "weight",
        # 16 -> 16 with L = 4 at the stride-2 map: weight iff H'W' > 256 / 36
        "auto": "weight" if ((size - 1) // 2 + 1) ** 2 > 256 / 36 else "latent",
    }[strategy]
    assert deploy.strategies == {
        "dw": "latent",
        "joint": "latent",
        "blocks": "latent",
        "lam": "latent",
        "phi": "latent",
        "pw": only_pw,
        "head": "latent",
    }
    assert isinstance(deploy.get_submodule("dy"), DeployMixture)
    assert isinstance(deploy.get_submodule("cond"), DeployMixture)
    x = torch.randn(5, 3, size, size, generator=torch.Generator().manual_seed(size))
    ref = assert_same_function(net, deploy, x, strategy=strategy, input_size=size)
    with torch.no_grad():
        assert rel_err(deploy(x), ref) <= 1e-5
