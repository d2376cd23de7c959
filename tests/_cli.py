"""CLI test helpers shared by the test modules: the one-line error check and a run of an
installed console script.

Imported as ``_cli`` (see ``_zoo``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

BIN = Path(sys.executable).parent
TIMEOUT = 300  # a safety net against hangs, not a timing assertion


def run(cmd, args):
    """``cmd`` (a click command) invoked in this process on ``args``, each made a string."""
    from click.testing import CliRunner

    return CliRunner().invoke(cmd, [str(a) for a in args])


def run_in(directory: Path, cmd, args):
    """:func:`run` with ``directory`` the working directory for the call (in a module
    fixture, where ``monkeypatch.chdir`` is not available)."""
    cwd = os.getcwd()
    os.chdir(directory)
    try:
        return run(cmd, args)
    finally:
        os.chdir(cwd)


def one_error_line(result, pattern: str, status: int = 1, *, notes: bool = False) -> None:
    """``result`` (a CliRunner result) failed with ``status`` and printed exactly one line,
    ``Error: ...`` matching ``pattern``, and no traceback; with ``notes``, other stderr lines
    (dcd-bench's ``note: ...`` before the run) may come before it."""
    assert result.exit_code == status, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip() and (not notes or ln.startswith("Error"))]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert re.search(pattern, lines[0]), lines[0]
    assert "Traceback" not in result.output


def run_script(
    script: str, *args, cwd: Path, env: dict | None = None, preexec_fn: Callable[[], None] | None = None
) -> subprocess.CompletedProcess:
    """Runs the installed console script ``script`` (as a user would) in ``cwd``."""
    exe = BIN / script
    assert exe.is_file(), f"console script {exe} is not installed (pip install -e .)"
    return subprocess.run(
        [str(exe), *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, **(env or {})},
        preexec_fn=preexec_fn,
    )


#: The body of :func:`run_scripts`'s server: it makes the scripts' one import, then forks
#: a child per job that runs the script file itself as ``__main__``.
_SERVER = r"""
import gc, json, os, resource, runpy, signal, sys, tempfile, time, traceback

import dcd_deploy.cli._exit  # what every console script imports first
import dcd_deploy.models  # and torch (~2.5 s), which every command that gets past its options loads

gc.freeze()  # the children leave the imported objects alone: no copy of their pages

jobs = json.loads(open(sys.argv[1]).read())
workers, timeout = int(sys.argv[3]), float(sys.argv[4])
status, running, queue, late = {}, {}, list(enumerate(jobs)), []

def child(job):
    os.chdir(job["cwd"])
    os.environ.update(job["env"])
    tempfile.tempdir = None  # read TMPDIR again, as a new interpreter would
    if job["cap"]:
        resource.setrlimit(resource.RLIMIT_AS, (job["cap"], job["cap"]))
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, job["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                            (2, job["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
        os.dup2(os.open(path, flags, 0o644), fd)
    sys.argv = [job["exe"], *job["args"]]
    code = 1
    try:
        runpy.run_path(job["exe"], run_name="__main__")  # ends in os._exit (cli._exit)
        code = 0
    except SystemExit as exc:
        code = dcd_deploy.cli._exit._status(exc.code)
    except BaseException:
        traceback.print_exc()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

while queue or running:
    while queue and len(running) < workers:
        i, job = queue.pop(0)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            try:
                child(job)
            finally:
                os._exit(1)
        running[pid] = i, time.monotonic() + timeout
    pid, wait_status = os.waitpid(-1, os.WNOHANG)
    if pid == 0:  # none ended: kill a hang as subprocess.run's timeout would
        for other, (i, end) in running.items():
            if time.monotonic() > end and i not in late:
                os.kill(other, signal.SIGKILL)
                late.append(i)
        time.sleep(0.01)
        continue
    status[running.pop(pid)[0]] = os.waitstatus_to_exitcode(wait_status)
with open(sys.argv[2], "w") as f:
    json.dump({"status": [status[i] for i in range(len(jobs))], "late": late}, f)
"""


def run_scripts(jobs: list[dict], *, workdir: Path, workers: int, memory_cap: int = 0) -> list:
    """Runs many installed console scripts, as :func:`run_script` would, without paying the
    interpreter start and torch's import (~2.5 s) for each.

    One server interpreter imports what every script imports first
    (``dcd_deploy.cli._exit``) and torch (``dcd_deploy.models``), then forks a child per job; the child takes the job's
    working directory, environment (added to this process's), address-space cap and
    ``argv``, sends stdout and stderr to files, and runs the script file itself as
    ``__main__``. The child is a process of its own as in :func:`run_script`: the
    script's status, output and files are its own. What such a run cannot show is what a
    fresh interpreter does before the script's first line (a ``sitecustomize`` hook on
    ``PYTHONPATH``, an import-time warning): run those with :func:`run_script`.

    jobs: dicts with ``script``, ``args`` and ``cwd``, optionally ``env``.
    workdir: an empty directory for the job list and the captured output.
    workers: children at a time.
    memory_cap: an address-space limit (bytes) for each child; 0 for none.

    Returns:
        One ``subprocess.CompletedProcess`` (text output) per job, in order.

    Raises:
        subprocess.TimeoutExpired: a job ran longer than ``TIMEOUT`` (it was killed).
    """
    import json

    spec = []
    for i, job in enumerate(jobs):
        exe = BIN / job["script"]
        assert exe.is_file(), f"console script {exe} is not installed (pip install -e .)"
        spec.append(
            {
                "exe": str(exe),
                "args": [str(a) for a in job["args"]],
                "cwd": str(job["cwd"]),
                "env": job.get("env") or {},
                "cap": memory_cap,
                "out": str(workdir / f"{i}.out"),
                "err": str(workdir / f"{i}.err"),
            }
        )
    (workdir / "jobs.json").write_text(json.dumps(spec))
    server = subprocess.run(
        [sys.executable, "-c", _SERVER, workdir / "jobs.json", workdir / "status.json", str(workers), str(TIMEOUT)],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=TIMEOUT * (len(jobs) + 2),  # a safety net: each job has its own TIMEOUT
    )
    assert server.returncode == 0, server.stderr
    done = json.loads((workdir / "status.json").read_text())
    if done["late"]:
        raise subprocess.TimeoutExpired([spec[done["late"][0]]["exe"], *spec[done["late"][0]]["args"]], TIMEOUT)
    codes = done["status"]
    return [
        subprocess.CompletedProcess(
            [s["exe"], *s["args"]],
            code,
            Path(s["out"]).read_text(),  # decoded as subprocess.run(text=True) decodes
            Path(s["err"]).read_text(),
        )
        for s, code in zip(spec, codes, strict=True)
    ]
