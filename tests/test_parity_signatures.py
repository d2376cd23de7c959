"""Parity for real models' signatures: several inputs, tuple/dict outputs, feature maps,
non-square and symbolic image sizes.

The files are written by PyTorch's own exporter (``torch.onnx.export(dynamo=True)``), so
these tests need nothing of this toolkit's exporter: they check that ``check_parity``
reads any file's inputs and outputs, feeds each input what it expects, and compares
every output, whatever its shape. Sensitivity: a file with one weight changed fails,
and the report names the output that moved.
"""

from __future__ import annotations

import contextlib
import io

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from onnx import numpy_helper
from torch import nn

from dcd_deploy import check_parity
from dcd_deploy.errors import DCDDeployError
from dcd_deploy.models import synthetic_images
from dcd_deploy.parity import read_signature

pytest.importorskip("onnxscript")


class TwoInputs(nn.Module):
    """An image and a vector of side information (e.g. camera metadata)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.side = nn.Linear(5, 8)
        self.head = nn.Linear(8, 4)

    def forward(self, image, meta):
        x = F.relu(self.conv(image)).mean((2, 3))
        return self.head(x + self.side(meta))


class Segmenter(nn.Module):
    """A dict output: class logits and a feature map at half resolution."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 6, 3, stride=2, padding=1)
        self.mask = nn.Conv2d(6, 2, 1)
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        f = F.relu(self.stem(x))
        return {"logits": self.fc(f.mean((2, 3))), "mask": self.mask(f)}


