"""count_complexity: hand-computed layers, published whole-model figures, conventions.

The small cases write each MAdd term out from the paper's formulas (Eq. 5 and
Section 3.4) and the usual conv/FC counts, independently of the implementation.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dcd_deploy import create_model
from dcd_deploy.bench.complexity import FORMS, STATUS_MISS, STATUS_OK, check_row, count_complexity
from dcd_deploy.bench.paper import PAPER_LATENCY_MS, PAPER_ROWS, PaperRow, parse_figure
from dcd_deploy.errors import UnsupportedInputError
from dcd_deploy.layers import CondConv2d, DCDConv2d

# Published whole-model figures (MAdds at 224x224): MobileNetV2 x1.0 300M (Sandler et al.
# 2018), ResNet-18 1.82G (He et al. 2016, as commonly cited; torchvision lists 1.81G).
MBV2_100_MADDS = 300e6
RESNET18_MADDS = 1.82e9
PUBLISHED_TOL = 0.01
# The paper's DCD MobileNetV2 MAdds (Table 4), independent of this code.
PAPER_DCD_MADDS = {"mobilenetv2_050_dcd": 104.8e6, "mobilenetv2_035_dcd": 63.1e6}


def meta_model(name: str, **kwargs) -> nn.Module:
    with torch.device("meta"):
        return create_model(name, **kwargs)


def test_single_conv2d():
    conv = nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False)
    c = count_complexity(conv, input_size=32)
    # C_out * H'W' * C_in/groups * k^2, output 16x16
    assert c.madds_latent == c.madds_weight == c.madds_min == 8 * 16 * 16 * 3 * 3 * 3
    assert c.params == 8 * 3 * 3 * 3
    assert c.classifier_params == 0 and c.branch_pool_madds == 0


def test_grouped_conv2d():
    conv = nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
    c = count_complexity(conv, input_size=10, in_channels=8)
    assert c.madds_latent == 8 * 10 * 10 * 1 * 3 * 3


def test_linear():
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 4 * 4, 10))
    c = count_complexity(model, input_size=4)
    assert c.madds_latent == 48 * 10
    assert c.params == 48 * 10 + 10


def test_dcd_conv_1x1_by_hand():
    cin, cout, lat, sq, h = 16, 32, 4, 8, 8
    layer = DCDConv2d(cin, cout, 1, latent_dim=lat, squeeze=sq)  # global pool, ReLU gate
    c = count_complexity(layer, input_size=h, in_channels=cin)
    n = h * h
    pool = cin * n  # average pool: one add per input element
    branch = pool + cin * sq + sq * (lat * lat) + sq * cout  # FC1, Φ head, Λ head
    latent = (
        cout * cin * n  # W0 conv
        + cout * n  # Λ ⊙ (W0 x)
        + cin * lat * n  # Qᵀ x
        + lat * lat * n  # Φ (Qᵀ x)
        + lat * cout * n  # P (...)
        + branch
    )
    weight = (
        cout * cin  # Λ ⊙ W0
        + cout * lat * lat  # P Φ
        + cout * lat * cin  # (PΦ) Qᵀ
        + cout * cin * n  # one conv with W(x)
        + branch
    )
    assert (c.madds_latent, c.madds_weight) == (latent, weight) == (49664, 37376)
    assert c.madds_min == min(latent, weight)
    assert c.branch_pool_madds == pool
    # C² + 2CL + (2C + L²) C/r generalised to C_in != C_out (Section 3.4)
    assert c.params == cout * cin + cin * lat + lat * cout + cin * sq + sq * (lat * lat + cout)


def test_non_square_input_by_hand():
    """(H, W) counts H·W pixels wherever the square count used S²; strides halve each side."""
    cin, cout, lat, sq, h, w = 16, 32, 4, 8, 6, 10
    net = nn.Sequential(
        DCDConv2d(cin, cout, 1, latent_dim=lat, squeeze=sq), nn.Conv2d(cout, 8, 3, stride=2, padding=1, bias=False)
    )
    c = count_complexity(net, input_size=(h, w), in_channels=cin)
    n = h * w
    branch = cin * n + cin * sq + sq * (lat * lat) + sq * cout
    dcd_latent = cout * cin * n + cout * n + cin * lat * n + lat * lat * n + lat * cout * n + branch
    conv = 8 * (3 * 5) * cout * 3 * 3  # output 3x5
    assert c.madds_latent == dcd_latent + conv
    assert c.branch_pool_madds == cin * n
    assert c.input_size == (h, w)
    assert count_complexity(net, input_size=(8, 8), in_channels=cin).input_size == 8


def test_non_square_input_checks_each_side():
    with pytest.raises(UnsupportedInputError):
        count_complexity(meta_model("resnet18_dcd"), input_size=(224, 160))


def test_condconv_by_hand():
    cin, cout, k, h = 8, 16, 8, 6
    layer = CondConv2d(cin, cout, 1, num_kernels=k)
    c = count_complexity(layer, input_size=h, in_channels=cin)
    numel = cout * cin
    # aggregation K * numel(W) + one conv + global pool + routing FC (C_in -> K)
    assert c.madds_latent == c.madds_weight == k * numel + numel * h * h + cin * h * h + cin * k


def test_static_mobilenetv2_matches_published():
    c = count_complexity(meta_model("mobilenetv2_100"))
    assert c.madds_latent == pytest.approx(MBV2_100_MADDS, rel=PUBLISHED_TOL)
    assert len(set(c.madds(f) for f in FORMS)) == 1


def test_static_resnet18_matches_published():
    c = count_complexity(meta_model("resnet18"))
    assert c.madds_latent == pytest.approx(RESNET18_MADDS, rel=PUBLISHED_TOL)


@pytest.mark.parametrize(
    "name",
    ["mobilenetv2_050", "mobilenetv2_050_dcd", "resnet10_dcd", "mobilenetv2_035_dyconv", "mobilenetv2_035_condconv"],
)
def test_params_are_numel_sum_and_breakdown_adds_up(name):
    model = meta_model(name)
    c = count_complexity(model)
    assert c.params == sum(p.numel() for p in model.parameters())
    assert sum(v.params for v in c.breakdown.values()) == c.params
    for form in FORMS:
        assert sum(getattr(v, f"madds_{form}") for v in c.breakdown.values()) == c.madds(form)
    assert c.classifier_params == sum(p.numel() for p in model.classifier.parameters())


@pytest.mark.parametrize("name", sorted(PAPER_DCD_MADDS))
def test_dcd_forms_order_and_paper_sanity(name):
    c = count_complexity(meta_model(name))
    assert c.madds_min <= c.madds_weight < c.madds_latent
    paper = PAPER_DCD_MADDS[name]
    assert c.madds_weight == pytest.approx(paper, rel=0.05)
    assert c.madds_min == pytest.approx(paper, rel=0.02)


def test_model_untouched_and_mode_restored():
    model = create_model("mobilenetv2_035_dcd").train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    count_complexity(model)
    assert model.training
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_unsupported_input_size_is_a_user_error():
    with pytest.raises(UnsupportedInputError):
        count_complexity(meta_model("resnet18_dcd"), input_size=160)


def test_unknown_parameterised_layer_is_refused():
    with pytest.raises(TypeError, match="PReLU"):
        count_complexity(nn.Sequential(nn.Conv2d(3, 4, 1), nn.PReLU()), input_size=8)


def test_parse_figure():
    assert parse_figure("2.0M") == (2.0, 0.05)
    assert parse_figure("1.81G") == (1810.0, 5.0)
    assert parse_figure("3.8G") == (3800.0, 50.0)
    with pytest.raises(ValueError):
        parse_figure("2.0")


def test_check_row_uses_printed_precision_and_convention():
    c = count_complexity(meta_model("resnet18"))
    row = PaperRow("x", "static", "resnet18", {}, "11.1M", "1.81G", "excl. classifier")
    check = check_row(row, c)
    assert check.params_m == pytest.approx(c.params_excl_classifier / 1e6)
    assert check.status == STATUS_OK and check.madds_form == "any"
    coarse = PaperRow("x", "static", "resnet18", {}, "12M", "1.81G")  # all params: 11.69M
    assert abs(check_row(coarse, c).params_dev_pct) > 2.0
    assert check_row(coarse, c).status == STATUS_OK  # equal at the printed precision
    far = PaperRow("x", "static", "resnet18", {}, "9.0M", "1.81G")
    assert check_row(far, c).status == STATUS_MISS


def test_paper_data_shape():
    assert len(PAPER_ROWS) == 49
    assert len({(r.table, r.row) for r in PAPER_ROWS}) == len(PAPER_ROWS)
    assert {r.table for r in PAPER_ROWS} == {"1a", "1b", "2", "3a", "3b", "4a", "4b"}
    assert PAPER_LATENCY_MS["mobilenetv2_050"]["dcd"] == 104
