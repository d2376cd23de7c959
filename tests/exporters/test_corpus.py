"""Any network with DCD layers exports, in all three modes, and computes what PyTorch does.

The corpus (``_corpus.py``) is written the way people write networks; the oracles are
the original PyTorch model (the parity check: float64 reference, ONNX Runtime at both
optimisation levels, OpenVINO with the fused kernels for fused files) and the file read
back: its op domains, constant Conv weights, symbolic batch, the layer record.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from _corpus import CORPUS, UNFUSED
from torch import nn
from torch.utils import _pytree as pytree

from dcd_deploy import check_parity, export_onnx
from dcd_deploy.errors import ExportError
from dcd_deploy.exporters import FUSED_OP_TYPES
from dcd_deploy.exporters.onnx import ALLOWED_OPS, LAYERS_KEY
from dcd_deploy.layers import DCDConv2d, DCDLinear, MixtureConv2d

DOMAIN = "dcd_deploy"
MODES = ("standard", "function", "fused")

_built: dict[str, nn.Module] = {}


def model(name: str) -> nn.Module:
    if name not in _built:
        _built[name] = CORPUS[name].build()
    return _built[name]


def dynamic_paths(m: nn.Module) -> dict[str, str]:
    out = {}
    for path, mod in m.named_modules():
        if isinstance(mod, (DCDConv2d, DCDLinear)):
            out[path] = "DCD"
        elif isinstance(mod, MixtureConv2d):
            out[path] = "DYConv" if type(mod).__name__ == "DynamicConv2d" else "CondConv"
    return out


def assert_file(proto: onnx.ModelProto, net: nn.Module, mode: str) -> list[dict]:
    graph = proto.graph
    inits = {t.name for t in graph.initializer}
    for node in graph.node:
        assert node.domain in ("", "ai.onnx") or (mode != "standard" and node.domain == DOMAIN), (
            node.domain,
            node.op_type,
        )
        if node.op_type == "Conv":  # constant weights: no per-sample kernel
            assert all(i in inits for i in node.input[1:]), node.name
    for f in proto.functions:
        assert f.domain == DOMAIN
        assert {n.op_type for n in f.node} <= ALLOWED_OPS
        sites = [n for n in graph.node if n.domain == DOMAIN and n.op_type == f.name and n.overload == f.overload]
        assert sites, f.name
        made_by = {o: n for n in f.node for o in n.output}
        for node in f.node:
            if node.op_type == "Conv":
                for formal in node.input[1:]:
                    while formal in made_by:  # a weight reshaped in the body (DCDDepthwise's (C, k²) w0, R)
                        shaping = made_by[formal]
                        assert shaping.op_type in ("Reshape", "Expand"), shaping.op_type
                        formal = shaping.input[0]
                    k = list(f.input).index(formal)
                    assert all(site.input[k] in inits for site in sites)
    # the batch axis stays symbolic on every input and output
    for vi in list(graph.input) + list(graph.output):
        assert vi.type.tensor_type.shape.dim[0].dim_param == "batch", vi.name
    # fused: never a Transpose pair that cancels
    producer = {o: n for n in graph.node for o in n.output}
    for node in graph.node:
        if node.op_type == "Transpose":
            prev = producer.get(node.input[0])
            assert prev is None or prev.op_type != "Transpose", node.name

    layers = json.loads({p.key: p.value for p in proto.metadata_props}[LAYERS_KEY])
    names = {o for n in graph.node for o in n.output} | {i.name for i in graph.input}
    for entry in layers:
        assert set(entry) == {"path", "kind", "form", "input", "output", "bn", "residual", "activation", "layout"}
        for key in ("input", "output", "residual"):
            assert entry[key] is None or entry[key] in names, (entry, key)
    expected = dynamic_paths(net)
    dyn = {e["path"]: e["kind"] for e in layers if e["kind"] not in ("Conv", "Linear")}
    assert dyn == expected
    modules = dict(net.named_modules())
    for e in layers:
        if e["kind"] == "Conv":
            assert isinstance(modules[e["path"]], nn.Conv2d)
        elif e["kind"] == "Linear":
            assert isinstance(modules[e["path"]], nn.Linear)
        if e["bn"] is not None:
            assert isinstance(modules[e["bn"]], (nn.BatchNorm1d, nn.BatchNorm2d))
        assert e["layout"] == ("NHWC" if mode == "fused" and e["path"] in _fused_paths(layers) else "NCHW")
    return layers


def _fused_paths(layers) -> set[str]:
    return {e["path"] for e in layers if e["layout"] == "NHWC"}


def run_ort(path, inputs) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: x.numpy() for i, x in zip(sess.get_inputs(), inputs)})


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_network_exports_and_matches_pytorch(tmp_path, name, mode):
    case, net = CORPUS[name], model(name)
    path = tmp_path / f"{name}.onnx"
    result = export_onnx(net, path, example_inputs=case.inputs(1), mode=mode, parity_batch_sizes=(1, 3))
    assert result and result.parity
    runtimes = {r.backend for r in result.parity.rows}
    assert runtimes == ({"onnxruntime", "openvino"} if mode == "fused" else {"onnxruntime"})
    proto = onnx.load(str(path))
    layers = assert_file(proto, net, mode)

    # Outputs: the model's, named as documented, at another batch size than the check's.
    x = case.inputs(4, seed=99)
    with torch.no_grad():
        ref = net(*x)
    leaves = pytree.tree_leaves(ref)
    got = run_ort(path, x)
    assert len(got) == len(leaves)
    for g, r in zip(got, leaves):
        assert g.shape == tuple(r.shape)
        assert np.abs(g - r.numpy()).max() <= 1e-5 + 1e-3 * float(r.abs().max())
    if isinstance(ref, dict):
        assert result.output_names == list(ref)
    elif isinstance(ref, tuple):
        assert result.output_names == [f"output_{i}" for i in range(len(ref))]
    else:
        assert result.output_names == ["logits"]

    if mode == "fused":
        dcd = [p for p, k in dynamic_paths(net).items() if k == "DCD"]
        assert result.unfused == UNFUSED[name]
        assert sorted(result.fused) == sorted(set(dcd) - set(UNFUSED[name]))
        assert result.fused_summary() == f"{len(dcd) - len(UNFUSED[name])} of {len(dcd)} DCD layers fused"
        assert _fused_paths(layers) == set(result.fused)
        fused_nodes = [n for n in proto.graph.node if n.domain == DOMAIN]
        assert len(fused_nodes) == len(result.fused) and {n.op_type for n in fused_nodes} <= set(FUSED_OP_TYPES)
    else:
        assert result.fused == [] and result.unfused == {}


def test_two_inputs_are_named_after_forward(tmp_path):
    case = CORPUS["two_input"]
    result = export_onnx(model("two_input"), tmp_path / "m.onnx", example_inputs=case.inputs(1), check=False)
    assert result.input_names == ["rgb", "depth"]
    result = export_onnx(
        model("two_input"),
        tmp_path / "n.onnx",
        example_inputs=case.inputs(1),
        check=False,
        input_names=["a", "b"],
        output_names=["cls", "emb"],
    )
    assert (result.input_names, result.output_names) == (["a", "b"], ["cls", "emb"])


@pytest.mark.parametrize("given", ["tuple", "dict"])
def test_two_inputs_checked_on_the_callers_inputs(tmp_path, given):
    """``parity_inputs`` as the documented tuple (input order) or dict (by input name): the
    check runs on them and the file says what it ran on, both shapes named."""
    case = CORPUS["two_input"]
    rgb, depth = case.inputs(3)
    inputs = (rgb, depth) if given == "tuple" else {"depth": depth, "rgb": rgb}
    result = export_onnx(
        model("two_input"),
        tmp_path / "m.onnx",
        example_inputs=case.inputs(1),
        parity_inputs=inputs,
        parity_batch_sizes=(1, 3),
    )
    assert result.parity and not result.parity.synthetic_inputs
    assert {r.n_inputs for r in result.parity.rows} == {3}
    props = {p.key: p.value for p in onnx.load(str(result.path)).metadata_props}
    shapes = (
        "3 x 3 x 32 x 32 and 3 x 1 x 32 x 32" if given == "tuple" else "depth: 3 x 1 x 32 x 32, rgb: 3 x 3 x 32 x 32"
    )
    assert props["dcd_deploy.parity_inputs"] == f"caller's inputs, {shapes}, taken as preprocessed"


def test_non_square_input_size_pair(tmp_path):
    net = model("nonsquare")
    result = export_onnx(net, tmp_path / "m.onnx", input_size=(48, 64), check=True)
    assert result.input_size == (48, 64)
    dims = onnx.load(str(result.path)).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims[1:]] == [3, 48, 64]
    props = {p.key: p.value for p in onnx.load(str(result.path)).metadata_props}
    assert props["input_size"] == "48x64"


class _IdsThenImage(nn.Module):
    """Token ids first, the image second: the image's side is the second input's."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.conv = DCDConv2d(3, 8, 3, padding=1)

    def forward(self, ids, image):
        return self.conv(image).mean((2, 3)) + self.embed(ids).mean(1)


