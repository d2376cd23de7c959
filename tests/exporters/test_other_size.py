"""A ``dynamic_size`` export is checked at a second size (``exporters/_other_size.py``).

The networks are written as users write them: a text recogniser's LSTM over the image's
columns and a keypoint head's soft-argmax over ``torch.linspace(0, 1, W)``, whose sizes
torch.export fixes inside a graph whose input stays symbolic (the file then fails at any
other size, or returns a wrong shape), and a depth network that resizes to another
tensor's symbolic size, which must export."""

from __future__ import annotations

import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dcd_deploy import export_onnx
from dcd_deploy.errors import ExportError
from dcd_deploy.exporters._other_size import STEPS, other_size_example, size_fixing_calls
from dcd_deploy.layers import DCDConv2d


class _TextLine(nn.Module):
    """A CRNN: grey 16-row strips, DCD convs, the columns through a BiLSTM."""

    def __init__(self):
        super().__init__()
        self.cnn = nn.Sequential(
            nn.Conv2d(1, 8, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2), DCDConv2d(8, 16, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2)
        )
        self.rows = nn.Conv2d(16, 16, (4, 1))  # the strip's 4 remaining rows into one: H must be 16
        self.rnn = nn.LSTM(16, 8, bidirectional=True, batch_first=True)
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        f = self.rows(self.cnn(x)).squeeze(2).permute(0, 2, 1)  # (B, W / 4, C)
        return self.fc(self.rnn(f)[0])


class _SoftArgmax(nn.Module):
    """Heatmaps, then the expected column of each: ``torch.linspace`` over the width."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU(), DCDConv2d(8, 4, 3, 1, 1))

    def forward(self, x):
        h = self.body(x)
        p = F.softmax(h.flatten(2), -1).view_as(h)
        return (p.sum(2) * torch.linspace(0, 1, h.shape[-1])).sum(-1)


class _Depth(nn.Module):
    """A coarse branch resized to the fine one's symbolic size, concatenated."""

    def __init__(self):
        super().__init__()
        self.fine = nn.Conv2d(3, 8, 3, 2, 1)
        self.coarse = nn.Sequential(DCDConv2d(8, 8, 3, 2, 1), nn.ReLU())
        self.head = nn.Conv2d(16, 1, 3, 1, 1)

    def forward(self, x):
        a = self.fine(x)
        b = F.interpolate(self.coarse(a), size=a.shape[-2:], mode="bilinear", align_corners=True)
        return self.head(torch.cat((a, b), 1))


def _model(cls) -> nn.Module:
    torch.manual_seed(0)
    return cls().eval()


class _Pyramid(nn.Module):
    """A pooling pyramid's 3x3 cell: the windows of a map the pool does not divide."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU(), DCDConv2d(8, 8, 3, 1, 1))
        self.cells = nn.AdaptiveAvgPool2d((3, 3))

    def forward(self, x):
        return self.cells(self.body(x)).flatten(1)


class _PyramidCall(nn.Module):
    """The same cell as a functional call in forward, as in most pooling-pyramid code."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU(), DCDConv2d(8, 8, 3, 1, 1))

    def forward(self, x):
        return F.adaptive_avg_pool2d(self.body(x), (3, 3)).flatten(1)


@pytest.mark.parametrize(
    "cls, size, checked, named",
    [
        (_TextLine, (16, 64), "16x128 (traced at 16x64)", "perhaps rnn (LSTM)"),
        # a functional call, by its size and the line of the model's code that made it
        (_SoftArgmax, (24, 32), "56x96 (traced at 24x32)", "perhaps torch.linspace(16) at test_other_size.py:"),
        (_Pyramid, (20, 28), "52x92 (traced at 20x28)", "perhaps cells (AdaptiveAvgPool2d to (3, 3))"),
        (
            _PyramidCall,
            (20, 28),
            "52x92 (traced at 20x28)",
            "perhaps F.adaptive_avg_pool2d((3, 3)) at test_other_size.py:",
        ),
    ],
)
def test_a_size_fixed_inside_the_graph_is_refused_and_nothing_written(tmp_path, cls, size, checked, named):
    model, out = _model(cls), tmp_path / "m.onnx"
    x = torch.randn(1, 1 if cls is _TextLine else 3, *size)
    with pytest.raises(ExportError, match="height and width are symbolic, but it does not compute") as err:
        export_onnx(model, out, example_inputs=x, dynamic_size=True)
    assert checked in str(err.value) and "export without --dynamic-size" in str(err.value)
    assert named in str(err.value)
    assert not out.exists() and list(tmp_path.iterdir()) == []
    # the same model exports at its fixed size, and that file is right there
    export_onnx(model, out, example_inputs=x)


