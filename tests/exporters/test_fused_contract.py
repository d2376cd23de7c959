"""The fused ops' input order (``_fused_contract.fused_inputs``) against the design doc's
tables (written out here by hand) and against the nodes a fused export writes."""

from __future__ import annotations

import itertools

import onnx
import pytest
import torch
from torch import nn

from dcd_deploy import export_onnx
from dcd_deploy.exporters import fused_inputs
from dcd_deploy.layers import DCDConv2d

#: docs/design.md#fused-op, DCDPointwise with every optional input present.
POINTWISE_ALL = ["x", "residual", "fc1", "gate", "scale_w", "phi_w", "phi_b", "q", "q_b", "p", "w0", "bias"]
#: DCDConvEpilogue: conv, x, residual, then DCDPointwise's weights without w0.
EPILOGUE_ALL = ["conv", "x", "residual", "fc1", "gate", "scale_w", "phi_w", "phi_b", "q", "q_b", "p", "bias"]
#: DCDDepthwise: x, residual, DCDPointwise's weights without q, q_b, then r.
DEPTHWISE_ALL = ["x", "residual", "fc1", "gate", "scale_w", "phi_w", "phi_b", "p", "w0", "bias", "r"]
OPTIONAL = {"residual": "residual", "gate": "se", "scale_w": "attention"}


@pytest.mark.parametrize(
    "op_type, full",
    [("DCDPointwise", POINTWISE_ALL), ("DCDConvEpilogue", EPILOGUE_ALL), ("DCDDepthwise", DEPTHWISE_ALL)],
)
@pytest.mark.parametrize("flags", list(itertools.product((0, 1), repeat=3)))
def test_inputs_are_the_documented_order_minus_the_absent_ones(op_type, full, flags):
    attrs = dict(zip(("residual", "se", "attention"), flags), pool=2, activation="relu6")
    want = [n for n in full if n not in OPTIONAL or attrs[OPTIONAL[n]] == 1]
    assert fused_inputs(attrs, op_type) == want


@pytest.mark.parametrize("flags", list(itertools.product((0, 1), repeat=3)))
def test_latent_input_takes_z_in_place_of_q(flags):
    # joint fusion (Eq. 8): z after the activations, no q or q_b (design.md's DCDConvEpilogue table)
    attrs = dict(zip(("residual", "se", "attention"), flags), pool=1, activation="none", latent_input=1)
    full = ["conv", "x", "residual", "z", "fc1", "gate", "scale_w", "phi_w", "phi_b", "p", "bias"]
    want = [n for n in full if n not in OPTIONAL or attrs[OPTIONAL[n]] == 1]
    assert fused_inputs(attrs, "DCDConvEpilogue") == want
    assert fused_inputs(attrs, "DCDPointwise")[:2] != ["x", "z"]  # DCDPointwise has no such attribute


def test_pointwise_is_the_default_and_unknown_op_types_are_refused():
    assert fused_inputs({}) == ["x", "fc1", "phi_w", "phi_b", "q", "q_b", "p", "w0", "bias"]
    with pytest.raises(ValueError):
        fused_inputs({}, "DCDNoSuchOp")


class _Net(nn.Module):
    """A 1x1 layer with a residual and ReLU (DCDPointwise), a 3x3 one (DCDConvEpilogue), a
    joint-fusion one (DCDConvEpilogue with latent_input), a 3x3 depthwise one (DCDDepthwise)."""

    def __init__(self):
        super().__init__()
        self.pw = DCDConv2d(8, 8, 1, gate="se", pool_size=2)
        self.kxk = DCDConv2d(8, 8, 3, channel_attention=False)
        self.joint = DCDConv2d(8, 8, 3, joint_fusion=True)
        self.dw = DCDConv2d(8, 8, 3, groups=8)

    def forward(self, x):
        return self.dw(self.joint(self.kxk(torch.relu(self.pw(x) + x))))


def test_the_export_writes_nodes_in_the_contract_order(tmp_path):
    """Each node's inputs are named by its function's formals: they follow the contract."""
    path = tmp_path / "m.onnx"
    export_onnx(
        _Net().eval(),
        path,
        input_size=8,
        example_inputs=torch.randn(1, 8, 8, 8),
        mode="fused",
        check=False,
        simplify=False,
    )
    proto = onnx.load(str(path))
    functions = {(f.name, f.overload): f for f in proto.functions}
    nodes = [n for n in proto.graph.node if n.domain == "dcd_deploy"]
    assert sorted(n.op_type for n in nodes) == ["DCDConvEpilogue", "DCDConvEpilogue", "DCDDepthwise", "DCDPointwise"]
    for node in nodes:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        names = fused_inputs(attrs, node.op_type)
        formals = list(functions[(node.op_type, node.overload)].input)
        assert len(node.input) == len(names) == len(formals)
        # activations keep their names, constants are w<index>_<name>
        assert [f.split("_", 1)[1] if f[0] == "w" and f[1].isdigit() else f for f in formals] == names
    with_z = [n for n in nodes if "z" in fused_inputs({a.name: a.i for a in n.attribute}, n.op_type)]
    assert len(with_z) == 1 and with_z[0].name.startswith("joint/")  # the joint layer alone reads z
    pointwise = next(n for n in nodes if n.op_type == "DCDPointwise")
    assert fused_inputs({a.name: onnx.helper.get_attribute_value(a) for a in pointwise.attribute}) == [
        "x",
        "residual",
        "fc1",
        "gate",
        "scale_w",
        "phi_w",
        "phi_b",
        "q",
        "q_b",
        "p",
        "w0",
        "bias",
    ]