class _Features(nn.Module):
    """No image at all: a (B, 16) feature vector through a DCD classifier."""

    def __init__(self):
        super().__init__()
        self.fc = DCDLinear(16, 4)

    def forward(self, x):
        return self.fc(x)


def test_input_size_is_the_image_inputs_side_wherever_it_sits(tmp_path):
    example = (torch.randint(0, 10, (1, 5)), torch.randn(1, 3, 24, 20))
    result = export_onnx(_IdsThenImage().eval(), tmp_path / "m.onnx", example_inputs=example)
    assert result and result.input_size == (24, 20)
    props = {p.key: p.value for p in onnx.load(str(result.path)).metadata_props}
    assert props["input_size"] == "24x20"


def test_a_model_of_no_image_input_records_no_input_size(tmp_path):
    result = export_onnx(_Features().eval(), tmp_path / "m.onnx", example_inputs=(torch.randn(1, 16),))
    assert result and result.input_size is None and result.to_dict()["input_size"] is None
    props = {p.key: p.value for p in onnx.load(str(result.path)).metadata_props}
    assert "input_size" not in props and props["arch"] == "_Features"


def test_fixed_batch(tmp_path):
    case = CORPUS["segnet_like"]
    result = export_onnx(model("segnet_like"), tmp_path / "m.onnx", example_inputs=case.inputs(1), batch=3)
    assert result.batch == 3 and {r.batch_size for r in result.parity.rows} == {3}
    graph = onnx.load(str(result.path)).graph
    assert all(vi.type.tensor_type.shape.dim[0].dim_value == 3 for vi in list(graph.input) + list(graph.output))


class DataDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.dcd = DCDConv2d(3, 8)

    def forward(self, x):
        y = self.dcd(x)
        if y.sum() > 0:  # control flow on a value: torch.export cannot trace it
            return y
        return -y


def test_untraceable_model_is_one_line_error(tmp_path):
    with pytest.raises(ExportError) as exc:
        export_onnx(DataDependent().eval(), tmp_path / "m.onnx", input_size=16)
    message = str(exc.value)
    assert "\n" not in message and "DataDependent" in message and "torch.export" in message
    assert "data-dependent" in message.lower() or "guard" in message.lower()
    assert list(tmp_path.iterdir()) == []


def test_a_failure_in_torch_onnxs_optimizer_is_named_as_such(tmp_path, monkeypatch):
    """torch.onnx.export ends in onnxscript's optimizer, whose passes raise onnx_ir's
    PassError around the real error; such a failure (a chunk at a symbolic size was one)
    read "torch.export cannot trace it". The optimizer made to fail as it did there."""
    from onnx_ir.passes import PassError
    from torch.onnx._internal.exporter._onnx_program import ONNXProgram

    def optimize(self):
        try:
            raise AttributeError("'NoneType' object has no attribute 'ndim'")
        except AttributeError as exc:
            raise PassError("An error occurred at step 0") from exc

    monkeypatch.setattr(ONNXProgram, "optimize", optimize)
    with pytest.raises(ExportError) as exc:
        export_onnx(model("resnet_like"), tmp_path / "m.onnx", input_size=32)
    assert str(exc.value).startswith(  # then where in user code: this test's stand-in here
        "cannot export ResNetLike: torch.onnx's optimizer (onnxscript) fails on its graph: "
        "'NoneType' object has no attribute 'ndim'"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("mode", ["standard", "fused"])
def test_dynamic_size_runs_at_other_sizes(tmp_path, mode):
    case, net = CORPUS["resnet_like"], model("resnet_like")
    result = export_onnx(net, tmp_path / "m.onnx", example_inputs=case.inputs(1), dynamic_size=True, mode=mode)
    assert result and result.dynamic_size
    dims = onnx.load(str(result.path)).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["batch", 3, "height", "width"]
    for hw in ((40, 24), (64, 64), (33, 57)):
        x = (torch.randn(2, 3, *hw, generator=torch.Generator().manual_seed(hw[0])),)
        with torch.no_grad():
            ref = net(*x)
        (got,) = run_ort(result.path, x)
        assert np.abs(got - ref.numpy()).max() <= 1e-5 + 1e-3 * float(ref.abs().max())


def test_dynamic_size_with_an_input_size_alone_is_checked_at_that_size(tmp_path):
    """The API's dynamic_size with input_size (no example_inputs): the check's images take
    the traced size (before, the check refused the file's symbolic sides)."""
    net = model("resnet_like")
    result = export_onnx(net, tmp_path / "m.onnx", input_size=(40, 24), dynamic_size=True)
    assert result and result.dynamic_size and tuple(result.parity.input_size) == (40, 24)


def test_dynamic_size_refused_by_a_layer_names_it(tmp_path):
    case = CORPUS["nonsquare"]  # its DCD layer "pw" pools 2x2: windows depend on the size
    with pytest.raises(ExportError, match=r"^pw: .*2x2 adaptive pool needs fixed input sizes"):
        export_onnx(model("nonsquare"), tmp_path / "m.onnx", example_inputs=case.inputs(1), dynamic_size=True)
    assert list(tmp_path.iterdir()) == []


def test_cli_prints_how_many_dcd_layers_are_fused_and_why_not(tmp_path):
    from click.testing import CliRunner

    from dcd_deploy.cli.export import main

    out = tmp_path / "m.onnx"
    result = CliRunner().invoke(
        main, ["mobilenetv2_035_dcd", "--mode", "fused", "--input-size", "64", "--no-check", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    # MobileNetV2: every 1x1 DCD layer fuses, and the DCD classifier (Gemm + DCDConvEpilogue)
    assert "  fused    33 of 33 DCD layers fused" in result.stdout
    assert "not fused" not in result.stdout


class _BNSeesASharedTensor(nn.Module):
    """The DCD layer's output feeds its BatchNorm and the residual: the BN cannot fold."""

    def __init__(self):
        super().__init__()
        self.dcd = DCDConv2d(3, 3, latent_dim=2, squeeze=4)
        self.bn = nn.BatchNorm2d(3)
        self.dcd2 = DCDConv2d(3, 4, latent_dim=2, squeeze=4)
        self.bn2 = nn.BatchNorm2d(4)

    def forward(self, x):
        y = self.dcd(x)
        y = self.bn(y) + y
        return self.bn2(self.dcd2(y)), y


def test_a_bn_folds_only_where_it_is_the_layers_sole_consumer(tmp_path):
    from dcd_deploy import to_deploy

    net = _BNSeesASharedTensor()
    with torch.no_grad():
        for bn in (net.bn, net.bn2):
            bn.running_mean.uniform_(-1, 1), bn.running_var.uniform_(0.5, 2), bn.weight.uniform_(0.5, 2)
    net.eval()
    deploy = to_deploy(net, input_size=8)
    assert isinstance(deploy.bn, nn.BatchNorm2d) and isinstance(deploy.bn2, nn.Identity)
    assert deploy.folded_bn == {"dcd2": "bn2"}
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        for got, ref in zip(deploy(x), net(x)):
            torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)
    result = export_onnx(net, tmp_path / "m.onnx", input_size=8)
    assert result and result.output_names == ["output_0", "output_1"]
    layers = json.loads({p.key: p.value for p in onnx.load(str(result.path)).metadata_props}[LAYERS_KEY])
    assert {e["path"]: e["bn"] for e in layers} == {"dcd": None, "dcd2": "bn2"}


def test_a_compiled_or_data_parallel_model_exports_and_checks_as_the_module_it_wraps(tmp_path):
    """export_onnx, to_deploy and check_parity take the wrapper a training script holds;
    torch.export cannot trace torch.compile's OptimizedModule itself."""
    from dcd_deploy import check_parity, to_deploy

    net = model("mobilenetv3_like")
    for i, wrapped in enumerate((torch.compile(net), nn.DataParallel(net), torch.compile(nn.DataParallel(net)))):
        result = export_onnx(wrapped, tmp_path / f"{i}.onnx", input_size=CORPUS["mobilenetv3_like"].input_size)
        assert result and result.parity and set(result.strategies) == set(dynamic_paths(net))
        assert check_parity(wrapped, tmp_path / f"{i}.onnx", batch_sizes=(2,))
        assert set(to_deploy(wrapped, input_size=CORPUS["mobilenetv3_like"].input_size).strategies) == set(
            dynamic_paths(net)
        )


class _WithNone(nn.Module):
    """``return y, None``-style outputs: an auxiliary head that is off in eval."""

    def __init__(self):
        super().__init__()
        self.a = DCDConv2d(3, 8, 3, padding=1)
        self.b = DCDConv2d(8, 8, 3, padding="valid")

    def forward(self, x):
        y = torch.relu(self.a(x))
        return self.b(y), None, {"pooled": y.mean((2, 3)), "aux": None}


def test_none_outputs_are_left_out_quietly(tmp_path, caplog):
    torch.manual_seed(0)
    net = _WithNone().eval()
    with caplog.at_level("WARNING"):
        result = export_onnx(net, tmp_path / "m.onnx", input_size=(12, 14), mode="fused")
    assert result, result.parity.summary()
    proto = onnx.load(str(tmp_path / "m.onnx"))
    assert [o.name for o in proto.graph.output] == ["output_0", "output_2_pooled"]
    x = torch.randn(2, 3, 12, 14)
    with torch.no_grad():
        want = net(x)
    sess = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})
    np.testing.assert_allclose(got[0], want[0].numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[1], want[2]["pooled"].numpy(), rtol=1e-4, atol=1e-5)
    assert not [r for r in caplog.records if "None" in r.getMessage()]  # torch.onnx's notices left out


