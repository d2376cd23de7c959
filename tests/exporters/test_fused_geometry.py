"""Fused mode and nn.Conv2d geometry: only layers at the fused ops' own geometry are fused.

The epilogue reads x at the centre tap, rows and columns ``i * stride``: a channel-fusion
layer with any odd kernel shape and dilation and a square stride fuses when its padding
puts that tap on x's pixel grid, cropped as much at the top as at the left ("same"
padding for the dilated kernel: offset 0; "valid": offset k // 2); a DCD layer with any
other padding or a non-square stride stays standard ops and says why (an even kernel
has no centre tap: channel fusion refuses it when the layer is built). Either way the file computes the model (checked against float64 PyTorch in ONNX
Runtime and OpenVINO by the export).
"""

from __future__ import annotations

import onnx
import pytest
import torch
from torch import nn

from dcd_deploy.exporters import export_onnx
from dcd_deploy.layers import DCDConv2d

pytest.importorskip("openvino")


class _Geometries(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.plain = DCDConv2d(8, 16, 1)
        self.padded = DCDConv2d(16, 16, 1, padding=1)  # 1x1 with a ring of zeros: 14x15 -> 16x17
        self.dilated = DCDConv2d(16, 16, 3, padding=2, dilation=2)  # "same" for its 5x5 extent
        self.same3 = DCDConv2d(16, 16, 3, padding="same")
        self.row = DCDConv2d(16, 16, (1, 3), padding=(0, 1))  # a non-square kernel, "same"
        self.tall = DCDConv2d(16, 16, (5, 3), stride=2, padding=(4, 1), dilation=(2, 1))
        self.valid = DCDConv2d(16, 16, 3, padding=0)  # the centre tap is cropped: offset 1
        self.wide_stride = DCDConv2d(16, 16, 3, stride=(1, 2), padding=1)
        self.crop5 = DCDConv2d(16, 16, 5, padding=1, stride=2)  # offset 1, stride 2
        self.valid_row = DCDConv2d(16, 16, (3, 5), padding="valid")  # cropped 1 at the top, 2 at the left
        for m in self.modules():
            if isinstance(m, DCDConv2d):
                for head in (m.fc_phi, m.fc_scale):
                    nn.init.normal_(head.weight, std=0.3)

    def forward(self, x):
        x = self.row(self.same3(self.dilated(self.padded(self.plain(x)))))
        x = self.wide_stride(self.valid(self.tall(x)))
        return self.valid_row(self.crop5(nn.functional.pad(x, (4, 4, 4, 4))))


def test_only_layers_at_the_fused_geometry_are_fused(tmp_path):
    result = export_onnx(
        _Geometries().eval(),
        tmp_path / "g.onnx",
        input_size=(14, 15),
        mode="fused",
        example_inputs=(torch.zeros(1, 8, 14, 15),),
        parity_batch_sizes=(2,),
    )
    assert result, result.parity.summary()
    assert sorted(result.fused) == ["crop5", "dilated", "plain", "row", "same3", "tall", "valid"]
    assert result.unfused == {
        "padded": "padding (1, 1, 1, 1)",
        "valid_row": "padding (0, 0, 0, 0)",
        "wide_stride": "stride 1x2",
    }
    nodes = [n for n in onnx.load(str(tmp_path / "g.onnx")).graph.node if n.domain == "dcd_deploy"]
    assert sorted(n.op_type for n in nodes) == ["DCDConvEpilogue"] * 6 + ["DCDPointwise"]
    offsets = sorted(a.i for n in nodes for a in n.attribute if a.name == "offset")
    assert offsets == [0, 0, 0, 0, 1, 1]  # k // 2 - pad: "valid" 3x3 and the 5x5 padded by 1
