"""The trace in a second process that imported the exporter while the model was loaded.

``torch.export`` imports all of ``torch._dynamo`` (1.4 s of CPU), and torch.onnx's
translator onnxscript's torchlib (0.4 s); neither can be shared between processes, and
a thread importing them holds the GIL the model's loading needs (docs/performance.md).
So ``dcd-export`` forks a :class:`TraceWorker` before it loads the model: the child
imports the exporter and prepares its tables (:mod:`._registry`, the decomposition
table) on the second core while the parent builds, loads and lowers the model; the
parent then sends it the lowered module, the child traces and translates it
(:func:`._trace.trace`, the same function as in one process) and sends the ONNX graph
back. The parent never imports the exporter.

The parent keeps everything the user sees: stdout and stderr (the child's Python
warnings and prints are sent back and replayed by the parent), the output file, the
exit status. The child's :class:`~dcd_deploy.errors.ExportError` (a model
``torch.export`` cannot trace) is raised again by the parent, the same one line. The
worker serves one trace and exits; whenever it cannot (a module that does not pickle; a
class of a module the child has not imported, e.g. the user's ``MODULE:FUNCTION``,
imported by the parent after the fork: the child never imports a module to unpickle,
so the user's code never runs twice at import; a child that died; any other exception
in it), :meth:`TraceWorker.trace`
returns None and the caller traces in its own process, as without a worker.

The child is its own process group, registered with :mod:`dcd_deploy._cleanup` (an
interrupted command kills it) and killed by :meth:`TraceWorker.close`; it leaves with
``os._exit``, never unwinding the parent's stack, and exits by itself when the
parent's end of the request pipe closes (the parent died). Linux only (``fork``).
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import sys
import threading
import traceback
import warnings
from collections.abc import Iterator

import onnx
import torch
from torch import nn

from .. import _cleanup
from ..errors import ExportError


class TraceWorker:
    """A forked child that imported the exporter and traces one module on request."""

    def __init__(self, pid: int, requests: int, replies: int):
        self.pid: int | None = pid
        self.requests: int | None = requests
        self.replies: int | None = replies

    @classmethod
    def start(cls) -> TraceWorker | None:
        """Fork the child (it starts importing at once); None where fork is not available."""
        if not sys.platform.startswith("linux") or (os.cpu_count() or 1) < 2:
            return None
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        with _cleanup.critical():  # a signal between fork and registration would orphan it
            pid = os.fork()
            if pid == 0:  # the child: never returns
                os.close(req_w)
                os.close(rep_r)
                _child(req_r, rep_w)
            os.close(req_r)
            os.close(rep_w)
            try:
                os.setpgid(pid, pid)  # also done by the child: whichever runs first
            except OSError:
                pass
            _cleanup.register_group(pid)
        return cls(pid, req_w, rep_r)

    def trace(self, model: nn.Module, example: tuple[torch.Tensor, ...], *, meanwhile=None, **options):
        """:func:`._trace.trace` of ``model`` in the child (``options`` as that takes them).

        ``meanwhile`` (no arguments) runs here while the child traces: this process
        would otherwise wait (a thread sends the request and receives the reply).

        Returns:
            ``(proto, fast_path)``, or None when the child cannot trace it (the caller
            traces in its own process).

        Raises:
            ExportError: the child's: ``torch.export`` cannot trace the model.
        """
        if self.requests is None:
            return None  # served already, or closed
        try:
            payload = pickle.dumps((model, example, options), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # a lambda, a local class, a handle: the module stays in this process
            self.close()
            return None
        received: list[bytes] = []
        exchange = threading.Thread(
            target=_exchange,
            args=(self.requests, self.replies, payload, received),
            name="dcd-trace-worker",
            daemon=True,
        )
        self.requests = self.replies = None  # the thread's now: it closes them
        exchange.start()
        try:
            if meanwhile is not None:
                meanwhile()
            exchange.join()
        finally:
            self.close()  # ends a child still tracing (this process was stopped): the thread sees EOF
            exchange.join()
        try:
            reply = pickle.loads(received[0]) if received and received[0] else ("fallback",)
        except Exception:  # the child died mid-reply, or it does not unpickle here: trace here
            reply = ("fallback",)
        if reply[0] == "error":
            _replay(reply[2], reply[3])
            raise ExportError(reply[1])
        if reply[0] != "ok":
            return None
        _, data, fast, caught, out, err = reply
        _replay(out, err, caught)
        return onnx.load_model_from_string(data), fast

    def close(self) -> None:
        """End the child (done or not) and release its pipes."""
        for name in ("requests", "replies"):
            fd = getattr(self, name)
            if fd is not None:
                setattr(self, name, None)
                with contextlib.suppress(OSError):
                    os.close(fd)
        if self.pid is not None:
            _cleanup.kill_group(self.pid)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            _cleanup.unregister_group(self.pid)
            self.pid = None


@contextlib.contextmanager
def trace_worker() -> Iterator[TraceWorker | None]:
    """A :class:`TraceWorker` for the body (None where none can start), ended after it."""
    worker = TraceWorker.start()
    try:
        yield worker
    finally:
        if worker is not None:
            worker.close()


def _exchange(requests: int, replies: int, payload: bytes, received: list) -> None:
    """Send the request, then read the reply to its end (the child closes it)."""
    try:
        with os.fdopen(requests, "wb", closefd=True) as f:
            f.write(payload)
    except OSError:  # the child died: nothing to read
        os.close(replies)
        return
    with os.fdopen(replies, "rb", closefd=True) as f:
        with contextlib.suppress(OSError):
            received.append(f.read())


def _replay(out: str, err: str, caught=()) -> None:
    """What the child's trace printed and warned, as if it had run here."""
    if out:
        sys.stdout.write(out)
    if err:
        sys.stderr.write(err)
    for message, category, filename, lineno in caught:
        warnings.warn_explicit(message, category, filename, lineno)