@dataclasses.dataclass
class _Heads:
    boxes: torch.Tensor
    scores: torch.Tensor | None = None


@dataclasses.dataclass
class _Out:
    """Training code's structured output: a field of tensors, a nested dataclass, a list."""

    logits: torch.Tensor
    heads: _Heads
    levels: list
    step: int = dataclasses.field(default=0, init=False)  # not an init field: not an output


class _DataclassOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = DCDConv2d(3, 8, 3, padding=1)
        self.b = DCDConv2d(8, 6, 1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        y = torch.relu(self.a(x))
        z = self.b(y)
        return _Out(self.fc(y.mean((2, 3))), _Heads(z[:, :4], None), [y, z.sigmoid()])


@pytest.mark.parametrize("mode", ["standard", "fused"])
def test_dataclass_outputs_export_by_field_and_leave_pytree_as_found(tmp_path, mode):
    torch.manual_seed(0)
    net = _DataclassOut().eval()
    result = export_onnx(net, tmp_path / "m.onnx", input_size=(12, 14), mode=mode)
    assert result, result.parity.summary()
    proto = onnx.load(str(tmp_path / "m.onnx"))
    assert [o.name for o in proto.graph.output] == ["logits", "heads.boxes", "levels.0", "levels.1"]
    x = torch.randn(2, 3, 12, 14)
    with torch.no_grad():
        want = net(x)
    sess = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {sess.get_inputs()[0].name: x.numpy()})))
    for name, value in [("logits", want.logits), ("heads.boxes", want.heads.boxes), ("levels.1", want.levels[1])]:
        np.testing.assert_allclose(got[name], value.numpy(), rtol=1e-4, atol=1e-5)
    assert _Out not in pytree.SUPPORTED_NODES and _Heads not in pytree.SUPPORTED_NODES


