"""The commands' error contract (docs/design.md#errors): :func:`run_cli`.

A :class:`~dcd_deploy.errors.DCDDeployError` becomes one ``Error: <message>`` line on
stderr and exit status 1, with no traceback; any other exception is a bug and
propagates with its traceback.

The same contract covers what the user's environment does to a run: SIGTERM and SIGHUP
(``timeout``, a closed terminal, a CI runner giving up) unwind like Ctrl-C, so every
temporary file and directory is removed and an existing output stays as it was, then
the command prints one line and exits with 128 + the signal number; when the main
thread is inside a native call that does not return (an endless inference), a watchdog
thread does the clean-up and exits :data:`SIGNAL_GRACE_S` seconds after the signal.
Running out of memory or disk space is one line and status 1, not a traceback; Python
warnings are shown after a command succeeds and dropped when it fails.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from .. import _cleanup
from ..errors import DCDDeployError

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
        if w.category is UserWarning and _is_ours(w.filename):  # said to the user: one line, as errors are
            click.echo(f"Warning: {w.message}", err=True)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


def _is_ours(filename: str) -> bool:
    """Whether a warning was raised in this package (its file and line mean nothing to a user)."""
    package = Path(__file__).resolve().parents[1]
    try:
        return Path(filename).resolve().is_relative_to(package)
    except (OSError, ValueError):
        return False


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
    if _cleanup.deferring(signum):  # raised again when the critical section ends
        return
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
        message = message[: MAX_ERROR_LINE - 3] + "..."
    if watch is not None:
        with watch.lock:  # the watchdog is not printing (or has exited the process)
            watch.reported = True
            watch.done.set()
    click.echo(f"Error: {message}", err=True)
    raise SystemExit(status) from None
