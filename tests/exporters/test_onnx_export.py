"""``export_onnx``: every zoo model, both modes, a graph of allowed ops with constant
Conv weights and no baked-in batch, parity-checked against the original PyTorch model.

Oracles: the original model (PyTorch, eval mode), ONNX Runtime run here directly,
the graph read back from the file, and, for the authors' release format, a network
assembled from the independent re-implementation of their layers in
``tests/models/test_authors.py`` (docs/design.md#release-format).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from _zoo import ZooCache
from _zoo import input_size as zoo_input_size
from onnx import numpy_helper
from torch import nn

import dcd_deploy
from dcd_deploy import check_parity, create_model, export_onnx, list_models, load_checkpoint, pseudo_train
from dcd_deploy.errors import DCDDeployError, ExportError, ParityError
from dcd_deploy.exporters import onnx as onnx_exporter
from dcd_deploy.exporters import to_deploy
from dcd_deploy.exporters.onnx import ALLOWED_OPS
from dcd_deploy.layers import DCDConv2d, DCDLinear, MixtureConv2d
from dcd_deploy.models import synthetic_images
from dcd_deploy.models.authors import save_release_checkpoint

DOMAIN = "dcd_deploy"
FORBIDDEN = {"GatherND", "Einsum", "Loop", "If", "Scan", "BatchNormalization", "ConvTranspose"}
ATOL, RTOL = 1e-5, 1e-3  # the parity contract (dcd_deploy.parity), applied here by hand


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_HERE = Path(__file__).resolve().parent
#: Hand-built nets (every DCD form, odd sizes) from the lowering tests.
nets = _load("_dcd_test_lowering_nets", _HERE / "test_lowering.py")
#: The release's layers re-implemented from docs/design.md#release-format alone.
authors = _load("_dcd_test_authors_oracles", _HERE.parent / "models" / "test_authors.py")


BIG_MODEL_PARAMS = 50_000_000


def input_size(name: str) -> int:
    """Small inputs where the architecture allows (96 beyond the ResNets)."""
    return zoo_input_size(name, small=96)


#: Function mode wraps each dynamic layer kind in a function; one model per block type
#: covers every kind: MobileNetV2 (1x1 and depthwise), ResNet-10 (k x k basic blocks) for
#: each dynamic variant, ResNet-50 (1x1 bottleneck DCD layers). Other widths and depths
#: repeat those functions, and a static model has none (its function export is its
#: standard one); every model is exported in standard mode.
FUNCTION_MODE_MODELS = frozenset(
    {
        "mobilenetv2_035_dcd",
        "mobilenetv2_035_dyconv",
        "mobilenetv2_035_condconv",
        "resnet10_dcd",
        "resnet10_dyconv",
        "resnet10_condconv",
        "resnet50_dcd",
    }
)


def zoo_cases():
    out = []
    for name in list_models():
        for mode in ("standard", "function"):
            if mode == "function" and name not in FUNCTION_MODE_MODELS:
                continue
            slow = name.startswith("resnet50") or name.endswith("_condconv")
            out.append(pytest.param(name, mode, marks=[pytest.mark.slow] if slow else [], id=f"{name}-{mode}"))
    return out


def test_function_mode_cases_cover_every_dynamic_layer_kind():
    """The models exported in function mode hold every kind a zoo model's layers have."""
    from dcd_deploy.exporters.lowering import to_deploy

    @functools.cache  # the function-mode models are in both sets: each is built and lowered once
    def kinds(name: str) -> set:
        model = create_model(name)
        deploy = to_deploy(model, input_size=input_size(name))
        return {
            (type(m).__name__, getattr(m, "kind", None), getattr(m, "kernel_size", None), getattr(m, "stride", None))
            for m in deploy.modules()
            if type(m).__name__ in ("DeployDCD", "DeployMixture")
        }

    covered = set().union(*(kinds(n) for n in FUNCTION_MODE_MODELS))
    everything = set().union(*(kinds(n) for n in list_models() if not n.startswith("resnet50_")))
    assert everything <= covered, everything - covered


#: ``trained(name, size=None, seed=0)``: one pseudo-trained zoo model at a time (cases
#: are grouped by model), at ``input_size`` unless a size is given.
trained = ZooCache(size=input_size, keep_one=True)


# ------------------------------------------------------------------------ graph checks
def dcd_paths(model: nn.Module) -> list[str]:
    return [n for n, m in model.named_modules() if isinstance(m, (DCDConv2d, DCDLinear))]