def test_a_dataclass_output_is_compared_field_by_field(tmp_path):
    """A file whose ``levels.1`` is off by 1%: the check fails and names that field."""
    torch.manual_seed(0)
    net = _DataclassOut().eval()
    export_onnx(net, tmp_path / "m.onnx", input_size=(12, 14), check=False)
    proto = onnx.load(str(tmp_path / "m.onnx"))
    out = proto.graph.output[3]
    node = onnx.helper.make_node("Mul", [out.name + "_raw", "k"], [out.name])
    for n in proto.graph.node:
        n.output[:] = [out.name + "_raw" if o == out.name else o for o in n.output]
    proto.graph.initializer.append(onnx.numpy_helper.from_array(np.array(1.01, np.float32), "k"))
    proto.graph.node.append(node)
    onnx.save(proto, str(tmp_path / "t.onnx"))
    report = check_parity(net, tmp_path / "t.onnx", batch_sizes=(2,), layers=False)
    assert not report and "levels.1" in report.summary(), report.summary()
    assert check_parity(net, tmp_path / "m.onnx", batch_sizes=(2,), layers=False)


def test_a_dataclass_the_user_registered_stays_registered(tmp_path):
    torch.manual_seed(0)
    pytree.register_dataclass(_Heads, serialized_type_name="tests.Heads")
    try:
        net = _DataclassOut().eval()
        assert export_onnx(net, tmp_path / "m.onnx", input_size=(12, 14), check=False)
        assert _Heads in pytree.SUPPORTED_NODES and _Out not in pytree.SUPPORTED_NODES
    finally:
        pytree._deregister_pytree_node(_Heads)


