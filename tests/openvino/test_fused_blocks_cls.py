"""Fused block-diagonal DCD layers (B > 1, paper Eq. 6) and the fused DCD classifier
(``DCDLinear``) through OpenVINO with the extension and ONNX Runtime (the nodes'
function bodies), against the PyTorch layer in float64 (:func:`check_parity`).

Neither has a kernel of its own: a B > 1 layer goes through ``DCDPointwise`` (1x1,
stride 1) or Conv + ``DCDConvEpilogue`` as the dense layer with zeros off the blocks, and
the classifier is the runtime's Gemm of W0 then ``DCDConvEpilogue`` at 1x1 spatial size.
Hypothesis draws the sizes, B, Λ, gates, the latent BNs, residual, activation and batch;
``derandomize`` keeps CI runs identical. Also here: the paper's "3a B=4" and
"3b DW+PW+CLS" ablation models exported fused, with every B > 1 and classifier layer
reported fused, pass the parity check in OpenVINO.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import onnx
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

pytest.importorskip("openvino")

import _zoo  # noqa: E402
from _fused_nets import (  # noqa: E402
    FUZZ,
    activation_specs,
    available_isas,
    build,
    check_activation,
    dcd_layer_net,
    forced_isa,
    make_activation,
)

from dcd_deploy import export_onnx  # noqa: E402
from dcd_deploy.layers import DCDConv2d, DCDLinear  # noqa: E402
from dcd_deploy.parity import check_parity  # noqa: E402

EXAMPLES = 30


@dataclass(frozen=True)
class Blocks:
    c_in: int
    c_out: int
    kernel: int
    stride: int
    blocks: int
    groups: int
    latent_dim: int
    pool_size: int
    gate: str
    channel_attention: bool
    latent_bn: bool
    residual: bool
    act: str
    side: int
    batch: int
    seed: int


@st.composite
def block_layers(draw) -> Blocks:
    kernel, stride = draw(st.sampled_from([(1, 1), (1, 1), (3, 1), (3, 2), (1, 2)]))
    blocks = draw(st.sampled_from([2, 3, 4]))
    groups = draw(st.sampled_from([1, 1, 1, blocks]))  # a grouped W0 (groups | B) too
    c_in = blocks * draw(st.integers(1 if groups == 1 else 2, 8))  # groups = C_in would be depthwise
    residual = stride == 1 and draw(st.booleans())
    c_out = c_in if residual else blocks * draw(st.integers(1, 12))
    return Blocks(
        c_in=c_in,
        c_out=c_out,
        kernel=kernel,
        stride=stride,
        blocks=blocks,
        groups=groups,
        latent_dim=blocks * draw(st.integers(1, 4)),
        pool_size=draw(st.sampled_from([1, 2])),
        gate=draw(st.sampled_from(["relu", "se"])),
        channel_attention=draw(st.booleans()),
        latent_bn=draw(st.booleans()),
        residual=residual,
        act=draw(activation_specs()),
        side=draw(st.sampled_from([1, 2, 5, 7, 12])),
        batch=draw(st.integers(1, 3)),
        seed=draw(st.integers(0, 2**16)),
    )


def _net(cfg: Blocks) -> nn.Module:
    return dcd_layer_net(cfg, cfg.kernel, cfg.stride, groups=cfg.groups, num_blocks=cfg.blocks)


def test_fused_block_diagonal_layers_match_pytorch(tmp_path, capsys):
    isas = available_isas()
    coverage: Counter = Counter()

    @settings(FUZZ, max_examples=EXAMPLES)
    @given(cfg=block_layers(), isa_index=st.integers(0, 2))
    def prop(cfg: Blocks, isa_index: int):
        model = build(cfg, _net)
        path = tmp_path / "m.onnx"
        result = export_onnx(model, path, input_size=cfg.side, mode="fused", check=False)
        assert result.fused == ["dcd"] and result.unfused == {}
        (node,) = [n for n in onnx.load(str(path)).graph.node if n.domain == "dcd_deploy"]
        pointwise = cfg.kernel == 1 and cfg.stride == 1
        assert node.op_type == ("DCDPointwise" if pointwise else "DCDConvEpilogue")
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        assert attrs["residual"] == int(cfg.residual)
        check_activation(attrs, cfg.act, model)
        g = torch.Generator().manual_seed(cfg.seed + 1)
        x = torch.randn(2 * cfg.batch, 3, cfg.side, cfg.side, generator=g)
        isa = isas[isa_index % len(isas)]
        with forced_isa(isa):
            report = check_parity(model, path, batch_sizes=(cfg.batch,), inputs=x, backends=("onnxruntime", "openvino"))
        assert report, f"{cfg!r} isa={isa}\n{report.table()}"
        coverage[f"isa {isa}"] += 1
        coverage[node.op_type] += 1
        coverage[f"B {cfg.blocks}"] += 1
        coverage["grouped W0" if cfg.groups > 1 else "dense W0"] += 1
        coverage[f"act {cfg.act.partition(':')[0]}"] += 1
        coverage["residual" if cfg.residual else "no residual"] += 1

    prop()
    with capsys.disabled():
        print(
            "\n[fuzz] fused B > 1 DCD layers vs PyTorch (OpenVINO + ORT): "
            + ", ".join(f"{k} {v}" for k, v in sorted(coverage.items()))
        )
    assert all(coverage[f"isa {isa}"] > 0 for isa in isas)
    assert coverage["act prelu"] > 0  # a slope per channel, the one activation with a vector
    assert all(coverage[k] > 0 for k in ("DCDPointwise", "DCDConvEpilogue", "grouped W0", "residual", "B 4"))


@dataclass(frozen=True)
class Classifier:
    c_in: int
    c_out: int
    blocks: int
    latent_dim: int | None
    gate: str
    channel_attention: bool
    latent_bn: bool
    bias: bool
    residual: bool
    act: str
    batch: int
    seed: int


@st.composite
def classifiers(draw) -> Classifier:
    blocks = draw(st.sampled_from([1, 1, 2, 4]))
    c_in = blocks * draw(st.integers(1, 24))
    residual = draw(st.booleans())
    c_out = c_in if residual else blocks * draw(st.integers(1, 30))
    latent = draw(st.none() | st.integers(1, 6)) if blocks == 1 else blocks * draw(st.integers(1, 3))
    return Classifier(
        c_in=c_in,
        c_out=c_out,
        blocks=blocks,
        latent_dim=latent,
        gate=draw(st.sampled_from(["relu", "se"])),
        channel_attention=draw(st.booleans()),
        latent_bn=draw(st.booleans()),
        bias=draw(st.booleans()),
        residual=residual,
        act=draw(activation_specs()),
        batch=draw(st.integers(1, 3)),
        seed=draw(st.integers(0, 2**16)),
    )


class ClassifierNet(nn.Module):
    """Features (B, C_in) -> DCDLinear [-> + features] [-> ReLU | ReLU6]: the classifier
    on a non-image input, so the fused node sits right behind the graph's input."""

    def __init__(self, cfg: Classifier):
        super().__init__()
        self.residual = cfg.residual
        self.cls = DCDLinear(
            cfg.c_in,
            cfg.c_out,
            bias=cfg.bias,
            num_blocks=cfg.blocks,
            latent_dim=cfg.latent_dim,
            gate=cfg.gate,
            channel_attention=cfg.channel_attention,
            latent_bn=cfg.latent_bn,
        )
        self.act = make_activation(cfg.act, cfg.c_out)

    def forward(self, x):
        y = self.cls(x)
        if self.residual:
            y = x + y
        return self.act(y)


