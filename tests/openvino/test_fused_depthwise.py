"""Fused depthwise DCD layers (paper Eq. 7, one ``DCDDepthwise`` node in the weight form)
through OpenVINO with the extension and through ONNX Runtime (the node's function body),
against the PyTorch layer in float64 (:func:`check_parity` compares with a float64 copy
of the model).

A random depthwise :class:`DCDConv2d` in a small image model

    Conv2d(3, C, 1) -> DCDConv2d(C, C, k, stride, padding, dilation, groups=C) -> BatchNorm2d
        [-> + stem output] [-> ReLU | ReLU6]

is exported with ``mode="fused"``; hypothesis draws the channels (vector tails included),
k in {3, 5, 7}, stride 1 / 2, padding (PyTorch's default k//2, none, "same" or a smaller
one), dilation, odd and non-square maps, batch 1-3, Λ and the SE gate on/off, pool 1 / 2,
residual, activation and the instruction-set path; ``derandomize`` keeps CI runs
identical. The paper's "3b DW" ablation (MobileNetV2 x0.5 with DCD on its depthwise
layers) exports with every DCD layer fused and keeps parity in OpenVINO.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import onnx
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from torch import nn

pytest.importorskip("openvino")

from _fused_nets import FUZZ, LayerNet, activation_specs, available_isas, build, check_activation, forced_isa  # noqa: E402
from _zoo import ZooCache  # noqa: E402

from dcd_deploy import export_onnx  # noqa: E402
from dcd_deploy.layers import DCDConv2d  # noqa: E402
from dcd_deploy.parity import check_parity  # noqa: E402

EXAMPLES = 40


@dataclass(frozen=True)
class DW:
    channels: int
    kernel: int
    stride: int
    padding: object  # None (k//2), "same", "valid" or an int
    dilation: int
    latent_dim: int | None
    pool_size: int
    gate: str
    channel_attention: bool
    residual: bool
    act: str
    height: int
    width: int
    batch: int
    seed: int

    def out_size(self, n: int) -> int:
        if self.padding == "same":
            return n
        pad = (
            (self.kernel // 2) * self.dilation
            if self.padding is None
            else 0
            if self.padding == "valid"
            else self.padding
        )
        return (n + 2 * pad - self.dilation * (self.kernel - 1) - 1) // self.stride + 1


@st.composite
def dw_layers(draw) -> DW:
    kernel = draw(st.sampled_from([3, 5, 7]))
    stride = draw(st.sampled_from([1, 2]))
    padding = draw(st.sampled_from([None, "valid", 1]) | (st.just("same") if stride == 1 else st.nothing()))
    cfg = DW(
        channels=draw(st.sampled_from([3, 8, 17, 24, 33])),
        kernel=kernel,
        stride=stride,
        padding=padding,
        dilation=draw(st.sampled_from([1, 1, 2])),
        latent_dim=draw(st.none() | st.integers(1, 8)),
        pool_size=draw(st.sampled_from([1, 2])),
        gate=draw(st.sampled_from(["relu", "se"])),
        channel_attention=draw(st.booleans()),
        residual=draw(st.booleans()),
        act=draw(activation_specs()),
        height=draw(st.sampled_from([5, 7, 9, 13])),
        width=draw(st.sampled_from([6, 7, 11, 15])),
        batch=draw(st.integers(1, 3)),
        seed=draw(st.integers(0, 2**16)),
    )
    assume(cfg.out_size(cfg.height) >= 1 and cfg.out_size(cfg.width) >= 1)
    same = (cfg.out_size(cfg.height), cfg.out_size(cfg.width)) == (cfg.height, cfg.width)
    return cfg if same or not cfg.residual else DW(**{**cfg.__dict__, "residual": False})


def _net(cfg: DW) -> nn.Module:
    layer = DCDConv2d(
        cfg.channels,
        cfg.channels,
        cfg.kernel,
        cfg.stride,
        padding=cfg.padding,
        dilation=cfg.dilation,
        groups=cfg.channels,
        latent_dim=cfg.latent_dim,
        pool_size=cfg.pool_size,
        gate=cfg.gate,
        channel_attention=cfg.channel_attention,
    )
    return LayerNet(layer, c_in=cfg.channels, c_out=cfg.channels, residual=cfg.residual, act=cfg.act)


def test_fused_depthwise_layers_match_pytorch_in_openvino_and_onnxruntime(tmp_path, capsys):
    isas = available_isas()
    coverage: Counter = Counter()

    @settings(FUZZ, max_examples=EXAMPLES)
    @given(cfg=dw_layers(), isa_index=st.integers(0, 2))
    def prop(cfg: DW, isa_index: int):
        model = build(cfg, _net)
        path = tmp_path / "m.onnx"
        result = export_onnx(model, path, input_size=(cfg.height, cfg.width), mode="fused", check=False)
        assert result.fused == ["dcd"] and result.unfused == {}
        (node,) = [n for n in onnx.load(str(path)).graph.node if n.domain == "dcd_deploy"]
        assert node.op_type == "DCDDepthwise"
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        assert (attrs["kernel"], attrs["stride"], attrs["dilation"]) == (cfg.kernel, cfg.stride, cfg.dilation)
        assert attrs["residual"] == int(cfg.residual)
        check_activation(attrs, cfg.act, model)
        g = torch.Generator().manual_seed(cfg.seed + 1)
        x = torch.randn(2 * cfg.batch, 3, cfg.height, cfg.width, generator=g)
        isa = isas[isa_index % len(isas)]
        with forced_isa(isa):
            report = check_parity(model, path, batch_sizes=(cfg.batch,), inputs=x, backends=("onnxruntime", "openvino"))
        assert report, f"{cfg!r} isa={isa}\n{report.table()}"
        coverage[f"isa {isa}"] += 1
        coverage[f"{cfg.kernel}x{cfg.kernel}/{cfg.stride}"] += 1
        coverage[f"pool {cfg.pool_size}"] += 1
        coverage[f"padding {cfg.padding}"] += 1
        coverage["residual" if cfg.residual else "no residual"] += 1
        coverage["dilated" if cfg.dilation > 1 else "undilated"] += 1
        coverage[f"act {cfg.act.partition(':')[0]}"] += 1

    prop()
    with capsys.disabled():
        print(
            "\n[fuzz] fused depthwise DCD layers vs PyTorch (OpenVINO + ORT): "
            + ", ".join(f"{k} {v}" for k, v in sorted(coverage.items()))
        )
    assert all(coverage[f"isa {isa}"] > 0 for isa in isas)
    assert coverage["act prelu"] > 0  # a slope per channel, the one activation with a vector
    assert all(coverage[k] > 0 for k in ("residual", "pool 2", "dilated", "padding valid"))
    assert all(any(key.startswith(f"{k}x{k}/") for key in coverage) for k in (3, 5, 7))
    assert coverage["3x3/2"] + coverage["5x5/2"] + coverage["7x7/2"] > 0


SIZE = 96  # as tests/exporters/test_table_variants.py


def test_table_3b_dw_variant_fuses_every_dcd_layer_and_keeps_parity_in_openvino(tmp_path):
    """MobileNetV2 x0.5 with DCD on the depthwise layers (Table 3b "DW"): every DCD layer is
    a DCDDepthwise node and the file matches the PyTorch model in OpenVINO and ORT."""
    model = ZooCache(size=lambda arch: SIZE, seed=1)("mobilenetv2_050_dcd", roles=("dw",))
    dws = [n for n, m in model.named_modules() if isinstance(m, DCDConv2d)]
    assert len(dws) == 17  # one per inverted residual block
    path = tmp_path / "dw.onnx"
    result = export_onnx(model, path, input_size=SIZE, mode="fused", check=False)
    assert sorted(result.fused) == sorted(dws) and result.unfused == {}
    assert result.op_histogram["dcd_deploy.DCDDepthwise"] == len(dws)
    report = check_parity(model, path, batch_sizes=(1, 2), n_inputs=4, backends=("onnxruntime", "openvino"))
    assert report, report.table()
