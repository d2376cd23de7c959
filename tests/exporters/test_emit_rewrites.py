"""What the emission changes in PyTorch's own export besides our layers: a spatial mean
that keeps its dims becomes GlobalAveragePool (ONNX Runtime keeps that in its blocked
layout); every other ReduceMean stays, and the file still computes the model."""

from __future__ import annotations

import collections

import onnx
import torch
import torch.nn.functional as F
from torch import nn

from dcd_deploy.exporters import export_onnx


class _Means(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)

    def forward(self, x):
        y = F.relu(self.conv(x))
        return {
            "kept": y.mean((2, 3), keepdim=True) * 2.0,  # (B, C, 1, 1): a global pool
            "pooled": F.adaptive_avg_pool2d(y, 1) + 1.0,  # likewise
            "flat": y.mean((-1, -2)),  # (B, C): dims dropped, stays ReduceMean
            "channels": y.mean(1, keepdim=True),
        }  # not spatial, stays ReduceMean


def test_spatial_means_become_global_average_pools(tmp_path):
    torch.manual_seed(0)
    result = export_onnx(_Means().eval(), tmp_path / "m.onnx", input_size=(10, 12), simplify=False)
    assert result, result.parity.summary()
    ops = collections.Counter(n.op_type for n in onnx.load(str(tmp_path / "m.onnx")).graph.node)
    assert ops["GlobalAveragePool"] == 2 and ops["ReduceMean"] == 2, ops
