"""One deploy class per DCD kind: which layer gets which, and what each says about itself.

Oracles: the paper's forms (Eq. 5-8) as the layer's arguments select them, and the MAdd
formulas of docs/design.md#counting-conventions computed by hand for small layers.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dcd_deploy.exporters import DeployDCD, deploy_kind, fused_inputs
from dcd_deploy.exporters._kinds import CentreTap, Depthwise, Joint, Linear, Pointwise
from dcd_deploy.layers import DCDConv2d, DCDLinear


@pytest.mark.parametrize(
    "layer, kind",
    [
        (DCDConv2d(8, 16, 1), Pointwise),
        (DCDConv2d(8, 16, 1, stride=2, num_blocks=2), Pointwise),
        (DCDConv2d(8, 16, 3), CentreTap),
        (DCDConv2d(8, 8, 3, groups=8), Depthwise),
        (DCDConv2d(8, 16, 3, joint_fusion=True), Joint),
        (DCDConv2d(8, 16, 3, channel_fusion=False), CentreTap),
        (DCDLinear(16, 10), Linear),
    ],
    ids=["1x1", "1x1 s2 B2", "3x3", "dw", "joint", "3x3 Λ only", "linear"],
)
def test_each_form_gets_its_kind_and_keeps_its_label(layer, kind):
    assert type(deploy_kind(layer)) is kind
    assert DeployDCD(layer.eval()).kind == kind.name


def test_only_dcd_layers_have_a_kind():
    with pytest.raises(TypeError):
        deploy_kind(nn.Conv2d(8, 8, 1))


def test_only_unpadded_stride_1_single_block_1x1_layers_have_the_weight_form():
    assert DeployDCD.supports_weight_form(DCDConv2d(8, 16, 1))
    for layer in (
        DCDConv2d(8, 16, 1, stride=2),
        DCDConv2d(8, 16, 1, num_blocks=2),
        DCDConv2d(8, 16, 3),
        DCDConv2d(8, 8, 3, groups=8),
        DCDLinear(16, 10),
        DCDConv2d(8, 16, 1, channel_fusion=False),
    ):
        assert not DeployDCD.supports_weight_form(layer)
        assert DeployDCD(layer.eval(), strategy="weight").strategy == "latent"


def test_pointwise_madds_by_hand():
    """C_in 8, C_out 16, L 4, 5x5 map: latent per pixel W0 128 + Λ 16 + Q 32 + Φ 16 + P 64;
    weight once: Λ ⊙ W0 128 + PΦ 16·16 + (PΦ)Q 16·4·8, plus W(x) x per pixel 128."""
    layer = DCDConv2d(8, 16, 1, latent_dim=4)
    n = 25
    assert deploy_kind(layer).madds(layer, n, n) == ((128 + 16 + 32 + 16 + 64) * n, 128 * n + 128 + 256 + 512)


def test_depthwise_and_joint_madds_by_hand():
    """Depthwise C 8, 3x3, L_k 4: per pixel W0 72 + Λ 8 + R 8·4·9 + Φ 8·16 + P 8·4. Joint C 8 -> 8,
    3x3, L 2, L_k 4 without Λ: per input pixel Q 16; per output pixel W0 576 + R 2·4·9 + Φ 2·2·4 + P 16."""
    dw = DCDConv2d(8, 8, 3, groups=8)
    latent, _ = deploy_kind(dw).madds(dw, 16, 16)
    assert latent == (72 + 8 + 288 + 128 + 32) * 16
    joint = DCDConv2d(8, 8, 3, joint_fusion=True, latent_dim=2, kernel_latent_dim=4, channel_attention=False)
    latent, weight = deploy_kind(joint).madds(joint, 16, 4)
    assert latent == 16 * 16 + (576 + 72 + 16 + 16) * 4
    assert weight == 576 * 4 + 2 * 2 * 4 * 9 + 8 * 2 * 2 * 9 + 8 * 2 * 8 * 9


@pytest.mark.parametrize(
    "layer, reason",
    [
        (DCDConv2d(8, 8, 3, groups=8), None),
        (DCDConv2d(8, 8, 5, stride=2, padding=1, groups=8), None),
        (DCDConv2d(8, 8, 3, stride=(1, 2), groups=8), "depthwise stride 1x2"),
        (DCDConv2d(8, 8, 3, dilation=(1, 2), groups=8), "depthwise dilation 1x2"),
        (DCDConv2d(8, 8, (3, 5), groups=8), "depthwise 3x5 kernel"),
        (DCDConv2d(8, 16, 3, joint_fusion=True, channel_fusion=False), "no channel fusion"),
        (DCDLinear(16, 10, channel_attention=False, channel_fusion=True), None),
        (DCDLinear(16, 10, channel_fusion=False), "no channel fusion"),
        (DCDConv2d(8, 16, 1, num_blocks=2), None),
        (DCDConv2d(8, 16, 3, num_blocks=2), None),
        (DCDConv2d(8, 16, 3, padding=0), None),  # "valid": the centre tap at offset 1
        (DCDConv2d(8, 16, (3, 5), padding=0), "padding (0, 0, 0, 0)"),  # cropped 1 and 2: no one offset
        (DCDConv2d(8, 16, 3, padding=(0, 1)), "padding (0, 1, 0, 1)"),
        (DCDConv2d(8, 16, 3, padding=2), "padding (2, 2, 2, 2)"),  # a ring around the centre tap
        (DCDConv2d(8, 16, 1), None),
        (DCDConv2d(8, 16, 3, stride=2), None),
        # joint fusion at any geometry: W0 and z are the runtime's own convolutions
        (DCDConv2d(8, 16, 3, joint_fusion=True), None),
        (DCDConv2d(8, 16, 4, stride=2, padding=0, dilation=2, joint_fusion=True), None),
    ],
)
def test_fused_contract_per_kind(layer, reason):
    deploy = DeployDCD(layer.eval())
    assert deploy.form_kind.why_not_fused(deploy) == reason
    if reason is None and isinstance(layer, DCDConv2d) and layer.groups > 1:
        assert deploy.form_kind.fused_op(deploy) == "DCDDepthwise"
    elif reason is None:
        pointwise = isinstance(layer, DCDConv2d) and layer.kernel_size == 1 and layer.stride == 1
        want = "DCDPointwise" if pointwise else "DCDConvEpilogue"  # the classifier: Gemm + epilogue
        assert deploy.form_kind.fused_op(deploy) == want


def test_joint_fused_constants_fit_the_latent_input_contract():
    # Φ' of L x L·L_k (L 3, L_k 4 here), no q or q_b: the node reads z = R(Q x) instead
    layer = DCDConv2d(8, 16, 3, joint_fusion=True, latent_dim=3, kernel_latent_dim=4, squeeze=5).eval()
    deploy = DeployDCD(layer)
    kind = deploy.form_kind
    attrs = kind.fused_attrs(deploy)
    assert attrs == {"latent_input": 1}
    c = kind.fused_constants(deploy)
    names = fused_inputs({**attrs, "attention": 1}, kind.fused_op(deploy))
    assert names == ["conv", "x", "z", "fc1", "scale_w", "phi_w", "phi_b", "p", "bias"]
    assert tuple(c["phi_w"].shape) == (3 * 3 * 4, 5) and tuple(c["phi_b"].shape) == (36,)
    assert not c["phi_b"].any() and tuple(c["p"].shape) == (16, 3)


def test_meta_layers_are_counted_without_weights():
    with torch.device("meta"):
        layer = DCDConv2d(8, 16, 3)
    assert deploy_kind(layer).madds(layer, 4, 4)[0] > 0


@pytest.mark.parametrize(
    "layer, offset",
    [
        (DCDConv2d(8, 16, 3), 0),  # "same"
        (DCDConv2d(8, 16, 3, padding=0), 1),  # "valid": output pixel 0 reads x[1, 1]
        (DCDConv2d(8, 16, 5, stride=2, padding=1), 1),
        (DCDConv2d(8, 16, 3, padding=0, dilation=3), 3),  # the centre tap of a 7-pixel extent
    ],
)
def test_the_epilogue_reads_the_centre_tap_at_k_over_2_minus_the_padding(layer, offset):
    deploy = DeployDCD(layer.eval())
    assert deploy.form_kind.fused_attrs(deploy) == {"stride": layer.stride, "offset": offset}