def mixture_paths(model: nn.Module) -> list[str]:
    return [n for n, m in model.named_modules() if isinstance(m, MixtureConv2d)]


def named_paths(model: nn.Module) -> list[str]:
    """Module paths every export must name nodes after: dynamic layers and plain convs."""
    out, dynamic = [], []
    for name, m in model.named_modules():
        if any(name.startswith(d + ".") for d in dynamic):
            continue
        if isinstance(m, (DCDConv2d, DCDLinear, MixtureConv2d)):
            dynamic.append(name)
            out.append(name)
        elif isinstance(m, nn.Conv2d):
            out.append(name)
    return out


def constants(nodes) -> dict[str, np.ndarray]:
    return {
        n.output[0]: numpy_helper.to_array(n.attribute[0].t)
        for n in nodes
        if n.op_type == "Constant" and n.attribute[0].name == "value"
    }


def assert_graph(proto: onnx.ModelProto, model: nn.Module, *, mode: str, size: int, batch=None):
    graph = proto.graph
    inits = {i.name: i for i in graph.initializer}
    # Read as arrays only where values are checked: Reshape targets (int64 by the ONNX spec).
    # Converting every weight (hundreds of MB on the big ResNets) would add nothing.
    main_consts = {
        **{name: numpy_helper.to_array(t) for name, t in inits.items() if t.data_type == onnx.TensorProto.INT64},
        **constants(graph.node),
    }
    functions = {(f.domain, f.name): f for f in proto.functions}

    # Ops: standard ones (our emission of a dynamic layer: the allowed set), plus (function
    # mode) calls into the toolkit's domain.
    ours = tuple(p + "/" for p in dcd_paths(model) + mixture_paths(model))
    for node in graph.node:
        if node.domain in ("", "ai.onnx"):
            if node.name.startswith(ours):
                assert node.op_type in ALLOWED_OPS, node.op_type
        else:
            assert mode == "function" and node.domain == DOMAIN, (node.domain, node.op_type)
            assert (DOMAIN, node.op_type) in functions
    all_ops = {n.op_type for n in graph.node} | {n.op_type for f in proto.functions for n in f.node}
    assert not all_ops & FORBIDDEN
    for f in proto.functions:
        assert f.domain == DOMAIN
        for node in f.node:
            assert node.domain in ("", "ai.onnx") and node.op_type in ALLOWED_OPS, (f.name, node.op_type)

    # Conv weights (and biases) are constants: initializers, or function inputs bound to
    # initializers at every call site.
    for node in graph.node:
        if node.op_type == "Conv":
            assert all(i in inits for i in node.input[1:]), node.name
    calls = [n for n in graph.node if n.domain == DOMAIN]
    for f in proto.functions:
        sites = [n for n in calls if n.op_type == f.name]
        assert sites, f.name
        for node in f.node:
            if node.op_type != "Conv":
                continue
            for formal in node.input[1:]:
                assert formal in f.input, (f.name, formal)
                k = list(f.input).index(formal)
                assert all(site.input[k] in inits for site in sites), (f.name, formal)

    # No batch baked into a Reshape: our targets are constants starting with 0 (copy the
    # batch); torch.onnx's are computed from Shape or start with 0 / -1.
    for nodes, known in [(graph.node, main_consts)] + [(f.node, constants(f.node)) for f in proto.functions]:
        for node in nodes:
            if node.op_type == "Reshape":
                if nodes is graph.node and not node.name.startswith(ours):
                    if node.input[1] in known:
                        assert known[node.input[1]][0] in (0, -1, batch or 0), (node.name, known[node.input[1]])
                    continue
                assert node.input[1] in known, node.name
                shape = known[node.input[1]]
                assert shape.ndim == 1 and shape[0] == 0, (node.name, shape)

    # Input and output: N x 3 x S x S -> N x classes, N dynamic unless fixed.
    (inp,), (out,) = graph.input, graph.output
    dims = inp.type.tensor_type.shape.dim
    assert [d.dim_value for d in dims[1:]] == [3, size, size]
    out_dims = out.type.tensor_type.shape.dim
    for d in (dims[0], out_dims[0]):
        if batch is None:
            assert d.dim_param and not d.dim_value
        else:
            assert d.dim_value == batch
    props = {p.key: p.value for p in proto.metadata_props}
    assert props["arch"] == getattr(model, "arch", type(model).__name__)
    assert props["input_size"] == str(size)
    assert props["dcd_deploy_version"] == dcd_deploy.__version__

    # Node names carry the module path they came from.
    names = [n.name for n in graph.node]
    for path in named_paths(model):
        assert any(name.startswith(path + "/") for name in names), path
    if mode == "function":
        dcd = dcd_paths(model)
        assert len(calls) == len(dcd)
        assert sorted(c.name.rpartition("/")[0] for c in calls) == sorted(dcd)
        assert any(i.domain == DOMAIN for i in proto.opset_import) == bool(dcd)
    else:
        assert calls == [] and len(proto.functions) == 0


