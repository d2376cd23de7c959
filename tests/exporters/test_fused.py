"""``export_onnx(mode="fused")``: the graph the fused kernels run, and its standard-op bodies.

The structure is checked against the model itself (which layers are 1x1 DCD layers,
which blocks are residual, which layers expand), not against the exporter's own plan;
the numbers against PyTorch through ONNX Runtime, which inlines the function bodies.
The OpenVINO kernels are tested in ``tests/openvino``.
"""

from __future__ import annotations

import importlib.util

import _zoo
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from dcd_deploy import export_onnx
from dcd_deploy.layers import DCDConv2d, DCDLinear
from dcd_deploy.models.mobilenetv2 import InvertedResidual
from dcd_deploy.parity import check_parity

ZOO = _zoo.ZooCache()
ARCH, SIZE = "mobilenetv2_050_dcd", 64
#: Constant inputs of the node without the optional ones (fc1, phi_w, phi_b, q, q_b, p, w0, bias).
BASE_WEIGHTS = 8


@pytest.fixture(scope="module")
def fused(tmp_path_factory):
    model = ZOO(ARCH, SIZE)
    path = tmp_path_factory.mktemp("fused") / "m.onnx"
    result = export_onnx(model, path, input_size=SIZE, mode="fused", check=False)
    return model, path, onnx.load(str(path)), result


def _attrs(node) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _export_fused(model, tmp_path):
    """``model`` exported fused at 10x10 without the check: the result, the file and its
    dcd_deploy nodes in graph order."""
    result = export_onnx(model, tmp_path / "m.onnx", input_size=10, mode="fused", check=False)
    proto = onnx.load(str(tmp_path / "m.onnx"))
    return result, proto, [n for n in proto.graph.node if n.domain == "dcd_deploy"]


def _parity_backends() -> tuple[str, ...]:
    """ONNX Runtime runs a fused node's standard-op body; OpenVINO, when installed, the kernels."""
    return ("onnxruntime", "openvino") if importlib.util.find_spec("openvino") else ("onnxruntime",)


def test_one_node_per_pointwise_dcd_layer_with_its_epilogue(fused):
    model, _, proto, result = fused
    nodes = [n for n in proto.graph.node if n.op_type == "DCDPointwise"]
    layers = [m for m in model.modules() if isinstance(m, DCDConv2d)]
    assert layers and all(m.kernel_size == 1 and m.stride == 1 for m in layers)  # MobileNetV2's DCD convs
    assert len(nodes) == len(layers) == result.op_histogram["dcd_deploy.DCDPointwise"]
    # the DCD classifier: the runtime's Gemm of W0, then one DCDConvEpilogue on (B, 1, 1, C)
    (cls,) = [n for n in proto.graph.node if n.domain == "dcd_deploy" and n.op_type != "DCDPointwise"]
    assert cls.op_type == "DCDConvEpilogue" and _attrs(cls)["pool"] == 1 and _attrs(cls)["stride"] == 1
    assert result.fused_summary() == f"{len(layers) + 1} of {len(layers) + 1} DCD layers fused"

    blocks = [m for m in model.modules() if isinstance(m, InvertedResidual)]
    residual_blocks = sum(b.identity and any(isinstance(m, DCDConv2d) for m in b.modules()) for b in blocks)
    attrs = [_attrs(n) for n in nodes]
    assert sum(a["residual"] for a in attrs) == residual_blocks > 0
    # expansion layers (C_in < C_out) pool 2x2 and end in ReLU6; projections pool globally, no activation
    expand = [m.in_channels < m.out_channels for m in layers]
    assert [a["pool"] for a in attrs] == [2 if e else 1 for e in expand]
    assert [a["activation"].decode() for a in attrs] == ["relu6" if e else "none" for e in expand]
    for node, a in zip(nodes, attrs):
        assert a["se"] == 1 and a["attention"] == 1
        assert len(node.input) == 1 + a["residual"] + BASE_WEIGHTS + a["se"] + a["attention"]
        assert a["form"].decode() in ("weight", "latent")


