"""The check's PyTorch side computed in a forked process gives the same report, or none.

Oracle: the same export checked in one process (``parallel_check=False``); the
prefetched result must also be refused for inputs other than those it computed on, and
the child must be gone once the check (or the export) is over.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch

from dcd_deploy import create_model, export_onnx
from dcd_deploy.parity import prefetch
from dcd_deploy.parity._prefetch import compute

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork: Linux only")

SIZE = 32
SMALL = 8  # the hand-built net's input side


@functools.cache
def _nets():
    """The hand-built DCD nets of the lowering tests (three DCD layers with BNs, a DCD
    classifier): the exports compared below trace in a fraction of a zoo model's time,
    and what the second process computes is the same for any model."""
    path = Path(__file__).resolve().parent / "exporters" / "test_lowering.py"
    spec = importlib.util.spec_from_file_location("_dcd_test_lowering_nets_prefetch", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _report(tmp_path, parallel: bool, **kwargs) -> dict:
    model = _nets().small_net(SMALL)
    result = export_onnx(model, tmp_path / f"m{parallel}.onnx", input_size=SMALL, parallel_check=parallel, **kwargs)
    d = result.parity.to_dict()
    d.pop("onnx_path")
    return d


@pytest.mark.parametrize("kwargs", [{}, {"batch": 2}])
def test_same_report_with_and_without_the_second_process(tmp_path, kwargs):
    assert _report(tmp_path, True, **kwargs) == _report(tmp_path, False, **kwargs)


def test_other_inputs_are_refused_and_the_child_is_gone():
    torch.manual_seed(0)
    model = create_model("mobilenetv2_050_dcd").eval()
    example = (torch.zeros(1, 3, SIZE, SIZE),)
    ahead = prefetch(model, example, batch=None)
    if (os.cpu_count() or 1) < 2:
        assert ahead is None
        return
    pid = ahead.pid
    other = [x + 1 for x in ahead.inputs]
    assert ahead.take(other, ahead.plans) is None
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped


def test_the_result_is_what_the_check_computes():
    torch.manual_seed(0)
    model = create_model("mobilenetv2_050_dcd").eval()
    ahead = prefetch(model, (torch.zeros(1, 3, SIZE, SIZE),), batch=None)
    if ahead is None:
        pytest.skip("one core")
    got = ahead.take(list(ahead.inputs), dict(ahead.plans))
    expected = compute(model, ahead.inputs, ahead.plans)
    assert got["kind"] == expected["kind"] == "float64"
    assert len(got["ref64"]) == len(expected["ref64"])  # per chunk, per output
    for chunk_got, chunk_exp in zip(got["ref64"], expected["ref64"]):
        assert len(chunk_got) == len(chunk_exp) and all((a == b).all() for a, b in zip(chunk_got, chunk_exp))
    for b in expected["fp32"]:
        for out_got, out_exp in zip(got["fp32"][b], expected["fp32"][b]):
            assert [n for n, _ in out_got] == [n for n, _ in out_exp]
            assert all((x == y).all() for (_, x), (_, y) in zip(out_got, out_exp))
    assert ahead.take(list(ahead.inputs), dict(ahead.plans)) is got  # kept for a second candidate
