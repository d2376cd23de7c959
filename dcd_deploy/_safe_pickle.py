"""Look at a checkpoint's bytes before torch does: only what a checkpoint can be.

``torch.load(weights_only=True)`` never runs code from a file, but it trusts the file's
shape: a tuple nested a million deep crashes its unpickler (a segfault), a 36-byte
pickle of ``bytearray(4_000_000_000)`` allocates 4 GB before anything is refused, a
small zip whose ``data.pkl`` inflates to gigabytes is inflated, and a FIFO or
``/dev/zero`` is read forever. This module refuses all of those from the bytes alone:

* :func:`check_regular_file`: only regular files are opened (a FIFO would block,
  a device never ends);
* :func:`check_zip`: no member of a torch zip may inflate more than
  :data:`MAX_INFLATION` times its stored size (torch stores members uncompressed),
  and all together no more than :data:`MAX_TOTAL_INFLATION` times the file;
* :func:`scan_pickle`: the pickle stream is parsed as opcodes (``pickletools.genops``,
  nothing is executed or built) while a small model of the unpickler's stack tracks how
  deep every object nests and the largest integer it holds. Nesting beyond
  :data:`MAX_DEPTH` is refused, and so is any call (``REDUCE``/``NEWOBJ``) or storage
  reference (``BINPERSID``) given an integer far larger than the file: a tensor
  storage cannot hold more elements than the file has bytes, and no plain object a
  checkpoint holds is built from a count bigger than that.
"""

from __future__ import annotations

import mmap
import os
import pickletools
import stat
import zipfile
from pathlib import Path

from ._atomic import file_kind
from .errors import CheckpointError

#: Deepest nesting of containers accepted (a torch checkpoint nests 5-8 deep; torch's
#: unpickler recurses per level and crashes around a few thousand).
MAX_DEPTH = 100
#: Largest ratio of a zip member's inflated size to its stored size (torch.save stores
#: members uncompressed, ratio 1).
MAX_INFLATION = 100
#: All members together may inflate to this many times the file (plus 1 MiB): what is
#: read stays bounded by the file's size even when each member's ratio is plausible.
MAX_TOTAL_INFLATION = 4
#: Integers up to this are accepted as call arguments whatever the file size.
SMALL_INT = 1 << 24
#: An integer argument may exceed the file size by this factor (sizes of views).
INT_SLACK = 16

_DAMAGED = "is damaged or truncated (its pickled data does not parse)"
_MARK_BUILDERS = {"LIST", "TUPLE", "DICT", "FROZENSET", "INST", "OBJ"}
_MARK_EXTENDERS = {"APPENDS", "SETITEMS", "ADDITEMS"}
_CONTAINERS = {"EMPTY_LIST", "EMPTY_DICT", "EMPTY_TUPLE", "EMPTY_SET"}
_NO_STACK = {"PROTO", "FRAME", "STOP", "READONLY_BUFFER", "PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"}


