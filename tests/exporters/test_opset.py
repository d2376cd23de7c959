"""Writing at an older opset (dcd_deploy/exporters/_opset.py, ``--opset``).

Oracles: numpy formulas of the ops (Mish, HardSwish, a mean) and float64 PyTorch through
the export's own parity check; each unit case first shows that ``onnx.version_converter``
alone refuses the model, so the test fails if the pass stops doing its part.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from _corpus import CORPUS
from onnx import TensorProto, defs, helper, numpy_helper, version_converter
from torch import nn

import dcd_deploy
from dcd_deploy.errors import ExportError
from dcd_deploy.exporters._opset import convert_opset
from dcd_deploy.layers import DCDConv2d

X = np.linspace(-25.0, 25.0, 2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)


def _model(nodes, *, out_shape=None, initializers=(), functions=(), opset=18):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(X.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape or list(X.shape))],
        initializer=list(initializers),
    )
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(f.domain, 1) for f in functions[:1]]
    return helper.make_model(graph, opset_imports=imports, functions=list(functions))


def _run(proto):
    onnx.checker.check_model(proto, full_check=True)
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": X})[0]


def _refused_by_onnx(proto, opset):
    with pytest.raises(Exception):  # noqa: B017 (the converter's RuntimeError/ValidationError)
        onnx.checker.check_model(version_converter.convert_version(proto, opset), full_check=True)


def _opset(proto):
    return next(i.version for i in proto.opset_import if i.domain in ("", "ai.onnx"))


x64 = X.astype(np.float64)


@pytest.mark.parametrize(
    "op, expected", [("Mish", x64 * np.tanh(np.log1p(np.exp(x64)))), ("HardSwish", x64 * np.clip(x64 / 6 + 0.5, 0, 1))]
)
@pytest.mark.parametrize("opset", [13, 17])
def test_an_op_newer_than_the_opset_is_written_as_its_onnx_body(op, expected, opset):
    proto = _model([helper.make_node(op, ["x"], ["y"], name="act")])
    newer = defs.get_schema(op, 18).since_version > opset
    if newer:
        _refused_by_onnx(proto, opset)
    out = convert_opset(proto, opset)
    assert _opset(out) == opset and (op in {n.op_type for n in out.graph.node}) == (not newer)
    np.testing.assert_allclose(_run(out), expected, rtol=1e-5, atol=1e-6)


def test_versions_that_only_added_types_convert_unchanged():
    shape = numpy_helper.from_array(np.array([2, 60], dtype=np.int64), "shape")
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Mul", ["r", "x"], ["m"]),
        helper.make_node("Add", ["m", "x"], ["a"]),
        helper.make_node("Identity", ["a"], ["i"]),
        helper.make_node("Reshape", ["i", "shape"], ["y"], allowzero=1),  # torch.onnx's flatten
    ]
    proto = _model(nodes, out_shape=[2, 60], initializers=[shape])
    _refused_by_onnx(proto, 13)
    out = convert_opset(proto, 13)
    assert _opset(out) == 13 and [n.domain for n in out.graph.node] == [""] * 5
    assert all(i.domain in ("", "ai.onnx") for i in out.opset_import)
    np.testing.assert_allclose(_run(out), (np.maximum(x64, 0) * x64 + x64).reshape(2, 60), rtol=1e-6)


@pytest.mark.parametrize("opset", [11, 12])
def test_opset_13s_bfloat16_versions_and_a_last_axis_softmax_convert_unchanged(opset):
    w = numpy_helper.from_array(np.linspace(-0.02, 0.02, 60 * 4, dtype=np.float32).reshape(60, 4), "w")
    nodes = [
        helper.make_node("Flatten", ["x"], ["f"]),
        helper.make_node("Clip", ["f", "lo", "hi"], ["c"]),
        helper.make_node("Gemm", ["c", "w"], ["g"]),
        helper.make_node("Softmax", ["g"], ["y"], axis=1),  # over a (N, 4) Gemm output: its last axis
    ]
    bounds = [numpy_helper.from_array(np.array(v, dtype=np.float32), n) for n, v in (("lo", -10.0), ("hi", 10.0))]
    proto = _model(nodes, out_shape=[2, 4], initializers=[w, *bounds])
    _refused_by_onnx(proto, opset)
    out = convert_opset(proto, opset)
    assert _opset(out) == opset and [n.domain for n in out.graph.node] == [""] * 4
    logits = np.clip(x64.reshape(2, 60), -10, 10) @ numpy_helper.to_array(w).astype(np.float64)
    expected = np.exp(logits - logits.max(1, keepdims=True))
    np.testing.assert_allclose(_run(out), expected / expected.sum(1, keepdims=True), rtol=1e-5)


@pytest.mark.parametrize("opset", [11, 12])
def test_pixel_shuffle_and_the_ops_13_only_retyped_convert_unchanged(opset):
    """DepthToSpace (nn.PixelShuffle), SpaceToDepth, Log and Sign: 13 only added bfloat16,
    and onnx's converter has no adapter down from it (they were refused before)."""
    nodes = [
        helper.make_node("SpaceToDepth", ["x"], ["s"], blocksize=2),  # (2, 12, 2, 2)
        helper.make_node("DepthToSpace", ["s"], ["d"], blocksize=2, mode="CRD"),
        helper.make_node("Abs", ["d"], ["a"]),
        helper.make_node("Log", ["a"], ["l"]),
        helper.make_node("Sign", ["d"], ["g"]),
        helper.make_node("Mul", ["l", "g"], ["y"]),
    ]
    x = X[..., :4]  # even sides for the blocks
    proto = _model(nodes, out_shape=list(x.shape))
    proto.graph.input[0].type.tensor_type.shape.dim[3].dim_value = 4
    out = convert_opset(proto, opset)
    assert _opset(out) == opset and [n.op_type for n in out.graph.node] == [n.op_type for n in nodes]
    onnx.checker.check_model(out, full_check=True)
    got = ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    # SpaceToDepth as ONNX's reference writes it; CRD DepthToSpace is torch's pixel_shuffle
    b, c, h, w = x.shape
    s2d = x.astype(np.float64).reshape(b, c, h // 2, 2, w // 2, 2).transpose(0, 3, 5, 1, 2, 4)
    shuffled = F.pixel_shuffle(torch.from_numpy(s2d.reshape(b, c * 4, h // 2, w // 2)), 2).numpy()
    np.testing.assert_allclose(got, np.log(np.abs(shuffled)) * np.sign(shuffled), rtol=1e-5)


@pytest.mark.parametrize("opset", [11, 12])
def test_argmax_of_a_segmentation_head_is_written_below_13(opset):
    """``logits.argmax(1)``: 12 added ``select_last_index`` (torch.onnx writes it, 0), 13
    bfloat16; at 11 the node drops the attribute at its default. Taking the last maximum
    cannot be written at 11."""
    nodes = [
        helper.make_node("ArgMax", ["x"], ["i"], axis=1, keepdims=0, select_last_index=0),
        helper.make_node("Cast", ["i"], ["y"], to=TensorProto.FLOAT),
    ]
    proto = _model(nodes, out_shape=[2, 4, 5])
    out = convert_opset(proto, opset)
    assert _opset(out) == opset
    argmax = next(n for n in out.graph.node if n.op_type == "ArgMax")
    assert ("select_last_index" in {a.name for a in argmax.attribute}) == (opset == 12)
    np.testing.assert_array_equal(_run(out), x64.argmax(1))
    last = [helper.make_node("ArgMax", ["x"], ["i"], axis=1, keepdims=0, select_last_index=1), nodes[1]]
    if opset == 11:
        with pytest.raises(ExportError, match="cannot write opset 11: .*ArgMax"):
            convert_opset(_model(last, out_shape=[2, 4, 5]), 11)
    else:
        np.testing.assert_array_equal(_run(convert_opset(_model(last, out_shape=[2, 4, 5]), 12)), x64.argmax(1))


@pytest.mark.parametrize("opset", [11, 12])
def test_gather_nd_of_an_adaptive_pool_is_written_below_13(opset):
    """``F.adaptive_avg_pool2d(x, (3, 3))`` of a size it does not divide: torch.onnx gathers
    the windows with GatherND (13: bfloat16 only; 12 added ``batch_dims``, written 0, which
    11 cannot say and does anyway). A ``batch_dims`` of 1 cannot be written at 11."""
    rows = numpy_helper.from_array(np.array([[3], [0], [3]], dtype=np.int64), "rows")
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[2, 0, 1, 3]),  # (4, 2, 3, 5)
        helper.make_node("GatherND", ["t", "rows"], ["g"], batch_dims=0),  # (3, 2, 3, 5)
        helper.make_node("Transpose", ["g"], ["y"], perm=[1, 2, 0, 3]),
    ]
    proto = _model(nodes, out_shape=[2, 3, 3, 5], initializers=[rows])
    _refused_by_onnx(proto, opset)
    out = convert_opset(proto, opset)
    assert _opset(out) == opset
    np.testing.assert_array_equal(_run(out), x64[:, :, [3, 0, 3], :])
    index = numpy_helper.from_array(np.zeros((2, 1), dtype=np.int64), "index")
    batched = [helper.make_node("GatherND", ["x", "index"], ["y"], batch_dims=1)]
    if opset == 11:
        with pytest.raises(ExportError, match="cannot write opset 11: .*GatherND"):
            convert_opset(_model(batched, out_shape=[2, 4, 5], initializers=[index]), 11)
    else:
        got = _run(convert_opset(_model(batched, out_shape=[2, 4, 5], initializers=[index]), 12))
        np.testing.assert_array_equal(got, x64[:, 0])


@pytest.mark.parametrize("opset", [11, 12])
def test_a_softmax_of_the_default_axis_keeps_it_below_13_where_the_default_was_1(opset):
    out = convert_opset(_model([helper.make_node("Softmax", ["x"], ["y"])]), opset)  # 13's default: -1
    assert _opset(out) == opset
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    np.testing.assert_allclose(_run(out), e / e.sum(-1, keepdims=True), rtol=1e-5)


@pytest.mark.parametrize("opset", [11, 12])
def test_log_softmax_and_hardmax_over_the_last_axis_are_written_below_13(opset):
    """Both changed as Softmax did at 13 (one axis, not every axis from it on); over the
    last axis, written or by default, the old version is the same function."""
    nodes = [
        helper.make_node("LogSoftmax", ["x"], ["l"], axis=-1),
        helper.make_node("Hardmax", ["x"], ["h"]),  # 13's default: -1
        helper.make_node("Add", ["l", "h"], ["y"]),
    ]
    out = convert_opset(_model(nodes), opset)
    assert _opset(out) == opset
    shifted = x64 - x64.max(-1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    hardmax = (x64 == x64.max(-1, keepdims=True)).astype(np.float64)  # X's rows have one maximum each
    np.testing.assert_allclose(_run(out), log_softmax + hardmax, rtol=1e-5, atol=1e-5)
    for op in ("LogSoftmax", "Hardmax"):
        with pytest.raises(ExportError, match=rf"^cannot write opset {opset}: a {op} over axis 2, not known"):
            convert_opset(_model([helper.make_node(op, ["x"], ["y"], axis=2)]), opset)


def test_a_softmax_over_another_axis_is_refused_below_13():
    # Softmax 11 normalises over all axes from `axis` on, and onnx's converter keeps the
    # node as it is (it computed that, not the model's softmax, before this was refused)
    proto = _model([helper.make_node("Softmax", ["x"], ["y"], axis=1)])
    with pytest.raises(
        ExportError,
        match=r"^cannot write opset 12: a Softmax over axis 1, not known to be its input's last .*; use opset 13 or newer$",
    ):
        convert_opset(proto, 12)
    out = convert_opset(_model([helper.make_node("Softmax", ["x"], ["y"], axis=1)]), 13)
    e = np.exp(x64 - x64.max(1, keepdims=True))
    np.testing.assert_allclose(_run(out), e / e.sum(1, keepdims=True), rtol=1e-5)


@pytest.mark.parametrize("arch, opset", [("mobilenetv2_035_dcd", 11), ("mobilenetv2_035_dyconv", 12)])
def test_a_zoo_model_exports_and_checks_at_opsets_below_13(tmp_path, arch, opset):
    model = dcd_deploy.pseudo_train(dcd_deploy.create_model(arch), seed=0, input_size=64)
    result = dcd_deploy.export_onnx(model, tmp_path / "m.onnx", input_size=64, opset=opset)
    assert result.parity and result.opset == opset
    proto = onnx.load(tmp_path / "m.onnx")
    assert _opset(proto) == opset
    for node in proto.graph.node:
        defs.get_schema(node.op_type, opset)  # SchemaError: an op without a version at opset


class _Chunks(nn.Module):
    """torch.chunk as torch.onnx writes it: Split 18 with ``num_outputs`` where the length
    divides, with the parts' sizes as an input where it does not (7 -> 3, 3, 1)."""

    def forward(self, x):
        a, b = torch.chunk(x[:, :6], 2, dim=1)
        c, d, e = torch.chunk(x, 3, dim=1)
        return torch.cat([a * b, c - d, e.expand(-1, 3, -1, -1)], 1)


@pytest.mark.parametrize("opset", [11, 12, 13, 17])
def test_torch_chunk_is_written_at_every_opset_and_checked(tmp_path, opset):
    result = dcd_deploy.export_onnx(
        _Chunks(), tmp_path / "m.onnx", example_inputs=(torch.randn(1, 7, 4, 4),), opset=opset
    )
    assert result.parity and result.opset == opset
    splits = [n for n in onnx.load(tmp_path / "m.onnx").graph.node if n.op_type == "Split"]
    assert len(splits) == 2 and not any(a.name == "num_outputs" for n in splits for a in n.attribute)
    assert all(len(n.input) == (1 if opset < 13 else 2) for n in splits)  # sizes an attribute before 13


class _HalvesNet(nn.Module):
    """A left and a right half seen apart (``chunk`` over the width), and the channels in
    thirds: at a symbolic size the first is a split of a computed size, which torch.onnx
    alone failed to write at any opset (onnxscript's optimizer on its SplitToSequence)."""

    def __init__(self):
        super().__init__()
        self.pw = DCDConv2d(3, 12)

    def forward(self, x):
        y = F.relu(self.pw(x))
        left, right = y.chunk(2, dim=3)
        a, b, c = y.chunk(3, dim=1)
        return torch.cat([left.mean((2, 3)), right.amax((2, 3)), (a * b - c).mean((2, 3))], 1)


def _export_at_symbolic_size_and_run_at(tmp_path, model, *, traced, opset, shapes):
    """Export ``model`` with a symbolic height and width at ``opset``, then run the file in
    ONNX Runtime at each of ``shapes`` against the model in float64."""
    result = dcd_deploy.export_onnx(model, tmp_path / "m.onnx", input_size=traced, opset=opset, dynamic_size=True)
    assert result.parity and result.opset == opset
    proto = onnx.load(tmp_path / "m.onnx")
    assert _opset(proto) == opset
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for shape in shapes:
        x = torch.rand(shape)
        with torch.no_grad():
            expected = model.double()(x.double()).numpy()
        model.float()
        (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_torch_chunk_over_a_symbolic_size_is_written_below_18_and_runs_at_other_sizes(tmp_path, opset):
    torch.manual_seed(0)
    # odd widths: the left half is the longer
    shapes = ((1, 3, 9, 7), (2, 3, 5, 12), (1, 3, 6, 3))
    _export_at_symbolic_size_and_run_at(tmp_path, _HalvesNet().eval(), traced=(8, 10), opset=opset, shapes=shapes)


@pytest.mark.parametrize("opset", [11, 13])
def test_a_split_in_parts_over_an_axis_of_unknown_length_becomes_slices(opset):
    """Split 18's ``num_outputs`` over a width shape inference cannot know: 5 in 3 parts is
    2, 2, 1 (numpy's ``array_split`` would give 2, 2, 1 too; 7 would tell them apart: 3, 3, 1
    against 3, 2, 2)."""
    split = helper.make_node("Split", ["x"], ["a", "b", "c"], axis=-1, num_outputs=3)
    cat = helper.make_node("Concat", ["c", "a", "b"], ["y"], axis=-1)
    graph = helper.make_graph(
        [split, cat],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4, "w"])],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    _refused_by_onnx(proto, opset)
    out = convert_opset(proto, opset)
    assert _opset(out) == opset and "Split" not in {n.op_type for n in out.graph.node}
    session = ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"])
    for w, sizes in ((5, (2, 2, 1)), (7, (3, 3, 1)), (9, (3, 3, 3))):
        x = np.arange(2 * 3 * 4 * w, dtype=np.float32).reshape(2, 3, 4, w)
        a, b, c = np.split(x, np.cumsum(sizes)[:-1], axis=-1)
        np.testing.assert_array_equal(session.run(None, {"x": x})[0], np.concatenate([c, a, b], axis=-1))


@pytest.mark.parametrize(
    "name, mode",
    [
        ("densenet_like", "standard"),
        ("efficientnet_like", "standard"),
        ("segnet_like", "fused"),
        ("two_input", "function"),
    ],
)
def test_users_networks_export_and_check_at_opset_11(tmp_path, name, mode):
    """The corpus's unfolded BN after a cat, SE through ``.mean``, ``F.interpolate`` with a
    dict output, two inputs, LayerNorm and GELU: what older edge toolchains are given."""
    if mode == "fused" and importlib.util.find_spec("openvino") is None:
        pytest.skip("openvino is not installed: the fused file is checked in it")
    case = CORPUS[name]
    result = dcd_deploy.export_onnx(
        case.build().eval(), tmp_path / "m.onnx", example_inputs=case.inputs(1), opset=11, mode=mode
    )
    assert result.parity and result.opset == 11
    proto = onnx.load(tmp_path / "m.onnx")
    for node in [*proto.graph.node, *(n for f in proto.functions for n in f.node)]:
        if node.domain in ("", "ai.onnx"):
            defs.get_schema(node.op_type, 11)


class _PadSoftmax(nn.Module):
    def __init__(self, axis: int):
        super().__init__()
        self.conv, self.axis = DCDConv2d(3, 8, 3), axis

    def forward(self, x):
        return self.conv(F.pad(x, (1, 2, 0, 1), mode="reflect")).softmax(self.axis)


def test_pad_and_a_last_axis_softmax_at_11_and_the_channel_softmax_refused(tmp_path):
    torch.manual_seed(0)
    result = dcd_deploy.export_onnx(_PadSoftmax(-1).eval(), tmp_path / "m.onnx", input_size=(12, 16), opset=11)
    assert result.parity and [
        len(n.input) for n in onnx.load(tmp_path / "m.onnx").graph.node if n.op_type == "Pad"
    ] == [2]
    # Softmax 11 over axis 1 of (N, C, H, W) would normalise over C, H and W together
    with pytest.raises(ExportError, match=r"^cannot write opset 11: a Softmax over axis 1, not known to be its"):
        dcd_deploy.export_onnx(_PadSoftmax(1).eval(), tmp_path / "n.onnx", input_size=(12, 16), opset=11)
    assert not (tmp_path / "n.onnx").exists()


@pytest.mark.parametrize("opset, axis", [(11, -2), (13, -2), (16, -2), (13, 2)])
def test_layer_normalization_is_written_below_17_as_its_arithmetic(opset, axis):
    """Over the last two axes of (2, 3, 4, 5), given as -2 or as 2 (counted by the input's rank)."""
    scale = numpy_helper.from_array(np.linspace(0.5, 2.0, 20, dtype=np.float32).reshape(4, 5), "scale")
    bias = numpy_helper.from_array(np.linspace(-1.0, 1.0, 20, dtype=np.float32).reshape(4, 5), "bias")
    node = helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y"], axis=axis, epsilon=1e-3)
    proto = _model([node], initializers=[scale, bias])
    _refused_by_onnx(proto, opset)
    out = convert_opset(proto, opset)
    assert _opset(out) == opset and "LayerNormalization" not in {n.op_type for n in out.graph.node}
    mean = x64.mean(axis=(2, 3), keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=(2, 3), keepdims=True)
    expected = (x64 - mean) / np.sqrt(var + 1e-3) * numpy_helper.to_array(scale) + numpy_helper.to_array(bias)
    np.testing.assert_allclose(_run(out), expected, rtol=1e-5, atol=1e-5)


def test_an_op_the_converter_cannot_write_is_one_error_naming_it():
    # F.grid_sample: GridSample came at 16 with no function body, so nothing can write it at 15
    grid = numpy_helper.from_array(np.zeros((2, 4, 5, 2), dtype=np.float32), "grid")
    node = helper.make_node("GridSample", ["x", "grid"], ["y"])
    with pytest.raises(ExportError, match=r"^cannot write opset 15: .*GridSample exists; use opset 18$"):
        convert_opset(_model([node], initializers=[grid]), 15)


def test_a_reshape_whose_zeros_mean_something_is_refused_with_the_converters_words():
    shape = numpy_helper.from_array(np.array([0, 60], dtype=np.int64), "shape")  # 0: copy dim, or empty?
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], allowzero=1)]
    with pytest.raises(ExportError, match=r"cannot write opset 13: .*Reshape; use opset 18"):
        convert_opset(_model(nodes, initializers=[shape]), 13)


