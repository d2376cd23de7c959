"""The check runs its runtime configurations in threads (``parity._each_runtime``) and
gives the same report as one after the other.

Oracle: the same export checked with one core reported (``os.cpu_count`` 1: every
configuration runs on the calling thread, in order); and the helper itself on a hand-made
case: results in the runners' order, an exception raised where its result is taken.
"""

from __future__ import annotations

import threading

import pytest
import torch

import dcd_deploy.parity as parity
from dcd_deploy import create_model, export_onnx

SIZE = 32


def _report(tmp_path, monkeypatch, cores: int, mode: str) -> dict:
    monkeypatch.setattr(parity.os, "cpu_count", lambda: cores)
    torch.manual_seed(0)
    model = create_model("mobilenetv2_050_dcd").eval()
    result = export_onnx(model, tmp_path / f"m{cores}.onnx", input_size=SIZE, mode=mode, parallel_check=False)
    d = result.parity.to_dict()
    d.pop("onnx_path")
    return d


@pytest.mark.parametrize("mode", ["standard", "function"])
def test_same_report_in_threads_and_in_turn(tmp_path, monkeypatch, mode):
    threaded = _report(tmp_path, monkeypatch, 2, mode)
    assert len({(r["backend"], r["optimization"]) for r in threaded["rows"]}) >= 2  # something ran side by side
    assert threaded == _report(tmp_path, monkeypatch, 1, mode)


def test_results_in_order_and_errors_where_taken(monkeypatch):
    monkeypatch.setattr(parity.os, "cpu_count", lambda: 2)
    threads = set()

    def work(value):
        threads.add(threading.get_ident())
        if value == "bad":
            raise ValueError("runner failed")
        return value * 2

    got = list(parity._each_runtime({"a": "x", "b": "y", "c": "z"}, work))
    assert got == [("a", "xx"), ("b", "yy"), ("c", "zz")]
    assert threading.get_ident() not in threads  # the runs were not on the caller
    it = parity._each_runtime({"a": "x", "b": "bad", "c": "z"}, work)
    assert next(it) == ("a", "xx")
    with pytest.raises(ValueError, match="runner failed"):
        next(it)