def check_regular_file(path: Path) -> os.stat_result:
    """``os.stat(path)`` of a regular file (links followed); CheckpointError otherwise.

    ``stat`` never blocks, unlike opening a FIFO, so nothing is opened here.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such file") from None
    except OSError as exc:
        raise CheckpointError(f"cannot read {path}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise CheckpointError(f"{path} is a directory, not a checkpoint file")
    if not stat.S_ISREG(st.st_mode):
        raise CheckpointError(f"{path} is {file_kind(st.st_mode)}, not a checkpoint file")
    return st


def check_zip(zf: zipfile.ZipFile, *, path: Path, file_size: int) -> None:
    """Refuse a zip whose members claim to inflate far beyond what is stored.

    Raises:
        CheckpointError: a member (or all together) inflates more than
            :data:`MAX_INFLATION` times (a zip bomb, not a checkpoint).
    """
    total = 0
    for info in zf.infolist():
        total += info.file_size
        if info.file_size > (1 << 20) and info.file_size > MAX_INFLATION * max(info.compress_size, 1):
            raise CheckpointError(
                f"{path}: zip member {info.filename} inflates from {info.compress_size} to {info.file_size} bytes "
                f"(more than {MAX_INFLATION}x); torch checkpoints store their data uncompressed; refusing it"
            )
    if total > (1 << 20) + MAX_TOTAL_INFLATION * file_size:
        raise CheckpointError(
            f"{path}: its zip members inflate to {total} bytes, more than {MAX_TOTAL_INFLATION}x the file; refusing it"
        )


class _Reader:
    """A read-only stream over a buffer that never allocates more than what is left.

    ``BufferedReader.read(n)`` may allocate ``n`` bytes up front, which a declared length
    of 4e9 in a pickle turns into 4 GB; slicing a buffer cannot.
    """

    def __init__(self, buf, start: int = 0):
        self.buf, self.pos = buf, start

    def read(self, n: int = -1) -> bytes:
        end = len(self.buf) if n is None or n < 0 else min(len(self.buf), self.pos + n)
        data = bytes(self.buf[self.pos : end])
        self.pos = end
        return data

    def readline(self) -> bytes:
        end = self.buf.find(b"\n", self.pos)
        end = len(self.buf) if end < 0 else end + 1
        return self.read(end - self.pos)

    def at_end(self) -> bool:
        return self.pos >= len(self.buf)


class _Refused(Exception):
    pass


class _Damaged(Exception):
    pass


def _scan_one(stream: _Reader, *, int_limit: int) -> None:
    """Parse one pickle as opcodes, modelling only depth and the largest integer per object."""
    machine = _Machine(int_limit)
    for op, arg, _ in pickletools.genops(stream):
        if op.name == "STOP":
            return
        if not machine.structure(op.name, arg):
            machine.objects(op.name, arg)
    raise _Damaged  # no STOP


class _Machine:
    """The unpickler's stack, modelled: each cell is [depth, largest int, name or None]."""

    def __init__(self, int_limit: int):
        self.int_limit = int_limit
        self.stack: list[list] = []
        self.marks: list[int] = []
        self.memo: dict = {}

    def pop(self) -> list:
        if not self.stack or (self.marks and len(self.stack) <= self.marks[-1]):
            raise _Damaged
        return self.stack.pop()

    def top(self) -> list:
        if not self.stack:
            raise _Damaged
        return self.stack[-1]

    def pop_mark(self) -> list[list]:
        if not self.marks:
            raise _Damaged
        start = self.marks.pop()
        items, self.stack[start:] = self.stack[start:], []
        return items

    @staticmethod
    def new(children: list[list], name=None) -> list:
        depth = 1 + max((c[0] for c in children), default=0)
        if depth > MAX_DEPTH:
            raise _Refused(f"nests objects more than {MAX_DEPTH} levels deep")
        return [depth, max((c[1] for c in children), default=0), name]

    def merge(self, children: list[list]) -> None:
        """Put ``children`` into the container on top (APPEND, SETITEMS, BUILD, ...)."""
        into = self.top()
        if children:
            grown = self.new(children)
            into[0] = max(into[0], grown[0])
            into[1] = max(into[1], grown[1])

    def call(self, func: list, args: list, what: str) -> list:
        if args[1] > self.int_limit:
            name = f" {func[2]}" if func[2] else ""
            raise _Refused(
                f"asks to build an object ({what}{name}) from the number {args[1]}, far larger than the file"
            )
        cell = self.new([args])
        cell[1] = 0  # the count was consumed by the call
        return cell

    def structure(self, name: str, arg) -> bool:
        """Memo, marks and containers; False when ``name`` is none of those."""
        if name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
            self.memo[len(self.memo) if name == "MEMOIZE" else arg] = self.top()
        elif name in _NO_STACK:
            pass
        elif name == "MARK":
            self.marks.append(len(self.stack))
        elif name in _CONTAINERS:
            self.stack.append([1, 0, None])
        elif name in _MARK_BUILDERS:
            items = self.pop_mark()
            self.stack.append(self.new(items, arg if name == "INST" else None))
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            items = [self.pop() for _ in range(int(name[-1]))][::-1]
            self.stack.append(self.new(items))
        elif name in ("APPEND", "BUILD"):
            self.merge([self.pop()])
        elif name == "SETITEM":
            value, key = self.pop(), self.pop()
            self.merge([key, value])
        elif name in _MARK_EXTENDERS:
            self.merge(self.pop_mark())
        else:
            return False
        return True

    def objects(self, name: str, arg) -> None:
        """Globals, calls, references and leaves."""
        if name == "GLOBAL":
            self.stack.append([0, 0, str(arg).replace(" ", ".")])
        elif name == "STACK_GLOBAL":
            attr, module = self.pop(), self.pop()
            self.stack.append([0, 0, f"{module[2]}.{attr[2]}"])
        elif name == "REDUCE":
            args, func = self.pop(), self.pop()
            self.stack.append(self.call(func, args, "call"))
        elif name == "NEWOBJ":
            args, cls = self.pop(), self.pop()
            self.stack.append(self.call(cls, args, "new"))
        elif name == "NEWOBJ_EX":
            kwargs, args, cls = self.pop(), self.pop(), self.pop()
            self.stack.append(self.call(cls, self.new([args, kwargs]), "new"))
        elif name == "BINPERSID":
            self.stack.append(self.call([0, 0, "storage"], self.pop(), "tensor storage"))
        elif name == "PERSID":
            self.stack.append([1, 0, None])
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            if arg not in self.memo:
                raise _Damaged
            self.stack.append(self.memo[arg])
        elif name == "POP":
            self.pop()
        elif name == "POP_MARK":
            self.pop_mark()
        elif name == "DUP":
            self.stack.append(self.top())
        elif isinstance(arg, int) and not isinstance(arg, bool):
            self.stack.append([0, abs(arg), None])
        else:  # strings, bytes, floats, None, booleans, extension codes, buffers
            self.stack.append([0, 0, arg if isinstance(arg, str) else None])