def sessions(path) -> list[ort.InferenceSession]:
    out = []
    for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        opts = ort.SessionOptions()
        opts.graph_optimization_level = level
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        out.append(ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"]))
    return out


def assert_close_to_torch(model, path, x):
    with torch.no_grad():
        ref = model(x).numpy()
    for sess in sessions(path):
        got = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
        assert got.shape == ref.shape
        assert np.abs(got - ref).max() <= ATOL + RTOL * np.abs(ref).max()


# ------------------------------------------------------------------------ the zoo
@pytest.fixture(scope="module")
def zoo_export(tmp_path_factory):
    """``zoo_export(name, mode)``: (model, path, result, seconds the call took) of the zoo
    case's export of ``name`` in ``mode``, made on first request, each in a folder of its own.

    The zoo test checks the export; the dynamic-batch test runs the same files at other
    batch sizes instead of exporting those models again. Models are rebuilt on request
    (``trained`` holds one at a time; pseudo-training is seeded, so the same weights).
    """
    made = {}

    def get(name: str, mode: str):
        model = trained(name)
        if (name, mode) not in made:
            size = input_size(name)
            path = tmp_path_factory.mktemp(f"{name}-{mode}") / f"{name}.onnx"
            # onnxsim re-runs and folds the whole model; on the 90-185M-parameter CondConv ResNets
            # that alone takes half a minute, so those skip it (simplification is covered by the rest).
            simplify = sum(p.numel() for p in model.parameters()) < BIG_MODEL_PARAMS
            before = time.perf_counter()
            # the command's batches (1, 2) on two images; the layer-wise check re-runs every
            # layer in float64 per image, so batch 4 would double its cost (13-15 s -> 7 s on
            # ResNet-50 DCD at 224); test_dynamic_batch_really_works runs batches 3 and 8
            result = export_onnx(
                model,
                path,
                input_size=size,
                mode=mode,
                parity_batch_sizes=(1, 2),
                simplify=simplify,
                parity_inputs=synthetic_images(2, size, seed=0),
            )
            made[name, mode] = path, result, time.perf_counter() - before
        return (model, *made[name, mode])

    return get


@pytest.mark.parametrize("name, mode", zoo_cases())
def test_zoo_model_exports_with_parity(zoo_export, name, mode):
    model, path, result, elapsed = zoo_export(name, mode)
    size = input_size(name)
    simplify = sum(p.numel() for p in model.parameters()) < BIG_MODEL_PARAMS

    assert result and result.parity
    assert result.simplified == (simplify and mode == "standard")
    assert {(r.optimization, r.batch_size) for r in result.parity.rows} == {
        (level, b) for level in ("disabled", "all") for b in (1, 2)
    }
    assert all(r.nonfinite == 0 and r.top1_mismatches == 0 for r in result.parity.rows)
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temp files left

    onnx.checker.check_model(str(path), full_check=True)
    proto = onnx.load(str(path))
    assert_graph(proto, model, mode=mode, size=size)

    # The result describes the file.
    assert result.path == path and (result.arch, result.input_size, result.mode) == (name, size, mode)
    assert result.batch is None and result.opset == onnx_exporter.DEFAULT_OPSET
    assert result.num_nodes == len(proto.graph.node)
    # Function calls count per kind of DCD layer: DCDChannelWeight_3 -> dcd_deploy.DCDChannelWeight.
    expected_hist = Counter(
        n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type.rsplit('_', 1)[0]}"
        for n in proto.graph.node
    )
    assert result.op_histogram == dict(expected_hist)
    assert sum(result.op_histogram.values()) == result.num_nodes
    assert result.size_bytes == path.stat().st_size
    # The export's own wall time: part of the call the test timed, parity check included.
    assert 0 < result.seconds <= elapsed
    assert set(result.strategies) == set(dcd_paths(model))
    assert set(result.strategies.values()) <= {"latent", "weight"}
    report = json.loads(json.dumps(result.to_dict()))
    assert report["path"] == str(path) and report["parity"]["passed"] is True


