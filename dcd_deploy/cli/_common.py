"""Helpers shared by the click commands.

:func:`run_cli` gives every command the toolkit's error contract (docs/design.md#errors):
a :class:`~dcd_deploy.errors.DCDDeployError` becomes one ``Error: <message>`` line on
stderr and exit status 1, with no traceback; any other exception is a bug and
propagates with its traceback. :func:`write_json_atomic` writes a report so a reader
never sees half a file.

The same contract covers what the user's environment does to a run: SIGTERM and SIGHUP
(``timeout``, a closed terminal, a CI runner giving up) unwind like Ctrl-C, so every
temporary file and directory is removed and an existing output stays as it was, then
the command prints one line and exits with 128 + the signal number. Running out of
memory or disk space is one line and status 1, not a traceback.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import re
import signal
import sys
import threading
import warnings
from pathlib import Path
from typing import Any, Callable, TypeVar

import click

from .. import _cleanup
from .._atomic import atomic_output, check_distinct, check_output_path
from .._limits import MAX_SEED, check_memory
from ..errors import DCDDeployError, ParityError

#: Exit status of a command stopped by a user error.
USER_ERROR_STATUS = 1

F = TypeVar("F", bound=Callable[..., Any])


def run_cli(fn: F) -> F:
    """Turn a :class:`DCDDeployError` raised by ``fn`` into ``Error: ...`` and exit 1.

    Apply it directly above the function, under the click decorators::

        @click.command()
        @click.option(...)
        @run_cli
        def main(...): ...
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with _signal_watchdog() as watch:
            try:
                with _terminate_as_exception(), _warnings_after_success():
                    return fn(*args, **kwargs)
            except DCDDeployError as exc:
                _fail(" ".join(str(exc).split("\n")) or type(exc).__name__, watch=watch)
            except Terminated as exc:
                _fail(_stopped(exc.signum), 128 + exc.signum, watch=watch)
            except MemoryError:
                _fail("out of memory; use a smaller input size, batch or model (or free memory)", watch=watch)
            except OSError as exc:
                if exc.errno not in _ENVIRONMENT_ERRNOS:
                    raise
                where = f" ({exc.filename})" if exc.filename else ""
                _fail(f"{exc.strerror or os.strerror(exc.errno)}{where}", watch=watch)

    return wrapper  # type: ignore[return-value]


def _stopped(signum: int) -> str:
    return f"stopped by {signal.Signals(signum).name}; temporary files removed, nothing written"


@contextlib.contextmanager
def _warnings_after_success():
    """Python warnings (numpy, torch, OpenVINO) raised during a command are shown after it
    succeeded, and dropped when it fails: the ``Error:`` line stays the only line."""
    with warnings.catch_warnings(record=True) as caught:
        yield
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


