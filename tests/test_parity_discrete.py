"""Parity of bool and integer outputs (a mask's ``p > t``, an ``argmax``): compared by the
share of elements that differ, since a decision on a value within rounding of its
threshold flips under any other summation order.

The oracles are hand-made: arrays with a known number of flipped elements, and a file
doctored so that exactly the pixels built to sit on the threshold decide the other way.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper
from torch import nn

from dcd_deploy import check_parity, export_onnx
from dcd_deploy.layers import DCDConv2d
from dcd_deploy.parity import DEFAULT_K, DISCRETE_FRACTION, ParityReport, _compare


def flipped(a: np.ndarray, n: int) -> np.ndarray:
    out = a.copy()
    out.reshape(-1)[:n] = ~out.reshape(-1)[:n]
    return out


def test_a_mask_with_one_flip_in_twenty_thousand_passes_and_counts_it():
    ref32 = np.random.default_rng(0).standard_normal((2, 100, 100)) > 0
    row = _compare(ref32.astype(np.float64), ref32, flipped(ref32, 1), "all", 2, atol=1e-5, rtol=1e-3)
    assert row.discrete and row.passed
    assert (row.differ, row.elements) == (1, 20000)
    assert row.max_abs == pytest.approx(1 / 20000) and row.tolerance == DISCRETE_FRACTION
    assert not row.ill_conditioned and not row.classifier


def test_a_mask_with_one_percent_flipped_fails():
    ref32 = np.random.default_rng(0).standard_normal((2, 100, 100)) > 0
    row = _compare(ref32.astype(np.float64), ref32, flipped(ref32, 200), "all", 2, atol=1e-5, rtol=1e-3)
    assert not row.passed and row.differ == 200


def test_labels_must_agree_where_there_are_few():
    # 8 labels: one flip is a share of 1/8, far above the allowance
    ref32 = np.arange(8, dtype=np.int64)
    out = ref32.copy()
    out[3] = 5
    row = _compare(ref32.astype(np.float64), ref32, out, "all", 8, atol=1e-5, rtol=1e-3)
    assert row.discrete and not row.passed and row.differ == 1
    assert _compare(ref32.astype(np.float64), ref32, ref32.copy(), "all", 8, atol=1e-5, rtol=1e-3).passed


def test_where_pytorch_fp32_itself_flips_the_row_is_ill_conditioned():
    ref = np.random.default_rng(1).standard_normal((4, 50, 50)) > 0  # 10000 elements
    torch32 = flipped(ref, 20)  # PyTorch fp32 off float64 on 0.2%
    out = flipped(ref, 150)  # 1.5%: within 10x PyTorch's own share
    row = _compare(ref.astype(np.float64), torch32, out, "all", 4, atol=1e-5, rtol=1e-3)
    assert row.ill_conditioned and row.passed
    assert row.tolerance == pytest.approx(DEFAULT_K * 20 / 10000)
    worse = _compare(ref.astype(np.float64), torch32, flipped(ref, 300), "all", 4, atol=1e-5, rtol=1e-3)
    assert not worse.passed


def test_a_mask_that_differs_is_named_when_another_output_is_the_worst():
    logits = np.linspace(-1, 1, 20).reshape(2, 10)
    near = _compare(logits, logits.astype(np.float32), logits + 9e-4, "all", 2, atol=1e-5, rtol=1e-3, output="y")
    mask32 = np.random.default_rng(0).standard_normal((2, 100, 100)) > 0
    mask = _compare(mask32.astype(np.float64), mask32, flipped(mask32, 1), "all", 2, atol=1e-5, rtol=1e-3)
    mask.output = "mask"
    report = ParityReport("f.onnx", None, 1e-5, 1e-3, rows=[near, mask], outputs=["y", "mask"])
    assert report and report.worst_output == "y"
    assert report.summary().startswith("PASS: worst output 'y' of 2: max abs 0.0009")
    assert "'mask': 1 of 20000 elements differ" in report.summary()


# ------------------------------------------------------------------------ through a file
class _MaskNet(nn.Module):
    """A DCD feature map and a mask decided on the input's channel sum."""

    def __init__(self):
        super().__init__()
        self.dcd = DCDConv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return {"features": self.dcd(x), "mask": x.sum(1) > 0}


SIDE = 32


def _inputs(on_threshold: int) -> torch.Tensor:
    """8 images whose first ``on_threshold`` pixels (over the batch) have channels summing
    to exactly 0 in every precision (a, -a, 0), all others far from 0."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 3, SIDE, SIDE, generator=g)
    x[:, 2] += torch.sign(x[:, 2]) * 0.5 - x.sum(1)  # |channel sum| >= 0.5 everywhere
    pixels = x.permute(0, 2, 3, 1).contiguous()  # (8, H, W, 3)
    pixels.view(-1, 3)[:on_threshold] = torch.tensor([0.75, -0.75, 0.0])
    return pixels.permute(0, 3, 1, 2).contiguous()


def _doctored(path, tmp_path):
    """The file with its mask's threshold moved from 0 to -1e-30: only a sum of exactly 0
    decides the other way (what a runtime's other rounding does to a value on the edge)."""
    proto = onnx.load(str(path))
    greater = next(n for n in proto.graph.node if n.op_type == "Greater")
    consts = {i.name: i for i in proto.graph.initializer}
    nodes = {o: n for n in proto.graph.node for o in n.output}
    name = greater.input[1]
    value = numpy_helper.to_array(consts[name]) if name in consts else numpy_helper.to_array(nodes[name].attribute[0].t)
    assert np.all(value == 0), value
    replacement = numpy_helper.from_array(np.full_like(value, -1e-30), name)
    if name in consts:
        consts[name].CopyFrom(replacement)
    else:
        nodes[name].attribute[0].t.CopyFrom(replacement)
    out = tmp_path / "doctored.onnx"
    onnx.save(proto, str(out))
    return out


@pytest.fixture(scope="module")
def mask_file(tmp_path_factory):
    torch.manual_seed(0)
    model = _MaskNet().eval()
    path = tmp_path_factory.mktemp("discrete") / "mask.onnx"
    export_onnx(model, path, example_inputs=_inputs(0)[:1], check=False)
    return model, path


def test_a_correct_file_agrees_on_every_element(mask_file):
    model, path = mask_file
    report = check_parity(model, path, inputs=_inputs(3), batch_sizes=(1, 2))
    assert report, report.summary()
    assert all(r.differ == 0 for r in report.rows if r.discrete)
    assert {r.output for r in report.rows if r.discrete} == {"mask"}


def test_elements_on_the_threshold_that_decide_the_other_way_pass_and_are_named(mask_file, tmp_path):
    model, path = mask_file
    doctored = _doctored(path, tmp_path)
    x = torch.cat([_inputs(0), _inputs(1)])  # 1 pixel on the threshold in 16·32·32 = 16384: 6.1e-5
    report = check_parity(model, doctored, inputs=x, batch_sizes=(1, 2), n_inputs=16)
    assert report, report.summary()
    rows = [r for r in report.rows if r.output == "mask"]
    assert rows and all((r.differ, r.elements) == (1, 16384) for r in rows)
    assert "worst output 'mask' of 2: 1 of 16384 elements differ from float64" in report.summary()


def test_many_elements_deciding_the_other_way_fail_and_name_the_output(mask_file, tmp_path):
    model, path = mask_file
    doctored = _doctored(path, tmp_path)
    report = check_parity(model, doctored, inputs=_inputs(100), batch_sizes=(1, 2))
    assert not report
    assert "worst output 'mask'" in report.summary()
    assert "100 of 8192 elements differ" in report.summary()
