"""A model whose ``forward`` takes a dict of tensors (``batch["image"]``), exported, run
and checked with no wrapper: the file takes the dict's tensors by key, records the
structure, and the parity check calls the model with the dict rebuilt."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from _dict_net import MaskedNet
from _dict_net import build as build_masked
from _tamper import scale_weight
from torch import nn

from dcd_deploy import check_parity, export_onnx
from dcd_deploy.layers import DCDConv2d

TREE_KEY = "dcd_deploy.input_tree"


class DepthNet(nn.Module):
    """A nested dict and a plain tensor beside it."""

    def __init__(self):
        super().__init__()
        self.rgb = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), DCDConv2d(8, 8))
        self.depth = nn.Conv2d(1, 8, 3, padding=1)
        self.fc = nn.Linear(8, 5)

    def forward(self, batch, gain):
        y = self.rgb(batch["img"]) + self.depth(batch["aux"]["depth"])
        return {"logits": self.fc(y.mean((2, 3))) * gain}


def _masked():
    return build_masked().eval()


def _batch(n=1, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"image": torch.randn(n, 3, 48, 64, generator=g), "mask": torch.rand(n, 1, 48, 64, generator=g).round()}


def _ort(path, feed):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {k: v.numpy() for k, v in feed.items()})


def _float64(model, *args):
    ref = type(model)()
    ref.load_state_dict(model.state_dict())
    args = [
        {
            k: (v.double() if isinstance(v, torch.Tensor) else {a: b.double() for a, b in v.items()})
            for k, v in a.items()
        }
        if isinstance(a, dict)
        else a.double()
        for a in args
    ]
    with torch.no_grad():
        return ref.double().eval()(*args)


def test_a_dict_input_becomes_the_files_inputs_by_key_and_matches_pytorch(tmp_path):
    model = _masked()
    result = export_onnx(model, tmp_path / "m.onnx", example_inputs=(_batch(),))
    assert result and result.input_names == ["image", "mask"]
    proto = onnx.load(str(result.path))
    assert [i.name for i in proto.graph.input] == ["image", "mask"]
    assert [d.dim_param for d in (i.type.tensor_type.shape.dim[0] for i in proto.graph.input)] == ["batch"] * 2
    batch = _batch(3, seed=5)  # another batch size than the traced one: the batch axis is dynamic
    (got,) = _ort(result.path, batch)
    want = _float64(model, batch).numpy()
    assert got.shape == (3, 4, 48, 64)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_the_file_records_the_input_tree(tmp_path):
    model = _masked()
    result = export_onnx(model, tmp_path / "m.onnx", example_inputs=(_batch(),), check=False)
    props = {p.key: p.value for p in onnx.load(str(result.path)).metadata_props}
    tree = json.loads(props[TREE_KEY])
    assert tree == {"args": [{"dict": {"image": 0, "mask": 1}}], "names": ["image", "mask"]}


def test_nested_dict_and_tensor_arguments_are_named_by_key_path(tmp_path):
    torch.manual_seed(1)
    model = DepthNet().eval()
    args = ({"img": torch.randn(1, 3, 40, 56), "aux": {"depth": torch.rand(1, 1, 40, 56)}}, torch.rand(1, 5))
    result = export_onnx(model, tmp_path / "d.onnx", example_inputs=args)
    assert result and result.input_names == ["batch.img", "batch.aux.depth", "gain"]
    assert result.output_names == ["logits"]
    x, d, gain = torch.randn(2, 3, 40, 56), torch.rand(2, 1, 40, 56), torch.rand(2, 5)
    (got,) = _ort(result.path, {"batch.img": x, "batch.aux.depth": d, "gain": gain})
    want = _float64(model, {"img": x, "aux": {"depth": d}}, gain)["logits"].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    props = {p.key: p.value for p in onnx.load(str(result.path)).metadata_props}
    assert json.loads(props[TREE_KEY])["args"] == [{"dict": {"img": 0, "aux": {"dict": {"depth": 1}}}}, 2]


def test_check_parity_rebuilds_the_dict_from_the_file(tmp_path):
    model = _masked()
    path = export_onnx(model, tmp_path / "m.onnx", example_inputs=(_batch(),), check=False).path
    report = check_parity(model, path)  # synthetic inputs by the file's specs
    assert report and report.reference == "float64"
    paths = {row.path for row in report.layers}
    assert {"body.0", "body.3", "head"} <= paths, paths  # the user's own module paths
    by_tree = check_parity(model, path, inputs=_batch(4, seed=2))  # the dict as forward takes it
    by_name = check_parity(model, path, inputs={"mask": _batch(4, seed=2)["mask"], "image": _batch(4, seed=2)["image"]})
    assert by_tree and by_name
    assert by_tree.max_rel == by_name.max_rel


def test_check_parity_takes_nested_arguments_as_forward_takes_them(tmp_path):
    torch.manual_seed(1)
    model = DepthNet().eval()
    args = ({"img": torch.randn(1, 3, 40, 56), "aux": {"depth": torch.rand(1, 1, 40, 56)}}, torch.rand(1, 5))
    path = export_onnx(model, tmp_path / "d.onnx", example_inputs=args, check=False).path
    inputs = ({"img": torch.randn(4, 3, 40, 56), "aux": {"depth": torch.rand(4, 1, 40, 56)}}, torch.rand(4, 5))
    assert check_parity(model, path, inputs=inputs)
    assert check_parity(model, path, example_inputs=args)


def test_a_tampered_file_fails_naming_the_layer(tmp_path):
    model = _masked()
    path = export_onnx(model, tmp_path / "m.onnx", example_inputs=(_batch(),), check=False).path
    proto = onnx.load(str(path))
    layer = scale_weight(proto)  # a Conv weight scaled by 1.05
    onnx.save(proto, str(tmp_path / "bad.onnx"))
    report = check_parity(model, tmp_path / "bad.onnx", inputs=_batch(4, seed=3))
    assert not report
    assert layer in report.summary()


def test_the_users_model_is_left_as_it_was(tmp_path):
    model = _masked()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    export_onnx(model, tmp_path / "m.onnx", example_inputs=(_batch(),))
    assert type(model) is MaskedNet and model.forward.__func__ is MaskedNet.forward
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    with torch.no_grad():
        assert model(_batch()).shape == (1, 4, 48, 64)


def test_a_leaf_that_is_no_tensor_is_one_line(tmp_path):
    from dcd_deploy.errors import ExportError

    with pytest.raises(ExportError, match="image is a float"):
        export_onnx(_masked(), tmp_path / "m.onnx", example_inputs=({"image": 1.0, "mask": torch.ones(1)},))
    assert not (tmp_path / "m.onnx").exists()


class ReadsSome(nn.Module):
    """Reads ``image`` by ``[]`` and ``mask`` by ``get``; a batch's ``label`` and ``path`` never."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), DCDConv2d(8, 4))

    def forward(self, batch):
        mask = batch.get("mask")
        return self.body(batch["image"]) * mask


