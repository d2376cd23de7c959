"""The check runs its runtime configurations in threads (``parity._each_runtime``) and
gives the same report as one after the other.

Oracle: the same export checked with one core reported (``os.cpu_count`` 1: every
configuration runs on the calling thread, in order); and the helper itself on a hand-made
case: results in the runners' order, an exception raised where its result is taken.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import threading
from pathlib import Path

import pytest

import dcd_deploy.parity as parity
from dcd_deploy import export_onnx

SIZE = 8


@functools.cache
def _nets():
    """The hand-built DCD nets of the lowering tests (three DCD layers with BNs, a DCD
    classifier): what the check runs is the same for any model, and these trace in a
    fraction of a zoo model's time."""
    path = Path(__file__).resolve().parent / "exporters" / "test_lowering.py"
    spec = importlib.util.spec_from_file_location("_dcd_test_lowering_nets_threads", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _report(tmp_path, monkeypatch, cores: int, mode: str) -> dict:
    monkeypatch.setattr(parity.os, "cpu_count", lambda: cores)
    model = _nets().small_net(SIZE)
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