def test_layout_changes_only_at_the_edges_of_fused_runs(fused):
    _, _, proto, _ = fused
    producer = {o: n for n in proto.graph.node for o in n.output}
    transposes = [n for n in proto.graph.node if n.op_type == "Transpose"]
    for t in transposes:
        src = producer.get(t.input[0])
        assert src is None or src.op_type != "Transpose", "a Transpose pair that cancels"
    for node in (n for n in proto.graph.node if n.op_type == "DCDPointwise"):
        src = producer[node.input[0]]
        # NHWC comes from a Transpose of an NCHW tensor or straight from the previous fused node
        assert src.domain == "dcd_deploy" or (src.op_type == "Transpose" and list(_attrs(src)["perm"]) == [0, 2, 3, 1])
    chained = sum(producer[n.input[0]].domain == "dcd_deploy" for n in proto.graph.node if n.op_type == "DCDPointwise")
    assert chained > 0  # block i's projection feeds block i+1's expansion in NHWC


def test_functions_share_the_op_type_and_differ_by_overload(fused):
    _, _, proto, _ = fused
    assert proto.ir_version >= 10  # overloads
    keys = [(f.domain, f.name, f.overload) for f in proto.functions]
    assert len(set(keys)) == len(keys)
    assert {k[:2] for k in keys} == {("dcd_deploy", "DCDPointwise"), ("dcd_deploy", "DCDConvEpilogue")}  # + classifier
    calls = {(n.domain, n.op_type, n.overload) for n in proto.graph.node if n.domain == "dcd_deploy"}
    assert calls == set(keys)
    common = {"pool", "se", "attention", "residual", "activation"}
    for f in proto.functions:
        extra = {"form"} if f.name == "DCDPointwise" else {"stride", "offset"}
        assert set(f.attribute) == common | extra
        assert {n.domain for n in f.node} == {""}  # standard ops only
    onnx.checker.check_model(proto, full_check=True)


def test_onnxruntime_runs_the_bodies_as_pytorch(fused, tmp_path):
    model, path, _, _ = fused
    report = check_parity(model, path, batch_sizes=(1, 3), backends=("onnxruntime",))
    assert report, report.table()
    standard = tmp_path / "standard.onnx"
    export_onnx(model, standard, input_size=SIZE, check=False)
    x = _zoo_inputs()
    outs = [
        ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
        for p in (path, standard)
    ]
    np.testing.assert_allclose(outs[0], outs[1], rtol=0, atol=1e-4 * np.abs(outs[1]).max())


def test_channel_layers_fuse_the_rest_stays_standard(tmp_path):
    """1x1 stride-1 layers become DCDPointwise; k x k and strided ones the standard Conv of
    W0 + DCDConvEpilogue; depthwise DCD layers DCDDepthwise (the weight form)."""
    torch.manual_seed(0)
    model = _Flat(
        torch.nn.Conv2d(3, 16, 1),
        DCDConv2d(16, 16, 3),  # k x k channel fusion: Conv + DCDConvEpilogue
        DCDConv2d(16, 16, 3, groups=16),  # depthwise: DCDDepthwise
        DCDConv2d(16, 24, 1, stride=2),  # strided 1x1: Conv + DCDConvEpilogue
        DCDConv2d(24, 32, 1, pool_size=2),  # DCDPointwise
        torch.nn.ReLU(),
    ).eval()
    result = export_onnx(model, tmp_path / "m.onnx", input_size=12, mode="fused", check=False)
    assert result.op_histogram["dcd_deploy.DCDPointwise"] == 1
    assert result.op_histogram["dcd_deploy.DCDConvEpilogue"] == 2
    assert result.op_histogram["dcd_deploy.DCDDepthwise"] == 1
    assert result.unfused == {}
    nodes = [n for n in onnx.load(str(tmp_path / "m.onnx")).graph.node if n.domain == "dcd_deploy"]
    epilogues = [n for n in nodes if n.op_type == "DCDConvEpilogue"]
    assert [_attrs(n)["stride"] for n in epilogues] == [1, 2]
    (node,) = [n for n in nodes if n.op_type == "DCDPointwise"]
    assert _attrs(node)["activation"] == b"relu" and _attrs(node)["pool"] == 2
    report = check_parity(model, tmp_path / "m.onnx", batch_sizes=(2,), backends=("onnxruntime",))
    assert report, report.table()