def _child(requests: int, replies: int) -> None:
    status = 1
    try:
        _cleanup.become_group_leader()
        torch.set_num_threads(1)  # the parent loads the model on the other core
        with contextlib.suppress(Exception):  # the trace imports what this could not
            _prepare()
        with os.fdopen(requests, "rb", closefd=True) as f:
            try:
                model, example, options = _Unpickler(f).load()
            except EOFError:  # the parent needs no trace (an error before it, or it died)
                os._exit(0)
            except Exception:  # a class this process never imported (the user's file)
                _reply(replies, ("fallback",))
                os._exit(0)
        _reply(replies, _traced(model, example, options))
        status = 0
    except BaseException:  # the parent traces itself
        pass
    finally:
        os._exit(status)


class _Unpickler(pickle.Unpickler):
    """Classes and functions of modules this process has imported only: unpickling never
    imports (runs) a module, e.g. the user's ``MODULE`` a second time, with its prints
    and side effects; the parent traces such a model itself."""

    def find_class(self, module: str, name: str):
        if module not in sys.modules:
            raise pickle.UnpicklingError(f"{module} is not imported in the trace worker")
        return super().find_class(module, name)


def _prepare() -> None:
    """Everything the trace imports and builds once per process, before it is asked to trace."""
    from torch.export import Dim  # noqa: F401  (torch.export and dynamo)
    from torch.export._trace import _export  # noqa: F401
    from torch.onnx._internal.exporter import _core, _fx_passes  # noqa: F401

    from ._placeholder import onnx_translation
    from ._trace import _kept_whole

    op, _ = onnx_translation()
    _kept_whole(op)  # the registry's op names (torchlib imported) and the decomposition table


def _traced(model: nn.Module, example, options) -> tuple:
    from ._trace import trace

    out, err = io.StringIO(), io.StringIO()
    try:
        with (
            warnings.catch_warnings(record=True) as caught,
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            traced = trace(model, example, **options)
    except ExportError as exc:
        return ("error", str(exc), out.getvalue(), err.getvalue())
    except Exception:
        return ("fallback", traceback.format_exc())
    kept = [(str(w.message), _picklable(w.category), w.filename, w.lineno) for w in caught]
    return ("ok", traced.proto.SerializeToString(), traced.fast_path, kept, out.getvalue(), err.getvalue())


def _picklable(category: type) -> type:
    try:
        pickle.loads(pickle.dumps(category))
    except Exception:
        return UserWarning
    return category


def _reply(fd: int, message: tuple) -> None:
    with os.fdopen(fd, "wb", closefd=True) as f:
        pickle.dump(message, f, protocol=pickle.HIGHEST_PROTOCOL)