def test_a_reshape_to_a_computed_shape_converts_unchanged():
    # torch.onnx's view(b, c, h * w) at a symbolic size: the shape is Shape's dims, computed
    # at run time; its allowzero=1 cannot meet a 0 (the result would be empty, so the input)
    consts = {
        "two": np.array([2], dtype=np.int64),
        "four": np.array([4], dtype=np.int64),
        "zero": np.array([0], dtype=np.int64),
    }
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Slice", ["s", "zero", "two"], ["bc"]),  # (b, c)
        helper.make_node("Slice", ["s", "two", "four"], ["hw"]),  # (h, w)
        helper.make_node("ReduceProd", ["hw"], ["n"], keepdims=1),  # (h * w,): over every axis, at 13 too
        helper.make_node("Concat", ["bc", "n"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"], allowzero=1),
    ]
    inits = [numpy_helper.from_array(v, k) for k, v in consts.items()]
    proto = _model(nodes, out_shape=[2, 3, 20], initializers=inits)
    _refused_by_onnx(proto, 13)
    out = convert_opset(proto, 13)
    assert [n.op_type for n in out.graph.node][-1] == "Reshape" and _opset(out) == 13
    assert not out.graph.node[-1].attribute  # allowzero: unknown at 13
    np.testing.assert_array_equal(_run(out), X.reshape(2, 3, 20))


@pytest.mark.parametrize(
    "bounds, expected", [(dict(start=-2), [4, 5]), (dict(start=1, end=3), [3, 4]), ({}, [2, 3, 4, 5])]
)
def test_a_shape_with_start_and_end_is_written_below_15_as_a_slice(bounds, expected):
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], **bounds),
        helper.make_node("Cast", ["s"], ["y"], to=TensorProto.FLOAT),
    ]
    proto = _model(nodes, out_shape=[len(expected)])
    if bounds:
        _refused_by_onnx(proto, 13)
    out = convert_opset(proto, 13)
    assert all(not n.attribute for n in out.graph.node if n.op_type == "Shape")
    np.testing.assert_array_equal(_run(out), np.array(expected, dtype=np.float32))