def test_the_calls_named_are_the_models_own_and_fix_a_size():
    class Calls(nn.Module):
        def __init__(self):
            super().__init__()
            self.cells = nn.AdaptiveAvgPool2d(3)  # a layer: named as one, not as its call

        def forward(self, x):
            rows = F.adaptive_max_pool2d(x, (4, None))
            pooled = F.adaptive_avg_pool2d(x, 1) + F.adaptive_avg_pool2d(x, (1, None)).mean()  # no size fixed
            return rows.sum() + pooled.sum() + self.cells(x).sum() + torch.linspace(0, 1, steps=x.shape[-1]).sum()

    found = size_fixing_calls(Calls(), (torch.randn(1, 2, 8, 12),))
    assert [f.split(" at ")[0] for f in found] == ["F.adaptive_max_pool2d((4, None))", "torch.linspace(12)"]
    assert all(f.endswith(" in forward") and " at test_other_size.py:" in f for f in found)

    class Fails(nn.Module):
        def forward(self, x):
            F.adaptive_avg_pool2d(x, 3)
            raise RuntimeError("the model's own failure")

    assert size_fixing_calls(Fails(), (torch.randn(1, 2, 8, 12),)) == []


def test_the_refused_file_was_indeed_wrong_at_the_other_size(tmp_path, monkeypatch):
    # independent of our check: the file the export wrote before it (the check at the traced
    # size only) is wrong in ONNX Runtime at the size the check picked, where PyTorch runs:
    # it fails, or its output (or the output it declares) is not PyTorch's
    monkeypatch.setattr("dcd_deploy.exporters.onnx.other_size_example", lambda model, example: None)
    model, out = _model(_TextLine), tmp_path / "m.onnx"
    export_onnx(model, out, example_inputs=torch.randn(1, 1, 16, 64), dynamic_size=True)
    x = torch.randn(1, 1, 16, 128)
    with torch.no_grad():
        ref = model(x).numpy()
    assert ref.shape == (1, 32, 5)
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    declared = session.get_outputs()[0].shape
    try:
        (y,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    except Exception:  # noqa: BLE001 - ONNX Runtime's refusal, whatever it raises
        return
    static_dims_wrong = any(isinstance(d, int) and d != r for d, r in zip(declared, ref.shape))
    assert static_dims_wrong or y.shape != ref.shape or abs(y - ref).max() > 1e-2 * abs(ref).max()


def test_a_resize_to_a_symbolic_size_exports_and_runs_at_other_sizes(tmp_path):
    # torch.export files a conv's output-size arithmetic (ints) under the conv's path: no
    # Conv record of it (once one read "sym_size_int" as a float layer output, and ONNX
    # Runtime refused the checked file)
    model, out = _model(_Depth), tmp_path / "m.onnx"
    result = export_onnx(model, out, example_inputs=torch.randn(1, 3, 40, 56), dynamic_size=True)
    assert result.parity and result.dynamic_size
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    for h, w in ((40, 56), (72, 40), (33, 47)):
        x = torch.randn(2, 3, h, w)
        (y,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
        with torch.no_grad():
            ref = model(x).numpy()
        assert y.shape == ref.shape and abs(y - ref).max() < 1e-4 * max(1.0, abs(ref).max())


def test_the_second_size_is_the_first_the_model_takes():
    example = (torch.zeros(1, 1, 16, 64), torch.zeros(1, 7))
    # _TextLine needs 16 rows: (32, 64) is skipped, (0, 64) taken; the 2-D input is kept
    moved = other_size_example(_model(_TextLine), example[:1])
    assert STEPS[:2] == ((32, 64), (0, 64)) and moved[0].shape == (1, 1, 16, 128)

    class Two(nn.Module):
        def forward(self, x, v):
            return x.mean((2, 3)) + v.sum(1, keepdim=True)

    moved = other_size_example(Two(), example)
    assert moved[0].shape == (1, 1, 48, 128) and moved[1] is example[1]

    class Fixed(nn.Module):
        def forward(self, x):
            return x.view(1, 16 * 64)

    assert other_size_example(Fixed(), example[:1]) is None