#: OSErrors that are the machine's state, not a bug: full disk, quota, file too large.
_ENVIRONMENT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
#: Signals that unwind a command like Ctrl-C does (SIGINT is click's KeyboardInterrupt).
TERMINATING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Terminated(BaseException):
    """A terminating signal arrived. A BaseException, so that no ``except Exception``
    on the way up swallows it, while every ``finally`` and context manager cleans up."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
        self.name = signal.Signals(signum).name


def _raise_terminated(signum, frame):
    # A second signal must not interrupt the clean-up the first one started.
    for sig in TERMINATING_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise Terminated(signum)


@contextlib.contextmanager
def _terminate_as_exception():
    """Turn SIGTERM/SIGHUP into :class:`Terminated` while the command runs."""
    previous = {}
    try:
        for sig in TERMINATING_SIGNALS:
            previous[sig] = signal.signal(sig, _raise_terminated)
    except ValueError:  # not the main thread (e.g. a test runner): leave signals alone
        pass
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


#: Seconds a signal waits for the main thread to unwind before the watchdog ends the
#: process itself (the main thread is inside a native call that never returns).
SIGNAL_GRACE_S = 3.0
#: Signals the watchdog acts on (SIGINT too: Ctrl-C during a hung inference).
_WATCHED = frozenset({signal.SIGTERM, signal.SIGHUP, signal.SIGINT})


class _Watch:
    def __init__(self):
        self.done = threading.Event()
        self.lock = threading.Lock()  # held by whoever prints the one Error line
        self.reported = False


@contextlib.contextmanager
def _signal_watchdog():
    """A thread that ends the process if a signal cannot be handled in time.

    Python runs a signal handler only when the main thread executes Python code; an
    ONNX Runtime or OpenVINO inference that never returns (a ``Loop`` of 10^15
    iterations) would make SIGTERM wait forever. Python's C-level handler also writes
    the signal's number to the wakeup fd, from any thread: this watchdog reads it, gives
    the main thread :data:`SIGNAL_GRACE_S` seconds to unwind (the normal path: every
    ``finally`` runs), then removes the registered temporary files, kills registered
    compiler groups (:mod:`dcd_deploy._cleanup`), prints the usual ``Error: stopped by
    ...`` line and exits with 128 + the signal number.
    """
    watch = _Watch()
    if threading.current_thread() is not threading.main_thread():
        yield watch
        return
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        previous = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except ValueError:
        os.close(r)
        os.close(w)
        yield watch
        return
    thread = threading.Thread(target=_watchdog, args=(r, watch), name="dcd-signal-watchdog", daemon=True)
    thread.start()
    try:
        yield watch
    finally:
        watch.done.set()
        signal.set_wakeup_fd(previous)
        with contextlib.suppress(OSError):
            os.write(w, b"\0")  # wakes the thread, which closes r
        os.close(w)


def _watchdog(r: int, watch: _Watch) -> None:
    try:
        while not watch.done.is_set():
            data = os.read(r, 64)
            if not data:
                return
            signals = [b for b in data if b in _WATCHED]
            if signals and not watch.done.wait(SIGNAL_GRACE_S):
                _exit_now(signals[0], watch)
    finally:
        os.close(r)


def _exit_now(signum: int, watch: _Watch) -> None:
    with watch.lock:
        if watch.reported or watch.done.is_set():
            return
        watch.reported = True
        _cleanup.emergency_cleanup()
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        with contextlib.suppress(OSError):
            os.write(2, f"Error: {_stopped(signum)}\n".encode())
        os._exit(128 + signum)


#: Longest Error line: a message quoting a file's contents (a 1 MB attribute) is cut.
MAX_ERROR_LINE = 2000


def _fail(message: str, status: int = USER_ERROR_STATUS, *, watch: _Watch | None = None):
    if len(message) > MAX_ERROR_LINE:
        message = message[:MAX_ERROR_LINE - 3] + "..."
    if watch is not None:
        with watch.lock:  # the watchdog is not printing (or has exited the process)
            watch.reported = True
            watch.done.set()
    click.echo(f"Error: {message}", err=True)
    raise SystemExit(status) from None


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` atomically (see :mod:`dcd_deploy._atomic`).

    Raises:
        DCDDeployError: the file cannot be written (missing directory, permissions).
    """
    with atomic_output(path) as tmp:
        try:
            try:
                text = json.dumps(data, indent=2, ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError:  # a file name that is not UTF-8: \udcxx escapes
                text = json.dumps(data, indent=2, ensure_ascii=True).encode("ascii")
            with open(tmp, "wb") as fh:
                fh.write(text + b"\n")
        except OSError as exc:
            raise DCDDeployError(f"cannot write {path}: {exc.strerror or exc}") from None


def check_output_dir(path: Path | None) -> None:
    """Refuse an unwritable output path early (before loading or exporting anything)."""
    if path is not None:
        check_output_path(path)


def parity_failure(report) -> ParityError:
    """The error for a failed or inconclusive check; it names ``--inputs`` where the inputs
    were to blame."""
    if report.verdict == "INCONCLUSIVE":
        return ParityError(f"parity check inconclusive: {report.summary()}", report)
    message = f"parity check failed: {report.summary()}"
    if report.ill_conditioned and report.synthetic_inputs and report.first_failing_layer is None:
        message += ("; the built-in synthetic images are outside this model's working range: "
                    "check on your own preprocessed images with --inputs FILE (.npy or .pt, N x 3 x H x W)")
    return ParityError(message, report)


def inputs_option(fn):
    """``--inputs FILE``: the parity check's images instead of the synthetic ones."""
    return click.option("--inputs", "inputs_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
                        metavar="FILE",
                        help="Check parity on these images: a .npy or .pt float tensor N x 3 x H x W, "
                             "preprocessed as the model expects (default: built-in synthetic images).")(fn)


def accept_inconclusive_option(fn):
    """``--accept-inconclusive``: an end-to-end check without power may pass."""
    return click.option("--accept-inconclusive", is_flag=True,
                        help="Pass even when the end-to-end comparison is inconclusive (PyTorch fp32 itself "
                             "far off float64 on these inputs) and no dynamic layer could decide it layer "
                             "by layer. Without it that is not a PASS (exit 1).")(fn)


def check_outputs(*, outputs, inputs=()) -> None:
    """Refuse, before any work, outputs that cannot be written or would overwrite an input.

    Args:
        outputs: the command's output paths (None for one not asked for).
        inputs: the files it reads (names that are not files, like zoo names, are skipped).

    Raises:
        DCDDeployError: an output is a directory, FIFO, device, ends in a separator, is an
            input, or two outputs are the same file.
    """
    for path in outputs:
        check_output_dir(path)
    check_distinct(outputs=outputs, inputs=inputs)


def default_output(model: str, suffix: str = ".onnx") -> Path:
    """MODEL's name with ``suffix`` in the current directory, never MODEL itself.

    ``dcd-export ckpt.onnx`` would otherwise write over its own input.
    """
    name = Path(model).name.split(".")[0] or "model"
    out = Path(name + suffix)
    if out.exists() and os.path.exists(model) and os.path.samefile(out, model):
        out = Path(f"{name}.deploy{suffix}")
    return out


class OutputPath(click.ParamType):
    """A file path kept as typed: ``newdir/`` must not lose its separator and become a file.

    Args:
        allow_dash: ``-`` is accepted (and kept as ``Path("-")``): the caller writes to stdout.
    """

    name = "path"

    def __init__(self, allow_dash: bool = False):
        self.allow_dash = allow_dash

    def convert(self, value, param, ctx):
        if isinstance(value, Path):
            return value
        if not value:
            self.fail("empty path", param, ctx)
        if value == "-" and not self.allow_dash:
            self.fail("'-' (stdout) is not accepted here; name a file", param, ctx)
        if value.endswith(os.sep):
            self.fail(f"{value} ends in a path separator; name a file, not a directory", param, ctx)
        return Path(value)


def check_parity_budget(*, input_size: int, batch_sizes, n_inputs: int) -> None:
    """Refuse a parity check too big for memory (see :mod:`dcd_deploy._limits`)."""
    biggest = max(batch_sizes)
    total = max(-(-n_inputs // b) * b for b in batch_sizes)
    check_memory(input_size=input_size, batch=biggest, n_inputs=total, what="the parity check")


@contextlib.contextmanager
def onnxruntime_errors(path):
    """ONNX Runtime failing on a user's file (a graph that fails at run time) is one line.

    ORT's own log of the failure (several coloured lines on stderr) is silenced: the
    ``Error:`` line carries its message.
    """
    import onnxruntime as ort

    ort.set_default_logger_severity(4)  # fatal only
    try:
        yield
    except Exception as exc:
        if not type(exc).__module__.startswith("onnxruntime"):
            raise
        text = " ".join(str(exc).split()) or type(exc).__name__
        text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text)
        text = re.sub(r"/onnxruntime_src/\S+ \S+ ", "", text)  # source location and C++ signature
        if len(text) > _MAX_MESSAGE:
            text = text[:_MAX_MESSAGE - 3] + "..."
        raise DCDDeployError(f"ONNX Runtime failed running {path}: {text}") from None


#: Longest message passed on from a third-party library.
_MAX_MESSAGE = 300


def model_options(fn):
    """The options every command that reads a MODEL argument shares."""
    fn = click.option("--arch", default=None, metavar="NAME",
                      help="Architecture of a plain state dict (a name from the zoo).")(fn)
    fn = click.option("--trust-checkpoint", is_flag=True,
                      help="Allow checkpoints that need full unpickling (runs code from the file).")(fn)
    fn = click.option("--seed", type=click.IntRange(0, MAX_SEED), default=0, show_default=True,
                      help="For a zoo name: pseudo-train seed giving non-trivial weights.")(fn)
    return fn