def scan_pickle(path: Path, *, file_size: int, member: bytes | None = None, count: int = 1) -> None:
    """Refuse a pickle stream that would crash or exhaust the unpickler (nothing is run).

    Args:
        path: the file (for messages; read with mmap when ``member`` is None).
        file_size: the checkpoint file's size, which bounds every count in it.
        member: the pickle's bytes, for a zip member already read.
        count: pickles to scan one after the other (torch's legacy format has five).

    Raises:
        CheckpointError: the stream is damaged, nests too deep, or asks for objects
            larger than the file could describe.
    """
    int_limit = max(SMALL_INT, INT_SLACK * file_size)
    try:
        if member is not None:
            _scan_all(_Reader(member), path, int_limit, count)
            return
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            _scan_all(_Reader(mm), path, int_limit, count)
    except (OSError, ValueError) as exc:  # mmap of an empty or vanished file
        raise CheckpointError(f"cannot read {path}: {exc}") from None


def _scan_all(stream: _Reader, path: Path, int_limit: int, count: int) -> None:
    try:
        for _ in range(count):
            _scan_one(stream, int_limit=int_limit)
            if stream.at_end():
                break
    except _Refused as exc:
        raise CheckpointError(
            f"{path} is not a plausible checkpoint: its pickled data {exc}; refusing to load it"
        ) from None
    except Exception:  # _Damaged, or whatever genops's parsers raise on garbage
        raise CheckpointError(f"{path} {_DAMAGED}") from None


__all__ = ["MAX_DEPTH", "MAX_INFLATION", "check_regular_file", "check_zip", "scan_pickle"]
