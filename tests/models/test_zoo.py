"""The model zoo: every entry builds and runs; parameter counts against independent
figures (the authors' published counts, torchvision's, the paper's tables); the
registry; the variant knobs that build the rows of the paper's ablation tables."""

from __future__ import annotations

import functools
import math

import pytest
import torch
from torch import nn

from dcd_deploy.errors import DCDDeployError, UnknownModelError, UnsupportedInputError
from dcd_deploy.layers import DCDConv2d, DCDLinear
from dcd_deploy.models import MobileNetV2, create_model, is_model, list_models, register_model

ALL_MODELS = list_models()

# MobileNetV2: 7 stages with n = 1, 2, 3, 4, 3, 3, 1 blocks; the first has t = 1 (no
# expansion, one 1x1), the other 16 have two pointwise 1x1s each.
MBV2_BLOCKS = 17
MBV2_PW = 2 * 16


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@functools.cache
def _count(name: str, knobs: tuple) -> int:
    return n_params(create_model(name, **dict(knobs)))


def count(name: str, **knobs) -> int:
    return _count(name, tuple(sorted(knobs.items())))


def is_fixed_pool_resnet(name: str) -> bool:
    return name.startswith("resnet") and name.endswith("_dcd")


# ----------------------------------------------------------------------------- every entry
def test_zoo_has_the_expected_families():
    expected = {f"mobilenetv2_{w}{k}" for w in ("100", "050", "035") for k in ("", "_dcd", "_dyconv", "_condconv")}
    expected |= {f"resnet{d}{k}" for d in (18, 50) for k in ("", "_dcd", "_dyconv", "_condconv")}
    assert expected <= set(ALL_MODELS)
    assert ALL_MODELS == sorted(set(ALL_MODELS))
    assert list_models("resnet*_dcd") == sorted(n for n in ALL_MODELS if n.startswith("resnet") and n.endswith("_dcd"))
    assert all(is_model(n) for n in ALL_MODELS)
    assert not is_model("mobilenetv2_100_dcdd")


@pytest.mark.parametrize("name", ALL_MODELS)
def test_model_builds_in_eval_mode_and_runs(name):
    torch.manual_seed(1)
    model = create_model(name)
    assert not model.training
    assert not any(m.training for m in model.modules())
    with torch.no_grad():
        logits = model(torch.randn(1, 3, 224, 224))
    assert logits.shape == (1, 1000)
    assert torch.isfinite(logits).all()
    assert logits.abs().max() > 0

    if hasattr(model, "check_input_size"):
        model.check_input_size(224)
    if is_fixed_pool_resnet(name):
        # the release's fixed 7x7 average pool cannot take a 2x2 final map
        with pytest.raises(UnsupportedInputError):
            model.check_input_size(64)
        return
    if hasattr(model, "check_input_size"):
        model.check_input_size(64)  # a global pool takes any size
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        small = model(x)
    assert small.shape == (2, 1000)
    assert torch.isfinite(small).all()
    assert (small[0] - small[1]).abs().max() > 0  # logits depend on the input


def test_fixed_pool_accepts_exactly_sizes_with_a_7x7_final_map():
    """Five stride-2 stages (pad k // 2) take s to ceil(s / 32): 7 for s in 193..224 only."""
    model = create_model("resnet18_dcd")
    for size in range(150, 260):
        if math.ceil(size / 32) == 7:
            model.check_input_size(size)
        else:
            with pytest.raises(UnsupportedInputError) as info:
                model.check_input_size(size)
            assert isinstance(info.value, DCDDeployError)
    with torch.no_grad():
        logits = model(torch.randn(1, 3, 193, 193))  # the smallest accepted size runs
    assert logits.shape == (1, 1000) and torch.isfinite(logits).all()


def test_num_classes_knob():
    model = create_model("mobilenetv2_050_dcd", num_classes=10)
    with torch.no_grad():
        assert model(torch.randn(1, 3, 64, 64)).shape == (1, 10)