def test_pseudo_trained_dyconv_mobilenetv2_at_64_is_exportable(tmp_path):
    model = pseudo_train(create_model("mobilenetv2_050_dyconv"), seed=0, input_size=64)
    path = tmp_path / "m.onnx"
    result = export_onnx(model, path, input_size=64)
    assert result and result.parity and result.path == path
    onnx.checker.check_model(str(path), full_check=True)
    # Checked again here, on inputs the export's own parity check did not see.
    assert_close_to_torch(model, path, synthetic_images(3, 64, seed=21))


# ------------------------------------------------------------------------ batch handling
@pytest.mark.parametrize(
    "name, mode",
    [
        ("mobilenetv2_035_dcd", "standard"),
        ("mobilenetv2_035_dcd", "function"),
        ("mobilenetv2_035_condconv", "standard"),  # DeployMixture: same code for DY-Conv
    ],
)
def test_dynamic_batch_really_works(zoo_export, name, mode):
    """The zoo test's files (checked there at batches 1 and 2) run at batches 1, 3 and 8."""
    model, path, _, _ = zoo_export(name, mode)
    size = input_size(name)
    for n in (1, 3, 8):
        assert_close_to_torch(model, path, synthetic_images(n, size, seed=10 + n))


def test_fixed_batch_export(tmp_path):
    model = trained("mobilenetv2_035_dcd", 64)
    path = tmp_path / "b2.onnx"
    result = export_onnx(model, path, input_size=64, batch=2)
    assert result.batch == 2
    assert {r.batch_size for r in result.parity.rows} == {2}  # the fixed batch overrides (1, 2)
    proto = onnx.load(str(path))
    assert_graph(proto, model, mode="standard", size=64, batch=2)
    assert {p.key: p.value for p in proto.metadata_props}["batch"] == "2"
    assert_close_to_torch(model, path, synthetic_images(2, 64, seed=4))
    sess = sessions(path)[0]
    with pytest.raises(Exception, match="(?i)dimension|shape"):
        sess.run(None, {"input": synthetic_images(3, 64, seed=4).numpy()})
    with pytest.raises(DCDDeployError, match="fixed batch of 2"):
        check_parity(model, path, batch_sizes=(1,))


@pytest.mark.parametrize("strategy", ["latent", "weight"])
def test_strategy_is_recorded_and_both_forms_pass(tmp_path, strategy):
    model = trained("mobilenetv2_035_dcd", 64)
    result = export_onnx(model, tmp_path / "m.onnx", input_size=64, strategy=strategy)
    assert result.parity
    capable = {n for n, m in model.named_modules() if isinstance(m, DCDConv2d)}
    assert result.strategies == {p: (strategy if p in capable else "latent") for p in dcd_paths(model)}
    props = {p.key: p.value for p in onnx.load(str(result.path)).metadata_props}
    assert props["strategies"] == ",".join(f"{k}={v}" for k, v in result.strategies.items())


# ------------------------------------------------------------------------ hand-built nets
@pytest.mark.parametrize("size", [7, 5, 2, 1])
@pytest.mark.parametrize("mode", ["standard", "function"])
@pytest.mark.parametrize("make", ["small_net", "forms_net"])
def test_every_form_exports_at_odd_sizes(tmp_path, make, mode, size):
    """Overlapping 2x2 pool windows (7: kernel 4 stride 3; 5: 3/2), 2x2, and H = W = 1."""
    model = getattr(nets, make)(size)
    path = tmp_path / "net.onnx"
    result = export_onnx(model, path, input_size=size, mode=mode, check=False)
    onnx.checker.check_model(str(path), full_check=True)
    proto = onnx.load(str(path))
    assert_graph(proto, model, mode=mode, size=size)
    x = torch.randn(6, 3, size, size, generator=torch.Generator().manual_seed(size))
    report = check_parity(model, path, batch_sizes=(1, 3), inputs=x)
    assert report, report.table()
    assert all(r.nonfinite == 0 for r in report.rows)
    assert_close_to_torch(model, path, x)
    assert result.num_nodes == len(proto.graph.node)