class Pair(nn.Module):
    """A tuple output whose second element is a feature map."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        return y.mean((2, 3)), torch.sigmoid(y)


def _export(model, args, path, *, names, outputs, dynamic_hw=False):
    batch = torch.export.Dim("batch", min=1, max=64)
    shapes = {}
    for name, a in zip(names, args):
        axes = {0: batch}
        if dynamic_hw and a.dim() == 4:
            axes.update({2: torch.export.Dim("h", min=8, max=256), 3: torch.export.Dim("w", min=8, max=256)})
        shapes[name] = axes
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        torch.onnx.export(
            model.eval(),
            tuple(args),
            str(path),
            dynamo=True,
            input_names=names,
            output_names=outputs,
            dynamic_shapes=shapes,
        )
    return path


def _tamper(path, out, weight_suffix):
    """A copy of ``path`` with one weight scaled by 1.05."""
    proto = onnx.load(str(path))
    t = next(t for t in proto.graph.initializer if t.name.endswith(weight_suffix))
    t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * np.float32(1.05), t.name))
    onnx.save(proto, str(out))
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("signatures")
    torch.manual_seed(0)
    built = {}
    m = TwoInputs()
    built["two"] = (
        m,
        _export(
            m,
            (torch.randn(2, 3, 16, 20), torch.randn(2, 5)),
            d / "two.onnx",
            names=["image", "meta"],
            outputs=["logits"],
        ),
    )
    m = Segmenter()
    built["dict"] = (
        m,
        _export(m, (torch.randn(2, 3, 24, 32),), d / "dict.onnx", names=["x"], outputs=["logits", "mask"]),
    )
    m = Pair()
    built["pair"] = (
        m,
        _export(
            m, (torch.randn(2, 3, 12, 18),), d / "pair.onnx", names=["x"], outputs=["pooled", "map"], dynamic_hw=True
        ),
    )
    return built


def test_signature_is_read_from_the_file(files):
    ins, outs = read_signature(files["two"][1])
    assert [s.name for s in ins] == ["image", "meta"] and [s.rank for s in ins] == [4, 2]
    assert ins[0].dims[1:] == (3, 16, 20) and ins[1].dims[1:] == (5,)
    assert not isinstance(ins[0].dims[0], int)  # the batch axis stayed symbolic
    assert ins[0].is_image and not ins[1].is_image
    ins, outs = read_signature(files["pair"][1])
    assert [s.name for s in outs] == ["pooled", "map"]
    assert ins[0].static(2) is None and ins[0].static(3) is None


def test_two_inputs_pass_and_fail_when_tampered(tmp_path, files):
    model, path = files["two"]
    report = check_parity(model, path, batch_sizes=(1, 2), n_inputs=4)
    assert report, report.table()
    assert report.input_size == [16, 20] and report.outputs == ["logits"]
    bad = _tamper(path, tmp_path / "bad.onnx", "side.weight")
    report = check_parity(model, bad, batch_sizes=(2,), n_inputs=4)
    assert not report and report.summary().startswith("FAIL")


def test_two_inputs_accept_a_tuple_or_a_dict(files):
    model, path = files["two"]
    image, meta = torch.randn(4, 3, 16, 20), torch.randn(4, 5)
    assert check_parity(model, path, batch_sizes=(2,), inputs=(image, meta))
    report = check_parity(model, path, batch_sizes=(2,), inputs={"meta": meta, "image": image})
    assert report and not report.synthetic_inputs and report.rows[0].n_inputs == 4


def test_non_image_inputs_follow_the_example(files):
    model, path = files["two"]
    seen = []
    hook = model.side.register_forward_pre_hook(lambda mod, args: seen.append(args[0].clone()))
    try:
        check_parity(
            model,
            path,
            batch_sizes=(2,),
            n_inputs=2,
            seed=3,
            example_inputs=(torch.zeros(1, 3, 16, 20), torch.zeros(1, 5)),
        )
    finally:
        hook.remove()
    meta = seen[-1]
    assert meta.shape == (2, 5) and meta.std() > 0.3  # seeded normal values, not the zeros of the example


def test_wrong_inputs_are_user_errors(files):
    model, path = files["two"]
    with pytest.raises(DCDDeployError, match="expected 2 tensor"):
        check_parity(model, path, inputs=torch.randn(2, 3, 16, 20))
    with pytest.raises(DCDDeployError, match="no tensor for the file's input"):
        check_parity(model, path, inputs={"image": torch.randn(2, 3, 16, 20)})
    with pytest.raises(DCDDeployError, match="same batch"):
        check_parity(model, path, batch_sizes=(1,), inputs=(torch.randn(2, 3, 16, 20), torch.randn(3, 5)))


def test_dict_output_with_a_feature_map_is_compared_per_output(tmp_path, files):
    model, path = files["dict"]
    report = check_parity(model, path, batch_sizes=(1, 2), n_inputs=4)
    assert report, report.table()
    assert report.input_size == [24, 32]
    assert {r.output for r in report.rows} == {"logits", "mask"}
    mask_rows = [r for r in report.rows if r.output == "mask"]
    assert all(not r.classifier for r in mask_rows) and len(mask_rows) == 4  # 2 levels x 2 batch sizes
    assert "output" in report.table().splitlines()[0]
    # the mask head changed: only its output moves, and the summary names it
    bad = _tamper(path, tmp_path / "bad.onnx", "mask.weight")
    report = check_parity(model, bad, batch_sizes=(2,), n_inputs=4)
    assert not report
    assert all(r.passed for r in report.rows if r.output == "logits")
    assert report.worst_output == "mask" and "worst output 'mask'" in report.summary()


def test_outputs_are_matched_by_dict_key(files):
    model, path = files["dict"]

    class Reordered(nn.Module):  # same function, dict in the other order
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, x):
            out = self.inner(x)
            return {"mask": out["mask"], "logits": out["logits"]}

    assert check_parity(Reordered(), path, batch_sizes=(2,), n_inputs=2)


def test_nested_outputs_are_matched_by_their_path(tmp_path):
    """A dict of lists is matched leaf by leaf by the names the export gives them
    (``levels.0``): the model returning its keys in another order still passes, and
    the levels swapped fail, naming one."""

    class Pyramid(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, 4, 3, stride=2, padding=1)
            self.fc = nn.Linear(4, 3)

        def forward(self, x):
            f = F.relu(self.stem(x))
            return {"logits": self.fc(f.mean((2, 3))), "levels": [f, F.avg_pool2d(f, 2)]}

    torch.manual_seed(0)
    model = Pyramid()
    path = _export(
        model,
        (torch.randn(2, 3, 16, 24),),
        tmp_path / "p.onnx",
        names=["x"],
        outputs=["logits", "levels.0", "levels.1"],
    )

    class Reordered(nn.Module):  # same function, the dict in the other order
        def __init__(self, inner, swap=False):
            super().__init__()
            self.inner, self.swap = inner, swap

        def forward(self, x):
            out = self.inner(x)
            levels = out["levels"][::-1] if self.swap else out["levels"]
            return {"levels": levels, "logits": out["logits"]}

    report = check_parity(Reordered(model), path, batch_sizes=(2,), n_inputs=2)
    assert report, report.table()
    assert list(dict.fromkeys(r.output for r in report.rows)) == ["logits", "levels.0", "levels.1"]
    report = check_parity(Reordered(model, swap=True), path, batch_sizes=(2,), n_inputs=2)
    assert not report
    assert all(r.passed for r in report.rows if r.output == "logits")
    assert report.worst_output in ("levels.0", "levels.1")


class SeqFirst(nn.Module):
    """A CRNN's CTC head: (T, N, C) log-probabilities, the layout ``nn.CTCLoss`` takes, and
    the pooled (N, C) logits beside."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=(4, 2), padding=1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        f = F.relu(self.conv(x)).mean(2).permute(2, 0, 1)  # (T, N, C)
        return self.fc(f).log_softmax(-1), self.fc(f.mean(0))