# ----------------------------------------------------------------------------- parameter counts
# docs/design.md#release-format: the authors' published counts (with DYCls), to 0.01M.
PUBLISHED = {
    "mobilenetv2_100_dcd": 5.72e6,
    "mobilenetv2_050_dcd": 3.06e6,
    "mobilenetv2_035_dcd": 2.27e6,
    "resnet18_dcd": 14.70e6,
    "resnet50_dcd": 29.84e6,
}
# torchvision's resnet18, resnet50 and mobilenet_v2 (same architectures, static).
TORCHVISION = {"resnet18": 11_689_512, "resnet50": 25_557_032, "mobilenetv2_100": 3_504_872}


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_param_count_matches_authors_release(name):
    assert abs(count(name) - PUBLISHED[name]) <= 0.005 * PUBLISHED[name]


@pytest.mark.parametrize("name", list(TORCHVISION))
def test_static_param_count_matches_torchvision(name):
    assert count(name) == TORCHVISION[name]


def test_resnet18_dcd_without_classifier_matches_paper_convention():
    """The paper's ResNet figures exclude the classifier (docs/design.md#counting-conventions):
    DCD ResNet-18 14.0M, static 11.1M, both quoted truncated to 0.1M (14.06M, 11.18M)."""
    for name, paper in (("resnet18_dcd", 14.0e6), ("resnet18", 11.1e6)):
        model = create_model(name)
        body = n_params(model) - n_params(model.classifier)
        assert paper <= body < paper + 0.1e6, name


# ----------------------------------------------------------------------------- registry
def test_duplicate_registration_raises_and_keeps_the_original():
    before = list_models()

    def mobilenetv2_050_dcd(**kwargs):  # same name as a zoo entry
        return nn.Identity()

    with pytest.raises(ValueError):
        register_model(mobilenetv2_050_dcd)
    assert list_models() == before
    assert isinstance(create_model("mobilenetv2_050_dcd"), MobileNetV2)


@pytest.mark.parametrize(
    "typo, meant", [("mobilenetv2_100_dcdd", "mobilenetv2_100_dcd"), ("resnet18dcd", "resnet18_dcd")]
)
def test_unknown_model_suggests_the_close_name(typo, meant):
    with pytest.raises(UnknownModelError) as info:
        create_model(typo)
    assert isinstance(info.value, DCDDeployError)
    assert isinstance(info.value, KeyError)
    assert meant in str(info.value)
    assert typo in str(info.value)


def test_invalid_knob_value_raises_value_error():
    with pytest.raises(ValueError):
        create_model("mobilenetv2_050_dcd", latent_mult=2.0)


# ----------------------------------------------------------------------------- ablation knobs
BASE = "mobilenetv2_050_dcd"
PW = ("pw",)  # Tables 1, 2 and 3a put DCD on the pointwise convolutions only


def dcd_convs(model):
    return [m for m in model.modules() if isinstance(m, DCDConv2d)]


def test_table1_rows_order_and_values_mobilenetv2_050():
    """Table 1a: static 2.0M < ΛW0 2.4M < W0+PΦQᵀ 2.7M < ΛW0+PΦQᵀ 2.9M (to 0.05M rounding)."""
    rows = [
        (count("mobilenetv2_050"), 2.0e6),
        (count(BASE, roles=PW, channel_fusion=False), 2.4e6),
        (count(BASE, roles=PW, channel_attention=False), 2.7e6),
        (count(BASE, roles=PW), 2.9e6),
    ]
    counts = [c for c, _ in rows]
    assert counts == sorted(counts) and len(set(counts)) == 4
    for c, paper in rows:
        assert abs(c - paper) <= 0.05e6, (c, paper)


def test_table1_rows_order_resnet18():
    """Table 1b: static < ΛW0 < W0+PΦQᵀ < ΛW0+PΦQᵀ."""
    counts = [
        count("resnet18"),
        count("resnet18_dcd", roles=("conv",), channel_fusion=False),
        count("resnet18_dcd", roles=("conv",), channel_attention=False),
        count("resnet18_dcd", roles=("conv",)),
    ]
    assert counts == sorted(counts) and len(set(counts)) == 4