def test_parity_at_input_size_1_compares_finite_numbers(tmp_path):
    model = nets.small_net(1)
    result = export_onnx(model, tmp_path / "one.onnx", input_size=1)
    assert all(r.nonfinite == 0 for r in result.parity.rows)


def test_adaptive_pool_over_a_single_pixel(tmp_path):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, 2, 1)
            self.pool = nn.AdaptiveAvgPool2d(2)
            self.fc = nn.Linear(16, 5)

        def forward(self, x):
            return self.fc(torch.flatten(self.pool(self.conv(x)), 1))

    model = Net().eval()
    try:
        result = export_onnx(model, tmp_path / "p.onnx", input_size=1, check=False)
    except ExportError:  # refusing cleanly is acceptable too
        return
    x = torch.randn(3, 3, 1, 1)
    assert check_parity(model, result.path, batch_sizes=(1,), inputs=x)


# ------------------------------------------------------------------------ failures
#: The failure-path tests' model: the hand-built net (DCD layers with BNs after them, a
#: DCD classifier) at 8x8. What they check is what ``export_onnx`` does with a wrong file
#: (raise, keep nothing, keep the unsimplified graph), the same for any model; tracing it
#: takes a fraction of a zoo model's time.
SMALL = 8


def test_failed_parity_raises_and_leaves_no_file(tmp_path, monkeypatch):
    model = nets.small_net(SMALL)
    other = nets.small_net(SMALL, seed=1)
    # The emitter is handed another model's deploy form: a wrong ONNX for `model`.
    monkeypatch.setattr(onnx_exporter, "to_deploy", lambda m, **kw: to_deploy(other, **kw))
    path = tmp_path / "wrong.onnx"
    with pytest.raises(ParityError, match="parity check failed: FAIL") as exc:
        export_onnx(model, path, input_size=SMALL)
    assert exc.value.report is not None and not exc.value.report
    assert not all(r.passed for r in exc.value.report.rows)
    assert list(tmp_path.iterdir()) == []  # neither the file nor a temporary


def test_zero_tolerance_fails_parity_and_leaves_no_file(tmp_path, monkeypatch):
    model = nets.small_net(SMALL)
    import dcd_deploy.parity as parity

    monkeypatch.setattr(parity, "DEFAULT_ATOL", 0.0)
    monkeypatch.setattr(parity, "DEFAULT_RTOL", 0.0)
    monkeypatch.setattr(parity, "DEFAULT_K", 0.0)
    with pytest.raises(ParityError):
        export_onnx(model, tmp_path / "m.onnx", input_size=SMALL)
    assert list(tmp_path.iterdir()) == []


def _corrupting_simplifier(calls):
    """An onnxsim stand-in that returns a wrong graph (every initialiser doubled) and
    reports success, as a simplifier bug would: only the parity check can catch it."""

    def simplify(proto, own_check=True):
        calls.append(own_check)
        bad = onnx.ModelProto()
        bad.CopyFrom(proto)
        for init in bad.graph.initializer:
            if init.data_type == onnx.TensorProto.FLOAT:
                init.CopyFrom(numpy_helper.from_array(2 * numpy_helper.to_array(init), init.name))
        return bad, True

    return simplify


def test_a_simplified_graph_that_fails_the_check_is_not_kept(tmp_path, monkeypatch):
    model = nets.small_net(SMALL)
    calls = []
    monkeypatch.setattr(onnx_exporter, "_simplify", _corrupting_simplifier(calls))
    result = export_onnx(model, tmp_path / "m.onnx", input_size=SMALL)
    assert calls == [False]  # the parity check, not onnxsim's own, decides
    assert result and not result.simplified
    x = synthetic_images(2, SMALL, seed=3)
    assert_close_to_torch(model, result.path, x)  # the file is the unsimplified, right one
    assert list(tmp_path.iterdir()) == [tmp_path / "m.onnx"]


def test_without_the_check_onnxsim_checks_its_own_result(tmp_path, monkeypatch):
    model = nets.small_net(SMALL)
    calls = []
    monkeypatch.setattr(onnx_exporter, "_simplify", _corrupting_simplifier(calls))
    result = export_onnx(model, tmp_path / "m.onnx", input_size=SMALL, check=False)
    assert calls == [True] and result.simplified


