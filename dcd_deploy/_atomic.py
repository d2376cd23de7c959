"""Atomic file output: write beside the target, rename over it only on success.

Every file the toolkit writes (checkpoints, ONNX models, reports) goes through
:func:`atomic_output`, so a crash, a full disk or a failed check never leaves a
half-written file, and a previous file of the same name stays intact.
"""

from __future__ import annotations

import os
import secrets
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .errors import DCDDeployError


def check_output_path(path: str | os.PathLike, *, error: type[DCDDeployError] = DCDDeployError) -> None:
    """Refuse, before any work, an output path that cannot be written.

    Raises:
        error: ``path`` is a directory, or its directory is missing, not a directory or
            not writable.
    """
    path = Path(path)
    parent = path.parent
    if path.is_dir():
        raise error(f"output path {path} is a directory")
    if not parent.exists():
        raise error(f"cannot write {path}: directory {parent} does not exist")
    if not parent.is_dir():
        raise error(f"cannot write {path}: {parent} is not a directory")
    if not os.access(parent, os.W_OK):
        raise error(f"cannot write {path}: output directory {parent} is not writable")


@contextmanager
def atomic_output(path: str | os.PathLike, *, error: type[DCDDeployError] = DCDDeployError) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` if the block succeeds.

    The temporary file is created with mode 0o666 so the umask decides the final mode,
    as for a file opened normally.

    Raises:
        error: the directory is missing or not writable (a one-line user error).
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    except OSError as exc:
        raise error(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