def test_fused_classifier_matches_pytorch(tmp_path, capsys):
    isas = available_isas()
    coverage: Counter = Counter()

    @settings(FUZZ, max_examples=EXAMPLES)
    @given(cfg=classifiers(), isa_index=st.integers(0, 2))
    def prop(cfg: Classifier, isa_index: int):
        model = build(cfg, ClassifierNet)
        if cfg.bias:  # a non-zero static bias, which Λ scales
            with torch.no_grad():
                model.cls.cls.bias.normal_(0, 0.5)
        path = tmp_path / "m.onnx"
        example = (torch.zeros(1, cfg.c_in),)
        result = export_onnx(model, path, example_inputs=example, mode="fused", check=False)
        assert result.fused == ["cls"] and result.unfused == {}
        graph = onnx.load(str(path)).graph
        (node,) = [n for n in graph.node if n.domain == "dcd_deploy"]
        assert node.op_type == "DCDConvEpilogue"
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        assert attrs["residual"] == int(cfg.residual)
        check_activation(attrs, cfg.act, model)
        assert attrs["pool"] == 1 and attrs["stride"] == 1 and attrs["offset"] == 0
        assert "Gemm" in {n.op_type for n in graph.node}  # W0 x + b0: the runtime's own
        g = torch.Generator().manual_seed(cfg.seed + 1)
        x = torch.randn(2 * cfg.batch, cfg.c_in, generator=g)
        isa = isas[isa_index % len(isas)]
        with forced_isa(isa):
            report = check_parity(
                model,
                path,
                batch_sizes=(cfg.batch,),
                inputs=x,
                example_inputs=example,
                backends=("onnxruntime", "openvino"),
            )
        assert report, f"{cfg!r} isa={isa}\n{report.table()}"
        coverage[f"isa {isa}"] += 1
        coverage[f"B {cfg.blocks}"] += 1
        coverage["residual" if cfg.residual else "no residual"] += 1
        coverage[f"act {cfg.act.partition(':')[0]}"] += 1
        coverage["Λ" if cfg.channel_attention else "no Λ"] += 1
        coverage[f"batch {cfg.batch}"] += 1

    prop()
    with capsys.disabled():
        print(
            "\n[fuzz] fused DCD classifier vs PyTorch (OpenVINO + ORT): "
            + ", ".join(f"{k} {v}" for k, v in sorted(coverage.items()))
        )
    assert all(coverage[f"isa {isa}"] > 0 for isa in isas)
    assert coverage["act prelu"] > 0  # a slope per channel, the one activation with a vector
    assert all(coverage[k] > 0 for k in ("B 1", "B 2", "residual", "Λ", "no Λ", "batch 3"))