def test_check_parity_against_another_models_file_fails(tmp_path):
    model = nets.small_net(SMALL)
    other = nets.small_net(SMALL, seed=1)
    path = export_onnx(other, tmp_path / "other.onnx", input_size=SMALL, check=False).path
    report = check_parity(model, path, batch_sizes=(1, 2))
    assert not report and not report.passed
    assert report.max_rel > 1e-2
    assert "FAIL" in report.summary()


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if export_onnx gets as far as lowering the model."""

    def forbidden(*args, **kwargs):
        raise AssertionError("export did work before validating its arguments")

    monkeypatch.setattr(onnx_exporter, "to_deploy", forbidden)


def test_missing_output_directory_fails_before_any_work(tmp_path, no_work):
    model = create_model("mobilenetv2_035_dcd")
    with pytest.raises(ExportError, match="does not exist"):
        export_onnx(model, tmp_path / "missing" / "m.onnx", input_size=64)
    with pytest.raises(ExportError, match="is a directory"):
        export_onnx(model, tmp_path, input_size=64)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(mode="fusion"), "unknown mode 'fusion'"),
        (dict(strategy="fast"), "unknown strategy 'fast'"),
        (dict(opset=10), "opset 10 is not supported"),
        (dict(batch=0), "batch must be a positive integer"),
        (dict(input_size=0), "input size must be a positive integer"),
    ],
)
def test_bad_arguments_fail_before_any_work(tmp_path, no_work, kwargs, message):
    model = create_model("mobilenetv2_035_dcd")
    with pytest.raises(ExportError, match=message):
        export_onnx(model, tmp_path / "m.onnx", **{"input_size": 64, **kwargs})
    assert list(tmp_path.iterdir()) == []


def test_model_is_not_modified(tmp_path):
    model = trained("mobilenetv2_035_dcd", 64)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    export_onnx(model, tmp_path / "m.onnx", input_size=64, mode="function", check=False)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert not model.training


# ------------------------------------------------------------------------ authors' release
def make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


class OracleBlock(nn.Module):
    def __init__(self, inp, oup, stride, t, fc_squeeze):
        super().__init__()
        hidden = round(inp * t)
        self.identity = stride == 1 and inp == oup
        dw = nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False)
        if t == 1:
            layers = [
                dw,
                nn.BatchNorm2d(hidden),
                nn.ReLU6(),
                nn.Conv2d(hidden, oup, 1, bias=False),
                nn.BatchNorm2d(oup),
            ]
        else:
            layers = [
                authors.oracle_dymodule(inp, hidden, fc_squeeze),
                nn.BatchNorm2d(hidden),
                nn.ReLU6(),
                dw,
                nn.BatchNorm2d(hidden),
                nn.ReLU6(),
                authors.oracle_dymodule(hidden, oup, fc_squeeze),
                nn.BatchNorm2d(oup),
            ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.identity else self.conv(x)


class OracleMobileNetV2(nn.Module):
    """The release's DCD MobileNetV2 (docs/design.md#release-format), trained with --dropout."""

    BLOCKS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, width, fc_squeeze, num_classes=1000):
        super().__init__()
        inp = make_divisible(32 * width)
        layers = [nn.Sequential(nn.Conv2d(3, inp, 3, 2, 1, bias=False), nn.BatchNorm2d(inp), nn.ReLU6())]
        for t, c, n, s in self.BLOCKS:
            oup = make_divisible(c * width)
            for i in range(n):
                layers.append(OracleBlock(inp, oup, s if i == 0 else 1, t, fc_squeeze))
                inp = oup
        self.features = nn.Sequential(*layers)
        head = make_divisible(1280 * width) if width > 1 else 1280
        self.conv = nn.Sequential(nn.Conv2d(inp, head, 1, bias=False), nn.BatchNorm2d(head), nn.ReLU6())
        self.classifier = nn.Sequential(nn.Dropout(0.1), authors.OracleDYCls(head, num_classes))

    def forward(self, x):
        return self.classifier(self.conv(self.features(x)).mean((2, 3)))