class _ExportAware(nn.Module):
    """Decodes eagerly, returns the raw head when exported (YOLO-style)."""

    def __init__(self):
        super().__init__()
        self.a = DCDConv2d(3, 8, 3, stride=2, padding=1)
        self.head = nn.Conv2d(8, 6, 1)

    def forward(self, x):
        y = self.head(torch.relu(self.a(x)))
        if torch.onnx.is_in_onnx_export():
            return y
        scores, index = y.flatten(2).max(-1)  # post-processing the file leaves out
        return y, scores, index


@pytest.mark.parametrize("mode", ["standard", "fused"])
def test_a_models_path_for_export_is_the_one_exported_and_checked(tmp_path, mode):
    """As ``torch.onnx.export`` does, the export (and its check, and dcd-validate's) runs the
    model with ``torch.onnx.is_in_onnx_export()`` true; the file once held the eager path."""
    torch.manual_seed(0)
    net = _ExportAware().eval()
    result = export_onnx(net, tmp_path / "m.onnx", input_size=(12, 16), mode=mode)
    assert result, result.parity.summary()
    assert not torch.onnx.is_in_onnx_export()  # left as found
    assert [o.name for o in onnx.load(str(tmp_path / "m.onnx")).graph.output] == ["logits"]
    x = torch.randn(2, 3, 12, 16)
    with torch.no_grad():
        want = net(x)[0]
    sess = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {"input": x.numpy()})[0], want.numpy(), rtol=1e-4, atol=1e-5)
    assert check_parity(net, tmp_path / "m.onnx", batch_sizes=(2,)) and not torch.onnx.is_in_onnx_export()


class _Views(nn.Module):
    """``forward(*views)``: a multi-view model taking any number of images."""

    def __init__(self):
        super().__init__()
        self.a = DCDConv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 3)

    def forward(self, *views):
        return self.fc(sum(torch.relu(self.a(v)).mean((2, 3)) for v in views))


def test_a_forward_of_star_args_exports_each_view_as_an_input(tmp_path):
    """torch.export binds ``*views`` as one tuple; its dynamic shapes are grouped the same
    (they were one per input: "inputs has 1 elements, but dynamic_shapes has 2")."""
    torch.manual_seed(0)
    net = _Views().eval()
    views = (torch.randn(1, 3, 10, 12), torch.randn(1, 3, 10, 12))
    result = export_onnx(net, tmp_path / "m.onnx", example_inputs=views, mode="fused")
    assert result, result.parity.summary()
    sess = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    assert len(sess.get_inputs()) == 2
    x = [torch.randn(3, 3, 10, 12) for _ in range(2)]
    got = sess.run(None, {i.name: v.numpy() for i, v in zip(sess.get_inputs(), x)})[0]
    with torch.no_grad():
        np.testing.assert_allclose(got, net(*x).numpy(), rtol=1e-4, atol=1e-5)