class _BroadcastAdd(torch.nn.Module):
    """A DCD layer plus its input's per-channel mean: an add, but not a residual."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 1)
        self.dcd = DCDConv2d(16, 16, 1)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.act = torch.nn.ReLU6()

    def forward(self, x):
        s = self.stem(x)
        return torch.flatten(self.act(self.dcd(s) + self.pool(s)), 1)


def test_a_broadcast_add_is_not_fused_as_a_residual(tmp_path):
    torch.manual_seed(0)
    model = _BroadcastAdd().eval()
    result = export_onnx(model, tmp_path / "m.onnx", input_size=6, mode="fused", check=False)
    (node,) = [n for n in onnx.load(str(tmp_path / "m.onnx")).graph.node if n.domain == "dcd_deploy"]
    assert _attrs(node)["residual"] == 0 and _attrs(node)["activation"] == b"none"
    assert result.op_histogram["Add"] == 1
    report = check_parity(model, tmp_path / "m.onnx", batch_sizes=(2,), backends=("onnxruntime",))
    assert report, report.table()


class _Smooth(torch.nn.Module):
    """DCD layers followed by SiLU (``Mul(t, Sigmoid(t))`` in the file) and Hardswish, as users
    write them; ``keep`` also returns the tensor before the last SiLU (so that one cannot fold)."""

    def __init__(self, keep: bool = False):
        super().__init__()
        self.keep = keep
        self.stem = torch.nn.Conv2d(3, 8, 1)
        self.a = DCDConv2d(8, 16, 1)
        self.b = DCDConv2d(16, 16, 3, stride=2, padding=1)
        self.c = DCDConv2d(16, 16, 3, padding=1, groups=16)
        self.d = DCDConv2d(16, 8, 1)

    def forward(self, x):
        y = torch.nn.functional.silu(self.a(self.stem(x)))
        y = torch.nn.functional.hardswish(self.b(y))
        y = torch.nn.functional.silu(self.c(y))
        t = self.d(y)
        return (torch.nn.functional.silu(t), t) if self.keep else torch.nn.functional.silu(t)


@pytest.mark.parametrize("keep", [False, True])
def test_silu_and_hardswish_are_fused_where_nothing_else_reads_their_input(tmp_path, keep):
    torch.manual_seed(0)
    model = _Smooth(keep).eval()
    result, proto, nodes = _export_fused(model, tmp_path)
    assert [n.op_type for n in nodes] == ["DCDPointwise", "DCDConvEpilogue", "DCDDepthwise", "DCDPointwise"]
    last = "none" if keep else "silu"  # the kept tensor is the layer's output: its SiLU stays a graph op
    assert [_attrs(n)["activation"].decode() for n in nodes] == ["silu", "hardswish", "silu", last]
    assert result.op_histogram.get("Sigmoid", 0) == int(keep) and "HardSwish" not in result.op_histogram
    x = torch.randn(3, 3, 10, 10)
    report = check_parity(model, tmp_path / "m.onnx", batch_sizes=(1, 3), backends=("onnxruntime",), inputs=x)
    assert report, report.table()


class _Gelu(torch.nn.Module):
    """DCD layers followed by GELU as users write it: exact (``F.gelu``, ``nn.GELU()``), the
    tanh approximation (another function: not the fused ops' GELU), and an exact one whose
    input is also added further on (so it cannot fold)."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 1)
        self.a = DCDConv2d(8, 16, 1)
        self.b = DCDConv2d(16, 16, 3, padding=1)
        self.c = DCDConv2d(16, 16, 1)
        self.d = DCDConv2d(16, 8, 3, padding=1, groups=8)
        self.act = torch.nn.GELU()
        self.tanh = torch.nn.GELU(approximate="tanh")

    def forward(self, x):
        y = torch.nn.functional.gelu(self.a(self.stem(x)))
        y = self.tanh(self.b(y))
        t = self.c(y)
        y = self.act(t) + t
        return self.act(self.d(y))


def test_exact_gelu_is_fused_and_the_tanh_form_is_not(tmp_path):
    torch.manual_seed(0)
    model = _Gelu().eval()
    result, proto, nodes = _export_fused(model, tmp_path)
    assert [_attrs(n)["activation"].decode() for n in nodes] == ["gelu", "none", "none", "gelu"]
    assert result.op_histogram.get("Erf", 0) == 1 and result.op_histogram.get("Tanh", 0) == 1
    x = torch.randn(3, 3, 10, 10) * 2
    backends = _parity_backends()
    report = check_parity(model, tmp_path / "m.onnx", batch_sizes=(1, 3), backends=backends, inputs=x)
    assert report, report.table()


class _Leaky(torch.nn.Module):
    """A YOLO-style stack: DCD layers (1x1, strided 3x3, depthwise, the classifier) each
    followed by LeakyReLU as users write it, ``nn.LeakyReLU(0.1)`` and ``F.leaky_relu`` at
    PyTorch's default slope 0.01, below 0 and above 1 (PyTorch takes any), and one whose
    input is also added further on (so it cannot fold)."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 1)
        self.a = DCDConv2d(8, 16, 1)
        self.b = DCDConv2d(16, 16, 3, stride=2, padding=1)
        self.c = DCDConv2d(16, 16, 3, padding=1, groups=16)
        self.d = DCDConv2d(16, 16, 1)
        self.fc = DCDLinear(16, 10)
        self.act = torch.nn.LeakyReLU(0.1)

    def forward(self, x):
        y = self.act(self.a(self.stem(x)))
        y = torch.nn.functional.leaky_relu(self.b(y))
        y = torch.nn.functional.leaky_relu(self.c(y), -0.5)
        t = self.d(y)
        y = self.act(t) + t
        return torch.nn.functional.leaky_relu(self.fc(y.mean((2, 3))), 1.5)


def test_leaky_relu_is_fused_with_its_slope_unless_its_input_is_read_elsewhere(tmp_path):
    torch.manual_seed(0)
    model = _Leaky().eval()
    result, proto, nodes = _export_fused(model, tmp_path)
    ops = ["DCDPointwise", "DCDConvEpilogue", "DCDDepthwise", "DCDPointwise", "DCDConvEpilogue"]
    assert [n.op_type for n in nodes] == ops
    assert [_attrs(n)["activation"].decode() for n in nodes] == ["leaky_relu"] * 3 + ["none", "leaky_relu"]
    slopes = [_attrs(n).get("activation_alpha") for n in nodes]
    assert slopes == [np.float32(s) for s in (0.1, 0.01, -0.5)] + [None, np.float32(1.5)]
    # the one left outside (after the layer whose output the add reads too), with its slope
    (outside,) = [n for n in proto.graph.node if n.op_type == "LeakyRelu"]
    assert result.op_histogram.get("LeakyRelu", 0) == 1 and _attrs(outside)["alpha"] == np.float32(0.1)
    x = torch.randn(3, 3, 10, 10) * 2
    backends = _parity_backends()
    report = check_parity(model, tmp_path / "m.onnx", batch_sizes=(1, 3), backends=backends, inputs=x)
    assert report, report.table()


def _with_slope(src, dst, slope) -> None:
    """``src`` with the first fused node's ``activation_alpha`` set to ``slope`` (None: removed)."""
    proto = onnx.load(str(src))
    node = next(n for n in proto.graph.node if n.domain == "dcd_deploy")
    attr = next(a for a in node.attribute if a.name == "activation_alpha")
    if slope is None:
        node.attribute.remove(attr)
    else:
        attr.f = slope
    onnx.save(proto, str(dst))


def test_a_fused_leaky_relu_runs_the_slope_it_carries_and_needs_a_finite_one(tmp_path):
    """The slope reaches the kernels: the same file with another slope in one node fails the
    parity check; without one, or with a NaN or infinite one, OpenVINO refuses the file."""
    pytest.importorskip("openvino")
    from dcd_deploy.errors import DCDDeployError
    from dcd_deploy.openvino import compile_onnx

    torch.manual_seed(0)
    model = _Leaky().eval()
    export_onnx(model, tmp_path / "m.onnx", input_size=10, mode="fused", check=False)
    _with_slope(tmp_path / "m.onnx", tmp_path / "other.onnx", 0.2)
    x = torch.randn(2, 3, 10, 10)
    report = check_parity(model, tmp_path / "other.onnx", batch_sizes=(1,), backends=("openvino",), inputs=x)
    assert not report, report.table()
    for slope, shown in ((None, "none or nan"), (float("nan"), "none or nan"), (float("-inf"), "-inf")):
        _with_slope(tmp_path / "m.onnx", tmp_path / "bad.onnx", slope)
        with pytest.raises(DCDDeployError, match="cannot compile") as err:
            compile_onnx(tmp_path / "bad.onnx")
        assert f"activation leaky_relu needs a finite activation_alpha (its negative slope), got {shown}" in str(
            err.value
        )


def _every_conv_kind(net: torch.nn.Module, d_out: int) -> None:
    """A stem, then DCD layers of each fused conv kind: 1x1 (a), 3x3 (b), depthwise (c), 1x1 (d)."""
    net.stem = torch.nn.Conv2d(3, 8, 1)
    net.a = DCDConv2d(8, 16, 1)
    net.b = DCDConv2d(16, 16, 3, padding=1)
    net.c = DCDConv2d(16, 16, 3, padding=1, groups=16)
    net.d = DCDConv2d(16, d_out, 1)


class _PReLU(torch.nn.Module):
    """DCD layers of every fused kind each followed by a PReLU as users write it: ``nn.PReLU(C)``
    (a slope per channel, as MobileFaceNet's) after the 1x1, depthwise and classifier layers,
    ``F.prelu`` with a one-element weight after the 3x3 and ``nn.PReLU()`` (one learnt slope)
    after the second 1x1."""

    def __init__(self):
        super().__init__()
        _every_conv_kind(self, d_out=16)
        self.fc = DCDLinear(16, 10)
        self.one = torch.nn.PReLU()
        self.per_a, self.per_c, self.per_fc = torch.nn.PReLU(16), torch.nn.PReLU(16), torch.nn.PReLU(10)
        self.slope = torch.nn.Parameter(torch.tensor([-0.3]))
        with torch.no_grad():  # trained slopes, not the 0.25 they start at; below 0 and above 1 too
            self.one.weight.fill_(0.15)
            for per in (self.per_a, self.per_c, self.per_fc):
                per.weight.uniform_(-0.5, 1.5)

    def forward(self, x):
        y = self.per_a(self.a(self.stem(x)))
        y = torch.nn.functional.prelu(self.b(y), self.slope)
        y = self.per_c(self.c(y))
        y = self.one(self.d(y))
        return self.per_fc(self.fc(y.mean((2, 3))))


def test_prelu_is_fused_with_its_slope_per_channel_or_as_the_leaky_relu_of_its_one_slope(tmp_path):
    torch.manual_seed(0)
    model = _PReLU().eval()
    result, proto, nodes = _export_fused(model, tmp_path)
    ops = ["DCDPointwise", "DCDConvEpilogue", "DCDDepthwise", "DCDPointwise", "DCDConvEpilogue"]
    assert [n.op_type for n in nodes] == ops
    assert [_attrs(n)["activation"].decode() for n in nodes] == ["prelu", "leaky_relu", "prelu", "leaky_relu", "prelu"]
    alphas = [_attrs(n).get("activation_alpha") for n in nodes]
    assert alphas == [None, np.float32(-0.3), None, np.float32(0.15), None]
    for node, per in zip([nodes[0], nodes[2], nodes[4]], [model.per_a, model.per_c, model.per_fc]):
        np.testing.assert_array_equal(np.float32(_attrs(node)["activation_slopes"]), per.weight.detach().numpy())
    assert all("activation_slopes" not in _attrs(n) for n in (nodes[1], nodes[3]))
    assert result.op_histogram.get("PRelu", 0) == 0  # every one folded into its layer
    x = torch.randn(3, 3, 10, 10) * 2  # both signs at every layer
    report = check_parity(model, tmp_path / "m.onnx", batch_sizes=(1, 3), backends=_parity_backends(), inputs=x)
    assert report, report.table()


def _with_slopes(src, dst, edit) -> None:
    """``src`` with the first fused node's ``activation_slopes`` replaced by ``edit(slopes)``
    (None: removed; a float: one float attribute in their place)."""
    proto = onnx.load(str(src))
    node = next(n for n in proto.graph.node if n.domain == "dcd_deploy")
    attr = next(a for a in node.attribute if a.name == "activation_slopes")
    slopes = edit(list(attr.floats))
    if slopes is None or isinstance(slopes, float):
        node.attribute.remove(attr)
        if slopes is not None:  # one float, not a list
            node.attribute.append(onnx.helper.make_attribute("activation_slopes", slopes))
    else:
        del attr.floats[:]
        attr.floats.extend(slopes)
    onnx.save(proto, str(dst))


def test_a_fused_prelu_runs_the_slopes_it_carries_and_needs_one_finite_slope_per_channel(tmp_path):
    """The slopes reach the kernels channel by channel: the same file with one node's slopes
    in reverse order fails the parity check in OpenVINO; without them, with one too few or a
    NaN among them, OpenVINO refuses the file."""
    pytest.importorskip("openvino")
    from dcd_deploy.errors import DCDDeployError
    from dcd_deploy.openvino import compile_onnx

    torch.manual_seed(0)
    model = _PReLU().eval()
    export_onnx(model, tmp_path / "m.onnx", input_size=10, mode="fused", check=False)
    _with_slopes(tmp_path / "m.onnx", tmp_path / "other.onnx", lambda s: s[::-1])
    x = torch.randn(2, 3, 10, 10) * 2
    report = check_parity(model, tmp_path / "other.onnx", batch_sizes=(1,), backends=("openvino",), inputs=x)
    assert not report, report.table()
    for edit, message in (
        (lambda s: None, "activation prelu needs activation_slopes (a negative slope per output channel)"),
        (lambda s: s[:-1], "activation_slopes has 15 values, expected one per output channel (16)"),
        (lambda s: [float("nan")] + s[1:], "activation_slopes must be finite, got nan"),
        (lambda s: 0.5, "activation_slopes must be a list of floats"),
    ):
        _with_slopes(tmp_path / "m.onnx", tmp_path / "bad.onnx", edit)
        with pytest.raises(DCDDeployError, match="cannot compile") as err:
            compile_onnx(tmp_path / "bad.onnx")
        assert message in str(err.value)


class _PaddingModes(torch.nn.Module):
    """DCD layers of every convolution kind in the three padding modes besides zeros, as an
    image-restoration network pads (reflect, replicate), with one zero-padded layer."""

    def __init__(self, modes=("reflect", "replicate", "circular")):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1, padding_mode="reflect")
        self.a = DCDConv2d(8, 16, 3, padding=1, padding_mode=modes[0])
        self.b = DCDConv2d(16, 16, 3, stride=2, padding=(1, 2), padding_mode=modes[1], groups=16)
        self.c = DCDConv2d(16, 16, 3, padding="same", dilation=2, padding_mode=modes[2], joint_fusion=True)
        self.d = DCDConv2d(16, 8, 1)

    def forward(self, x):
        y = torch.relu(self.a(self.stem(x)))
        return self.d(torch.relu(self.c(torch.relu(self.b(y)))))


