"""The console scripts end without the interpreter's teardown, and otherwise as Python would."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PRELUDE = """
import atexit, sys, threading, time
from dcd_deploy.cli._exit import run_and_exit

class Teardown:
    def __del__(self):
        print("teardown ran", flush=True)

KEPT = Teardown()  # freed only by the interpreter's teardown
atexit.register(lambda: print("atexit ran", end=""))  # unflushed: the exit must flush it
"""


def _run(body: str) -> subprocess.CompletedProcess:
    code = PRELUDE + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("returned, status", [(None, 0), (0, 0), (3, 3)])
def test_status_output_and_atexit_without_teardown(returned, status):
    proc = _run(f"""
        def command():
            print("partial line", end="")
            return {returned!r}
        run_and_exit(command)
    """)
    assert proc.returncode == status, proc.stderr
    assert proc.stdout == "partial lineatexit ran"  # no "teardown ran": skipped
    assert proc.stderr == ""


def test_system_exit_of_a_click_command_keeps_its_status_and_message():
    proc = _run("""
        def command():
            raise SystemExit("Error: something")
        run_and_exit(command)
    """)
    assert proc.returncode == 1
    assert proc.stderr == "Error: something\n"
    assert "teardown ran" not in proc.stdout


def test_a_running_non_daemon_thread_gets_the_normal_exit():
    proc = _run("""
        def late():
            time.sleep(0.3)
            print("thread done", flush=True)
        def command():
            threading.Thread(target=late).start()
            return 4
        run_and_exit(command)
    """)
    assert proc.returncode == 4
    assert "thread done" in proc.stdout and "atexit ran" in proc.stdout
    assert "teardown ran" in proc.stdout  # Python's own exit, teardown included


def test_an_exception_is_python_s_to_report():
    proc = _run("""
        def command():
            raise RuntimeError("a bug")
        run_and_exit(command)
    """)
    assert proc.returncode == 1
    assert "RuntimeError: a bug" in proc.stderr and "Traceback" in proc.stderr


def test_installed_scripts_and_python_m_use_it():
    from dcd_deploy.__main__ import COMMANDS

    bin_dir = __import__("pathlib").Path(sys.executable).parent
    for name in COMMANDS:
        assert "dcd_deploy.cli._exit" in (bin_dir / f"dcd-{name}").read_text()
    with open(sys.modules["dcd_deploy.__main__"].__file__) as f:
        assert "run_and_exit(main)" in f.read()
