"""Atomic file output: write beside the target, rename over it only on success.

Every file the toolkit writes (checkpoints, ONNX models, reports) goes through
:func:`atomic_output`, so a crash, a full disk or a failed check never leaves a
half-written file, and a previous file of the same name stays intact.

Only regular files are ever replaced: a directory, FIFO, socket or device node at the
output path (``-o /dev/null``) is refused, because renaming over it would destroy it. A
symlink to a regular file is written through: its target is replaced atomically and the
link stays a link. An existing output keeps its permission bits. A file with several
hard links is refused: renaming a new file over one name would silently split it from
the others.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from . import _cleanup
from .errors import DCDDeployError

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)

#: Errors of a write that ran out of room: disk full, quota, file size limit.
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words ("a FIFO (named pipe)", ...)."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def write_target(path: str | os.PathLike, *, error: type[DCDDeployError] = DCDDeployError) -> Path:
    """The file a write to ``path`` replaces: ``path`` itself, or a symlink's final target.

    Raises:
        error: ``path`` ends in a path separator, is (or links to) something other than a
            regular file, is a dangling link, or has several hard links.
    """
    text = os.fspath(path)
    if text.endswith(os.sep) or (os.altsep and text.endswith(os.altsep)):
        raise error(f"output path {text} ends in a path separator; name a file, not a directory")
    path = Path(text)
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        st = os.stat(target)
    except (FileNotFoundError, NotADirectoryError):  # a new file (its directory is checked elsewhere)
        if target is not path:
            raise error(f"output path {path} is a symlink to {target}, which does not exist") from None
        return path
    except OSError as exc:
        raise error(f"cannot write {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        via = f" (via the symlink {path})" if target is not path else ""
        raise error(f"output path {target}{via} is {file_kind(st.st_mode)}, not a regular file; refusing to replace it")
    if st.st_nlink > 1:
        raise error(
            f"output path {target} has {st.st_nlink} hard links; replacing it would split it from "
            "the others; remove it or choose another name"
        )
    return target


def check_output_path(path: str | os.PathLike, *, error: type[DCDDeployError] = DCDDeployError) -> None:
    """Refuse, before any work, an output path that cannot or must not be written.

    Raises:
        error: ``path`` is not a regular file (directory, FIFO, socket, device), ends in a
            path separator, or its directory is missing, not a directory or not writable.
    """
    target = write_target(path, error=error)
    parent = target.parent
    if not parent.exists():
        raise error(f"cannot write {path}: directory {parent} does not exist")
    if not parent.is_dir():
        raise error(f"cannot write {path}: {parent} is not a directory")
    if not os.access(parent, os.W_OK):
        raise error(f"cannot write {path}: output directory {parent} is not writable")


def _identity(path: str | os.PathLike) -> tuple | None:
    """(device, inode) of an existing file (following links), else its absolute real path."""
    try:
        st = os.stat(path)
        return (st.st_dev, st.st_ino)
    except OSError:
        return (os.path.realpath(path),)


def check_distinct(
    *,
    outputs: Iterable[str | os.PathLike | None],
    inputs: Iterable[str | os.PathLike | None] = (),
    error: type[DCDDeployError] = DCDDeployError,
) -> None:
    """Refuse an output that is an input, or two outputs that are the same file.

    Links and relative spellings are seen through (same device and inode, or the same
    real path for files that do not exist yet).

    Raises:
        error: ``-o`` equal to the input, ``--json`` equal to ``-o``, and the like.
    """
    seen: dict[tuple, str] = {}
    for p in inputs:
        if p is not None and os.path.exists(p):
            seen.setdefault(_identity(p), f"the input {p}")
    for p in outputs:
        if p is None:
            continue
        ident = _identity(p)
        if ident in seen:
            raise error(f"output path {p} is the same file as {seen[ident]}; refusing to overwrite it")
        seen[ident] = f"the output {p}"


@contextmanager
def atomic_output(path: str | os.PathLike, *, error: type[DCDDeployError] = DCDDeployError) -> Iterator[Path]:
    """Yield a temporary path beside ``path``'s target; rename it over the target on success.

    A new file gets mode 0o666 minus the umask, as for a file opened normally; an existing
    one keeps its permission bits. A symlink is written through (see the module docstring).

    Raises:
        error: the path must not be replaced (see :func:`write_target`), or the directory
            is missing or not writable (a one-line user error).
    """
    path = Path(path)
    target = write_target(path, error=error)
    tmp = temporary_name(target)
    try:
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    except OSError as exc:
        raise error(f"cannot write {path}: {exc.strerror or exc}") from None
    _cleanup.register_path(tmp)
    try:
        try:
            yield tmp
        except OSError as exc:
            if exc.errno not in _FULL:
                raise
            raise error(
                f"cannot write {path}: {exc.strerror or exc} (nothing written; the previous file, if any, is intact)"
            ) from None
        except DCDDeployError as exc:
            _name_the_output(exc, tmp, path)
            raise
        # Checked again: the path may have changed while the output was being made.
        if write_target(path, error=error) != target:
            raise error(f"output path {path} changed while it was being written; nothing written")
        try:
            old = os.stat(target)
        except FileNotFoundError:
            old = None
        if old is not None:
            os.chmod(tmp, stat.S_IMODE(old.st_mode))
            if (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
                try:  # root writing someone else's file keeps it theirs
                    os.chown(tmp, old.st_uid, old.st_gid)
                except OSError:
                    pass
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
        _cleanup.unregister_path(tmp)


#: The part of the output's name kept in its temporary name (NAME_MAX is 255 bytes: a
#: 250-character output name must still get a temporary one).
_TMP_STEM = 40


def temporary_name(target: Path) -> Path:
    """A new hidden name beside ``target``: ``.<start of its name>.<8 hex>.tmp``.

    Only ASCII letters, digits, ``-``, ``_`` and ``.`` of the name are kept, at most
    :data:`_TMP_STEM` of them: whatever reads the temporary file (``onnx.checker``
    takes only UTF-8 paths) sees a plain name, and it is never longer than the target's
    directory allows.
    """
    stem = re.sub(r"[^A-Za-z0-9._-]", "", target.name)[:_TMP_STEM] or "out"
    return target.with_name(f".{stem}.{secrets.token_hex(4)}.tmp")


def _name_the_output(exc: DCDDeployError, tmp: Path, path: Path) -> None:
    """A message naming the hidden temporary file names the output instead."""
    if exc.args and isinstance(exc.args[0], str) and tmp.name in exc.args[0]:
        text = exc.args[0].replace(str(tmp), str(path)).replace(tmp.name, path.name)
        exc.args = (text, *exc.args[1:])
