"""The check's PyTorch side, computed in a second process while the file is being made.

What a parity check compares the file with (the original model in float64 on the
check's inputs, and in PyTorch fp32 batch by batch) depends on the model and the
inputs only, not on the file. ``dcd-export`` knows both before it traces, so it forks
once the model is loaded: the child computes them on the second core while the parent
traces, translates, simplifies and writes, and sends the arrays back through a pipe
(MobileNetV2 x1.0: about 1.5 s of CPU off the command's critical path).

The check takes them only when its own inputs and batch plan are exactly those the
child computed on (``torch.equal``); otherwise, or if the child failed, it computes them
itself as always. The child is its own process group (registered with
:mod:`dcd_deploy._cleanup`, so an interrupted command kills it), ignores the parent's
signal handlers, and leaves with ``os._exit``: it never unwinds the parent's stack
(whose ``finally`` blocks own the output's temporary file). Linux only (``fork``).
"""

from __future__ import annotations

import os
import pickle
import sys

import torch
from torch import nn

from .. import _cleanup
from .._modes import onnx_exporting


class Prefetch:
    """A forked child computing :func:`compute` for ``inputs`` and ``plans``; :meth:`take`
    returns its result for exactly those, :meth:`close` ends it."""

    def __init__(self, pid: int, fd: int, inputs: list[torch.Tensor], plans: dict[int, int]):
        self.pid, self.fd, self.inputs, self.plans = pid, fd, inputs, plans
        self.result: dict | None = None
        #: the float64 copy of the model (made here: the layer-wise check reads it in this process)
        self.reference_model: nn.Module | None = None

    def prepare_reference_model(self, model: nn.Module) -> None:
        """Make the float64 copy of ``model`` now, while this process would wait (a trace
        in another process); the check makes it itself if this fails."""
        from . import _reference_model

        try:
            self.reference_model = _reference_model(model)
        except Exception:
            self.reference_model = None

    @classmethod
    def start(cls, model: nn.Module, inputs: list[torch.Tensor], plans: dict[int, int]) -> Prefetch | None:
        """Fork a child computing the reference; None where fork is not available."""
        if not sys.platform.startswith("linux") or (os.cpu_count() or 1) < 2:
            return None
        r, w = os.pipe()
        with _cleanup.critical():  # a signal between fork and registration would orphan it
            pid = os.fork()
            if pid == 0:  # the child: never returns
                os.close(r)
                _child(model, inputs, plans, w)
            os.close(w)
            try:
                os.setpgid(pid, pid)  # also done by the child: whichever runs first
            except OSError:  # the child has exited already, or exec'd: nothing to group
                pass
            _cleanup.register_group(pid)
        return cls(pid, r, inputs, plans)

    def take(self, inputs: list[torch.Tensor], plans: dict[int, int]) -> dict | None:
        """The child's result if it computed on exactly ``inputs`` and ``plans``, else None
        (the caller computes); the child is done after the first call, its result kept
        for the next (a second candidate file checked on the same inputs)."""
        same = (
            plans == self.plans
            and len(inputs) == len(self.inputs)
            and all(
                a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b) for a, b in zip(inputs, self.inputs)
            )
        )
        if self.fd is not None:
            try:
                with os.fdopen(self.fd, "rb", closefd=True) as f:
                    self.fd = None
                    self.result = pickle.load(f) if same else None
            except (EOFError, OSError, pickle.UnpicklingError):
                self.result = None
            self.close()
        return self.result if same else None

    def close(self) -> None:
        """End the child (done or not) and release its pipe."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.pid is not None:
            _cleanup.kill_group(self.pid)
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
            _cleanup.unregister_group(self.pid)
            self.pid = None


def _child(model: nn.Module, inputs, plans, fd: int) -> None:
    status = 1
    try:
        _cleanup.become_group_leader()
        torch.set_num_threads(1)
        result = compute(model, inputs, plans)
        with os.fdopen(fd, "wb") as f:
            pickle.dump(result, f, protocol=pickle.HIGHEST_PROTOCOL)
        status = 0
    except BaseException:  # the parent computes it itself
        pass
    finally:
        os._exit(status)


def compute(model: nn.Module, inputs: list[torch.Tensor], plans: dict[int, int]) -> dict:
    """What :func:`~dcd_deploy.check_parity` computes of the model: the float64 reference
    (``ref64``, ``kind``) on ``inputs`` and, per batch size, the fp32 outputs batch by
    batch (``fp32``: {batch: [[(name, array) per output] per batch]})."""
    from . import _forward, _reference

    model = model.eval()
    with onnx_exporting():  # as check_parity runs it
        _, ref64, kind = _reference(model, inputs)
    fp32 = {}
    with torch.no_grad(), onnx_exporting():
        for b, used in plans.items():
            chunks = [[x[i : i + b] for x in inputs] for i in range(0, used, b)]
            fp32[b] = [[(n, t.numpy()) for n, t in _forward(model, c)] for c in chunks]
    return {"ref64": ref64, "kind": kind, "fp32": fp32}
