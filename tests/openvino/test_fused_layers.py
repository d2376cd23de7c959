"""Fused DCD layers through OpenVINO with the extension, against PyTorch.

Unlike ``test_kernel.py`` (the kernel against a numpy model of the op contract), the
oracle here is the PyTorch layer itself in float64 (:func:`check_parity`): a random
pointwise :class:`DCDConv2d` in a small image model

    Conv2d(3, C_in, 1) -> DCDConv2d -> BatchNorm2d [-> + stem output] [-> ReLU | ReLU6]

is exported with ``mode="fused"`` (one ``DCDPointwise`` node with the add and the
activation fused) and run by OpenVINO (the kernel) and ONNX Runtime (the node's
function body), each instruction-set path of this CPU drawn in turn. Hypothesis draws
odd and typical channel counts, latent sizes, 1x1 and 2x2 pooling over odd, even and
1-pixel maps, SE or ReLU gates, Λ on or off, the release's latent BNs, residual or not,
batch 1-4 and the exporter's form; ``derandomize`` keeps CI runs identical.

Also here: every zoo DCD model exported fused and checked in OpenVINO.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import onnx
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

pytest.importorskip("openvino")

import _zoo  # noqa: E402
from _fused_nets import (  # noqa: E402
    EXAMPLES,
    FUZZ,
    activation_specs,
    available_isas,
    build,
    check_activation,
    dcd_layer_net,
    forced_isa,
)

from dcd_deploy import export_onnx, list_models  # noqa: E402
from dcd_deploy.layers import DCDConv2d, DCDLinear  # noqa: E402
from dcd_deploy.parity import check_parity  # noqa: E402


@dataclass(frozen=True)
class Layer:
    c_in: int
    c_out: int
    latent_dim: int | None
    pool_size: int
    gate: str
    channel_attention: bool
    latent_bn: bool
    residual: bool
    act: str
    side: int
    batch: int
    strategy: str
    seed: int


@st.composite
def layers(draw) -> Layer:
    c_in = draw(st.sampled_from([1, 3, 8, 17, 23, 32, 64]))
    residual = draw(st.booleans())
    c_out = c_in if residual else draw(st.sampled_from([4, 16, 17, 23, 48, 96]))
    return Layer(
        c_in=c_in,
        c_out=c_out,
        latent_dim=draw(st.none() | st.integers(1, 20)),
        pool_size=draw(st.sampled_from([1, 2])),
        gate=draw(st.sampled_from(["relu", "se"])),
        channel_attention=draw(st.booleans()),
        latent_bn=draw(st.booleans()),
        residual=residual,
        act=draw(activation_specs()),
        side=draw(st.sampled_from([1, 2, 5, 7, 12, 15])),
        batch=draw(st.integers(1, 4)),
        strategy=draw(st.sampled_from(["weight", "latent", "auto"])),
        seed=draw(st.integers(0, 2**16)),
    )


def _net(cfg: Layer) -> nn.Module:
    return dcd_layer_net(cfg)


def test_fused_layers_match_pytorch_in_openvino_and_onnxruntime(tmp_path, capsys):
    isas = available_isas()
    assert "portable" in isas
    coverage: Counter = Counter()

    @FUZZ
    @given(cfg=layers(), isa_index=st.integers(0, 2))
    def prop(cfg: Layer, isa_index: int):
        model = build(cfg, _net)
        size = cfg.side  # the exporter takes square inputs
        path = tmp_path / "m.onnx"
        export_onnx(model, path, input_size=size, mode="fused", strategy=cfg.strategy, check=False)
        (node,) = [n for n in onnx.load(str(path)).graph.node if n.domain == "dcd_deploy"]
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        assert attrs["residual"] == int(cfg.residual)
        check_activation(attrs, cfg.act, model)
        g = torch.Generator().manual_seed(cfg.seed + 1)
        x = torch.randn(2 * cfg.batch, 3, size, size, generator=g)
        isa = isas[isa_index % len(isas)]
        with forced_isa(isa):
            report = check_parity(model, path, batch_sizes=(cfg.batch,), inputs=x, backends=("onnxruntime", "openvino"))
        assert report, f"{cfg!r} isa={isa}\n{report.table()}"
        coverage[f"isa {isa}"] += 1
        coverage[f"form {attrs['form'].decode()}"] += 1
        coverage[f"pool {cfg.pool_size}"] += 1
        coverage["residual" if cfg.residual else "no residual"] += 1
        coverage[f"batch {cfg.batch}"] += 1
        coverage[f"act {cfg.act.partition(':')[0]}"] += 1

    prop()
    with capsys.disabled():
        print(
            "\n[fuzz] fused DCD layers vs PyTorch (OpenVINO + ORT): "
            + ", ".join(f"{k} {v}" for k, v in sorted(coverage.items()))
        )
    assert sum(v for k, v in coverage.items() if k.startswith("isa ")) >= EXAMPLES
    assert all(coverage[f"isa {isa}"] > 0 for isa in isas)
    assert coverage["form weight"] > 0 and coverage["form latent"] > 0
    assert coverage["residual"] > 0 and coverage["batch 4"] > 0
    assert coverage["act prelu"] > 0  # a slope per channel, the one activation with a vector


ZOO = _zoo.ZooCache(keep_one=True)
DCD_MODELS = [m for m in list_models() if m.endswith("_dcd")]


@pytest.mark.slow
@pytest.mark.parametrize("arch", DCD_MODELS)
def test_zoo_dcd_models_fused_in_openvino(arch, tmp_path):
    size = _zoo.input_size(arch)
    model = ZOO(arch, size)
    path = tmp_path / f"{arch}.onnx"
    result = export_onnx(model, path, input_size=size, mode="fused", check=False)
    channel = [
        m
        for m in model.modules()
        if isinstance(m, DCDConv2d) and m.channel_fusion and not m.form.depthwise and not m.form.joint
    ]
    pixels = _input_pixels(model, size, channel)
    # design.md "Fused op": a wide 1x1 layer (C >= 256 both, >= 1024 one) on <= 14x14 runs
    # around OpenVINO's own 1x1 Conv instead
    pointwise = sum(
        m.kernel_size == 1
        and m.stride == 1
        and not (
            pixels[m] <= 196
            and min(m.in_channels, m.out_channels) >= 256
            and max(m.in_channels, m.out_channels) >= 1024
        )
        for m in channel
    )
    assert result.op_histogram.get("dcd_deploy.DCDPointwise", 0) == pointwise
    classifiers = sum(isinstance(m, DCDLinear) and m.channel_fusion for m in model.modules())
    # k x k and strided ones: OpenVINO's Conv of W0, then the epilogue op; the classifier: Gemm, then it
    assert result.op_histogram.get("dcd_deploy.DCDConvEpilogue", 0) == len(channel) - pointwise + classifiers
    report = check_parity(model, path, batch_sizes=(1, 2), n_inputs=2, backends=("openvino",))
    assert report, report.table()
    assert report.max_rel < 1e-3 and all(r.top1_agreement == 1.0 for r in report.rows)


def _input_pixels(model, size, layers) -> dict:
    """H·W of each layer's input map at a size x size image (forward hooks)."""
    pixels = {}
    hooks = [
        m.register_forward_hook(lambda m, args, out: pixels.__setitem__(m, args[0].shape[2] * args[0].shape[3]))
        for m in layers
    ]
    try:
        with torch.no_grad():
            model(torch.zeros(1, 3, size, size))
    finally:
        for h in hooks:
            h.remove()
    return pixels


