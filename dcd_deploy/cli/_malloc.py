"""glibc's allocator told to keep the memory a command frees, for the command's lifetime.

glibc serves an allocation above its mmap threshold (128 KiB, rising to at most 32 MiB
as such blocks are freed) with a fresh ``mmap`` and unmaps it on ``free``; the heap's
free top beyond the trim threshold goes back to the kernel too. A model's activations
are such blocks: every forward pass of pseudo-training, the float64 reference and the
parity check's runtimes maps new pages, and the kernel zeroes each one on its first
touch. ``dcd-export mobilenetv2_100_dcd`` took 0.7-1.0 million minor page faults, about
2 s of system time (docs/performance.md). Raising both thresholds keeps freed blocks in
the heap for the next allocation of that size: the faults fall to a third. The memory
goes back to the system when the command exits, a few seconds later; the peak is what
the command needs at once, as before.

Only the ``dcd-export`` script sets it (:mod:`._exit`), before anything is imported;
another C library (musl, macOS) or an allocator preloaded in its place is left alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

#: mallopt's parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
#: Allocations above this still get their own mapping (glibc's own cap is 32 MiB: an
#: image batch's activations are larger).
MMAP_THRESHOLD = 1 << 30
#: Free heap top kept instead of trimmed, and the extra the heap grows by each time.
TRIM_THRESHOLD = 2**31 - 1
TOP_PAD = 64 << 20


def keep_freed_memory() -> bool:
    """Set the thresholds; False (and nothing changed) where the C library is not glibc."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018  (glibc only: musl has mallopt as a stub)
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return all(
        mallopt(param, value) == 1
        for param, value in (
            (_M_MMAP_THRESHOLD, MMAP_THRESHOLD),
            (_M_TRIM_THRESHOLD, TRIM_THRESHOLD),
            (_M_TOP_PAD, TOP_PAD),
        )
    )