SIZE = 96
_ablation = _zoo.ZooCache(size=lambda arch: SIZE, seed=1)


@pytest.mark.parametrize(
    "name, config",
    [("3a B=4", dict(num_blocks=4)), ("3b DW+PW+CLS", dict(roles=("dw", "pw", "cls")))],
    ids=["3a B=4", "3b DW+PW+CLS"],
)
def test_ablation_models_fused_in_openvino(name, config, tmp_path):
    model = _ablation("mobilenetv2_050_dcd", **config)
    path = tmp_path / "m.onnx"
    result = export_onnx(model, path, input_size=SIZE, mode="fused", check=False)
    paths = {m: p for p, m in model.named_modules()}
    blocks = [paths[m] for m in model.modules() if isinstance(m, DCDConv2d) and m.num_blocks > 1]
    linear = [paths[m] for m in model.modules() if isinstance(m, DCDLinear)]
    assert linear and set(blocks + linear) <= set(result.fused)
    if name == "3a B=4":
        assert blocks and result.unfused == {}
    else:  # the depthwise kind is not this file's
        assert set(result.unfused.values()) <= {"depthwise"}
    report = check_parity(model, path, batch_sizes=(1, 2), n_inputs=2, backends=("openvino",))
    assert report, report.table()
    assert all(r.top1_agreement == 1.0 for r in report.rows)