@pytest.mark.parametrize("mode", ["standard", "function", "fused"])
def test_layers_of_other_padding_modes_export_and_are_left_unfused_with_the_reason(tmp_path, mode):
    torch.manual_seed(0)
    model = _PaddingModes().eval()
    result = export_onnx(model, tmp_path / "m.onnx", input_size=(11, 14), mode=mode, check=False)
    if mode == "fused":  # the ops pad with zeros: those layers stay standard ops, and say why
        assert result.unfused == {
            "a": "padding_mode 'reflect'",
            "b": "padding_mode 'replicate'",
            "c": "padding_mode 'circular'",
        }
        assert list(result.fused) == ["d"]
    x = torch.randn(3, 3, 11, 14) * 2
    backends = _parity_backends() if mode == "fused" else ("onnxruntime",)  # OpenVINO runs no function
    report = check_parity(model, tmp_path / "m.onnx", batch_sizes=(1, 3), backends=backends, inputs=x)
    assert report, report.table()
    zero_padded = _PaddingModes(modes=("zeros",) * 3).eval()  # the same weights, padded with zeros
    zero_padded.load_state_dict(model.state_dict())
    report = check_parity(zero_padded, tmp_path / "m.onnx", batch_sizes=(1,), backends=("onnxruntime",), inputs=x)
    assert not report, "the file is the zero-padded network's"