class ReadsAll(ReadsSome):
    """Iterates the batch: every entry is read (a sum over all of them)."""

    def forward(self, batch):
        extra = sum(v.float().mean() for k, v in batch.items() if k != "image")
        return self.body(batch["image"]) + extra


def _loader_batch(n=1, seed=0):
    """A data loader's batch: the model's inputs with a label and file names among them."""
    g = torch.Generator().manual_seed(seed)
    return {
        "image": torch.randn(n, 3, 24, 32, generator=g),
        "label": torch.randint(0, 4, (n,), generator=g),
        "path": [f"{i}.png" for i in range(n)],
        "mask": torch.rand(n, 1, 24, 32, generator=g).round(),
    }


def test_entries_forward_never_reads_are_left_out_of_the_file(tmp_path):
    torch.manual_seed(3)
    model = ReadsSome().eval()
    result = export_onnx(model, tmp_path / "r.onnx", example_inputs=(_loader_batch(),))
    assert result and result.input_names == ["image", "mask"]
    assert result.unread_inputs == ["label", "path"]
    props = {p.key: p.value for p in onnx.load(str(result.path)).metadata_props}
    assert json.loads(props[TREE_KEY])["args"] == [{"dict": {"image": 0, "mask": 1}, "unread": ["label", "path"]}]
    batch = _loader_batch(3, seed=4)
    (got,) = _ort(result.path, {"image": batch["image"], "mask": batch["mask"]})
    with torch.no_grad():
        want = ReadsSome().double().eval()
        want.load_state_dict(model.state_dict())
        want = want({"image": batch["image"].double(), "mask": batch["mask"].double()}).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    # the check takes the batch as the loader gives it, labels and names included
    assert check_parity(model, result.path, inputs=(batch,))


def test_entries_read_by_iterating_the_dict_are_all_kept(tmp_path):
    torch.manual_seed(3)
    batch = _loader_batch()
    del batch["path"]  # a string cannot be a graph input: every entry here is read
    result = export_onnx(ReadsAll().eval(), tmp_path / "a.onnx", example_inputs=(batch,))
    assert result and result.input_names == ["image", "label", "mask"] and result.unread_inputs == []


def test_root_hooks_see_the_dict_as_the_users_call_does(tmp_path):
    model = _masked()
    model.register_forward_pre_hook(lambda m, args: ({**args[0], "image": args[0]["image"] * 2 - 1},))
    model.register_forward_hook(lambda m, args, out: out + args[0]["mask"])
    result = export_onnx(model, tmp_path / "h.onnx", example_inputs=(_batch(),))
    assert result and result.input_names == ["image", "mask"]
    batch = _batch(2, seed=6)
    (got,) = _ort(result.path, batch)
    with torch.no_grad():
        want = model(batch).numpy()  # the user's own call: its hooks on the dict
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert np.abs(want - _float64(_masked(), batch).numpy()).max() > 0.1  # the hooks do change it


class OptionalMask(nn.Module):
    """``forward(x, mask=None)``, called as ``model(x, None)``."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), DCDConv2d(8, 4))

    def forward(self, x, mask=None, gain=None):
        y = self.body(x)
        y = y if mask is None else y * mask
        return y if gain is None else y * gain["scale"]


def test_a_none_argument_is_no_input_of_the_file(tmp_path):
    torch.manual_seed(4)
    model = OptionalMask().eval()
    x = torch.randn(1, 3, 20, 24)
    gain = {"scale": torch.full((1, 1, 1, 1), 2.0)}
    result = export_onnx(model, tmp_path / "n.onnx", example_inputs=(x, None, gain))
    assert result and result.input_names == ["x", "gain.scale"]
    props = {p.key: p.value for p in onnx.load(str(result.path)).metadata_props}
    assert json.loads(props[TREE_KEY])["args"] == [0, None, {"dict": {"scale": 1}}]
    x2, scale2 = torch.randn(3, 3, 20, 24), torch.rand(3, 1, 1, 1)
    (got,) = _ort(result.path, {"x": x2, "gain.scale": scale2})
    with torch.no_grad():
        ref = OptionalMask().double().eval()
        ref.load_state_dict(model.state_dict())
        want = ref(x2.double(), None, {"scale": scale2.double()}).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    assert check_parity(model, result.path, inputs=(x2, None, {"scale": scale2}))
