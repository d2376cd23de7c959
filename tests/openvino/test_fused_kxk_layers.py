"""Fused k x k and strided DCD layers (standard Conv of W0 + ``DCDConvEpilogue``) through
OpenVINO with the extension and through ONNX Runtime (the node's function body), against
the PyTorch layer in float64 (:func:`check_parity`).

A random channel-fusion :class:`DCDConv2d` (3x3 or 5x5, a non-square odd kernel, dilated
or not, at stride 1 or 2, or 1x1 at stride 2, at the default "same" padding; the paper's
Eq. 8 form with the 1x1 dynamic residual at the centre tap) in a small image model

    Conv2d(3, C_in, 1) -> DCDConv2d(k, stride) -> BatchNorm2d [-> + stem output] [-> ReLU | ReLU6]

is exported with ``mode="fused"``; hypothesis draws channels, latent sizes, pooling over
odd, even, non-square and 1-pixel maps, gates, Λ, the latent BNs, residual (stride 1), activation,
batch and the instruction-set path; ``derandomize`` keeps CI runs identical.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import onnx
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from torch import nn

pytest.importorskip("openvino")

from _fused_nets import FUZZ, activation_specs, available_isas, build, check_activation, dcd_layer_net, forced_isa  # noqa: E402

from dcd_deploy import export_onnx  # noqa: E402
from dcd_deploy.parity import check_parity  # noqa: E402

EXAMPLES = 40


@dataclass(frozen=True)
class KxK:
    c_in: int
    c_out: int
    kernel: int | tuple[int, int]
    stride: int
    latent_dim: int | None
    pool_size: int
    gate: str
    channel_attention: bool
    latent_bn: bool
    residual: bool
    act: str
    side: int
    batch: int
    seed: int
    dilation: int | tuple[int, int] = 1
    width: int | None = None  # None: side x side

    @property
    def geometry(self) -> str:
        kh, kw = (self.kernel,) * 2 if isinstance(self.kernel, int) else self.kernel
        dilated = "" if self.dilation == 1 else f" dilation {self.dilation}"
        return f"{kh}x{kw}/{self.stride}{dilated}"


@st.composite
def kxk_layers(draw) -> KxK:
    kernel, stride = draw(st.sampled_from([(3, 1), (3, 2), (1, 2), (5, 1), ((1, 3), 1), ((5, 3), 2)]))
    dilation = 1 if kernel == 1 else draw(st.sampled_from([1, 1, 2, (2, 1)]))
    c_in = draw(st.sampled_from([1, 3, 8, 17, 23, 32]))
    residual = stride == 1 and draw(st.booleans())
    c_out = c_in if residual else draw(st.sampled_from([4, 16, 17, 23, 48]))
    return KxK(
        c_in=c_in,
        c_out=c_out,
        kernel=kernel,
        stride=stride,
        latent_dim=draw(st.none() | st.integers(1, 12)),
        pool_size=draw(st.sampled_from([1, 2])),
        gate=draw(st.sampled_from(["relu", "se"])),
        channel_attention=draw(st.booleans()),
        latent_bn=draw(st.booleans()),
        residual=residual,
        act=draw(activation_specs()),
        side=draw(st.sampled_from([1, 2, 5, 7, 12, 15])),
        batch=draw(st.integers(1, 3)),
        seed=draw(st.integers(0, 2**16)),
        dilation=dilation,
        width=draw(st.none() | st.sampled_from([3, 8])),
    )


def _net(cfg: KxK) -> nn.Module:
    return dcd_layer_net(cfg, cfg.kernel, cfg.stride, dilation=cfg.dilation)


def test_fused_kxk_layers_match_pytorch_in_openvino_and_onnxruntime(tmp_path, capsys):
    isas = available_isas()
    coverage: Counter = Counter()

    @settings(FUZZ, max_examples=EXAMPLES)
    @given(cfg=kxk_layers(), isa_index=st.integers(0, 2))
    @example(  # a strided 1x1 layer always, whatever the derandomized draws cover
        cfg=KxK(8, 16, 1, 2, None, 2, "se", True, True, False, "relu", 7, 2, 3), isa_index=2
    )
    @example(  # ResNet's strided 3x3 layer, undilated
        cfg=KxK(16, 32, 3, 2, None, 1, "relu", True, False, False, "relu", 12, 1, 11), isa_index=0
    )
    @example(  # a dilated non-square kernel on a non-square map, residual
        cfg=KxK(8, 8, (3, 5), 1, 6, 1, "relu", True, False, True, "relu6", 9, 2, 5, dilation=2, width=6), isa_index=1
    )
    def prop(cfg: KxK, isa_index: int):
        model = build(cfg, _net)
        path = tmp_path / "m.onnx"
        hw = cfg.side if cfg.width is None else (cfg.side, cfg.width)
        export_onnx(model, path, input_size=hw, mode="fused", check=False)
        graph = onnx.load(str(path)).graph
        (node,) = [n for n in graph.node if n.domain == "dcd_deploy"]
        assert node.op_type == "DCDConvEpilogue"
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        assert attrs["stride"] == cfg.stride and attrs["offset"] == 0
        assert attrs["residual"] == int(cfg.residual)
        check_activation(attrs, cfg.act, model)
        g = torch.Generator().manual_seed(cfg.seed + 1)
        x = torch.randn(2 * cfg.batch, 3, cfg.side, cfg.width or cfg.side, generator=g).double().float()
        isa = isas[isa_index % len(isas)]
        with forced_isa(isa):
            report = check_parity(model, path, batch_sizes=(cfg.batch,), inputs=x, backends=("onnxruntime", "openvino"))
        assert report, f"{cfg!r} isa={isa}\n{report.table()}"
        coverage[f"isa {isa}"] += 1
        coverage[cfg.geometry] += 1
        coverage["dilated" if cfg.dilation != 1 else "not dilated"] += 1
        coverage["non-square map" if cfg.width not in (None, cfg.side) else "square map"] += 1
        coverage[f"pool {cfg.pool_size}"] += 1
        coverage["residual" if cfg.residual else "no residual"] += 1
        coverage[f"act {cfg.act.partition(':')[0]}"] += 1

    prop()
    with capsys.disabled():
        print(
            "\n[fuzz] fused k x k DCD layers vs PyTorch (OpenVINO + ORT): "
            + ", ".join(f"{k} {v}" for k, v in sorted(coverage.items()))
        )
    assert all(coverage[f"isa {isa}"] > 0 for isa in isas)
    assert coverage["act prelu"] > 0  # a slope per channel, the one activation with a vector
    assert all(coverage[k] > 0 for k in ("3x3/1", "3x3/2", "1x1/2", "residual", "pool 2", "dilated", "non-square map"))
    assert any(k.startswith(("1x3/", "5x3/", "3x5/")) for k in coverage)
