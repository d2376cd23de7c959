"""``mode="fused"``: elementwise ops between fused layers run on the NHWC tensors.

The networks are written as users write them (SELU, ELU, a per-channel PReLU after a scale,
an elementwise max of two DCD layers, the tanh form of GELU); the numbers are checked
against PyTorch in float64 through ONNX Runtime and, when installed, OpenVINO's fused
kernels. The structure is checked on the file: no elementwise op reads a Transpose.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from onnx import numpy_helper

from dcd_deploy import export_onnx
from dcd_deploy.exporters._builder import GraphBuilder
from dcd_deploy.exporters._sink import ELEMENTWISE, _nhwc_constant
from dcd_deploy.layers import DCDConv2d
from dcd_deploy.parity import check_parity

BACKENDS = ("onnxruntime", "openvino") if importlib.util.find_spec("openvino") else ("onnxruntime",)
TO_NCHW, TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]


class _Between(torch.nn.Module):
    """Fused DCD layers with ops the fused epilogue does not take between them."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 1)
        self.a = DCDConv2d(8, 16, 1)
        self.b = DCDConv2d(16, 16, 3, padding=1)
        self.c = DCDConv2d(16, 16, 1)
        self.prelu = torch.nn.PReLU(16)
        self.scale = torch.nn.Parameter(torch.rand(1, 16, 1, 1) + 0.5)
        self.d = DCDConv2d(16, 8, 1)
        self.e = DCDConv2d(8, 8, 3, padding=1, groups=8)
        self.tanh_gelu = torch.nn.GELU(approximate="tanh")

    def forward(self, x):
        y = F.selu(self.a(self.stem(x)))
        y = F.elu(self.b(y)) * 0.5
        y = self.prelu(self.c(y) * self.scale)  # after the scale: no epilogue of c's (that one is fused)
        y = torch.maximum(self.d(y), -self.d(y).abs())
        return self.tanh_gelu(self.e(y))


class _Mixed(torch.nn.Module):
    """A DCD layer's output times its own NCHW input: the product stays in NCHW."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 1)
        self.a = DCDConv2d(8, 8, 1)
        self.b = DCDConv2d(8, 8, 1)

    def forward(self, x):
        s = self.stem(x)
        return self.b(F.selu(self.a(s)) * s)


def _export(model, tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "m.onnx"
    export_onnx(model.eval(), path, input_size=10, mode="fused", check=False)
    proto = onnx.load(str(path))
    producer = {o: n for n in proto.graph.node for o in n.output}
    return path, proto, producer


def _parity(model, path):
    x = torch.randn(3, 3, 10, 10) * 2
    report = check_parity(model, path, batch_sizes=(1, 3), backends=BACKENDS, inputs=x)
    assert report, report.table()


def test_ops_between_fused_layers_read_their_nhwc_outputs(tmp_path):
    torch.manual_seed(0)
    model = _Between().eval()
    path, proto, producer = _export(model, tmp_path)
    fused = [n for n in proto.graph.node if n.domain == "dcd_deploy"]
    assert len(fused) == 5
    moved = [n for n in proto.graph.node if n.op_type in ELEMENTWISE and n.domain == ""]
    assert {"Selu", "Elu", "PRelu", "Mul", "Max", "Abs", "Neg", "Tanh"} <= {n.op_type for n in moved}
    for node in moved:
        for t in node.input:
            src = producer.get(t)
            assert src is None or src.op_type != "Transpose", f"{node.op_type} reads a Transpose"
    for node in fused[1:]:  # each reads NHWC without a Transpose of its own
        x = node.input[1 if node.op_type == "DCDConvEpilogue" else 0]  # input 0 of that one: its conv
        assert producer[x].domain == "dcd_deploy" or producer[x].op_type in ELEMENTWISE, producer[x].op_type
    # to NHWC only where a runtime Conv wrote NCHW: the stem, the 3x3 layer's conv of W0
    to_nhwc = [n for n in proto.graph.node if n.op_type == "Transpose" and list(n.attribute[0].ints) == TO_NHWC]
    assert sorted(producer[n.input[0]].op_type for n in to_nhwc) == ["Conv", "Conv"]
    # PReLU's slope (16 channels): laid out against NHWC
    prelu = next(n for n in proto.graph.node if n.op_type == "PRelu")
    slope = next(numpy_helper.to_array(t) for t in proto.graph.initializer if t.name == prelu.input[1])
    assert slope.shape == (1, 1, 1, 16)
    np.testing.assert_array_equal(slope.reshape(-1), model.prelu.weight.detach().numpy())
    _parity(model, path)


def test_an_op_that_also_reads_an_nchw_tensor_stays_in_nchw(tmp_path):
    torch.manual_seed(0)
    model = _Mixed().eval()
    path, proto, producer = _export(model, tmp_path)
    (mul,) = [n for n in proto.graph.node if n.op_type == "Mul"]
    assert {producer[t].op_type for t in mul.input} == {"Transpose", "Conv"}  # the SELU output's NCHW view, s
    (selu,) = [n for n in proto.graph.node if n.op_type == "Selu"]
    assert producer[selu.input[0]].domain == "dcd_deploy"  # SELU itself reads the NHWC output
    _parity(model, path)


@pytest.mark.parametrize("shape", [(), (1,), (16, 1, 1), (1, 16, 1, 1), (5,), (4, 1), (1, 1, 4, 5), (2, 16, 4, 5)])
def test_a_constant_broadcasts_against_nhwc_as_it_did_against_nchw(shape):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 16, 4, 5)).astype(np.float32)  # NCHW
    c = rng.standard_normal(shape).astype(np.float32)
    g = GraphBuilder(18)
    name = _nhwc_constant(g, "m/Add", "c", c)
    (init,) = g.initializers
    assert init.name == name
    c_nhwc = numpy_helper.to_array(init)
    assert c_nhwc.dtype == np.float32
    np.testing.assert_array_equal((x.transpose(TO_NHWC) - c_nhwc).transpose(TO_NCHW), x - c)