@pytest.mark.parametrize("act", ["relu", "relu6", "leaky_relu:0.1"])
def test_a_nan_input_gives_nan_outputs_as_in_pytorch(act, tmp_path):
    """The kernel's pooling, products and epilogue keep NaN (max(NaN, 0) is NaN, as torch.relu).

    Through a whole zoo model OpenVINO's own fused activations turn NaN into numbers (its
    standard-op export does the same), so the layer is checked alone, after a plain conv.
    """
    cfg = Layer(
        c_in=17,
        c_out=23,
        latent_dim=None,
        pool_size=2,
        gate="se",
        channel_attention=True,
        latent_bn=True,
        residual=False,
        act=act,
        side=7,
        batch=2,
        strategy="weight",
        seed=4,
    )
    model = build(cfg, _net)
    path = tmp_path / "m.onnx"
    export_onnx(model, path, input_size=cfg.side, mode="fused", check=False)
    x = torch.randn(4, 3, cfg.side, cfg.side, generator=torch.Generator().manual_seed(0))
    x[1, 0, 3, 3] = float("nan")
    report = check_parity(model, path, batch_sizes=(2,), inputs=x, backends=("openvino",))
    assert report, report.table()
    assert all(r.nonfinite > 0 and r.nonfinite_match for r in report.rows)