def test_an_output_whose_batch_is_not_its_first_axis_is_compared_by_sample(tmp_path):
    """The file names where each output's batch is (its symbolic batch on axis 1): the
    check joins batches there (it joined them on axis 0, and a NumPy broadcast error
    escaped). A tampered file fails on both outputs."""
    torch.manual_seed(0)
    model = SeqFirst().eval()
    path = _export(model, (torch.randn(2, 3, 16, 24),), tmp_path / "ctc.onnx", names=["x"], outputs=["ctc", "logits"])
    assert [s.dims for s in read_signature(path)[1]] == [(12, "batch", 5), ("batch", 5)]
    report = check_parity(model, path, batch_sizes=(1, 2), n_inputs=4)
    assert report, report.table()
    assert {r.output for r in report.rows} == {"ctc", "logits"}
    assert not check_parity(model, _tamper(path, tmp_path / "bad.onnx", "fc.weight"), batch_sizes=(1, 2), n_inputs=4)


def test_batch_axes_read_the_files_dims():
    from dcd_deploy.parity._signature import TensorSpec, batch_axes

    f32 = np.dtype("float32")
    ins = [TensorSpec("x", ("N", 3, 8, 8), f32)]
    outs = [
        TensorSpec("ctc", (12, "N", 5), f32),
        TensorSpec("logits", ("N", 5), f32),
        TensorSpec("square", ("N", "N"), f32),  # the batch on two axes: the first
        TensorSpec("anchors", (12, 4), f32),  # no batch: axis 0, as always
        TensorSpec("unknown", None, f32),  # a rank the file does not give
    ]
    assert batch_axes(ins, outs) == [1, 0, 0, 0, 0]
    fixed = [TensorSpec("x", (1, 3, 8, 8), f32)]
    assert batch_axes(fixed, [TensorSpec("t", (12, 1, 5), f32), TensorSpec("u", (1, 1, 5), f32)]) == [1, 0]


def test_a_fixed_batch_file_of_a_sequence_first_output_checks(tmp_path):
    """A fixed batch of 1: the output is (12, 1, 5), the one axis of the batch's size."""
    from dcd_deploy import export_onnx

    torch.manual_seed(0)
    result = export_onnx(SeqFirst().eval(), tmp_path / "ctc1.onnx", input_size=(16, 24), batch=1)
    assert result, result.parity.table()
    assert [s.dims for s in read_signature(tmp_path / "ctc1.onnx")[1]][0] == (12, 1, 5)


def test_feature_map_output_with_symbolic_size(files):
    model, path = files["pair"]
    with pytest.raises(DCDDeployError, match="symbolic height or width"):
        check_parity(model, path)
    report = check_parity(model, path, batch_sizes=(2,), n_inputs=2, example_inputs=(torch.zeros(1, 3, 20, 28),))
    assert report and report.input_size == [20, 28], report.table()
    x = synthetic_images(2, (12, 40), seed=5)
    report = check_parity(model, path, batch_sizes=(2,), inputs=x)
    assert report and report.input_size == [12, 40]
    assert [r.output for r in report.rows] == ["pooled", "map"] * 2


def test_output_count_mismatch_is_a_user_error(files):
    _, path = files["dict"]
    with pytest.raises(DCDDeployError, match="returns 1 tensor"):
        check_parity(nn.Conv2d(3, 2, 1), path)


def test_non_square_images_are_the_square_generator_stretched():
    square = synthetic_images(3, 16, seed=2)
    assert torch.equal(square, synthetic_images(3, (16, 16), seed=2))
    wide = synthetic_images(3, (16, 40), seed=2)
    assert wide.shape == (3, 3, 16, 40)
    mean, std = torch.tensor([0.485, 0.456, 0.406]), torch.tensor([0.229, 0.224, 0.225])
    pixels = wide * std.view(1, 3, 1, 1) + mean.view(1, 3, 1, 1)
    assert pixels.min() >= -1e-6 and pixels.max() <= 1 + 1e-6  # a [0, 1] image, normalised


def test_synthetic_integer_inputs_take_the_examples_range_and_pixels_take_0_to_255():
    """A uint8 input that is no NCHW image (an NHWC camera frame) gets pixels over 0-255
    where nothing says its range (no example, or the zero example of a trace); an example
    with a range keeps it (a 0/1 mask), and other integers keep the example's values."""
    from dcd_deploy.parity._signature import TensorSpec, synthetic_inputs

    frame = TensorSpec("x", ("batch", 20, 28, 3), np.dtype(np.uint8))
    for example in (None, torch.zeros(1, 20, 28, 3, dtype=torch.uint8)):
        (x,) = synthetic_inputs([frame], None if example is None else [example], 4, seed=0)
        assert x.dtype == torch.uint8 and x.shape == (4, 20, 28, 3)
        assert int(x.min()) < 10 and int(x.max()) > 245  # 6,720 draws over 0-255
    mask = torch.zeros(1, 20, 28, 3, dtype=torch.uint8)
    mask[0, 0, 0, 0] = 1
    (x,) = synthetic_inputs([frame], [mask], 4, seed=0)
    assert set(x.unique().tolist()) == {0, 1}
    ids = TensorSpec("ids", ("batch", 6), np.dtype(np.int64))
    (x,) = synthetic_inputs([ids], [torch.full((1, 6), 5)], 3, seed=0)
    assert set(x.unique().tolist()) == {5}
