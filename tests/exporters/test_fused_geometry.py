"""Fused mode and nn.Conv2d geometry: only layers at the fused ops' own geometry are fused.

The fused ops read the centre tap at padding k//2 without dilation; a DCD layer with any
other padding, a dilation or a non-square kernel stays standard ops, says why, and the
file still computes the model (checked in ONNX Runtime and OpenVINO by the export).
"""

from __future__ import annotations

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
        self.padded = DCDConv2d(16, 16, 1, padding=1)  # 1x1 with a ring of zeros: 14x14 -> 16x16
        self.dilated = DCDConv2d(16, 16, 3, padding=2, dilation=2)
        self.same3 = DCDConv2d(16, 16, 3, padding="same")
        for m in self.modules():
            if isinstance(m, DCDConv2d):
                for head in (m.fc_phi, m.fc_scale):
                    nn.init.normal_(head.weight, std=0.3)

    def forward(self, x):
        return self.same3(self.dilated(self.padded(self.plain(x))))


def test_only_layers_at_the_fused_geometry_are_fused(tmp_path):
    result = export_onnx(
        _Geometries().eval(),
        tmp_path / "g.onnx",
        input_size=14,
        mode="fused",
        example_inputs=(torch.zeros(1, 8, 14, 14),),
        parity_batch_sizes=(2,),
    )
    assert result, result.parity.summary()
    assert sorted(result.fused) == ["plain", "same3"]
    assert result.unfused == {"padded": "padding (1, 1, 1, 1)", "dilated": "dilation 2x2"}