def test_reduce_mean_of_opset_18_is_written_at_17():
    axes = numpy_helper.from_array(np.array([2, 3], dtype=np.int64), "axes")
    nodes = [helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=0, noop_with_empty_axes=0)]
    proto = _model(nodes, out_shape=[2, 3], initializers=[axes])
    _refused_by_onnx(proto, 17)
    np.testing.assert_allclose(_run(convert_opset(proto, 17)), x64.mean(axis=(2, 3)), rtol=1e-6)


def test_local_functions_are_kept_and_converted():
    body = [
        helper.make_node("Constant", [], ["axes"], value=numpy_helper.from_array(np.array([3], dtype=np.int64))),
        helper.make_node("ReduceMean", ["a", "axes"], ["m"], keepdims=1),
        helper.make_node("Mul", ["a", "m"], ["b"]),
    ]
    fn = helper.make_function("mine", "Scale", ["a"], ["b"], body, [helper.make_opsetid("", 18)])
    proto = _model([helper.make_node("Scale", ["x"], ["y"], domain="mine")], functions=[fn])
    out = convert_opset(proto, 13)
    assert [f.name for f in out.functions] == ["Scale"]
    assert [(i.domain, i.version) for i in out.functions[0].opset_import] == [("", 13)]
    assert ("mine", 1) in [(i.domain, i.version) for i in out.opset_import]
    np.testing.assert_allclose(_run(out), x64 * x64.mean(axis=3, keepdims=True), rtol=1e-6)


