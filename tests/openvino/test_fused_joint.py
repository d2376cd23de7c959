"""Joint fusion (paper Eq. 8) fused around OpenVINO's convolutions: ``DCDConvEpilogue``
with ``latent_input = 1``.

The graph keeps ``conv = W0 * x`` and the latent ``z = R(Q x)`` as standard Convs; the
node adds ``Λ ⊙ conv + P Φ'(x) z + bias (+ residual, activation)``. Two oracles:

* the op alone (conv and z fed in) against a float64 numpy model of its contract
  (``_fused_reference.latent_epilogue_reference``), on every instruction-set path;
* whole layers: a random joint-fusion :class:`DCDConv2d` in a small image model, exported
  with ``mode="fused"``, against the PyTorch layer in float64 (:func:`check_parity`) in
  OpenVINO (the kernels) and ONNX Runtime (the node's function body). Hypothesis draws
  channels, k 3 / 5 / 4, stride 1 / 2, padding, odd non-square maps, batch 1-3, Λ,
  L, L_k, residual and activation; ``derandomize`` keeps runs identical. And
  ``resnet18_dcd`` with ``joint_fusion=True``: every DCD layer fused, parity in OpenVINO.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from torch import nn

ov = pytest.importorskip("openvino")
onnx = pytest.importorskip("onnx")
from _fused_nets import FUZZ, LayerNet, activation_specs, available_isas, build, check_activation, forced_isa  # noqa: E402
from _fused_reference import LATENT_WEIGHT_ORDER, latent_epilogue_reference, make_latent_case, max_relative_error  # noqa: E402
from hypothesis import example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from test_kernel import ISAS, _cpu_isas, _need, core, ext_path, lib  # noqa: E402,F401

from dcd_deploy import create_model, export_onnx, pseudo_train  # noqa: E402
from dcd_deploy.layers import DCDConv2d  # noqa: E402
from dcd_deploy.parity import check_parity  # noqa: E402

CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 1}
EXAMPLES = 30


@pytest.fixture(scope="module")
def isas(lib):  # noqa: F811
    return _cpu_isas(lib)


# ------------------------------------------------------------------- the op alone
def make_latent_model(x, conv, z, c, *, residual, pool, se, attention, activation):
    """One DCDConvEpilogue node with latent_input = 1; conv, x, [residual], z graph inputs."""
    t = TensorProto.FLOAT
    names = ["conv", "x"] + (["residual"] if residual else []) + ["z"]
    shapes = {"conv": conv.shape, "x": x.shape, "residual": conv.shape, "z": z.shape}
    inputs = [helper.make_tensor_value_info(n, t, list(shapes[n])) for n in names]
    weights = [k for k in LATENT_WEIGHT_ORDER if k in c]
    node = helper.make_node(
        "DCDConvEpilogue",
        names + weights,
        ["out"],
        domain="dcd_deploy",
        pool=pool,
        se=int(se),
        attention=int(attention),
        residual=int(residual),
        activation=activation,
        latent_input=1,
    )
    graph = helper.make_graph(
        [node],
        "dcd",
        inputs,
        [helper.make_tensor_value_info("out", t, list(conv.shape))],
        [numpy_helper.from_array(c[k], k) for k in weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("dcd_deploy", 1)])
    return model.SerializeToString()


def check_latent(core, lib, isa, monkeypatch, *, threads=1, seed=0, activation="none", **sizes):  # noqa: F811
    monkeypatch.setenv("DCD_DEPLOY_ISA", isa)
    assert lib.dcd_deploy_ov_isa().decode() == isa
    opts = {k: sizes.pop(k) for k in ("pool", "se", "attention")}
    residual = sizes.pop("residual")
    x, conv, z, res, c = make_latent_case(np.random.default_rng(seed), residual=residual, **opts, **sizes)
    model = make_latent_model(x, conv, z, c, residual=residual, activation=activation, **opts)
    compiled = core.compile_model(core.read_model(model, b""), "CPU", {**CONFIG, "INFERENCE_NUM_THREADS": threads})
    feeds = {"conv": conv, "x": x, "z": z, **({"residual": res} if residual else {})}
    got = compiled(feeds)[0]
    want = latent_epilogue_reference(x, conv, z, res, c, activation=activation, **opts)
    assert got.shape == want.shape
    err = max_relative_error(got, want)
    assert err < 2e-5, f"max error {err:.2e} relative to the output scale"


BASE = dict(B=1, H=9, W=7, Ho=9, Wo=7, Cin=17, Cout=23, L=4, Lz=16, S=8, pool=1, se=0, attention=0, residual=0)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize(
    "sizes",
    [
        dict(pool=2),
        dict(H=11, W=10, Ho=5, Wo=4, pool=2),  # a strided conv's output
        dict(H=6, W=6, Ho=8, Wo=8),  # a padded one's (larger than x)
        dict(H=1, W=1, Ho=1, Wo=1, pool=2),
        dict(Cin=64, Cout=96, L=8, Lz=32, S=12, pool=2),  # whole panels, Lz above one
        dict(Cin=23, Cout=160, L=5, Lz=45, S=6),  # partial panels, Lz = L·9 (5x5: L_k 12 would be 60)
        dict(L=1, Lz=1),
    ],
    ids=["pool2", "strided", "padded", "1x1", "panels", "partial", "L1"],
)
def test_latent_op_shapes(core, lib, isas, monkeypatch, isa, sizes):  # noqa: F811
    _need(isas, isa)
    check_latent(core, lib, isa, monkeypatch, **{**BASE, **sizes})


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize(
    "se,attention,residual,activation", [(1, 0, 0, "relu"), (0, 1, 1, "relu6"), (1, 1, 1, "none"), (0, 0, 1, "relu")]
)
def test_latent_op_options(core, lib, isas, monkeypatch, isa, se, attention, residual, activation):  # noqa: F811
    _need(isas, isa)
    sizes = {**BASE, "B": 3, "H": 8, "W": 5, "Ho": 4, "Wo": 3, "pool": 2, "se": se}
    sizes.update(attention=attention, residual=residual)
    check_latent(core, lib, isa, monkeypatch, activation=activation, seed=se + 2 * attention + 4 * residual, **sizes)


def test_latent_op_two_threads(core, lib, monkeypatch):  # noqa: F811
    monkeypatch.delenv("DCD_DEPLOY_ISA", raising=False)
    isa = lib.dcd_deploy_ov_isa().decode()
    sizes = {**BASE, "B": 2, "H": 17, "W": 15, "Ho": 17, "Wo": 15, "Cout": 40, "L": 8, "Lz": 32, "pool": 2}
    sizes.update(se=1, attention=1, residual=1)
    check_latent(core, lib, isa, monkeypatch, threads=2, activation="relu", **sizes)


def test_latent_op_ir_round_trip(core, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.delenv("DCD_DEPLOY_ISA", raising=False)
    sizes = {**BASE, "B": 2, "Cin": 12, "Cout": 20, "L": 3, "Lz": 12, "S": 6, "pool": 2, "se": 1, "attention": 1}
    x, conv, z, _, c = make_latent_case(
        np.random.default_rng(4), residual=0, **{k: v for k, v in sizes.items() if k != "residual"}
    )
    opts = dict(pool=2, se=1, attention=1)
    model = core.read_model(make_latent_model(x, conv, z, c, residual=0, activation="relu6", **opts), b"")
    node = next(op for op in model.get_ordered_ops() if op.get_type_name() == "DCDConvEpilogue")
    assert node.get_input_size() == 4  # conv, x, z, the packed weights
    ov.save_model(model, tmp_path / "m.xml", compress_to_fp16=False)
    back = core.read_model(tmp_path / "m.xml")
    node = next(op for op in back.get_ordered_ops() if op.get_type_name() == "DCDConvEpilogue")
    attrs = node.get_attributes()
    assert attrs["latent_input"] == 1 and list(attrs["packed"]) == [20, 12, 6, 3, 12]
    got = core.compile_model(back, "CPU", CONFIG)({"conv": conv, "x": x, "z": z})[0]
    want = latent_epilogue_reference(x, conv, z, None, c, activation="relu6", **opts)
    assert max_relative_error(got, want) < 2e-5


@pytest.mark.parametrize(
    "what,match",
    [("z", "z has shape"), ("phi_w", "phi_w has shape"), ("q", "inputs given"), ("packed", "packed must be")],
)
def test_bad_latent_models_are_refused(core, tmp_path, monkeypatch, what, match):  # noqa: F811
    monkeypatch.delenv("DCD_DEPLOY_ISA", raising=False)
    sizes = {k: v for k, v in BASE.items() if k != "residual"}
    x, conv, z, _, c = make_latent_case(np.random.default_rng(6), residual=0, **sizes)
    if what == "z":
        z = z[..., :-1]  # Lz 15: Φ' says 16
    elif what == "phi_w":
        c["phi_w"] = c["phi_w"][:-1]  # not L x Lz rows
    model = make_latent_model(x, conv, z, c, residual=0, pool=1, se=0, attention=0, activation="none")
    if what == "q":  # q among the inputs of a latent-input node: one input too many
        proto = onnx.load_from_string(model)
        proto.graph.initializer.append(numpy_helper.from_array(np.zeros((4, 17), np.float32), "q"))
        proto.graph.node[0].input.insert(len(proto.graph.node[0].input) - 1, "q")
        model = proto.SerializeToString()
    if what == "packed":  # a saved IR whose packed attribute lost Lz
        ov.save_model(core.read_model(model, b""), tmp_path / "m.xml", compress_to_fp16=False)
        xml = (tmp_path / "m.xml").read_text()
        assert 'packed="23, 17, 8, 4, 16"' in xml
        (tmp_path / "m.xml").write_text(xml.replace('packed="23, 17, 8, 4, 16"', 'packed="23, 17, 8, 4"'))
        with pytest.raises(Exception, match=match):
            core.read_model(tmp_path / "m.xml")
        return
    with pytest.raises(Exception, match=match):
        core.read_model(model, b"")


# --------------------------------------------------------------- whole layers, fuzzed
@dataclass(frozen=True)
class JointLayer:
    c_in: int
    c_out: int
    kernel: int
    stride: int
    padding: int | None
    latent_dim: int | None
    kernel_latent_dim: int | None
    pool_size: int
    gate: str
    channel_attention: bool
    residual: bool
    act: str
    hw: tuple[int, int]
    batch: int
    seed: int


@st.composite
def joint_layers(draw) -> JointLayer:
    kernel = draw(st.sampled_from([3, 5, 4]))
    stride = draw(st.sampled_from([1, 2]))
    padding = draw(st.sampled_from([None, 0, 1]))
    if kernel == 4 and padding is None:
        padding = 1  # an even kernel has no centred default here
    residual = stride == 1 and (padding is None) and draw(st.booleans())
    c_in = draw(st.sampled_from([1, 3, 8, 17, 32]))
    return JointLayer(
        c_in=c_in,
        c_out=c_in if residual else draw(st.sampled_from([4, 16, 17, 40])),
        kernel=kernel,
        stride=stride,
        padding=padding,
        latent_dim=draw(st.none() | st.integers(1, 8)),
        kernel_latent_dim=draw(st.none() | st.integers(1, 6)),
        pool_size=draw(st.sampled_from([1, 2])),
        gate=draw(st.sampled_from(["relu", "se"])),
        channel_attention=draw(st.booleans()),
        residual=residual,
        act=draw(activation_specs()),
        hw=draw(st.sampled_from([(7, 9), (9, 5), (6, 11), (5, 5), (12, 7)])),
        batch=draw(st.integers(1, 3)),
        seed=draw(st.integers(0, 2**16)),
    )


#: A residual joint-fusion layer with LeakyReLU (the coverage asks for one residual).
RESIDUAL_EXAMPLE = JointLayer(
    c_in=17,
    c_out=17,
    kernel=3,
    stride=1,
    padding=None,
    latent_dim=None,
    kernel_latent_dim=3,
    pool_size=2,
    gate="se",
    channel_attention=True,
    residual=True,
    act="leaky_relu:0.1",
    hw=(9, 5),
    batch=2,
    seed=7,
)


def _net(cfg: JointLayer) -> nn.Module:
    layer = DCDConv2d(
        cfg.c_in,
        cfg.c_out,
        cfg.kernel,
        cfg.stride,
        cfg.padding,
        joint_fusion=True,
        latent_dim=cfg.latent_dim,
        kernel_latent_dim=cfg.kernel_latent_dim,
        pool_size=cfg.pool_size,
        gate=cfg.gate,
        channel_attention=cfg.channel_attention,
    )
    return LayerNet(layer, c_in=cfg.c_in, c_out=cfg.c_out, residual=cfg.residual, act=cfg.act)


def test_fused_joint_layers_match_pytorch_in_openvino_and_onnxruntime(tmp_path, capsys):
    isas = available_isas()
    coverage: Counter = Counter()

    @settings(FUZZ, max_examples=EXAMPLES)
    @given(cfg=joint_layers(), isa_index=st.integers(0, 2))
    @example(cfg=RESIDUAL_EXAMPLE, isa_index=0)  # a residual whatever the draws (about 1 in 18 is one)
    def prop(cfg: JointLayer, isa_index: int):
        model = build(cfg, _net)
        path = tmp_path / "m.onnx"
        result = export_onnx(model, path, input_size=cfg.hw, mode="fused", check=False)
        assert result.fused == ["dcd"] and result.unfused == {}
        (node,) = [n for n in onnx.load(str(path)).graph.node if n.domain == "dcd_deploy"]
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        assert node.op_type == "DCDConvEpilogue" and attrs["latent_input"] == 1
        assert attrs["residual"] == int(cfg.residual)
        check_activation(attrs, cfg.act, model)
        g = torch.Generator().manual_seed(cfg.seed + 1)
        x = torch.randn(2 * cfg.batch, 3, *cfg.hw, generator=g)
        isa = isas[isa_index % len(isas)]
        with forced_isa(isa):
            report = check_parity(model, path, batch_sizes=(cfg.batch,), inputs=x, backends=("onnxruntime", "openvino"))
        assert report, f"{cfg!r} isa={isa}\n{report.table()}"
        coverage[f"isa {isa}"] += 1
        coverage[f"{cfg.kernel}x{cfg.kernel}/{cfg.stride}"] += 1
        coverage[f"pad {cfg.padding}"] += 1
        coverage["residual" if cfg.residual else "no residual"] += 1
        coverage[f"act {cfg.act.partition(':')[0]}"] += 1

    prop()
    with capsys.disabled():
        print(
            "\n[fuzz] fused joint-fusion layers vs PyTorch (OpenVINO + ORT): "
            + ", ".join(f"{k} {v}" for k, v in sorted(coverage.items()))
        )
    assert all(coverage[f"isa {isa}"] > 0 for isa in isas)
    assert coverage["act prelu"] > 0  # a slope per channel, the one activation with a vector
    assert all(coverage[k] > 0 for k in ("3x3/1", "3x3/2", "5x5/1", "5x5/2", "residual", "pad 0"))


def test_resnet18_joint_fusion_exports_fused_and_matches_pytorch_in_openvino(tmp_path):
    # fixed_pool=False: the release's fixed 7x7 average pool takes 224 only
    model = pseudo_train(create_model("resnet18_dcd", joint_fusion=True, fixed_pool=False), input_size=64)
    joint = [n for n, m in model.named_modules() if isinstance(m, DCDConv2d) and m.form.joint]
    assert len(joint) == 16
    path = tmp_path / "r18j.onnx"
    result = export_onnx(model, path, input_size=64, mode="fused", check=False)
    # every joint layer fused, and the DCD classifier (Gemm + a 1x1 epilogue)
    assert sorted(result.fused) == sorted(joint + ["classifier.1"])
    assert result.unfused == {}
    assert result.fused_summary() == "17 of 17 DCD layers fused"
    assert result.op_histogram.get("dcd_deploy.DCDConvEpilogue", 0) == 17
    report = check_parity(model, path, batch_sizes=(1, 2), n_inputs=2, backends=("openvino",))
    assert report, report.table()
    assert all(r.top1_agreement == 1.0 for r in report.rows)
