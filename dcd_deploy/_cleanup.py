"""What a command must remove if it is stopped where Python cannot unwind.

A command stopped by SIGTERM normally unwinds like Ctrl-C: every ``finally`` runs and
removes its temporary files (``cli._run.run_cli``). But a signal is handled only
when the main thread runs Python code, and an inference inside ONNX Runtime or OpenVINO
(a ``Loop`` of 10^15 iterations) may never return to it. Then the command's watchdog
(``cli._run``) exits the process itself, after :func:`emergency_cleanup`: the
temporary files and directories registered here are removed and the compiler process
groups registered here are killed. Registration is cheap; everything that creates a
temporary file or starts a compiler registers it for its lifetime.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_paths: dict[str, None] = {}
_groups: dict[int, None] = {}
_critical = 0
_pending: list[int] = []


@contextlib.contextmanager
def critical() -> Iterator[None]:
    """A section a terminating signal must not interrupt (starting a compiler and
    registering its process group: a signal in between would orphan it). The CLI's
    handler defers a signal that arrives inside (:func:`deferring`); it is raised again
    when the section ends."""
    global _critical
    _critical += 1
    try:
        yield
    finally:
        _critical -= 1
        if not _critical and _pending:
            signum = _pending[0]
            _pending.clear()
            signal.raise_signal(signum)


def deferring(signum: int) -> bool:
    """Called by a signal handler: True (and the signal is kept) inside :func:`critical`."""
    if _critical:
        _pending.append(signum)
        return True
    return False


def register_path(path: str | os.PathLike) -> None:
    """Remove ``path`` (a file or directory tree) if the process must exit abruptly."""
    with _lock:
        _paths[os.fspath(path)] = None


def unregister_path(path: str | os.PathLike) -> None:
    with _lock:
        _paths.pop(os.fspath(path), None)


def register_group(pgid: int) -> None:
    """Kill process group ``pgid`` (a compiler started in its own session) on an abrupt exit."""
    with _lock:
        _groups[pgid] = None


def unregister_group(pgid: int) -> None:
    with _lock:
        _groups.pop(pgid, None)


def kill_group(pgid: int) -> None:
    """SIGKILL every process of group ``pgid``; nothing if it is gone."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def become_group_leader() -> None:
    """In a child this command forked (``parity``'s reference, the trace worker): the
    default signal dispositions (the parent's handlers and wakeup fd are its own) and a
    process group of its own, which the parent registers (:func:`register_group`) and
    kills as a whole."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    os.setpgid(0, 0)


def emergency_cleanup() -> None:
    """Kill the registered process groups and remove the registered paths (best effort)."""
    with _lock:
        groups, paths = list(_groups), list(_paths)
    for pgid in groups:
        kill_group(pgid)
    for p in paths:
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(p)


@contextlib.contextmanager
def temporary_directory(prefix: str) -> Iterator[str]:
    """``tempfile.TemporaryDirectory(prefix=prefix)`` that an abrupt exit removes too."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        register_path(tmp)
        try:
            yield tmp
        finally:
            unregister_path(tmp)
