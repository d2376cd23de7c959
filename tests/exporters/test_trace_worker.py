"""The trace in a pre-warmed second process gives what the trace in one process gives.

Oracle: the same export without a worker (``trace_worker=None``): the same ONNX bytes,
the same report, the same one-line error for a model ``torch.export`` cannot trace; a
module that does not pickle, or a worker that died, falls back to that path. The
worker must be gone after its trace, and the CLI must not leave a file behind.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch
from click.testing import CliRunner
from torch import nn

from dcd_deploy import export_onnx
from dcd_deploy.cli.export import main as export_main
from dcd_deploy.errors import ExportError
from dcd_deploy.exporters import _trace
from dcd_deploy.exporters._trace_worker import TraceWorker, trace_worker
from dcd_deploy.layers import DCDConv2d

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or (os.cpu_count() or 1) < 2, reason="fork, two cores"
)

SIZE = 16


class Small(nn.Module):
    """A DCD layer, a BN folded into it, a functional op and a pooled head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.dcd = DCDConv2d(8, 16)
        self.bn = nn.BatchNorm2d(16)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        y = torch.nn.functional.silu(self.bn(self.dcd(self.stem(x))))
        return self.head(y.mean((2, 3)))


class DataDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.dcd = DCDConv2d(3, 8)

    def forward(self, x):
        y = self.dcd(x)
        if y.sum() > 0:  # control flow on a value: torch.export cannot trace it
            return y
        return -y


def build_small() -> nn.Module:
    """``MODULE:FUNCTION`` for the CLI tests (this module is imported before the fork)."""
    torch.manual_seed(0)
    return Small().eval()


def build_data_dependent() -> nn.Module:
    torch.manual_seed(0)
    return DataDependent().eval()


def _gone(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def _spy(monkeypatch) -> list:
    """Record each in-process trace (the worker's trace runs in the child, unseen here)."""
    calls = []
    real = _trace._fast

    def fast(*args):
        calls.append(args[0])
        return real(*args)

    monkeypatch.setattr(_trace, "_fast", fast)
    return calls


def _export(tmp_path, name, model, worker, **kwargs):
    result = export_onnx(model, tmp_path / f"{name}.onnx", input_size=SIZE, trace_worker=worker, **kwargs)
    report = result.parity.to_dict() if result.parity is not None else None
    if report is not None:
        report.pop("onnx_path")
    return (tmp_path / f"{name}.onnx").read_bytes(), report


@pytest.mark.parametrize("mode", ["standard", "fused"])
def test_same_bytes_and_report_as_in_one_process(tmp_path, monkeypatch, mode):
    model = build_small()
    alone = _export(tmp_path, "alone", model, None, mode=mode)
    calls = _spy(monkeypatch)
    with trace_worker() as worker:
        pid = worker.pid
        split = _export(tmp_path, "split", model, worker, mode=mode)
        assert worker.pid is None and _gone(pid)  # one trace, then it is gone
    assert calls == []  # traced in the worker, not here
    assert split == alone


def test_untraceable_model_is_the_same_one_line_error(tmp_path, monkeypatch):
    with pytest.raises(ExportError) as alone:
        export_onnx(DataDependent().eval(), tmp_path / "a.onnx", input_size=SIZE)
    calls = _spy(monkeypatch)
    with trace_worker() as worker, pytest.raises(ExportError) as split:
        export_onnx(DataDependent().eval(), tmp_path / "b.onnx", input_size=SIZE, trace_worker=worker)
    assert calls == []
    assert str(split.value) == str(alone.value) and "\n" not in str(split.value)
    assert list(tmp_path.iterdir()) == []


class Unpicklable(Small):
    def __init__(self):
        super().__init__()
        self.hook = lambda x: x  # a lambda does not pickle


def test_a_module_that_does_not_pickle_is_traced_here(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = Unpicklable().eval()
    alone = _export(tmp_path, "alone", model, None, check=False)
    calls = _spy(monkeypatch)
    with trace_worker() as worker:
        pid = worker.pid
        split = _export(tmp_path, "split", model, worker, check=False)
        assert _gone(pid)
    assert len(calls) == 1
    assert split == alone


def test_a_dead_worker_is_traced_here(tmp_path, monkeypatch):
    model = build_small()
    alone = _export(tmp_path, "alone", model, None, check=False)
    calls = _spy(monkeypatch)
    worker = TraceWorker.start()
    os.killpg(worker.pid, 9)
    split = _export(tmp_path, "split", model, worker, check=False)
    assert len(calls) == 1 and worker.pid is None
    assert split == alone


def test_the_worker_ends_when_nothing_is_traced():
    with trace_worker() as worker:
        pid = worker.pid
    assert _gone(pid)


def test_cli_traces_in_the_worker(tmp_path, monkeypatch):
    calls = _spy(monkeypatch)
    out = tmp_path / "m.onnx"
    result = CliRunner().invoke(
        export_main, [f"{__name__}:build_small", "--input-size", str(SIZE), "-o", str(out), "-q"]
    )
    assert result.exit_code == 0, result.output
    assert calls == [] and out.exists()


def test_cli_error_in_the_worker_is_one_line_and_no_file(tmp_path, monkeypatch):
    calls = _spy(monkeypatch)
    out = tmp_path / "m.onnx"
    result = CliRunner().invoke(
        export_main, [f"{__name__}:build_data_dependent", "--input-size", str(SIZE), "-o", str(out)]
    )
    assert result.exit_code == 1
    errors = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(errors) == 1 and errors[0].startswith("Error: cannot export DataDependent"), result.stderr
    assert "Traceback" not in result.output
    assert calls == [] and list(tmp_path.iterdir()) == []


def test_interrupted_while_the_worker_traces_ends_it():
    """Ctrl-C in the parent (here: while it does its own work meanwhile) kills the child."""
    model = build_small()

    def interrupted():
        raise KeyboardInterrupt

    worker = TraceWorker.start()
    pid = worker.pid
    with pytest.raises(KeyboardInterrupt):
        worker.trace(
            model,
            (torch.zeros(1, 3, SIZE, SIZE),),
            meanwhile=interrupted,
            batch=None,
            dynamic_size=False,
            input_names=["input"],
            output_names=["logits"],
        )
    assert worker.pid is None and _gone(pid)


def test_a_class_the_worker_has_not_imported_is_traced_here(tmp_path, monkeypatch):
    """The user's MODULE:FUNCTION file is imported after the fork: the worker does not
    import it again (its top-level code would run twice), the parent traces."""
    (tmp_path / "late_net.py").write_text(
        "from torch import nn\n"
        "from dcd_deploy.layers import DCDConv2d\n"
        "print('imported late_net')\n"
        "class LateNet(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.dcd = DCDConv2d(3, 8)\n"
        "    def forward(self, x):\n"
        "        return self.dcd(x).mean((2, 3))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    calls = _spy(monkeypatch)
    with trace_worker() as worker:
        import importlib

        late = importlib.import_module("late_net")
        torch.manual_seed(0)
        split = _export(tmp_path, "split", late.LateNet().eval(), worker, check=False)
    assert len(calls) == 1
    torch.manual_seed(0)
    assert split == _export(tmp_path, "alone", late.LateNet().eval(), None, check=False)
