"""The console scripts' entry points: a command, then the process ends without teardown.

When a command returns, CPython tears the interpreter down: it clears every module and
collects every object still alive, a second or so of freeing memory the operating
system takes back at exit anyway. With ``torch.export``'s imports loaded (dynamo,
sympy, onnxscript's torchlib) that teardown took 1.3-1.5 s of CPU after
``dcd-export mobilenetv2_100_dcd`` (docs/performance.md). So a console script ends the
way Python ends up to that point, then stops: the command has returned (its files are
written and its temporary files removed by its own ``finally`` blocks), non-daemon
threads are joined, ``atexit`` handlers run, stdout and stderr are flushed; then
``os._exit`` with the command's status. Where one of these cannot be done as Python
would (a non-daemon thread still running, a flush failing on a closed pipe), the
normal exit runs instead, so the status and the output are what they always were.

Only the installed scripts and ``python -m dcd_deploy`` end this way; calling a
command's ``main`` (tests, click's ``CliRunner``) exits as any click command does.
"""

from __future__ import annotations

import atexit
import importlib
import os
import sys
import threading
from collections.abc import Callable
from typing import NoReturn


def run_and_exit(command: Callable[[], object]) -> NoReturn:
    """Run ``command`` (returning an exit status, or raising ``SystemExit``), then end
    the process with its status without the interpreter's teardown.

    An exception other than ``SystemExit`` propagates (Python prints it and exits 1).
    """
    try:
        code = command()
    except SystemExit as exc:
        code = exc.code
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.current_thread()):
        sys.exit(code)  # Python joins them first
    atexit._run_exitfuncs()  # what Py_Finalize runs next: logging's flush, multiprocessing's joins
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe: Python's own exit reports it as always
        sys.exit(code)
    os._exit(_status(code))


def _status(code: object) -> int:
    """The exit status ``sys.exit(code)`` gives (a message is printed to stderr, status 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _command(module: str) -> Callable[[], object]:
    return lambda: importlib.import_module(module).main()


def export() -> NoReturn:
    """``dcd-export``, with glibc's allocator keeping freed memory (:mod:`._malloc`)."""
    from ._malloc import keep_freed_memory

    keep_freed_memory()
    run_and_exit(_command("dcd_deploy.cli.export"))


def validate() -> NoReturn:
    """``dcd-validate``."""
    run_and_exit(_command("dcd_deploy.cli.validate"))


def bench() -> NoReturn:
    """``dcd-bench``."""
    run_and_exit(_command("dcd_deploy.cli.bench"))