class _Mish(torch.nn.Module):
    """A CSP-style stack: DCD layers (1x1, 3x3, depthwise) each followed by Mish as users
    write it (``nn.Mish()``, ``F.mish``), and one whose input is also returned (so it cannot
    fold and stays a graph op)."""

    def __init__(self):
        super().__init__()
        _every_conv_kind(self, d_out=8)
        self.act = torch.nn.Mish()

    def forward(self, x):
        y = self.act(self.a(self.stem(x)))
        y = torch.nn.functional.mish(self.b(y))
        t = self.d(self.act(self.c(y)))
        return torch.nn.functional.mish(t), t


def test_mish_is_fused_where_nothing_else_reads_its_input(tmp_path):
    torch.manual_seed(0)
    model = _Mish().eval()
    result, proto, nodes = _export_fused(model, tmp_path)
    assert [n.op_type for n in nodes] == ["DCDPointwise", "DCDConvEpilogue", "DCDDepthwise", "DCDPointwise"]
    assert [_attrs(n)["activation"].decode() for n in nodes] == ["mish", "mish", "mish", "none"]
    assert result.op_histogram.get("Mish", 0) == 1  # the one on the returned tensor
    x = torch.randn(3, 3, 10, 10) * 3  # both tails: Mish's dip at -1.19 and its linear part
    backends = _parity_backends()
    report = check_parity(model, tmp_path / "m.onnx", batch_sizes=(1, 3), backends=backends, inputs=x)
    assert report, report.table()


