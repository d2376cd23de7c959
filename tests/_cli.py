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