def test_table1_knobs_switch_heads():
    no_lam = create_model(BASE, channel_attention=False)
    no_phi = create_model(BASE, channel_fusion=False)
    assert dcd_convs(no_lam) and all(m.fc_scale is None and m.fc_phi is not None for m in dcd_convs(no_lam))
    assert all(m.fc_phi is None and m.conv_q is None and m.fc_scale is not None for m in dcd_convs(no_phi))
    assert no_lam.classifier[-1].fc_scale is None and no_phi.classifier[-1].fc_phi is None
    assert count(BASE, channel_attention=False) < count(BASE)  # Λ off: fewer parameters


def test_table1_static_row_via_knobs_is_the_static_model():
    assert count(BASE, channel_attention=False, channel_fusion=False) == count("mobilenetv2_050")


def test_table2_latent_multiplier():
    """Table 2: fewer parameters as L shrinks; each layer's L scales by the multiplier."""
    mults = (0.25, 0.5, 0.75, 1.0)
    counts = [count(BASE, roles=PW, latent_mult=m) for m in mults]
    assert counts == sorted(counts) and len(set(counts)) == 4
    full = [m.latent_dim for m in dcd_convs(create_model(BASE, roles=PW))]
    quarter = [m.latent_dim for m in dcd_convs(create_model(BASE, roles=PW, latent_mult=0.25))]
    assert len(full) == len(quarter) == MBV2_PW
    for f, q in zip(full, quarter):
        assert abs(q - f / 4) <= 0.5 or q == 1, (f, q)


@pytest.mark.parametrize("attention", [False, True])
def test_table3a_num_blocks(attention):
    """Table 3a: a sparser dynamic residual (larger B) has fewer parameters."""
    counts = [count(BASE, roles=PW, num_blocks=b, channel_attention=attention) for b in (1, 2, 4, 8)]
    assert counts == sorted(counts, reverse=True) and len(set(counts)) == 4


def test_num_blocks_8_builds_block_diagonal_layers():
    model = create_model(BASE, num_blocks=8)
    layers = dcd_convs(model) + [model.classifier[-1]]
    assert len(layers) == MBV2_PW + 1
    for m in layers:
        assert m.num_blocks == 8 and m.latent_dim % 8 == 0
    for m in dcd_convs(model):  # Q and P are grouped 1x1s: C_in / 8 and L / 8 inputs per output
        assert m.conv_q.groups == m.conv_p.groups == 8
        assert m.fc_phi.out_features == m.latent_dim**2 // 8  # B blocks of (L / B)² entries
    with torch.no_grad():
        assert torch.isfinite(model(torch.randn(1, 3, 64, 64))).all()


# Table 3b rows (DW, PW, CLS) and the paper's parameter counts, which rank them.
TABLE3B = [
    ((), 2.0),
    (("cls",), 2.2),
    (("dw",), 2.4),
    (("dw", "cls"), 2.6),
    (("pw",), 2.9),
    (("pw", "cls"), 3.1),
    (("dw", "pw"), 3.3),
    (("dw", "pw", "cls"), 3.5),
]


def test_table3b_rows_rank_as_in_the_paper():
    counts = [count(BASE, roles=roles) for roles, _ in TABLE3B]
    paper = [p for _, p in TABLE3B]
    assert sorted(range(8), key=counts.__getitem__) == sorted(range(8), key=paper.__getitem__)
    assert len(set(counts)) == 8


@pytest.mark.parametrize("roles", [("dw",), ("pw", "cls", "dw")])
def test_table3b_roles_build_the_right_layers(roles):
    model = create_model(BASE, roles=roles)
    convs = dcd_convs(model)
    dw = [m for m in convs if m.form.depthwise]
    pw = [m for m in convs if not m.form.depthwise]
    assert len(dw) == MBV2_BLOCKS
    assert all(m.kernel_size == 3 and m.groups == m.in_channels for m in dw)
    assert len(pw) == (MBV2_PW if "pw" in roles else 0)
    assert all(m.kernel_size == 1 for m in pw)
    assert isinstance(model.classifier[-1], DCDLinear) == ("cls" in roles)
    with torch.no_grad():
        assert torch.isfinite(model(torch.randn(1, 3, 64, 64))).all()