class _Flat(torch.nn.Sequential):
    def forward(self, x):
        return torch.flatten(super().forward(x), 1)


def _zoo_inputs() -> np.ndarray:
    from dcd_deploy.models import synthetic_images

    return synthetic_images(2, SIZE, seed=5).numpy()


@pytest.mark.parametrize(
    "c_in, c_out, side, want",
    [
        (256, 1024, 7, "DCDConvEpilogue"),  # wide on a small map: OpenVINO's 1x1 Conv + the epilogue
        (1024, 256, 14, "DCDConvEpilogue"),
        (256, 1024, 16, "DCDPointwise"),  # 256 pixels: above the rule's 14x14
        (96, 576, 7, "DCDPointwise"),  # MobileNetV2's widths: not measured, the fused GEMM
    ],
)
def test_wide_1x1_layers_on_small_maps_run_around_the_runtime_conv(tmp_path, c_in, c_out, side, want):
    torch.manual_seed(0)
    model = _Flat(torch.nn.Conv2d(3, c_in, 1), DCDConv2d(c_in, c_out, 1), torch.nn.ReLU()).eval()
    path = tmp_path / "m.onnx"
    export_onnx(model, path, input_size=side, mode="fused", check=False)
    graph = onnx.load(str(path)).graph
    (node,) = [n for n in graph.node if n.domain == "dcd_deploy"]
    assert node.op_type == want
    if want == "DCDConvEpilogue":
        assert _attrs(node)["stride"] == 1 and _attrs(node)["activation"] == b"relu"
        convs = [n for n in graph.node if n.op_type == "Conv"]
        assert len(convs) == 2  # the stem and the layer's W0
        backends = _parity_backends()
        report = check_parity(model, path, batch_sizes=(2,), backends=backends)
        assert report, report.table()