def test_release_checkpoint_exports_what_the_authors_network_computes(tmp_path):
    size = 96
    model = trained("mobilenetv2_050_dcd", size)
    save_release_checkpoint(model, tmp_path / "model_best.pth.tar")
    raw = torch.load(tmp_path / "model_best.pth.tar", weights_only=True)
    assert raw["arch"] == "mobilenetv2_dcd"

    oracle = OracleMobileNetV2(0.5, fc_squeeze=8)
    oracle.load_state_dict({k.removeprefix("module."): v for k, v in raw["state_dict"].items()}, strict=True)
    oracle = oracle.double().eval()

    loaded = load_checkpoint(tmp_path / "model_best.pth.tar")
    result = export_onnx(loaded, tmp_path / "release.onnx", input_size=size, mode="function")
    assert result.parity
    x = synthetic_images(6, size, seed=77)
    with torch.no_grad():
        expected = oracle(x.double()).numpy()
    scale = np.abs(expected).max()
    assert np.isfinite(expected).all() and scale > 0
    # Λ and Φ matter in this model: the oracle with both heads frozen is far off.
    frozen = OracleMobileNetV2(0.5, fc_squeeze=8)
    frozen.load_state_dict(oracle.state_dict())
    with torch.no_grad():
        for m in frozen.modules():
            if hasattr(m, "fc_phi"):
                m.fc_phi.weight.zero_()
                m.fc_scale.weight.zero_()
        assert np.abs(frozen.double().eval()(x.double()).numpy() - expected).max() > 0.05 * scale
    for sess in sessions(result.path):
        got = sess.run(None, {"input": x.numpy()})[0]
        assert np.abs(got - expected).max() <= ATOL + RTOL * scale
        assert (got.argmax(1) == expected.argmax(1)).all()


def test_release_checkpoint_at_224_exports_with_defaults_and_matches_the_authors_logits(tmp_path, monkeypatch):
    """The user's first command on a published MobileNetV2 file: ``dcd-export model_best.pth.tar``.

    Its BN statistics come from the images it was calibrated on (here: natural-looking
    synthetic images, as training on photographs gives); the gate must pass the correct
    export on its default inputs, and the file must match an independent implementation
    of the authors' network to 1e-4 of the output scale on the checkpoint's own inputs.
    """
    from click.testing import CliRunner

    from dcd_deploy.cli.export import main as export_main

    model = pseudo_train(create_model("mobilenetv2_050_dcd"), seed=3, input_size=224)
    save_release_checkpoint(model, tmp_path / "model_best.pth.tar")  # module. prefix, dropout classifier
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(export_main, ["model_best.pth.tar"])
    assert result.exit_code == 0, result.output
    assert "parity   PASS" in result.stdout and "ill-conditioned" not in result.stdout

    raw = torch.load(tmp_path / "model_best.pth.tar", weights_only=True)
    oracle = OracleMobileNetV2(0.5, fc_squeeze=8)
    oracle.load_state_dict({k.removeprefix("module."): v for k, v in raw["state_dict"].items()}, strict=True)
    x = synthetic_images(4, 224, seed=1234)  # "the checkpoint's own inputs": images of its working range
    with torch.no_grad():
        expected = oracle.double().eval()(x.double()).numpy()
    scale = np.abs(expected).max()
    for sess in sessions(tmp_path / "model_best.onnx"):
        got = sess.run(None, {"input": x.numpy()})[0]
        assert np.abs(got - expected).max() <= 1e-4 * scale


class _SmallNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.dcd = DCDConv2d(8, 8, 3, padding=1)

    def forward(self, x):
        return self.dcd(torch.relu(self.stem(x))).mean((2, 3))


def test_the_export_takes_the_size_of_the_images_it_is_checked_on(tmp_path):
    # a user's own images (NumPy, 40x56): without input_size the file is made at their size
    torch.manual_seed(0)
    net = _SmallNet().eval()
    images = np.random.default_rng(1).random((3, 3, 40, 56), dtype=np.float32)
    result = export_onnx(net, tmp_path / "m.onnx", parity_inputs=images)
    assert result.parity and result.parity.input_size == [40, 56]
    dims = onnx.load(str(result.path)).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims][1:] == [3, 40, 56]
    sess = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    with torch.no_grad():
        want = net(torch.from_numpy(images)).numpy()
    np.testing.assert_allclose(sess.run(None, {"input": images})[0], want, rtol=1e-4, atol=1e-5)
    # an input_size that contradicts them is said before anything is traced, and nothing written
    with pytest.raises(ExportError, match=r"parity_inputs are 40x56 images, but input_size makes a 64x64 file"):
        export_onnx(net, tmp_path / "n.onnx", parity_inputs=images, input_size=64)
    assert not (tmp_path / "n.onnx").exists()
    # with dynamic sides a file traced at another size is checked on them
    assert export_onnx(net, tmp_path / "d.onnx", parity_inputs=images, input_size=64, dynamic_size=True).parity