class _UsersNet(nn.Module):
    """Written as users write them: functional Mish and Hardswish, an interpolation to a
    tensor's size, a flatten, ``.mean``."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.pw = DCDConv2d(16, 32)
        self.bn = nn.BatchNorm2d(32)
        self.head = nn.Linear(32 + 16, 5)

    def forward(self, x):
        s = F.hardswish(self.stem(x))
        y = F.mish(self.bn(self.pw(s)))
        y = F.interpolate(F.max_pool2d(y, 2), size=y.shape[-2:], mode="bilinear", align_corners=False)
        return self.head(torch.cat([y.mean((2, 3)), F.adaptive_avg_pool2d(s, 1).flatten(1)], 1))


@pytest.mark.parametrize(
    "mode, opset",
    [("standard", 13), ("standard", 15), ("standard", 17), ("function", 13), ("fused", 13), ("fused", 21)]
    + [("standard", 11), ("function", 11), ("fused", 12)],
)
def test_a_users_network_exports_and_checks_at_other_opsets(tmp_path, mode, opset):
    if mode == "fused" and importlib.util.find_spec("openvino") is None:
        pytest.skip("openvino is not installed: the fused file is checked in it")
    torch.manual_seed(0)
    model = _UsersNet().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-0.2, 0.2)
        model.bn.running_var.uniform_(0.5, 2.0)
    result = dcd_deploy.export_onnx(model, tmp_path / "m.onnx", input_size=(24, 40), opset=opset, mode=mode)
    assert result.parity and result.opset == opset
    proto = onnx.load(tmp_path / "m.onnx")
    assert _opset(proto) == opset
    if mode != "standard":  # the converter drops local functions: each is converted and kept
        assert proto.functions and all(_opset(f) == opset for f in proto.functions)
    for node in [*proto.graph.node, *(n for f in proto.functions for n in f.node)]:
        if node.domain in ("", "ai.onnx"):
            defs.get_schema(node.op_type, opset)  # SchemaError: an op without a version at opset


class _SymbolicSizeNet(nn.Module):
    """``view(b, c, h * w)`` and a flatten of a size-dependent tensor: at a symbolic size
    torch.onnx writes their shapes as computed Reshapes with ``allowzero=1``."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.pw = DCDConv2d(8, 16)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        y = F.relu(self.pw(F.relu(self.stem(x))))
        b, c, h, w = y.shape
        return self.head(y.reshape(b, c, h * w).mean(-1))


@pytest.mark.parametrize("opset", [11, 13])
def test_a_symbolic_size_network_is_written_below_14_and_runs_at_other_sizes(tmp_path, opset):
    torch.manual_seed(0)
    shapes = ((1, 3, 40, 72), (3, 3, 17, 23))
    _export_at_symbolic_size_and_run_at(
        tmp_path, _SymbolicSizeNet().eval(), traced=(32, 48), opset=opset, shapes=shapes
    )
